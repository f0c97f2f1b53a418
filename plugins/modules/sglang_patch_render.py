#!/usr/bin/python
"""Ansible module: render the toolkit's SGLang patch templates (run on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_patch_render
short_description: Render the SGLang patch templates for sglang_patch
description:
  - Renders the selected C(roles/sglang_patches/files/patches/*.diff.j2) with their variables, strictly (an undefined
    variable fails). Runs on the controller, whose Python has jinja2, so the GPU host needs none.
    The toolkit's action plugin (plugins/action/sglang_patch_render.py) runs the same step in the
    controller's own process; without it, delegate the module to localhost. Changes nothing.
  - With O(pristine), applies each rendered diff in memory to the target's pristine bytes and runs
    pyflakes on the result and on the pristine file (plugins/module_utils/sglang_sm120/patches/lint.py); fails, naming the
    patch, the file and the line, when the patch adds a message such as an undefined name. Needs
    pyflakes in the controller's Python (requirements.txt).
options:
  template_dir:
    description: Directory holding the templates.
    type: path
    required: true
  only:
    description: Patch ids to render (default, the patches that are on by default).
    type: list
    elements: str
  pristine:
    description:
      - The targets' pristine bytes, as returned by M(sm120.sglang.sglang_package) with its
        O(sm120.sglang.sglang_package#module:pristine_of) option (per target a dict with C(content_base64)).
        Targets left out are not linted.
    type: dict
attributes:
  check_mode:
    description: Renders and lints only; a check-mode run does and returns exactly what a real run does.
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
  - sm120.sglang.sglang_sm120.patch_manifest
"""

EXAMPLES = r"""
- name: Render the patches on the controller
  sglang_patch_render:
    manifest: "{{ lookup('ansible.builtin.file', 'roles/sglang_patches/files/patches/manifest.yml') | from_yaml }}"
    template_dir: roles/sglang_patches/files/patches
  delegate_to: localhost
  become: false
  register: sglang_patches_render

- name: Render and lint against the host's pristine files
  sglang_patch_render:
    manifest: "{{ lookup('ansible.builtin.file', 'roles/sglang_patches/files/patches/manifest.yml') | from_yaml }}"
    template_dir: roles/sglang_patches/files/patches
    pristine: "{{ sglang_pkg.pristine }}"
  delegate_to: localhost
"""

RETURN = r"""
rendered:
  description: Per patch id, the resolved C(values) and the rendered diff C(text).
  type: dict
  returned: success
  sample:
    kimi_k25_eagle3_delegation:
      values: {}
      text: "--- a/srt/models/kimi_k25.py\n+++ b/srt/models/kimi_k25.py\n@@ -120,6 +120,9 @@\n ..."
linted:
  description: Ids of the patches whose result was linted against O(pristine).
  type: list
  elements: str
  returned: success
  sample: [kimi_k25_eagle3_delegation, torch_symm_mem_capability]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.patches.render import ARGUMENT_SPEC, render


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: render(module.params))


if __name__ == "__main__":
    main()
