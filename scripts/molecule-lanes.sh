#!/usr/bin/env bash
# Run molecule scenarios in LANES parallel lanes (default 2), each lane one scenario after another.
# A scenario spends most of its time waiting on containers, SSH and systemd, so two lanes use a
# 2-core machine better than one. Every line is prefixed with its scenario; each scenario's time
# is printed at the end. Exits non-zero when any scenario failed (the other lane still finishes).
#   scripts/molecule-lanes.sh SCENARIO...
set -uo pipefail
lanes=${MOLECULE_LANES:-2}
[ $# -gt 0 ] || { echo "usage: $0 SCENARIO..." >&2; exit 2; }
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

run_lane() {
    local lane=$1; shift
    local scenario start status
    for scenario in "$@"; do
        start=$(date +%s)
        molecule test -s "$scenario" 2>&1 | sed -u "s/^/[$scenario] /"
        status=${PIPESTATUS[0]}
        echo "$scenario $status $(( $(date +%s) - start ))" >>"$results/lane-$lane"
    done
}

# Deal the scenarios to the lanes in the order given (put the longest first).
declare -a assigned
i=0
for scenario in "$@"; do
    assigned[$((i % lanes))]+="$scenario "
    i=$((i + 1))
done
pids=()
for lane in $(seq 0 $((lanes - 1))); do
    # shellcheck disable=SC2086
    [ -n "${assigned[$lane]:-}" ] && { run_lane "$lane" ${assigned[$lane]} & pids+=($!); }
done
wait "${pids[@]}"

failed=0
echo "molecule: scenario, exit status, seconds"
while read -r scenario status seconds; do
    echo "molecule:   $scenario $status ${seconds}s"
    [ "$status" = 0 ] || failed=1
done < <(cat "$results"/lane-* | sort)
[ "$(cat "$results"/lane-* | wc -l)" = "$#" ] || { echo "molecule: not every scenario reported" >&2; failed=1; }
exit $failed
