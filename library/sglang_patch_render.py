#!/usr/bin/python
"""Ansible module: render the toolkit's SGLang patch templates (run on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_patch_render
short_description: Render the SGLang patch templates for sglang_patch
description:
  - Renders the selected C(files/patches/*.diff.j2) with their variables, strictly (an undefined
    variable fails). Meant to run on the controller (C(delegate_to: localhost)), whose Python has
    jinja2, so the GPU host needs none. Changes nothing.
options:
  manifest:
    description: The parsed C(files/patches/manifest.yml).
    type: dict
    required: true
  template_dir:
    description: Directory holding the templates.
    type: path
    required: true
  only:
    description: Patch ids to render (default, the patches that are on by default).
    type: list
    elements: str
  values:
    description: Template variables, overriding the manifest's defaults.
    type: dict
    default: {}
author: sglang-sm120 toolkit
"""

EXAMPLES = r"""
- name: Render the patches on the controller
  sglang_patch_render:
    manifest: "{{ lookup('ansible.builtin.file', 'files/patches/manifest.yml') | from_yaml }}"
    template_dir: files/patches
  delegate_to: localhost
  become: false
  register: sglang_patches_render
"""

RETURN = r"""
rendered:
  description: Per patch id, the resolved C(values) and the rendered diff C(text).
  type: dict
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_patches import SglangPatchError, load_manifest, render_selected


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            manifest=dict(type="dict", required=True),
            template_dir=dict(type="path", required=True),
            only=dict(type="list", elements="str"),
            values=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        rendered = render_selected(load_manifest(p["manifest"], p["template_dir"]), p["only"], p["values"])
    except SglangPatchError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, rendered=rendered)


if __name__ == "__main__":
    main()
