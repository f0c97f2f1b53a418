#!/usr/bin/python
"""Ansible module: import the patched SGLang modules with a release's own Python."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_import_check
short_description: Import patched SGLang modules with the release's Python
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/patches/import_check.py. Runs O(python) once and imports every module
    with C(importlib.import_module), reporting each; a patch that compiles but raises at import
    (for instance C(NameError)) fails here, before the release can be marked ready.
  - Fails naming each module that does not import, its error and the last 15 lines of its
    traceback. Changes nothing (no bytecode is written).
options:
  python:
    description: The release's interpreter, e.g. C(<venv>/bin/python).
    type: path
    required: true
  targets:
    description: Patch targets relative to the C(sglang/) package (C(srt/x/y.py) is C(sglang.srt.x.y)).
    type: list
    elements: str
    default: []
  modules:
    description: Further dotted module names to import.
    type: list
    elements: str
    default: []
  environment:
    description: Extra environment variables for the interpreter.
    type: dict
    default: {}
  timeout:
    description: Seconds allowed for all the imports together.
    type: int
    default: 600
  sglang_dir:
    description: The C(sglang/) package directory the O(targets) are in; needed with O(stamp).
    type: path
  stamp:
    description:
      - A file recording a successful check with the key of what decided it (the interpreter, the
        modules, the environment, the bytes of every target, what is installed beside sglang).
      - When the key is unchanged the imports are not run again (C(cached=true)); a converge that
        changed nothing does not pay tens of seconds of imports. Written after a successful check,
        never in check mode.
    type: path
attributes:
  check_mode:
    description: Imports only (no bytecode written); a check-mode run imports and fails exactly as a real run does.
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
"""

EXAMPLES = r"""
- name: Import every patched module with the release's Python
  sglang_import_check:
    python: /opt/sglang/releases/r1/venv/bin/python
    targets: [srt/distributed/device_communicators/torch_symm_mem.py, srt/models/kimi_k25.py]
"""

RETURN = r"""
imports:
  description: Per module, whether it imported and, if not, its error and traceback.
  type: list
  elements: dict
  returned: always
  sample:
    - {module: sglang.srt.models.kimi_k25, ok: true, error: "", traceback: ""}
    - {module: sglang.srt.layers.quantization.modelopt_quant, ok: false, error: "NameError: name 'fp4_gemm' is not defined",
       traceback: "Traceback (most recent call last):\n  ..."}
  contains:
    module: {description: The module imported., type: str, sample: sglang.srt.models.kimi_k25}
    ok: {description: Whether it imported., type: bool, sample: true}
    error: {description: "The exception, empty when it imported.", type: str, sample: ""}
    traceback: {description: "The last lines of the traceback, empty when it imported.", type: str, sample: ""}
cached: {description: Whether the outcome was read from O(stamp) instead of importing again., type: bool, returned: always, sample: false}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import ToolkitError, run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.patches import import_check as checks

ARGUMENT_SPEC = dict(
    python=dict(type="path", required=True),
    targets=dict(type="list", elements="str", default=[]),
    modules=dict(type="list", elements="str", default=[]),
    environment=dict(type="dict", default={}),
    timeout=dict(type="int", default=600),
    sglang_dir=dict(type="path"),
    stamp=dict(type="path"),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_by={"stamp": ("sglang_dir",)}, supports_check_mode=True)
    run_module(module, lambda: import_check(module.params, module.check_mode), partial=dict(imports=[], cached=False))


def import_check(p: dict, check_mode: bool) -> dict:
    env = {k: str(v) for k, v in p["environment"].items()}
    key = None
    names = [checks.module_name(t) for t in p["targets"]] + list(p["modules"])
    if p["stamp"]:
        key = checks.proof_key(p["python"], names, env, p["sglang_dir"], p["targets"])
        proven = checks.read_proof(p["stamp"], key)
        if proven is not None:
            return dict(changed=False, cached=True, imports=[o.to_dict() for o in proven])
    outcomes = checks.check_imports(p["python"], names, env, p["timeout"])
    imports = [o.to_dict() for o in outcomes]
    if not all(o.ok for o in outcomes):
        raise ToolkitError(checks.failure_message(p["python"], outcomes), imports=imports, cached=False)
    if key and outcomes and not check_mode:
        checks.write_proof(p["stamp"], key, outcomes)
    return dict(changed=False, cached=False, imports=imports)


if __name__ == "__main__":
    main()
