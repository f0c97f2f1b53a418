#!/usr/bin/python
"""Ansible module: install the verified wheel files into a release venv and read back what is installed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_release_install
short_description: Install exactly the verified wheels into a release venv, then read them back
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/release/install.py, run on the host.
  - Installs the FILES of each artifact's verified wheels from the host wheelhouse (paths, never
    names resolved by pip against a wheelhouse where an upstream manylinux wheel of the same
    version would win), with C(--no-index); with O(install_deps) their own requirements come
    from the artifacts' wheelhouse directories and O(find_links) only, constrained by the
    artifacts' C(pins) (triton==3.5.1 with torch); without it, C(--no-deps).
  - Then reads back each distribution's dist-info (METADATA version, RECORD sha256 of every file
    and the bytes on disk) and fails naming each distribution that differs, expected and found.
  - The sm_120 evidence is read from the installed shared objects with the build's reader and the
    spec's verify rules.
  - O(install=false) only reads back (an existing venv against the given artifacts).
  - Then checks that every ELF shared object and executable in the venv's site-packages can load on
    this host (plugins/module_utils/sglang_sm120/build/elf_closure.py) - each DT_NEEDED resolved as ld.so would, through the
    object's RPATH/RUNPATH (C($ORIGIN) expanded), O(library_dirs), the libraries of torch/lib and
    nvidia/*/lib (the venv's, and those of the directories its .pth files add, e.g. a shared runtime's torch),
    the ld.so.cache and the default directories, glibc and the NVIDIA driver's
    libraries being always present - and fails naming each package, object and library that cannot
    be found (e.g. C(torchvision/_C.so needs libcudart.so.12) on a CUDA-13 host), unless the package
    or object is in O(closure_allowlist).
options:
  venv:
    description: The release venv.
    type: path
    required: true
  build_root:
    description: The build root holding wheelhouse/<artifact>/<key>/.
    type: path
    required: true
  artifacts:
    description: Artifact name -> cache record (sglang_build_artifacts), the ones the release installs, in build order.
    type: dict
    required: true
  specs:
    description: Artifact name -> build spec (for the verify rules).
    type: dict
    default: {}
  install:
    description: Install before reading back.
    type: bool
    default: true
  install_deps:
    description: Resolve the wheels' requirements from the wheelhouse (--no-index); false installs with --no-deps.
    type: bool
    default: true
  find_links:
    description: More host directories for the requirements.
    type: list
    elements: path
    default: []
  log:
    description: Where pip's output goes.
    type: path
  cuobjdump:
    description: cuobjdump to read GPU code with (else the built-in reader).
    type: path
  library_dirs:
    description:
      - Host directories the release's processes search first (the service's C(LD_LIBRARY_PATH), the CUDA toolkit's lib64).
    type: list
    elements: path
    default: []
  closure_allowlist:
    description:
      - Packages (C(torchvision)) or a package's objects (C(nvidia-nvshmem-cu13:nvidia/nvshmem/lib/nvshmem_transport_*), a glob
        of paths relative to site-packages) whose unloadable libraries do not fail the release, each with the reason.
      - A key without a non-empty reason is refused.
    type: dict
    default: {}
  check_closure:
    description: Run the library check (false skips it, saying so in RV(library_closure)).
    type: bool
    default: true
attributes:
  check_mode:
    description: Not supported; in check mode Ansible skips the module.
    support: none
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.no_diff
"""

EXAMPLES = r"""
- name: Install and read back
  sglang_release_install:
    venv: /opt/sglang/releases/0003-1a2b3c4d/venv
    build_root: /opt/sglang/build
    artifacts: "{{ sglang_build_artifacts }}"
"""

RETURN = r"""
installed:
  description: Each distribution read back.
  type: list
  elements: dict
  returned: success
  sample:
    - artifact: torch
      distribution: torch
      version: 2.9.1+sm120
      wheel: torch-2.9.1+sm120-cp312-cp312-linux_x86_64.whl
      wheel_sha256: 9c1e0b7d4a3f2e6c5b8a7d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a
      dist_info: /opt/sglang/releases/0002-1a2b3c4d/venv/lib/python3.12/site-packages/torch-2.9.1+sm120.dist-info
      files_checked: 16842
sm120_verification:
  description: GPU code of the installed shared objects of each CUDA artifact.
  type: list
  elements: dict
  returned: success
  sample:
    - artifact: sgl_kernel
      distribution: sglang-kernel
      version: 0.4.3
      read_from: >-
        installed files (sglang_kernel-0.4.3.dist-info/RECORD)
        in /opt/sglang/releases/0002-1a2b3c4d/venv/lib/python3.12/site-packages
      witness: cuobjdump
      shared_objects:
        - {path: sgl_kernel/sm100/common_ops.abi3.so, gpu_code: [sm_100a, sm_120a], cudart_major: 13, rule: must carry the target}
library_closure:
  description: What the library check read and found; C(allowed) the unloadable libraries of allowlisted packages, with the reason.
  type: dict
  returned: success
  sample:
    site_packages: [/opt/sglang/releases/0002-1a2b3c4d/venv/lib/python3.12/site-packages]
    objects_checked: 412
    host_dirs: [/usr/local/cuda-13.0/lib64]
    ld_cache_entries: 549
    unmet: []
    allowed:
      - >-
        nvidia-nvshmem-cu13 3.4.5: nvidia/nvshmem/lib/nvshmem_transport_ucx.so.3 needs libucs.so.0, which nothing on this host
        provides (searched: ...) (allowed: NVSHMEM's remote transports, dlopen()ed only for multi-node NVSHMEM)
    allowlist_unused: []
    other_abi_files: 0
argv:
  description: The pip command.
  type: list
  elements: str
  returned: when installing
  sample: [/opt/sglang/releases/0002-1a2b3c4d/venv/bin/python, -m, pip, install, --no-index, --disable-pip-version-check, --no-deps,
           /opt/sglang/build/wheelhouse/torch/3f2a9c1d0e4b/torch-2.9.1+sm120-cp312-cp312-linux_x86_64.whl]
"""

import os
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.build.elf_closure import pth_dirs, scan_venv
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import ToolkitError, run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.release import install as release_install

ARGUMENT_SPEC = dict(
    venv=dict(type="path", required=True),
    build_root=dict(type="path", required=True),
    artifacts=dict(type="dict", required=True),
    specs=dict(type="dict", default={}),
    install=dict(type="bool", default=True),
    install_deps=dict(type="bool", default=True),
    find_links=dict(type="list", elements="path", default=[]),
    log=dict(type="path"),
    cuobjdump=dict(type="path"),
    library_dirs=dict(type="list", elements="path", default=[]),
    closure_allowlist=dict(type="dict", default={}),
    check_closure=dict(type="bool", default=True),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=False)
    result = {}  # what a failure returns too: what was done before it
    run_module(module, lambda: install(module.params, result), partial=result)


def install(p: dict, result: dict) -> dict:
    wheels = release_install.release_wheels(p["build_root"], p["artifacts"], p["specs"])
    if p["install"]:
        dirs = list(dict.fromkeys(os.path.dirname(w["wheel"]) for w in wheels))
        with tempfile.NamedTemporaryFile("w", suffix="-constraints.txt", delete=False) as handle:
            handle.write(release_install.constraints_text(wheels))
        argv = release_install.install_argv(
            os.path.join(p["venv"], "bin", "python"), wheels, p["install_deps"], dirs + p["find_links"], handle.name
        )
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        os.unlink(handle.name)
        if p["log"]:
            with open(p["log"], "a", encoding="utf-8") as log:
                log.write("+ " + " ".join(argv) + "\n" + proc.stdout + proc.stderr)
        result["argv"] = argv
        if proc.returncode != 0:
            raise ToolkitError(f"pip install of the verified wheels failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")
    result.update(release_install.read_back(p["venv"], wheels, p["cuobjdump"]))
    if p["check_closure"]:
        sites = release_install.site_packages(p["venv"])
        closure = scan_venv(sites, host_dirs=p["library_dirs"], allowlist=p["closure_allowlist"], provider_sites=pth_dirs(sites))
        result["library_closure"] = closure.summary()
        failure = closure.failure()
        if failure:
            raise ToolkitError(f"the release venv {p['venv']}: {failure}")
    else:
        result["library_closure"] = {"skipped": "check_closure is false"}
    return dict(changed=p["install"], **result)


if __name__ == "__main__":
    main()
