#!/usr/bin/python
"""Ansible module: wait a while for a background (async) job to end, returning its progress."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_async_wait
short_description: Wait a while for a background job to end, and say where it stands
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/progress.py, for a flat C(until) loop around a task started
    with C(async) and C(poll=0)
    (the benchmark's client). Waits up to O(wait_seconds) for the job's results file to show that it ended, and returns
    RV(finished) and RV(progress) (what runs, its phase, elapsed and remaining time, the last line of its log), which the toolkit's
    stdout callback (plugins/callback/sglang_progress.py) prints at a steady interval instead of C(FAILED - RETRYING).
  - Reads the job's outcome from nothing; call C(ansible.builtin.async_status) once the loop ends for the job's own result.
  - Changes nothing.
options:
  results_file:
    description: The job's results file, C(results_file) of the result the C(async) task registered.
    type: path
    required: true
  log:
    description: A file the job writes its progress to; its last non-blank line is returned. Empty, none.
    type: path
  what:
    description: What runs, as the progress line names it.
    type: str
    required: true
  phase:
    description: Its phase, as the progress line shows it.
    type: str
    default: ""
  started:
    description: Epoch seconds of the job's start, for the elapsed time.
    type: float
    required: true
  timeout:
    description: The job's time limit in seconds, for the remaining time; 0 when there is none.
    type: float
    default: 0
  wait_seconds:
    description: How long this call waits at most for the job to end.
    type: float
    default: 10
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
  - sm120.sglang.sglang_sm120.lock_renewal
"""

EXAMPLES = r"""
- name: Wait for the run, one retry per poll
  sglang_async_wait:
    results_file: "{{ job.results_file }}"
    log: /opt/sglang/bench/run.progress
    what: benchmark eagle3 concurrency 1
    started: "{{ started }}"
    timeout: 1800
    wait_seconds: 10
  register: waited
  until: waited.finished or waited.progress.elapsed_s >= 1800
  retries: 185
  delay: 0
"""

RETURN = r"""
finished:
  description: Whether the job has ended (its result is then read with C(ansible.builtin.async_status)).
  type: bool
  returned: always
  sample: false
progress:
  description: Where the job stands, for the toolkit's stdout callback (plugins/module_utils/sglang_sm120/progress.py).
  type: dict
  returned: always
  sample: {what: benchmark eagle3 concurrency 1, phase: bench_client, elapsed_s: 95.0, timeout_s: 1800.0,
           last_log_line: "12/32 requests done"}
  contains:
    what: {description: O(what)., type: str, sample: benchmark eagle3 concurrency 1}
    phase: {description: O(phase)., type: str, sample: bench_client}
    elapsed_s: {description: Seconds since O(started)., type: float, sample: 95.0}
    timeout_s: {description: O(timeout)., type: float, sample: 1800.0}
    last_log_line: {description: The last non-blank line of O(log)., type: str, sample: "12/32 requests done"}
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.progress import Progress, last_log_line, wait_job
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.release.lock import renew_while_polling

ARGUMENT_SPEC = dict(
    results_file=dict(type="path", required=True),
    log=dict(type="path"),
    what=dict(type="str", required=True),
    phase=dict(type="str", default=""),
    started=dict(type="float", required=True),
    timeout=dict(type="float", default=0),
    wait_seconds=dict(type="float", default=10),
    lock_renewal=dict(type="dict", options=dict(path=dict(type="path", required=True), run_id=dict(type="str", required=True))),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: wait(module.params, module.check_mode))


def wait(p: dict, check_mode: bool = False) -> dict:
    renew_while_polling(p["lock_renewal"], check_mode)  # each poll of a benchmark run renews the deploy lock's heartbeat
    finished = wait_job(p["results_file"], p["wait_seconds"])
    progress = Progress(
        what=p["what"],
        phase=p["phase"],
        elapsed_s=round(time.time() - p["started"], 1),
        timeout_s=p["timeout"],
        last_log_line=last_log_line(p["log"]) if p["log"] else "",
    )
    return dict(changed=False, finished=finished, progress=progress.to_dict())


if __name__ == "__main__":
    main()
