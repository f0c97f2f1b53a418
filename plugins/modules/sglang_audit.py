#!/usr/bin/python
"""Ansible module: find the EAGLE-3 interface gaps of a model class in an installed SGLang."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_audit
short_description: Audit what SGLang's speculative path needs from a target model class
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/patches/audit.py; reads the SGLang source statically, never
    imports it.
  - Fails, listing the missing methods and their call sites, when a required one is missing.
  - Never changes anything.
options:
  sglang:
    description: The installed C(sglang/) package directory or a wheel file.
    type: path
    required: true
  model_class:
    description: Target model class name (or give O(model_dir)).
    type: str
  model_dir:
    description: Model directory whose config.json names the architecture.
    type: path
  algorithm:
    description: Speculative algorithm.
    type: str
    default: EAGLE3
  fail_on_missing:
    description: Fail when a required method is missing (false only reports, e.g. after a revert).
    type: bool
    default: true
  stamp:
    description:
      - A file recording an audit that passed, with the key of what decided it (the class or model
        config, the algorithm, the auditor's own source, every file of the sglang package by path,
        size and mtime). While the key holds the audit is not run again (C(cached=true)).
      - Only for an unpacked O(sglang) directory; written after a passed audit, never in check mode.
    type: path
attributes:
  check_mode:
    description: Reads the SGLang source only; a check-mode run audits and fails exactly as a real run does.
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
"""

EXAMPLES = r"""
- name: Ensure SGLang provides every EAGLE-3 method Kimi-K2.5 needs
  sglang_audit:
    sglang: /opt/sglang/current/venv/lib/python3.11/site-packages/sglang
    model_class: KimiK25ForConditionalGeneration
"""

RETURN = r"""
cached:
  description: Whether the report was read from O(stamp) instead of auditing again.
  type: bool
  returned: success
  sample: false
audit:
  description: The audit of the model class against the algorithm's calls.
  type: dict
  returned: always
  sample:
    sglang_version: 0.5.9
    model_class: KimiK25ForConditionalGeneration
    algorithm: EAGLE3
    missing_required: []
    call_sites: {set_eagle3_layers_to_capture: ["sglang/srt/model_executor/model_runner.py:512"]}
    conditional: [{name: get_embed_and_head, feature: shared embedding and head, present: true}]
    guarded: []
    ok: true
    required: [set_eagle3_layers_to_capture]
    assigned_by_loader: {}
  contains:
    sglang_version:
      description: The SGLang version audited.
      type: str
      sample: 0.5.9
    model_class:
      description: The target model class.
      type: str
      sample: KimiK25ForConditionalGeneration
    algorithm:
      description: The speculative algorithm.
      type: str
      sample: EAGLE3
    missing_required:
      description: Required methods the class lacks.
      type: list
      elements: str
      sample: []
    call_sites:
      description: Per required method, where SGLang calls it (file:line).
      type: dict
      sample: {set_eagle3_layers_to_capture: ["sglang/srt/model_executor/model_runner.py:512"]}
    conditional:
      description: Methods needed only for a feature, with whether the class has them.
      type: list
      elements: dict
      sample: [{name: get_embed_and_head, feature: shared embedding and head, present: true}]
    guarded:
      description: Methods SGLang calls only behind a hasattr-style guard.
      type: list
      elements: str
      sample: []
    ok:
      description: Whether no required method is missing.
      type: bool
      sample: true
    required:
      description: The methods the algorithm requires of the target model.
      type: list
      elements: str
      sample: [set_eagle3_layers_to_capture]
    assigned_by_loader:
      description: Attributes the model loader assigns to every model it builds (name -> file:line).
      type: dict
      sample: {}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import ToolkitError, run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.patches import audit

ARGUMENT_SPEC = dict(
    sglang=dict(type="path", required=True),
    model_class=dict(type="str"),
    model_dir=dict(type="path"),
    algorithm=dict(type="str", default="EAGLE3"),
    fail_on_missing=dict(type="bool", default=True),
    stamp=dict(type="path"),
)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_one_of=[("model_class", "model_dir")],
        mutually_exclusive=[("model_class", "model_dir")],
        supports_check_mode=True,
    )
    run_module(module, lambda: audit_or_proof(module.params, module.check_mode))


def audit_or_proof(p: dict, check_mode: bool) -> dict:
    key = ""
    if p["stamp"] and os.path.isdir(p["sglang"]):
        key = audit.audit_key(p["sglang"], p["model_class"], p["algorithm"], p["model_dir"])
        proven = audit.read_audit_proof(p["stamp"], key)
        if proven is not None:
            return dict(changed=False, cached=True, audit=proven)
    result = audit.audit(p["sglang"], p["model_class"], p["algorithm"], model_dir=p["model_dir"])
    report = result.to_dict()
    if not result.ok and p["fail_on_missing"]:
        sites = "; ".join(f"{name} (called at {', '.join(result.call_sites.get(name, []))})" for name in result.missing_required)
        raise ToolkitError(
            f"SGLang {result.sglang_version}: {result.model_class} lacks what {result.algorithm} calls on the target model: {sites}",
            audit=report,
            cached=False,
        )
    if key and result.ok and not check_mode:
        audit.write_audit_proof(p["stamp"], key, report)
    return dict(changed=False, cached=False, audit=report)


if __name__ == "__main__":
    main()
