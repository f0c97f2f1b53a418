#!/usr/bin/env bash
# Make a running systemd test container reachable the way the GPU host is: sshd with its own host
# keys, a non-root user with key authentication and sudo, on a port published on 127.0.0.1.
#
#   scripts/testhost-ssh.sh CONTAINER PORT KEYDIR [USER] [SUDO]
#
# KEYDIR/id_ed25519 is the controller's key (made once); KEYDIR/known_hosts gets the container's
# fresh host key for [127.0.0.1]:PORT (replacing an older line). SUDO=nopasswd (default) gives the
# user passwordless sudo, SUDO=none gives none (a test of missing sudo rights).
set -euo pipefail
container=$1 port=$2 keydir=$3 user=${4:-deploy} sudo=${5:-nopasswd}

mkdir -p "$keydir"
chmod 700 "$keydir"
[ -f "$keydir/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C "sglang-toolkit-test" -f "$keydir/id_ed25519"

docker exec -i "$container" bash -s "$user" "$sudo" "$(cat "$keydir/id_ed25519.pub")" <<'EOF'
set -euo pipefail
user=$1 sudo=$2 pubkey=$3
if [ ! -f /etc/ssh/.host-keys-regenerated ]; then   # the image's keys are shared by every container
    rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub
    ssh-keygen -A >/dev/null
    touch /etc/ssh/.host-keys-regenerated
    systemctl restart ssh
fi
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
install -d -m 700 -o "$user" -g "$user" "/home/$user/.ssh"
echo "$pubkey" > "/home/$user/.ssh/authorized_keys"
chown "$user:$user" "/home/$user/.ssh/authorized_keys"
chmod 600 "/home/$user/.ssh/authorized_keys"
if [ "$sudo" = nopasswd ]; then
    echo "$user ALL=(ALL) NOPASSWD: ALL" > "/etc/sudoers.d/90-$user"
    chmod 440 "/etc/sudoers.d/90-$user"
else
    rm -f "/etc/sudoers.d/90-$user"
fi
systemctl is-active --quiet ssh || systemctl start ssh
EOF

# The host key as a client will see it on the published port.
hostkey=$(docker exec "$container" cat /etc/ssh/ssh_host_ed25519_key.pub | cut -d' ' -f1,2)
touch "$keydir/known_hosts"
grep -v "^\[127.0.0.1\]:$port " "$keydir/known_hosts" > "$keydir/known_hosts.new" || true
echo "[127.0.0.1]:$port $hostkey" >> "$keydir/known_hosts.new"
mv "$keydir/known_hosts.new" "$keydir/known_hosts"
for _ in $(seq 30); do
    if ssh -q -i "$keydir/id_ed25519" -o UserKnownHostsFile="$keydir/known_hosts" -o StrictHostKeyChecking=yes \
        -o BatchMode=yes -o ConnectTimeout=3 -p "$port" "$user@127.0.0.1" true 2>/dev/null; then
        echo "testhost-ssh: $user@127.0.0.1:$port reaches $container (sudo: $sudo)"
        exit 0
    fi
    sleep 1
done
echo "testhost-ssh: cannot ssh to $user@127.0.0.1:$port ($container); is the port published on 127.0.0.1?" >&2
exit 1
