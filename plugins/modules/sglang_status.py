#!/usr/bin/python
"""Ansible module: say what a host serves now (releases, current and why, the unit, health, the last start)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_status
short_description: Read what the host serves now, changing nothing
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/serve/status.py; playbooks/status.yml prints its RV(lines).
  - Reads the release record (O(root)/releases.json, its C(current) link and the current release's manifest), the
    unit through C(systemctl show) and GET O(health_url) once.
  - Never fails on what it finds. An unreadable record, a link that disagrees with the record, an active unit that
    is not healthy and an enabled unit that is not running are listed in RV(status.problems) (and RV(lines)).
options:
  root:
    description: The toolkit's release root on the host (sglang_root).
    type: path
    required: true
  unit:
    description: The server's systemd unit.
    type: str
    default: sglang.service
  health_url:
    description: The server's health endpoint (loopback; SGLang keeps /health open without a key).
    type: str
    default: http://127.0.0.1:30000/health
  probe_timeout:
    description: Seconds the GET may take (a real SGLang /health generates a token, and answers 503 itself after 20 s).
    type: float
    default: 30
attributes:
  check_mode:
    description: Reads only; a check-mode run reads as a real run does.
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
"""

EXAMPLES = r"""
- name: Read what the host serves
  sm120.sglang.sglang_status:
    root: /opt/sglang
  register: sglang_status
"""

RETURN = r"""
status:
  description: What was read.
  type: dict
  returned: always
  sample: {current: 0002-1a2b3c4d, last_good: 0002-1a2b3c4d, why_current: "the newest release, good: served and was healthy",
           unit: {name: sglang.service, active_state: active, sub_state: running, main_pid: 4242, restarts: 0},
           health: {url: "http://127.0.0.1:30000/health", status: 200, phase: healthy, seconds: 1.02}, problems: []}
  contains:
    releases: {description: "Every release in the record, oldest first (id, state, reason, created, removed).", type: list, elements: dict}
    current: {description: "The current release (null when none).", type: str}
    current_link: {description: "Where the current link points (null when there is none).", type: str}
    last_good: {description: "The newest release that served healthy.", type: str}
    why_current: {description: "Why the current release is current, from the record.", type: str}
    unit: {description: "The unit's load_state, enabled, active_state, sub_state, main_pid and restarts.", type: dict}
    health: {description: "The GET: url, status (null when nothing answered), phase, seconds.", type: dict}
    last_start:
      description: "The current release's last start from its manifest: healthy_after_s, phase, profile, canary, fabric."
      type: dict
    problems: {description: "What disagrees (record and link, unit and health).", type: list, elements: str}
lines:
  description: The status as an operator reads it, a line each.
  type: list
  elements: str
  returned: always
  sample: ["current: 0002-1a2b3c4d (the newest release, good: served and was healthy)", "last known-good: 0002-1a2b3c4d"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.serve.status import read_status, status_lines

ARGUMENT_SPEC = dict(
    root=dict(type="path", required=True),
    unit=dict(type="str", default="sglang.service"),
    health_url=dict(type="str", default="http://127.0.0.1:30000/health"),
    probe_timeout=dict(type="float", default=30),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: status(module.params))


def status(p: dict) -> dict:
    found = read_status(p["root"], p["unit"], p["health_url"], p["probe_timeout"])
    return dict(changed=False, status=found.to_dict(), lines=status_lines(found))


if __name__ == "__main__":
    main()
