#!/usr/bin/env bash
# make sample-report: docs/sample/ (report.md, report.json, chart.png) from the lab host's latest report,
# marked as the lab's stand-in server. Measure both profiles on the lab first, e.g.
#   .venv/bin/ansible-playbook -i inventory/lab playbooks/benchmark.yml -e '{"sglang_benchmark_profiles": ["baseline", "eagle3"]}'
# (the target runs that when the lab has no report yet; `make lab` first).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
latest() { ls -td reports/sglang-lab/*/ 2>/dev/null | head -n 1; }
if [ -z "$(latest)" ]; then
    "$here/.venv/bin/ansible-playbook" -i inventory/lab playbooks/benchmark.yml -e '{"sglang_benchmark_profiles": ["baseline", "eagle3"]}'
fi
from=$(latest)
for file in report.md report.json chart.png; do
    [ -s "$from$file" ] || { echo "sample-report: $from$file is missing or empty" >&2; exit 1; }
done
mkdir -p docs/sample
{
    echo "> **A sample, from the lab's stand-in server** (TEST FIXTURE \`tests/fixtures/sglang-standin\`, on a CPU:"
    echo "> its speeds, accept lengths and phases are the stand-in's, not a GPU's). Made by \`make sample-report\`"
    echo "> from \`$(basename "$from")\`; a real host's report has the same sections."
    echo
    cat "${from}report.md"
} > docs/sample/report.md
cp "${from}report.json" docs/sample/report.json
cp "${from}chart.png" docs/sample/chart.png
echo "sample-report: docs/sample/ from ${from}"
