#!/usr/bin/python
"""Ansible module: wait a while for the SGLang unit to answer GET /health with 200."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_health
short_description: Poll the unit and its /health endpoint for a while
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/serve/health.py. Waits up to O(wait_seconds) and returns
    progress (elapsed, HTTP status, unit state, last journal line); the role calls it again until
    healthy, crashed or past its start timeout. Once the server is healthy (or has crashed), with
    O(sglang_version) and O(argv) it judges the journal since the start with
    plugins/module_utils/sglang_sm120/serve/evidence.py (SGLang's own start-up lines, per version) and returns the verdict
    of each optimisation and those switched off.
  - Changes nothing, except the deploy lock's heartbeat when given O(lock_renewal).
options:
  unit:
    description: systemd unit.
    type: str
    default: sglang.service
  url:
    description: Health URL (loopback).
    type: str
    default: http://127.0.0.1:30000/health
  started:
    description: Epoch seconds of the (re)start, for elapsed time and the journal.
    type: float
    required: true
  wait_seconds:
    description: How long this call waits at most for a 200 (plus up to one O(probe_timeout)); at least one probe is made.
    type: float
    default: 15
  probe_timeout:
    description:
      - Seconds one GET may take. A real SGLang /health generates a token (>= 1 s) and answers 503 itself after 20 s,
        so keep this above 20 s, or a busy server reads as down.
    type: float
    default: 30
  restarts_baseline:
    description: The unit's NRestarts right after the restart; more means it crashed.
    type: int
    default: 0
  sglang_version:
    description: The SGLang version the unit runs (the launch plan's); picks the lines and fields that are evidence. Empty judges nothing.
    type: str
    default: ""
  argv:
    description: The server's launch flags (the launch plan's argv); which optimisations were asked for.
    type: list
    elements: str
    default: []
  journal_lines:
    description: Journal lines returned as the tail.
    type: int
    default: 30
  timeout:
    description: The time limit of the start in seconds (the role's sglang_start_timeout), for RV(progress); 0 when there is none.
    type: float
    default: 0
  known_causes:
    description:
      - The start-failure catalogue's log signatures (the launch plan's C(log_signatures)). A start that crashed or ran
        past O(timeout) whose journal matches one names that catalogue entry (RV(known_cause)).
    type: list
    elements: dict
    default: []
attributes:
  check_mode:
    description: Polls only; a check-mode run waits and reads the unit, the endpoint and the journal as a real run does.
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
  - sm120.sglang.sglang_sm120.lock_renewal
"""

EXAMPLES = r"""
- name: Wait for health
  sglang_health:
    started: "{{ sglang_service_started }}"
"""

RETURN = r"""
poll:
  description: The outcome of this poll.
  type: dict
  returned: always
  sample: {healthy: false, status: 503, active_state: active, sub_state: running, restarts: 0, elapsed: 184.2,
           last_line: "Load weight end. type=KimiK25ForConditionalGeneration", crashed: false, phase: "503", probe_seconds: 0.01}
  contains:
    healthy: {description: Whether the endpoint answered 200., type: bool, sample: true}
    status: {description: HTTP status of the endpoint (null when it did not answer)., type: int, sample: 200}
    active_state: {description: The unit's ActiveState., type: str, sample: active}
    sub_state: {description: The unit's SubState., type: str, sample: running}
    restarts: {description: The unit's NRestarts., type: int, sample: 0}
    elapsed: {description: Seconds since O(started)., type: float, sample: 312.5}
    last_line: {description: The last journal line., type: str, sample: "The server is fired up and ready to roll!"}
    crashed: {description: Whether the unit failed or restarted since the baseline., type: bool, sample: false}
    phase:
      description: Where the start stands, as /health shows it (C(port closed), C(no answer), C(503), C(healthy), or C(HTTP <code>)).
      type: str
      sample: "503"
    probe_seconds: {description: How long the last GET took., type: float, sample: 1.02}
progress:
  description:
    - Where the start stands, for the toolkit's stdout callback (plugins/callback/sglang_progress.py), which prints it at a
      steady interval instead of C(FAILED - RETRYING); plugins/module_utils/sglang_sm120/progress.py.
  type: dict
  returned: always
  sample: {what: "start of sglang.service", phase: "/health 503, unit active", elapsed_s: 184.2, timeout_s: 1800.0,
           last_log_line: "Load weight end. type=KimiK25ForConditionalGeneration"}
  contains:
    what: {description: What runs., type: str, sample: start of sglang.service}
    phase: {description: What /health answered and the unit's ActiveState., type: str, sample: "/health 503, unit active"}
    elapsed_s: {description: Seconds since O(started)., type: float, sample: 184.2}
    timeout_s: {description: O(timeout)., type: float, sample: 1800.0}
    last_log_line: {description: The last journal line., type: str, sample: "Load weight end. type=KimiK25ForConditionalGeneration"}
journal_tail:
  description: The last O(journal_lines) journal lines of the unit since O(started); empty when the server is healthy.
  type: list
  elements: str
  returned: always
  sample: ["Load weight end. type=KimiK25ForConditionalGeneration", "The server is fired up and ready to roll!"]
known_cause:
  description:
    - The catalogue entry the journal of a crashed or timed-out start matched (name is its id; title, cause, fix, refs, the
      line); null while the start goes on, once healthy, or when none matched.
  type: dict
  returned: always
  sample: {name: out-of-memory-after-load, cause: "the GPU memory ran out after the weights loaded", fix: "lower --mem-fraction-static",
           refs: [], title: "the GPU memory runs out after the weights loaded", line: "torch.OutOfMemoryError: CUDA out of memory."}
optimisations:
  description:
    - Per optimisation, server_evidence.judge on the start-up journal, with C(name), C(flag), C(value), C(verdict) (yes, no, unknown),
      C(evidence) (quoted lines) and C(note) (what was missing). Empty until healthy or crashed, or without O(sglang_version).
  type: list
  elements: dict
  returned: always
  sample: [{name: cuda graphs, flag: null, value: null, verdict: "yes", note: "",
            evidence: ["server log: Capture cuda graph end. Time elapsed: 56.05 s. mem usage=0.04 GB. avail mem=97.13 GB."]}]
runtime_findings:
  description: The optimisations of RV(optimisations) whose verdict is no, as C(name), C(meaning) and the C(line) (or field) that says so.
  type: list
  elements: dict
  returned: always
  sample: [{name: mixed chunk, meaning: "mixed chunk off at start: server log: Mixed chunked prefill is disabled ...",
            line: "Mixed chunked prefill is disabled because of using eagle speculative decoding."}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.launch.start_failures import match_log
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.progress import Progress, clean_line
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.release.lock import renew_while_polling
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.serve.evidence import findings, judge, select_lines
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.serve.health import journal, poll

ARGUMENT_SPEC = dict(
    unit=dict(type="str", default="sglang.service"),
    url=dict(type="str", default="http://127.0.0.1:30000/health"),
    started=dict(type="float", required=True),
    wait_seconds=dict(type="float", default=15),
    probe_timeout=dict(type="float", default=30),
    restarts_baseline=dict(type="int", default=0),
    sglang_version=dict(type="str", default=""),
    argv=dict(type="list", elements="str", default=[]),
    journal_lines=dict(type="int", default=30),
    lock_renewal=dict(type="dict", options=dict(path=dict(type="path", required=True), run_id=dict(type="str", required=True))),
    timeout=dict(type="float", default=0),
    known_causes=dict(type="list", elements="dict", default=[]),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: health(module.params, module.check_mode))


def health(p: dict, check_mode: bool = False) -> dict:
    renew_while_polling(p["lock_renewal"], check_mode)  # each poll of a long start renews the deploy lock's heartbeat
    result = poll(
        p["unit"], p["url"], p["started"], p["wait_seconds"], restarts_baseline=p["restarts_baseline"], probe_timeout=p["probe_timeout"]
    )
    optimisations = []
    if p["sglang_version"] and (result.healthy or result.crashed):
        lines = select_lines(journal(p["unit"], p["started"], 5000), p["sglang_version"])
        optimisations = judge(p["argv"], lines, None, p["sglang_version"])
    progress = Progress(
        what=f"start of {p['unit']}",
        phase=f"/health {result.phase}, unit {result.active_state}",
        elapsed_s=float(result.elapsed),
        timeout_s=p["timeout"],
        last_log_line=clean_line(result.last_line),
    )
    # the journal explains a start that is not healthy; a healthy one is not read again (one journalctl less per converge)
    tail = [] if result.healthy else journal(p["unit"], p["started"], p["journal_lines"])
    ended = result.crashed or (p["timeout"] > 0 and result.elapsed >= p["timeout"])
    # a failed start named by its start-failure catalogue entry, from the journal (a crash counts as the run phase "exited")
    cause = match_log(tail, "exited" if result.crashed else result.phase, p["known_causes"]) if ended and not result.healthy else None
    return dict(
        changed=False,
        poll=result.to_dict(),
        progress=progress.to_dict(),
        journal_tail=tail,
        known_cause=cause,
        optimisations=optimisations,
        runtime_findings=findings(optimisations),
    )


if __name__ == "__main__":
    main()
