#!/usr/bin/env bash
# The lab host: a systemd container named sglang-lab standing in for the GPU host.
#   scripts/lab.sh up      create and start it (kept between runs: a second deploy is a no-op);
#                          reachable as deploy@127.0.0.1:$LAB_SSH_PORT (key and known_hosts in
#                          $SGLANG_TOOLKIT_CACHE/lab-ssh), sudo for become, like the GPU host
#   scripts/lab.sh down    remove it
#   scripts/lab.sh status  say whether it runs
set -euo pipefail
name=${LAB_NAME:-sglang-lab}
image=${LAB_IMAGE:-sglang-testhost:bookworm}
port=${LAB_SSH_PORT:-2200}
here=$(cd "$(dirname "$0")/.." && pwd)
keydir=${SGLANG_TOOLKIT_CACHE:-$here/.cache}/lab-ssh
# SGLang's CPU runtime environment (make sglang-runtime), mounted read-only: the lab's release venvs
# import SGLang through it (sglang_release_site_packages), as the GPU host's venvs do natively.
runtime=${SGLANG_TOOLKIT_CACHE:-$here/.cache}/sglang-runtime/site-packages

case "${1:-}" in
up)
    if [ "$(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" = true ] \
        && [ "$(docker port "$name" 22/tcp 2>/dev/null)" = "127.0.0.1:$port" ] \
        && docker inspect -f '{{range .Mounts}}{{.Destination}} {{end}}' "$name" | grep -q /opt/sglang-runtime/site-packages; then
        echo "lab: $name is running"
        exec "$here/scripts/testhost-ssh.sh" "$name" "$port" "$keydir"
    fi
    if [ ! -d "$runtime/torch" ]; then
        echo "lab: no SGLang runtime environment at $runtime: run make sglang-runtime first" >&2
        exit 1
    fi
    docker rm -f "$name" >/dev/null 2>&1 || true
    # sshd published on loopback only; the container has no other use for its network.
    docker run -d --name "$name" --hostname "$name" \
        --cap-add SYS_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
        -v /sys/fs/cgroup:/sys/fs/cgroup:rw -v "$(readlink -f "$runtime"):/opt/sglang-runtime/site-packages:ro" --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
        -p "127.0.0.1:$port:22" "$image" /lib/systemd/systemd >/dev/null
    for _ in $(seq 60); do
        state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
        case "$state" in
        running|degraded)
            echo "lab: $name is up (systemd $state)"
            exec "$here/scripts/testhost-ssh.sh" "$name" "$port" "$keydir"
            ;;
        esac
        sleep 1
    done
    echo "lab: $name did not finish booting; docker logs $name says:" >&2
    docker logs --tail 20 "$name" >&2
    exit 1
    ;;
down)
    docker rm -f "$name" >/dev/null 2>&1 && echo "lab: removed $name" || echo "lab: no $name"
    ;;
status)
    docker inspect -f '{{.Name}} running={{.State.Running}} image={{.Config.Image}}' "$name" 2>/dev/null || echo "lab: no $name"
    ;;
*)
    echo "usage: $0 up|down|status" >&2
    exit 2
    ;;
esac
