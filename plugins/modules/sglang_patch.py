#!/usr/bin/python
"""Ansible module: apply or revert the toolkit's SGLang source patches, all or nothing."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_patch
short_description: Apply or revert the SGLang source patches of roles/sglang_patches/files/patches
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/patches/engine.py (see roles/sglang_patches/files/patches/README.md).
  - Every target's sha256 is checked against the manifest before anything is written; the whole
    selection is applied in memory first, so one failing patch changes no file.
  - Idempotent from the recorded state and hashes; drift and unknown SGLang versions are refused.
  - When pyflakes is installed in the interpreter that runs this module, a patch that adds a pyflakes
    message to its target (undefined name, ...) is refused too; the role lints on the controller
    first (M(sm120.sglang.sglang_patch_render) with O(sm120.sglang.sglang_patch_render#module:pristine)).
  - Templates are either rendered on the controller (O(rendered), what the role does) or here from
    O(template_dir), which needs jinja2 in the interpreter that runs this module.
options:
  sglang_dir:
    description: The installed C(sglang/) package directory.
    type: path
    required: true
  template_dir:
    description:
      - Directory on the host holding the C(<id>.diff.j2) templates (rendered here, needs jinja2).
      - Give this or O(rendered).
    type: path
  rendered:
    description:
      - The patches already rendered on the controller by M(sm120.sglang.sglang_patch_render), so the host needs
        no jinja2. Their values must equal the values this run resolves, else nothing changes.
    type: dict
  state_dir:
    description: Where state and pristine copies are kept (default C(<sglang_dir>/../.sglang-patches)).
    type: path
  only:
    description: Patch ids to act on (default, the patches that are on by default; for absent, all recorded).
    type: list
    elements: str
  state:
    description: present applies, absent reverts.
    type: str
    choices: [present, absent]
    default: present
attributes:
  check_mode:
    description: Plans and checks every patch exactly as a real run does and reports C(would-apply) or C(would-revert); writes nothing.
    support: full
  diff_mode:
    description: Returns the unified diff of every file the patches change (or would change, in check mode).
    support: full
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.patch_manifest
"""

EXAMPLES = r"""
- name: Ensure the SGLang patches are applied in the release
  sglang_patch:
    sglang_dir: /opt/sglang/releases/r1/venv/lib/python3.11/site-packages/sglang
    manifest: "{{ lookup('ansible.builtin.file', 'roles/sglang_patches/files/patches/manifest.yml') | from_yaml }}"
    rendered: "{{ sglang_patches_render.rendered }}"
"""

RETURN = r"""
patches:
  description: Per selected patch, what was done (or would be, in check mode).
  type: list
  elements: dict
  returned: always
  sample:
    - id: kimi_k25_eagle3_delegation
      target: srt/models/kimi_k25.py
      status: applied
      changed: true
      found_sha256: 5d41402abc4b2a76b9719d911017c592ae2d8d4c1f6e3b7a9c0d2e4f6a8b0c1d
      before_sha256: 5d41402abc4b2a76b9719d911017c592ae2d8d4c1f6e3b7a9c0d2e4f6a8b0c1d
      after_sha256: 7b1e3c9a0d2f4e6a8c0b1d3f5a7c9e1b2d4f6a8c0e2b4d6f8a0c2e4b6d8f0a1c
      values: {}
      diff: ""
  contains:
    id: {description: The patch id., type: str, sample: kimi_k25_eagle3_delegation}
    target: {description: "The patched file, relative to the sglang package.", type: str, sample: srt/models/kimi_k25.py}
    status:
      description: applied, already-applied, would-apply, not-applicable, fixed-upstream, reverted, would-revert or not-applied.
      type: str
      sample: applied
    changed: {description: Whether this patch changed (or would change) its target., type: bool, sample: true}
    found_sha256:
      description: sha256 of the target as found.
      type: str
      sample: 5d41402abc4b2a76b9719d911017c592ae2d8d4c1f6e3b7a9c0d2e4f6a8b0c1d
    before_sha256:
      description: sha256 of the pristine target.
      type: str
      sample: 5d41402abc4b2a76b9719d911017c592ae2d8d4c1f6e3b7a9c0d2e4f6a8b0c1d
    after_sha256:
      description: sha256 of the patched target.
      type: str
      sample: 7b1e3c9a0d2f4e6a8c0b1d3f5a7c9e1b2d4f6a8c0e2b4d6f8a0c2e4b6d8f0a1c
    values: {description: The template values the patch was rendered with., type: dict, sample: {}}
    diff: {description: The unified diff of the change (empty when nothing changes)., type: str, sample: ""}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.patches.engine import apply, revert
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.patches.manifest import load_manifest

ARGUMENT_SPEC = dict(
    sglang_dir=dict(type="path", required=True),
    manifest=dict(type="dict", required=True),
    template_dir=dict(type="path"),
    rendered=dict(type="dict"),
    state_dir=dict(type="path"),
    only=dict(type="list", elements="str"),
    values=dict(type="dict", default={}),
    state=dict(type="str", choices=["present", "absent"], default="present"),
)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_one_of=[("template_dir", "rendered")],
        mutually_exclusive=[("template_dir", "rendered")],
        supports_check_mode=True,
    )
    run_module(module, lambda: patch(module.params, module.check_mode, module._diff))


def patch(p: dict, check_mode: bool, diff: bool) -> dict:
    manifest = load_manifest(p["manifest"], p["template_dir"], p["rendered"])
    if p["state"] == "present":
        results = apply(manifest, p["sglang_dir"], p["state_dir"], p["only"], p["values"], check=check_mode)
    else:
        results = revert(manifest, p["sglang_dir"], p["state_dir"], p["only"], check=check_mode)
    output = dict(changed=any(result.changed for result in results), patches=[result.to_dict() for result in results])
    if diff:
        output["diff"] = [dict(prepared=result.diff) for result in results if result.diff]
    return output


if __name__ == "__main__":
    main()
