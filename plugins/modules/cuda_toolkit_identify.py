#!/usr/bin/python
"""Ansible module: say which CUDA release a toolkit tree is, from what it holds (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda_toolkit_identify
short_description: Identify an installed CUDA toolkit and work out the exact package pins of a release
description:
  - Says which release the tree at I(root) is from what it holds, not from version.json alone
    (NVIDIA's apt packages ship none) -- the CUDA runtime's own version (C(libcudart.so.13.0.88),
    or the C(nvidia_cuda_runtime-13.0.88.dist-info) of a wheels tree), the dpkg versions of the
    runtime and meta packages, and version.json when present. Sources that disagree, or a
    runtime no table knows, leave the release unknown.
  - Works out the exact Debian package pins of I(version) from its components (NVIDIA's
    cuda-toolkit meta wheel pins) and NVIDIA's package names, and reports which of them dpkg
    has installed at which version.
  - Reads only; never reports a change.
options:
  root:
    description: 'Toolkit path (/usr/local/cuda-13.0).'
    type: path
    required: true
  version:
    description: 'The release wanted (13.0.1).'
    type: str
    required: true
  components:
    description: 'Component wheel -> version of that release; must name nvidia-cuda-runtime.'
    type: dict
    required: true
  component_packages:
    description: 'Component wheel -> NVIDIA Debian package names ({series} = 13-0).'
    type: dict
    default: {}
  meta_packages:
    description: 'Meta package names ({series}); pinned at the release version.'
    type: list
    elements: str
    default: []
  runtime_packages:
    description: 'Package names of the CUDA runtime ({series}).'
    type: list
    elements: str
    default: []
  runtime_releases:
    description: 'Runtime version -> release it belongs to.'
    type: dict
    default: {}
  apt_revision:
    description: 'Debian revision of NVIDIA''s packages (13.0.88-C(1)).'
    type: str
    default: "1"
  prerequisites:
    description:
      - Packages the toolkit needs beside it (the host compiler); the ones dpkg does not have installed are
        returned as C(missing_prerequisites), so the role asks apt only for those.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
"""

EXAMPLES = r"""
- name: Identify what is at /usr/local/cuda-13.0 and work out the package pins of CUDA 13.0.1
  sm120.sglang.cuda_toolkit_identify:
    root: /usr/local/cuda-13.0
    version: 13.0.1
    components:
      nvidia-cuda-runtime: 13.0.88
      nvidia-cuda-nvcc: 13.0.88
      nvidia-cuda-cccl: 13.0.85
    component_packages:
      nvidia-cuda-runtime: ["cuda-cudart-{series}", "cuda-cudart-dev-{series}"]
      nvidia-cuda-nvcc: ["cuda-nvcc-{series}"]
      nvidia-cuda-cccl: ["cuda-cccl-{series}"]
    meta_packages: ["cuda-toolkit-{series}"]
    runtime_packages: ["cuda-cudart-{series}"]
    runtime_releases: {"13.0.88": "13.0.1", "13.0.96": "13.0.2"}
    apt_revision: "1"
    prerequisites: [g++]
  register: cuda_toolkit_present

- name: Refuse another release at the toolkit path
  ansible.builtin.assert:
    that: not cuda_toolkit_present.present or cuda_toolkit_present.release == "13.0.1"
    fail_msg: "found {{ cuda_toolkit_present.description }} at /usr/local/cuda-13.0, expected CUDA 13.0.1"
"""

RETURN = r"""
present:
  description: Whether anything is at root.
  type: bool
  returned: success
  sample: true
release:
  description: The release the tree is, empty when nothing is there or it is unknown.
  type: str
  returned: success
  sample: 13.0.1
runtime:
  description: The CUDA runtime version found, if any.
  type: str
  returned: success
  sample: 13.0.88
description:
  description: What was found and on what evidence, for messages.
  type: str
  returned: success
  sample: "CUDA 13.0.1 (cuda-cudart-13-0 13.0.88-1 installed; runtime 13.0.88 (libcudart.so.13.0.88), which is 13.0.1's)"
pins:
  description: Debian package -> exact version for the wanted release.
  type: dict
  returned: success
  sample: {cuda-cudart-13-0: 13.0.88-1, cuda-nvcc-13-0: 13.0.88-1, cuda-toolkit-13-0: 13.0.1-1}
installed:
  description: The pinned packages dpkg has installed -> their versions.
  type: dict
  returned: success
  sample: {cuda-cudart-13-0: 13.0.88-1, cuda-nvcc-13-0: 13.0.88-1}
drift:
  description: Pinned packages installed at another version ('name version (expected V)').
  type: list
  elements: str
  returned: success
  sample: ["cuda-cudart-13-0 13.0.96-1 (expected 13.0.88-1)"]
missing_prerequisites:
  description: The O(prerequisites) dpkg does not have installed.
  type: list
  elements: str
  returned: success
  sample: [g++]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import ToolkitError, run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.host import cuda_toolkit

ARGUMENT_SPEC = dict(
    root=dict(type="path", required=True),
    version=dict(type="str", required=True),
    components=dict(type="dict", required=True),
    component_packages=dict(type="dict", default={}),
    meta_packages=dict(type="list", elements="str", default=[]),
    runtime_packages=dict(type="list", elements="str", default=[]),
    runtime_releases=dict(type="dict", default={}),
    apt_revision=dict(type="str", default="1"),
    prerequisites=dict(type="list", elements="str", default=[]),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: identify(module, module.params))


def identify(module: AnsibleModule, p: dict) -> dict:
    components = {str(k): str(v) for k, v in p["components"].items()}
    if cuda_toolkit.RUNTIME_COMPONENT not in components:
        raise ToolkitError(
            f"cuda_toolkit_components: expected the components of CUDA {p['version']} including {cuda_toolkit.RUNTIME_COMPONENT} "
            f"(stack_cuda_components), found {', '.join(sorted(components)) or 'none'}"
        )
    series = cuda_toolkit.debian_series(p["version"])
    packages = {str(k): [str(n) for n in v] for k, v in p["component_packages"].items()}
    pins = cuda_toolkit.component_pins(p["version"], components, packages, p["meta_packages"], p["apt_revision"]) if packages else {}
    runtime_packages = tuple(n.format(series=series) for n in p["runtime_packages"])
    meta = p["meta_packages"][0].format(series=series) if p["meta_packages"] else ""
    wanted = set(pins) | set(runtime_packages) | ({meta} if meta else set())
    installed = cuda_toolkit.dpkg_installed(module.run_command, module.get_bin_path("dpkg-query"), sorted(wanted | set(p["prerequisites"])))
    identity = cuda_toolkit.identify_toolkit(
        p["root"], {str(k): str(v) for k, v in p["runtime_releases"].items()}, installed, meta, runtime_packages
    )
    return dict(
        changed=False,
        present=identity is not None,
        release=(identity.release or "") if identity else "",
        runtime=(identity.runtime or "") if identity else "",
        description=identity.describe() if identity else "nothing",
        pins=pins,
        installed={name: version for name, version in installed.items() if name in pins},
        drift=[
            f"{name} {version} (expected {pins[name]})"
            for name, version in sorted(installed.items())
            if name in pins and version != pins[name]
        ],
        missing_prerequisites=[name for name in p["prerequisites"] if name not in installed],
    )


if __name__ == "__main__":
    main()
