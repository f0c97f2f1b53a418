#!/usr/bin/env bash
# Make sure a Docker engine answers. On Debian/Ubuntu as root, install Debian's docker.io
# when dockerd is missing and start dockerd in the background; elsewhere say what to install.
set -euo pipefail

if docker info >/dev/null 2>&1; then
    exit 0
fi
is_debian_root() { [ "$(id -u)" = 0 ] && [ -r /etc/debian_version ] && command -v apt-get >/dev/null; }

if ! command -v dockerd >/dev/null 2>&1; then
    if ! is_debian_root; then
        echo "ensure-docker: no Docker engine answers and this is not Debian/Ubuntu as root." >&2
        echo "ensure-docker: install a Docker engine (Debian/Ubuntu: apt-get install docker.io), start it, and run again." >&2
        exit 1
    fi
    echo "ensure-docker: installing Debian's docker.io"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
if ! command -v docker >/dev/null 2>&1; then
    echo "ensure-docker: dockerd is installed but no docker client is on PATH; install docker.io or docker-ce-cli." >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "ensure-docker: dockerd is installed but not answering; start it (sudo systemctl start docker) and run again." >&2
    exit 1
fi
if [ -d /run/systemd/system ] && systemctl start docker 2>/dev/null; then
    :
else
    echo "ensure-docker: starting dockerd (log: /var/log/dockerd.log)"
    # its own session: a job control group that ends (a finished shell, a killed make) does not take it along
    setsid nohup dockerd >/var/log/dockerd.log 2>&1 < /dev/null &
fi
for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && exit 0
    sleep 1
done
echo "ensure-docker: dockerd did not answer within 60 s; see /var/log/dockerd.log" >&2
exit 1
