#!/usr/bin/python
"""Ansible module: prove a CUDA apt repository offers exactly the pinned release, before it is used."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda_toolkit_repo_check
short_description: Check a CUDA apt repository's key and package index before anything changes
description:
  - Reads the flat repository's C(Packages.gz) (or C(Packages)) at I(url) and fails, naming the
    repository and the versions it has, unless every package in I(required) and every other
    pinned package the repository carries is offered at its pinned version.
  - With I(fingerprints), fetches I(key) (URL, host path or armored text) and fails unless one of
    its primary keys has one of those fingerprints.
  - Reads only (the index is not trusted for anything but this check, apt verifies the signed
    repository afterwards); never reports a change.
options:
  url:
    description: Repository URL (https, http or file scheme), ending in /.
    type: str
    required: true
  version:
    description: The CUDA release wanted, for messages.
    type: str
    required: true
  pins:
    description: Debian package -> exact version.
    type: dict
    required: true
  required:
    description: Packages that must be offered at their pinned version.
    type: list
    elements: str
    default: []
  key:
    description: Signing key to check (URL, absolute host path or armored key).
    type: str
  fingerprints:
    description: Allowed fingerprints of the key (hex, spaces ignored).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    description: Reads only; a check-mode run fetches and checks exactly as a real run does.
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
"""

EXAMPLES = r"""
- name: Check NVIDIA's repository key and that it offers the pinned CUDA 13.0.1 packages
  sm120.sglang.cuda_toolkit_repo_check:
    url: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/
    version: 13.0.1
    pins: {cuda-toolkit-13-0: 13.0.1-1, cuda-cudart-13-0: 13.0.88-1, cuda-nvcc-13-0: 13.0.88-1}
    required: [cuda-toolkit-13-0, cuda-cudart-13-0]
    key: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/3bf863cc.pub
    fingerprints: [EB693B3035CD5710E231E123A4B469963BF863CC]

- name: Check a local repository unpacked on the host (no key check)
  sm120.sglang.cuda_toolkit_repo_check:
    url: file:///var/cuda-repo-ubuntu2404-13-0-local/
    version: 13.0.1
    pins: "{{ cuda_toolkit_present.pins }}"
    required: [cuda-toolkit-13-0]
"""

RETURN = r"""
offered:
  description: Pinned package -> versions the repository offers.
  type: dict
  returned: success
  sample: {cuda-cudart-13-0: [13.0.48-1, 13.0.88-1, 13.0.96-1], cuda-nvcc-13-0: [13.0.48-1, 13.0.88-1]}
key_fingerprints:
  description: Fingerprints of the checked key.
  type: list
  elements: str
  returned: when key and fingerprints are given
  sample: [EB693B3035CD5710E231E123A4B469963BF863CC]
"""

from functools import partial

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.host.cuda_toolkit import check_repository


def fetch(module: AnsibleModule, url: str) -> bytes | None:
    """The bytes at an http(s) ``url``, or None when it is not there."""
    response, info = fetch_url(module, url, timeout=60)
    if response is None or info.get("status") != 200:
        return None
    return response.read()


ARGUMENT_SPEC = dict(
    url=dict(type="str", required=True),
    version=dict(type="str", required=True),
    pins=dict(type="dict", required=True),
    required=dict(type="list", elements="str", default=[]),
    key=dict(type="str", no_log=False),
    fingerprints=dict(type="list", elements="str", default=[]),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    args = (partial(fetch, module), p["url"], p["version"], p["pins"], p["required"], p["key"], p["fingerprints"])
    run_module(module, lambda: dict(changed=False, **check_repository(*args)))


if __name__ == "__main__":
    main()
