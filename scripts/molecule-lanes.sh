#!/usr/bin/env bash
# Run molecule scenarios in MOLECULE_LANES parallel lanes (default 3), each lane one scenario after another.
# A scenario spends much of its time waiting on containers, SSH, systemd and the stand-in server (with
# pipelining a task costs one `docker exec`), so three lanes use a 2-core machine better than two.
# The job `pytest` runs the unit tests (pytest tests, printing the 25 slowest) in a lane like a scenario (make test). Every
# line is prefixed with its job; each job's time is printed at the end.
# Exits non-zero when any job failed (the other lanes still finish); a failed job's summary is printed again at the end.
#   scripts/molecule-lanes.sh SCENARIO|pytest...
set -uo pipefail
lanes=${MOLECULE_LANES:-3}
[ $# -gt 0 ] || { echo "usage: $0 SCENARIO..." >&2; exit 2; }
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

# A shared queue, in the order given (put the longest first): each lane takes the next scenario
# when it is free, so a long scenario does not hold back the others.
queue=$results/queue
printf '%s\n' "$@" >"$queue"
next_scenario() {
    (
        flock 9
        head -n 1 "$queue"
        sed -i '1d' "$queue"
    ) 9>"$queue.lock"
}

run_lane() {
    local lane=$1 scenario start status
    while scenario=$(next_scenario) && [ -n "$scenario" ]; do
        start=$(date +%s)
        if [ "$scenario" = pytest ]; then
            pytest --durations=25 tests 2>&1 | tee "$results/log-$scenario" | sed -u "s/^/[pytest] /"
        else
            molecule test -s "$scenario" 2>&1 | tee "$results/log-$scenario" | sed -u "s/^/[$scenario] /"
        fi
        status=${PIPESTATUS[0]}
        echo "$scenario $status $(( $(date +%s) - start ))" >>"$results/lane-$lane"
    done
}

pids=()
for lane in $(seq 1 "$lanes"); do
    run_lane "$lane" &
    pids+=($!)
done
wait "${pids[@]}"

failed=0
echo "molecule: job, exit status, seconds"
while read -r scenario status seconds; do
    echo "molecule:   $scenario $status ${seconds}s"
    [ "$status" = 0 ] || failed=1
done < <(cat "$results"/lane-* | sort)
# A failed job's last lines again, after the table: a CI that keeps only the tail of the output still
# shows which test or task failed (pytest's short summary names each failed test).
while read -r scenario status seconds; do
    [ "$status" = 0 ] && continue
    echo "molecule: the last lines of $scenario (exit status $status):"
    if [ "$scenario" = pytest ]; then
        sed -n '/short test summary info/,$p' "$results/log-$scenario" | tail -n 60
    else
        grep -n -E 'fatal:|FAILED!|failed=[1-9]|ERROR' "$results/log-$scenario" | tail -n 20
        tail -n 20 "$results/log-$scenario"
    fi | sed "s/^/[$scenario] /"
done < <(cat "$results"/lane-* | sort)
[ "$(cat "$results"/lane-* | wc -l)" = "$#" ] || { echo "molecule: not every scenario reported" >&2; failed=1; }
exit $failed
