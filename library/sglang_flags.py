#!/usr/bin/python
"""Ansible module: validate SGLang launch flags against the release's own server_args.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_flags
short_description: Validate a launch profile against SGLang's flags and this hardware, render ExecStart
description:
  - Thin wrapper around module_utils/flag_rules.py C(check_launch), the same checker as
    C(bin/sglang-flags). With O(python) whose environment can import the SGLang in O(sglang) (put
    first on its PYTHONPATH, with O(pythonpath) after it), SGLang's own parser decides
    (abbreviations refused); otherwise the flag table is read statically from the sources of
    O(sglang) (an installed package, an unpacked wheel or the wheel). RV(parser) says which.
  - Unknown flags, abbreviations, wrong types or choices fail with a suggestion. EAGLE without a
    draft model fails. Per SGLang version, combinations that version accepts but fails on or
    mis-runs on this hardware fail (speculative-eagle-topk > 1 with flashinfer on an MLA target
    unless the profile key C(_allow_topk_tree_on_mla) or O(allow_topk_tree_on_mla) acknowledges it;
    allreduce fusion on capability 12 where it raises; torch symm-mem on capability 12 where it
    crashes without its patch); known no-ops warn.
  - Profile keys starting with C(_) are the toolkit's and are never rendered.
  - Changes nothing.
options:
  sglang:
    description: The sglang package directory, the directory holding it, or a wheel, whose flags apply.
    type: path
    required: true
  profile:
    description: Canonical flag name (without --) -> value; true is a switch, false or null omit it.
    type: dict
    required: true
  python:
    description: A Python whose environment has SGLang's dependencies; static table when it cannot import SGLang.
    type: path
  pythonpath:
    description: More PYTHONPATH entries for O(python), after O(sglang) (e.g. a runtime's site-packages).
    type: list
    elements: path
    default: []
  model_class:
    description: The target model class (config.json architectures); MLA classes get the topk rule.
    type: str
  allow_topk_tree_on_mla:
    description: Acknowledge speculative-eagle-topk > 1 with flashinfer on an MLA target.
    type: bool
    default: false
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
    model_class: KimiK25ForConditionalGeneration
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
parser:
  description: sglang (SGLang's own parser was imported) or static (table read from its sources).
  type: str
  returned: always
parser_line:
  description: The same, as bin/sglang-flags prints it, with the reason for the static table.
  type: str
  returned: always
mode:
  description: import or static (as RV(parser), the older name).
  type: str
  returned: success
version:
  description: The SGLang version checked.
  type: str
  returned: always
flag_warnings:
  description: The warnings, one line each with the fix and the upstream reference.
  type: list
  returned: always
errors:
  description: The problems, one line each with the fix and the upstream reference.
  type: list
  returned: failure
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.flag_rules import check_launch
from ansible.module_utils.server_flags import FlagError, exec_start


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            sglang=dict(type="path", required=True),
            profile=dict(type="dict", required=True),
            python=dict(type="path"),
            pythonpath=dict(type="list", elements="path", default=[]),
            model_class=dict(type="str"),
            allow_topk_tree_on_mla=dict(type="bool", default=False),
            applied_patches=dict(type="list", elements="str", default=[]),
            gpu_major=dict(type="int", default=12),
            launch_python=dict(type="str", required=True),
            launch_module=dict(type="str", default="sglang.launch_server"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        report = check_launch(
            p["sglang"],
            profile=p["profile"],
            model_class=p["model_class"],
            gpu_major=p["gpu_major"],
            planned_patches=p["applied_patches"],
            allow_topk_tree_on_mla=p["allow_topk_tree_on_mla"],
            python=p["python"],
            pythonpath=p["pythonpath"],
        )
    except FlagError as exc:
        module.fail_json(msg=str(exc))
    common = dict(
        parser=report.parser,
        parser_line=report.parser_line,
        version=report.version,
        flag_warnings=[f.text() for f in report.warnings],
    )
    if not report.ok:
        errors = [f.text() for f in report.errors]
        module.fail_json(
            msg=f"invalid SGLang launch flags ({report.parser_line}), nothing changed: " + "; ".join(errors),
            errors=errors,
            **common,
        )
    module.exit_json(
        changed=False,
        argv=report.argv,
        exec_start=exec_start(p["launch_python"], p["launch_module"], report.argv),
        mode="import" if report.parser == "sglang" else "static",
        static_reason=report.parser_reason,
        flags_known=report.flags_known,
        **common,
    )


if __name__ == "__main__":
    main()
