#!/usr/bin/python
"""Ansible module: validate SGLang launch flags against the release's own server_args.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_flags
short_description: Validate a launch profile against SGLang's flags and render ExecStart
description:
  - Thin wrapper around module_utils/server_flags.py. With O(python) whose environment can import
    SGLang, SGLang's own parser decides (abbreviations refused); otherwise the flag table is read
    statically from C(server_args.py) of O(sglang) (an installed package or the wheel).
  - Unknown flags, abbreviations, wrong types or choices fail with a suggestion; EAGLE without a
    draft model, or torch symm-mem on capability 12 without its patch, fail; known no-ops warn.
  - Changes nothing.
options:
  sglang:
    description: The sglang package directory or wheel whose flags apply.
    type: path
    required: true
  profile:
    description: Canonical flag name (without --) -> value; true is a switch, false or null omit it.
    type: dict
    required: true
  python:
    description: A Python that may import SGLang (the release venv's); static table when it cannot.
    type: path
  applied_patches:
    description: Ids of the patches the release carries.
    type: list
    elements: str
    default: []
  gpu_major:
    description: Compute capability major of the GPUs.
    type: int
    default: 12
  launch_python:
    description: Interpreter written into ExecStart.
    type: str
    required: true
  launch_module:
    description: Module run with -m.
    type: str
    default: sglang.launch_server
author: sglang-sm120 toolkit
"""

EXAMPLES = r"""
- name: Validate the eagle3 profile
  sglang_flags:
    sglang: /opt/sglang/build/wheelhouse/sglang/KEY/sglang-0.5.9-py3-none-any.whl
    profile: {model-path: /data/Kimi-K2.5-NVFP4, tp-size: 8}
    launch_python: /opt/sglang/releases/0002-abcd1234/venv/bin/python
"""

RETURN = r"""
argv:
  description: The flags as arguments.
  type: list
  returned: success
exec_start:
  description: The ExecStart value, one flag per continued line.
  type: str
  returned: success
mode:
  description: import (SGLang's own parser) or static (table from server_args.py).
  type: str
  returned: success
"""

import json
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.server_flags import IMPORT_CHECK, FlagError, cross_check, exec_start, flag_table, read_server_args, validate


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            sglang=dict(type="path", required=True),
            profile=dict(type="dict", required=True),
            python=dict(type="path"),
            applied_patches=dict(type="list", elements="str", default=[]),
            gpu_major=dict(type="int", default=12),
            launch_python=dict(type="str", required=True),
            launch_module=dict(type="str", default="sglang.launch_server"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        table = flag_table(read_server_args(p["sglang"]))
    except FlagError as exc:
        module.fail_json(msg=str(exc))
    result = validate(table, p["profile"])
    errors, warnings = cross_check(p["profile"], p["applied_patches"], p["gpu_major"])
    errors = result.errors + errors
    mode, reason = "static", "no release Python given"
    if not result.errors and p["python"]:
        proc = subprocess.run([p["python"], "-c", IMPORT_CHECK, *result.argv], capture_output=True, text=True, check=False, timeout=300)
        try:
            verdict = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            verdict = {"mode": "static", "reason": (proc.stderr or "no output").strip()[-300:]}
        mode, reason = verdict["mode"], verdict.get("reason", "")
        if mode == "import" and not verdict["ok"]:
            errors.append(f"SGLang's own parser refuses the flags: {verdict['error']}")
    if errors:
        module.fail_json(msg="invalid SGLang launch flags, nothing changed: " + "; ".join(errors), errors=errors, warnings_found=warnings)
    module.exit_json(
        changed=False,
        argv=result.argv,
        exec_start=exec_start(p["launch_python"], p["launch_module"], result.argv),
        mode=mode,
        static_reason=reason if mode == "static" else "",
        flag_warnings=warnings,
        flags_known=len(table),
    )


if __name__ == "__main__":
    main()
