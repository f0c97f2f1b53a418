#!/usr/bin/python
"""Ansible module: apply or revert the toolkit's SGLang source patches, all or nothing."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_patch
short_description: Apply or revert the SGLang source patches of files/patches
description:
  - Thin wrapper around module_utils/sglang_patches.py (see files/patches/README.md).
  - Every target's sha256 is checked against the manifest before anything is written; the whole
    selection is applied in memory first, so one failing patch changes no file.
  - Idempotent from the recorded state and hashes; drift and unknown SGLang versions are refused.
  - When pyflakes is installed in the interpreter that runs this module, a patch that adds a pyflakes
    message to its target (undefined name, ...) is refused too; the role lints on the controller
    first (M(sglang_patch_render) with O(sglang_patch_render#module:pristine)).
  - Templates are either rendered on the controller (O(rendered), what the role does) or here from
    O(template_dir), which needs jinja2 in the interpreter that runs this module.
options:
  sglang_dir:
    description: The installed C(sglang/) package directory.
    type: path
    required: true
  manifest:
    description: The parsed C(files/patches/manifest.yml).
    type: dict
    required: true
  template_dir:
    description:
      - Directory on the host holding the C(<id>.diff.j2) templates (rendered here, needs jinja2).
      - Give this or O(rendered).
    type: path
  rendered:
    description:
      - The patches already rendered on the controller by M(sglang_patch_render), so the host needs
        no jinja2. Their values must equal the values this run resolves, else nothing changes.
    type: dict
  state_dir:
    description: Where state and pristine copies are kept (default C(<sglang_dir>/../.sglang-patches)).
    type: path
  only:
    description: Patch ids to act on (default, the patches that are on by default; for absent, all recorded).
    type: list
    elements: str
  values:
    description: Template variables, overriding the manifest's defaults.
    type: dict
    default: {}
  state:
    description: present applies, absent reverts.
    type: str
    choices: [present, absent]
    default: present
author: sglang-sm120 toolkit
"""

EXAMPLES = r"""
- name: Ensure the SGLang patches are applied in the release
  sglang_patch:
    sglang_dir: /opt/sglang/releases/r1/venv/lib/python3.11/site-packages/sglang
    manifest: "{{ lookup('ansible.builtin.file', 'files/patches/manifest.yml') | from_yaml }}"
    rendered: "{{ sglang_patches_render.rendered }}"
"""

RETURN = r"""
patches:
  description: Per patch, id, target, status, changed, before/after sha256 and values.
  type: list
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_patches import SglangPatchError, apply, load_manifest, revert


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            sglang_dir=dict(type="path", required=True),
            manifest=dict(type="dict", required=True),
            template_dir=dict(type="path"),
            rendered=dict(type="dict"),
            state_dir=dict(type="path"),
            only=dict(type="list", elements="str"),
            values=dict(type="dict", default={}),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        required_one_of=[("template_dir", "rendered")],
        mutually_exclusive=[("template_dir", "rendered")],
        supports_check_mode=True,
    )
    p = module.params
    try:
        manifest = load_manifest(p["manifest"], p["template_dir"], p["rendered"])
        if p["state"] == "present":
            results = apply(manifest, p["sglang_dir"], p["state_dir"], p["only"], p["values"], check=module.check_mode)
        else:
            results = revert(manifest, p["sglang_dir"], p["state_dir"], p["only"], check=module.check_mode)
    except SglangPatchError as exc:
        module.fail_json(msg=str(exc))
    changed = any(result.changed for result in results)
    output = dict(changed=changed, patches=[result.to_dict() for result in results])
    if module._diff:
        output["diff"] = [dict(prepared=result.diff) for result in results if result.diff]
    module.exit_json(**output)


if __name__ == "__main__":
    main()
