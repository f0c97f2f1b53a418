#!/usr/bin/python
"""Ansible module: locate the SGLang package in a virtualenv, without importing it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_package
short_description: Find the installed SGLang package of a virtualenv
description:
  - Looks for C(lib*/python3*/site-packages/sglang) in the virtualenv and reads the version from
    its C(version.py) (cross-checked with pip's dist-info). Never imports sglang or torch.
  - Fails, naming the path, when the directory is not a virtualenv or holds no or several sglang
    packages.
options:
  venv:
    description: The virtualenv directory (the one holding C(pyvenv.cfg)).
    type: path
    required: true
author: sglang-sm120 toolkit
"""

EXAMPLES = r"""
- name: Locate SGLang in the release
  sglang_package:
    venv: /opt/sglang/current/venv
  register: sglang_pkg
"""

RETURN = r"""
package:
  description: venv, python_version, site_packages, sglang_dir, version, dist_info_version.
  type: dict
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_patches import SglangPatchError, find_sglang


def main() -> None:
    module = AnsibleModule(argument_spec=dict(venv=dict(type="path", required=True)), supports_check_mode=True)
    try:
        package = find_sglang(module.params["venv"])
    except SglangPatchError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, package=package.to_dict())


if __name__ == "__main__":
    main()
