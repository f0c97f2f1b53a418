#!/usr/bin/env bash
# The lab host: a systemd container named sglang-lab standing in for the GPU host.
#   scripts/lab.sh up      create and start it (kept between runs: a second deploy is a no-op)
#   scripts/lab.sh down    remove it
#   scripts/lab.sh status  say whether it runs
set -euo pipefail
name=${LAB_NAME:-sglang-lab}
image=${LAB_IMAGE:-sglang-testhost:bookworm}

case "${1:-}" in
up)
    if [ "$(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" = true ]; then
        echo "lab: $name is running"
        exit 0
    fi
    docker rm -f "$name" >/dev/null 2>&1 || true
    docker run -d --name "$name" --hostname "$name" \
        --cap-add SYS_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
        -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
        --network none "$image" /lib/systemd/systemd >/dev/null
    for _ in $(seq 60); do
        state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
        case "$state" in running|degraded) echo "lab: $name is up (systemd $state)"; exit 0 ;; esac
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
