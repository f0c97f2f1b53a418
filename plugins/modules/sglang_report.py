#!/usr/bin/python
"""Ansible module: benchmark figures, verdict and the per-release report (JSON, Markdown)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_report
short_description: Summarize benchmark runs, judge baseline vs speculative, write the release report
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/serve/report.py, run on the host (standard library only).
  - Reads every run file and evidence file first (a missing or malformed one fails before anything is
    written), then records the figures in the release's manifest.json and its releases.json entry,
    and writes report.json and report.md into O(report_dir) together (a temporary directory swapped in).
  - The chart (chart.png) is drawn on the controller from report.json by plugins/plugin_utils/sglang_sm120_controller/chart.py
    (matplotlib); the host needs no plotting library.
  - Each optimisation the flags ask for is reported C(yes), C(no) or C(unknown) with its evidence;
    C(yes) only when the server showed it (see O(evidence)).
options:
  root:
    description: Release root (holds releases/ and releases.json).
    type: path
    default: /opt/sglang
  release:
    description: The release measured.
    type: str
    required: true
  host:
    description: Host name shown in the report and chart.
    type: str
    required: true
  runs:
    description:
      - One item per run, C(profile), C(slot) and C(path) of its result file; C(slot) is c1, batch, or grid (a cell of the
        benchmark grid, which also names its C(context_tokens), 0 for the prompt set as it is; its concurrency is the run's own).
      - A profile measured only in the grid takes its c1 and batch figures from the grid's shortest context.
    type: list
    elements: dict
    default: []
  output_len:
    description: Output tokens per request (bench_serving files do not record it).
    type: int
    required: true
  configured_profile:
    description: The profile the host is configured to serve.
    type: str
    required: true
  baseline:
    description: Profile the speculative one is compared with.
    type: str
    default: baseline
  candidate:
    description: The speculative profile judged against the baseline.
    type: str
    default: eagle3
  gate:
    description: What a candidate slower than baseline x O(threshold) means (the role fails on C(fail)).
    type: str
    choices: [warn, fail, "off"]
    default: warn
  threshold:
    description: Ratio the candidate must reach (1.0 = at least as fast as baseline).
    type: float
    default: 1.0
  evidence:
    description:
      - Per profile, the path of what the server showed while that profile ran (written by
        C(bench_client.py --evidence)) - its /get_server_info answer and journal lines.
      - The configured profile's evidence decides the optimisations; without it they are C(unknown)
        unless the flag check or the start-up journal says C(no).
    type: dict
    default: {}
  settings:
    description: Benchmark settings shown in the report (prompt set, counts, client and why).
    type: dict
    default: {}
  router:
    description:
      - Behind a router, this worker's leave in the deploy - C(url) (the router), C(worker_url), C(left) (taken out in
        this deploy), C(healthy_before) (healthy workers the router listed then), C(drain) (module sglang_drain's result).
      - Shown in the report's Router section; {} (no router) shows none.
    type: dict
    default: {}
  reference:
    description:
      - Others' published figures for this hardware (the sglang_benchmark role's reference-figures.yml, read on the
        controller), shown in the report's section of others' measurements with the EAGLE-3 ratio per cell; never
        judged. An entry that cannot be read fails the module naming it, before anything is recorded.
    type: list
    elements: dict
    default: []
  grid_margin:
    description:
      - In the benchmark grid (runs with C(slot) grid), how far from 1.0 the candidate/baseline ratio must be for a point to count as
        paying or losing (0.05 = at or above 1.05x pays, at or below 0.95x loses, even between).
    type: float
    default: 0.05
  workload:
    description:
      - The operator's expected workload, C(concurrency) and C(context_tokens); the grid's section names the profile to serve for it,
        read at the measured point nearest at or above it. {} names none.
    type: dict
    default: {}
  greedy:
    description:
      - Per profile, module sglang_answers' C(greedy) check as it returned it (the greedy outputs of the same prompts). With
        both O(baseline) and O(candidate) the verdict carries their greedy agreement (C(verdict.agreement)) and trips the
        gate when it is below O(agreement_min).
    type: dict
    default: {}
  agreement_min:
    description: The share of prompts whose greedy outputs must agree, from 0 to 1.
    type: float
    default: 0.5
  report_dir:
    description: Where the three report files go (default C(<root>/releases/<release>/report)).
    type: path
attributes:
  check_mode:
    description: Reads and judges every run as a real run does and fails the same way; writes neither the record nor the report files.
    support: full
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.no_diff
"""

EXAMPLES = r"""
- name: Write the report of the current release
  sglang_report:
    release: 0003-1a2b3c4d
    host: gpu-1
    output_len: 128
    configured_profile: eagle3
    runs:
      - {profile: eagle3, slot: c1, path: /opt/sglang/benchmark/eagle3-c1.json}
"""

RETURN = r"""
figures:
  description: Per profile, the C(c1) and C(batch) summaries (output tok/s, TTFT, ITL, accept length...).
  type: dict
  returned: success
  sample:
    eagle3:
      c1: {ok: true, problem: "", tool: bench_serving, profile: eagle3, concurrency: 1, output_len: 512, requests: 16, completed: 16,
           failed: 0, duration_s: 78.6, output_tokens: 8192, output_tok_s: 104.22, request_per_s: 0.204,
           ttft_ms: {mean: 430.5, p50: 421.0, p99: 512.3}, itl_ms: {mean: 9.52, p50: 9.1, p99: 14.8},
           latency_ms: {mean: 4912.0, p50: 4890.0, p99: 5230.0}, accept_length: 2.91,
           accept_source: "server counters, reset before the run (bench_serving's warm-up request included)", accept_note: "", errors: []}
verdict:
  description: Which profile is faster and by how much; C(status) pass, warn, fail, off or not-compared.
  type: dict
  returned: success
  sample: {baseline: baseline, candidate: eagle3, metric: output tok/s at concurrency 1, gate: warn, threshold: 1.0, status: pass,
           faster: eagle3, ratio: 1.6865, percent: 68.65,
           message: "eagle3 is faster: eagle3 104.2 tok/s vs baseline 61.8 tok/s at concurrency 1 (1.69x, 68.7% faster)"}
grid:
  description:
    - The benchmark grid, when runs had C(slot) grid; null otherwise. C(cells) (profile, concurrency, context_tokens, prompt_tokens,
      output_tok_s, ttft_ms and itl_ms medians, accept_length, ok, problem), C(ratios) (candidate/baseline per point and its class,
      pays, even, loses or not measured), C(regions) (per context, the verdict and its message), C(summary) and C(workload)
      (the profile to serve for the declared workload, and why).
  type: dict
  returned: success
  sample:
    summary: "eagle3 pays (>= 1.05x) in 3 of 6 measured points, loses (<= 0.95x) in 2; from 0.81x to 1.93x"
    workload: {declared: [8, 4096], point: [8, 8192], ratio: 1.21, profile: eagle3, message: "serve eagle3 for the declared workload ..."}
lines:
  description: One human-readable line per run (then, with a grid, its summary, one line per context and the workload's choice).
  type: list
  elements: str
  returned: success
  sample: ["eagle3 concurrency 1: 104.2 tok/s, 0.20 req/s, TTFT 430.5 ms (p99 512.3), ITL 9.52 ms, accept length 2.91"]
optimisations:
  description: Per optimisation the flags ask for, C(state) (yes, no or unknown), C(evidence) and C(note).
  type: list
  elements: dict
  returned: success
  sample:
    - {name: CUDA graphs, flag: --cuda-graph-max-bs, value: "64", state: "yes", evidence: ["server log: Capture cuda graph end."],
       note: ""}
files:
  description: The report files written on the host (in check mode, that would be written).
  type: list
  elements: str
  returned: success
  sample: [/opt/sglang/releases/0002-1a2b3c4d/report/report.json, /opt/sglang/releases/0002-1a2b3c4d/report/report.md]
report_dir:
  description: The directory of the report files.
  type: str
  returned: success
  sample: /opt/sglang/releases/0002-1a2b3c4d/report
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.release.records import Releases
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.serve.report import report_release

ARGUMENT_SPEC = dict(
    root=dict(type="path", default="/opt/sglang"),
    release=dict(type="str", required=True),
    host=dict(type="str", required=True),
    runs=dict(type="list", elements="dict", default=[]),
    output_len=dict(type="int", required=True),
    configured_profile=dict(type="str", required=True),
    baseline=dict(type="str", default="baseline"),
    candidate=dict(type="str", default="eagle3"),
    gate=dict(type="str", choices=["warn", "fail", "off"], default="warn"),
    threshold=dict(type="float", default=1.0),
    evidence=dict(type="dict", default={}),
    settings=dict(type="dict", default={}),
    router=dict(type="dict", default={}),
    reference=dict(type="list", elements="dict", default=[]),
    report_dir=dict(type="path"),
    grid_margin=dict(type="float", default=0.05),
    workload=dict(type="dict", default={}),
    greedy=dict(type="dict", default={}),
    agreement_min=dict(type="float", default=0.5),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    names = (
        "baseline",
        "candidate",
        "gate",
        "threshold",
        "evidence",
        "settings",
        "router",
        "report_dir",
        "reference",
        "grid_margin",
        "workload",
        "greedy",
        "agreement_min",
    )
    options = {name: p[name] for name in names}
    args = (Releases(p["root"]), p["release"], p["host"], p["runs"], p["output_len"], p["configured_profile"])
    run_module(module, lambda: dict(changed=True, **report_release(*args, **options, check_mode=module.check_mode)))


if __name__ == "__main__":
    main()
