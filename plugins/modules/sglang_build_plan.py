#!/usr/bin/python
"""Ansible module: validate the build specs and compute their cache keys (run on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_build_plan
short_description: Validate build specs, order them and compute their cache keys
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/build/pipeline.py. Every spec is checked before anything is
    built; an unknown field or a missing source fails naming the artifact.
  - A key is the sha256 of the artifact's inputs (including the content of controller-side
    sources and of a C(lock) file's pins) and of the keys of what it depends on. It runs on the controller,
    where C(path) and C(wheelhouse) sources and C(lock) files live; a C(lock) file that is missing or does not
    parse fails naming it. The toolkit's action plugin (plugins/action/sglang_build_plan.py) runs
    the same step in the controller's own process; without it, delegate the module to localhost.
    Changes nothing.
options:
  specs:
    description: The build specs (see the role sglang_build).
    type: list
    elements: raw
    required: true
  context:
    description: Inputs common to every artifact (CUDA version, nvcc build, CUDA home, arch).
    type: dict
    required: true
attributes:
  check_mode:
    description: Computes only; a check-mode run plans exactly as a real run does.
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
"""

EXAMPLES = r"""
- name: Plan the builds
  sglang_build_plan:
    specs: "{{ sglang_build_specs }}"
    context: {cuda_version: 13.0.1, cuda_home: /usr/local/cuda-13.0, arch: "12.0"}
  delegate_to: localhost
  register: sglang_build_planned
"""

RETURN = r"""
plan:
  description: The artifacts in build order.
  type: list
  elements: dict
  returned: success
  sample:
    - name: torch
      package: torch
      key: 3f2a9c1d0e4b7a6f5e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f
      short: 3f2a9c1d0e4b
      kind: source
      depends_on: []
      spec: {name: torch, kind: source, cuda_arch: "12.0"}
      controller_files: []
      prebuilt_files: []
  contains:
    name: {description: The artifact's name., type: str, sample: torch}
    package: {description: The Python distribution it builds., type: str, sample: torch}
    key: {description: sha256 of its inputs and of its dependencies' keys., type: str,
          sample: 3f2a9c1d0e4b7a6f5e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f}
    short: {description: The key's first 12 characters., type: str, sample: 3f2a9c1d0e4b}
    kind: {description: How the artifact is made., type: str, sample: source}
    depends_on: {description: Names of the artifacts it depends on., type: list, elements: str, sample: [torch]}
    spec: {description: The validated build spec., type: dict, sample: {name: torch, kind: source, cuda_arch: "12.0"}}
    lock: {description: "The spec's lock file as read on the controller (file, text, digest of its pins), null without one.", type: dict,
           sample: {file: roles/toolkit_defaults/files/locks/sglang-0.5.9.txt, text: "fastapi==0.115.6 --hash=sha256:...", digest: 9f2c}}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.build.plan_step import ARGUMENT_SPEC, plan_step
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: plan_step(module.params))


if __name__ == "__main__":
    main()
