#!/usr/bin/python
"""Ansible module: check a release's systemd unit with systemd-analyze before it is linked or started."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_unit_check
short_description: Check a unit with systemd-analyze verify and rate its hardening, before it runs
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/serve/unit_check.py. Runs C(systemd-analyze verify) on
    O(unit) (any line it prints fails) and C(systemd-analyze security --offline=true) (the overall exposure
    it rates must be at most O(ceiling)).
  - Fails naming the unit and what systemd-analyze said, ending C(nothing was switched or restarted); the
    role calls it before linking the unit or restarting anything.
  - With O(stamp), a passing outcome is recorded with the key of what decided it (the unit's bytes, the
    ceiling, the systemd-analyze binary); while that key holds, the checks are not run again (C(cached=true)).
options:
  unit:
    description: The unit file to check.
    type: path
    required: true
  ceiling:
    description: The highest exposure C(systemd-analyze security) may rate the unit (sglang_service_security_ceiling).
    type: float
    required: true
  stamp:
    description: The record of a passing check (written after a pass, never in check mode).
    type: path
attributes:
  check_mode:
    description: Runs both checks (they only read); a check-mode run fails exactly as a real run does and writes no stamp.
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
"""

EXAMPLES = r"""
- name: Check the unit and rate its hardening
  sglang_unit_check:
    unit: /opt/sglang/releases/0002-1a2b3c4d/sglang.service
    ceiling: 4.5
    stamp: /opt/sglang/releases/0002-1a2b3c4d/sglang.service.checked.json
"""

RETURN = r"""
score:
  description: The overall exposure systemd-analyze security rated.
  type: float
  returned: success
  sample: 2.1
security_line:
  description: The last line systemd-analyze security printed (its overall rating).
  type: str
  returned: success
  sample: "-> Overall exposure level for sglang.service: 2.1 OK"
cached:
  description: Whether the outcome was read from O(stamp) instead of running systemd-analyze again.
  type: bool
  returned: success
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import ToolkitError, run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.serve.unit_check import check_unit


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(unit=dict(type="path", required=True), ceiling=dict(type="float", required=True), stamp=dict(type="path")),
        supports_check_mode=True,
    )
    run_module(module, lambda: unit_check(module))


def unit_check(module: AnsibleModule) -> dict:
    p = module.params
    analyze = module.get_bin_path("systemd-analyze")
    if not analyze:
        raise ToolkitError(f"{p['unit']}: systemd-analyze is not on this host's PATH; nothing was switched or restarted")
    outcome = check_unit(
        p["unit"], p["ceiling"], analyze, lambda argv: module.run_command(list(argv)), p["stamp"], record=not module.check_mode
    )
    return dict(changed=False, **outcome.to_dict())


if __name__ == "__main__":
    main()
