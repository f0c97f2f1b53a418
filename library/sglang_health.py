#!/usr/bin/python
"""Ansible module: wait a while for the SGLang unit to answer GET /health with 200."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_health
short_description: Poll the unit and its /health endpoint for a while
description:
  - Thin wrapper around module_utils/service_health.py. Waits up to O(wait_seconds) and returns
    progress (elapsed, HTTP status, unit state, last journal line); the role calls it again until
    healthy, crashed or past its start timeout. With O(journal_checks) it also returns the journal
    lines since the start that show optimisations switched off at run time.
  - Changes nothing.
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
    description: How long this call waits at most.
    type: float
    default: 15
  restarts_baseline:
    description: The unit's NRestarts right after the restart; more means it crashed.
    type: int
    default: 0
  journal_checks:
    description: List of {pattern, meaning} looked for in the journal since O(started).
    type: list
    elements: dict
    default: []
  journal_lines:
    description: Journal lines returned as the tail.
    type: int
    default: 30
attributes:
  check_mode:
    description: Polls only; a check-mode run waits and reads the unit, the endpoint and the journal as a real run does.
    support: full
  diff_mode:
    description: No diff; nothing is changed.
    support: none
author: sglang-sm120 toolkit
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
           last_line: "Load weight end. type=KimiK25ForConditionalGeneration", crashed: false}
  contains:
    healthy: {description: Whether the endpoint answered 200., type: bool, sample: true}
    status: {description: HTTP status of the endpoint (null when it did not answer)., type: int, sample: 200}
    active_state: {description: The unit's ActiveState., type: str, sample: active}
    sub_state: {description: The unit's SubState., type: str, sample: running}
    restarts: {description: The unit's NRestarts., type: int, sample: 0}
    elapsed: {description: Seconds since O(started)., type: float, sample: 312.5}
    last_line: {description: The last journal line., type: str, sample: "The server is fired up and ready to roll!"}
    crashed: {description: Whether the unit failed or restarted since the baseline., type: bool, sample: false}
journal_tail:
  description: The last O(journal_lines) journal lines of the unit since O(started).
  type: list
  elements: str
  returned: always
  sample: ["Load weight end. type=KimiK25ForConditionalGeneration", "The server is fired up and ready to roll!"]
runtime_findings:
  description: Per O(journal_checks) entry that matched, its C(meaning) and the first matching C(line).
  type: list
  elements: dict
  returned: always
  sample: [{meaning: CUDA graphs disabled at run time, line: "Disable cuda graph because of insufficient memory"}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.service_health import findings, journal, poll


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", default="sglang.service"),
            url=dict(type="str", default="http://127.0.0.1:30000/health"),
            started=dict(type="float", required=True),
            wait_seconds=dict(type="float", default=15),
            restarts_baseline=dict(type="int", default=0),
            journal_checks=dict(type="list", elements="dict", default=[]),
            journal_lines=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = poll(p["unit"], p["url"], p["started"], p["wait_seconds"], restarts_baseline=p["restarts_baseline"])
    lines = journal(p["unit"], p["started"], 5000) if p["journal_checks"] else []
    module.exit_json(
        changed=False,
        poll=result.to_dict(),
        journal_tail=journal(p["unit"], p["started"], p["journal_lines"]),
        runtime_findings=findings(lines, p["journal_checks"]),
    )


if __name__ == "__main__":
    main()
