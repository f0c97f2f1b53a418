#!/usr/bin/python
"""Ansible module: prove a CUDA toolkit tree is the wanted release and compiles for an SM."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda_toolkit_verify
short_description: Check nvcc's version, the release the tree is, and that a tiny kernel compiles for a GPU architecture
description:
  - Runs C(CUDA_HOME/bin/nvcc --version) and compares release and build.
  - Says which release the tree is from what it holds (the CUDA runtime's own version --
    C(libcudart.so.13.0.88) or the wheels' dist-info --, the dpkg versions of its packages,
    version.json when present), not from version.json alone. nvcc is V13.0.88 in both CUDA
    13.0.1 and 13.0.2; only the runtime (13.0.88 vs 13.0.96) tells them apart.
  - With I(packages), every one of those packages dpkg has installed must be at exactly its version.
  - Compiles a one-line kernel with C(-gencode arch=compute_XY,code=sm_XY) in a temporary
    directory and reads the GPU architecture out of the object itself (its embedded fat
    binary, suffix-exact, so sm_120a is not sm_120), so a compiler that exits 0 without emitting
    that code still fails.
  - Reads nothing but the toolkit, dpkg's database and a temporary directory; never reports a change.
options:
  cuda_home:
    description: Root of the toolkit tree (for example /usr/local/cuda-13.0).
    type: path
    required: true
  release:
    description: Expected C(release X.Y) from nvcc --version.
    type: str
    required: true
  build:
    description: Expected nvcc build (for example V13.0.88).
    type: str
    required: true
  version:
    description: Expected CUDA release of the tree (13.0.1); not checked when omitted.
    type: str
  runtime:
    description: Expected CUDA runtime version (13.0.88 for 13.0.1); not checked when omitted.
    type: str
  runtime_releases:
    description: Runtime version -> release it belongs to (names what is found).
    type: dict
    default: {}
  packages:
    description: Debian package -> exact version every installed one must have.
    type: dict
    default: {}
  meta_package:
    description: The release's meta package (its version counts as evidence of the release).
    type: str
    default: ""
  runtime_packages:
    description: The runtime's package names (cuda-cudart-13-0).
    type: list
    elements: str
    default: []
  arch:
    description: Compute capability to compile for (12.0 means sm_120, 12.0a means sm_120a).
    type: str
    default: "12.0"
  stamp:
    description:
      - A file recording a successful probe compile with the key of what decided it (the target,
        nvcc's version text, the size, mtime and inode of nvcc, ptxas, cicc, fatbinary, nvlink, cudafe++).
      - While the key holds the probe is not compiled again (C(probe_cached=true)); the version,
        runtime and package checks always run. Written after a successful compile, never in check mode.
    type: path
attributes:
  check_mode:
    description:
      - Runs nvcc and compiles the probe in a temporary directory in check mode too (nothing outside it is written).
      - O(stamp) is read in check mode, never written.
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
"""

EXAMPLES = r"""
- name: Ensure nvcc is V13.0.88, the runtime is 13.0.1's and the compiler emits sm_120 code
  cuda_toolkit_verify:
    cuda_home: /usr/local/cuda-13.0
    release: "13.0"
    build: V13.0.88
    version: 13.0.1
    runtime: 13.0.88
    arch: "12.0"
"""

RETURN = r"""
probe_cached:
  description: Whether the probe's targets were read from O(stamp) instead of compiling again.
  type: bool
  returned: success
  sample: false
nvcc_release:
  description: The release nvcc reports.
  type: str
  returned: success
  sample: "13.0"
nvcc_build:
  description: The build nvcc reports.
  type: str
  returned: success
  sample: V13.0.88
targets:
  description: GPU targets found in the compiled probe object (suffix-exact).
  type: list
  elements: str
  returned: success
  sample: [sm_120]
version:
  description: The release the tree was identified as (empty when unknown).
  type: str
  returned: success
  sample: 13.0.1
runtime:
  description: The CUDA runtime version found.
  type: str
  returned: success
  sample: 13.0.88
identified:
  description: What the tree is and on what evidence.
  type: str
  returned: success
  sample: "CUDA 13.0.1 (runtime 13.0.88 (libcudart.so.13.0.88), which is 13.0.1's)"
packages:
  description: The given packages dpkg has installed -> their versions.
  type: dict
  returned: success
  sample: {cuda-cudart-13-0: 13.0.88-1, cuda-nvcc-13-0: 13.0.88-1}
"""

import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.build.pipeline import gpu_code
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import ToolkitError, run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.host.cuda_toolkit import (
    identify_toolkit,
    parse_dpkg_query,
    parse_nvcc_version,
    probe_key,
    read_probe,
    write_probe,
)

PROBE = "__global__ void sm_probe(float *x) { x[threadIdx.x] *= 2.0f; }\n"


ARGUMENT_SPEC = dict(
    cuda_home=dict(type="path", required=True),
    release=dict(type="str", required=True),
    build=dict(type="str", required=True),
    version=dict(type="str"),
    runtime=dict(type="str"),
    runtime_releases=dict(type="dict", default={}),
    packages=dict(type="dict", default={}),
    meta_package=dict(type="str", default=""),
    runtime_packages=dict(type="list", elements="str", default=[]),
    arch=dict(type="str", default="12.0"),
    stamp=dict(type="path"),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: verify(module, module.params))


def verify(module: AnsibleModule, p: dict) -> dict:
    home, arch = p["cuda_home"], p["arch"]
    target = re.fullmatch(r"(\d+)\.?(\d)(a?)", arch.strip())
    if not target:
        raise ToolkitError(f"arch: expected a compute capability like 12.0 or 12.0a, found {arch!r}")
    code = target.group(1) + target.group(2) + target.group(3)
    nvcc = os.path.join(home, "bin", "nvcc")
    if not os.access(nvcc, os.X_OK):
        raise ToolkitError(f"expected an executable nvcc at {nvcc}, found none")
    rc, out, err = module.run_command([nvcc, "--version"])
    wanted_pkgs = {str(k): str(v) for k, v in p["packages"].items()}
    installed = {}
    dpkg_query = module.get_bin_path("dpkg-query")
    names = sorted(set(wanted_pkgs) | set(p["runtime_packages"]) | ({p["meta_package"]} if p["meta_package"] else set()))
    if dpkg_query and names:
        installed = parse_dpkg_query(module.run_command([dpkg_query, "-W", "-f", "${Package} ${db:Status-Status} ${Version}\n", *names])[1])
    found = parse_nvcc_version(out if rc == 0 else err)
    releases = {str(k): str(v) for k, v in p["runtime_releases"].items()}
    identity = identify_toolkit(home, releases, installed, p["meta_package"], tuple(p["runtime_packages"]))
    wanted = (p["release"], p["build"])
    if (found.release, found.build) != wanted:
        raise ToolkitError(f"{nvcc}: expected release {wanted[0]}, {wanted[1]}; found release {found.release}, {found.build}")
    evidence = "; ".join(identity.evidence + identity.problems)
    if p["runtime"] and identity.runtime != p["runtime"]:
        theirs = releases.get(identity.runtime or "", "")
        raise ToolkitError(
            f"{home}: expected the CUDA runtime {p['runtime']}"
            + (f" ({releases[p['runtime']]}'s)" if p["runtime"] in releases else "")
            + f", found {identity.runtime or 'none'}"
            + (f" ({theirs}'s)" if theirs else "")
            + f" ({evidence}); nvcc {found.build} alone cannot tell them apart"
        )
    if p["version"] and identity.release != p["version"]:
        raise ToolkitError(f"{home}: expected CUDA {p['version']}, found {identity.release or 'an unknown release'} ({evidence})")
    drift = {name: version for name, version in installed.items() if name in wanted_pkgs and version != wanted_pkgs[name]}
    if drift:
        raise ToolkitError(
            f"{home}: packages not at CUDA {p['version'] or found.release}'s versions: "
            + ", ".join(f"{name} {version} (expected {wanted_pkgs[name]})" for name, version in sorted(drift.items()))
        )

    key = probe_key(home, code, out if rc == 0 else err, PROBE) if p["stamp"] else ""
    targets = read_probe(p["stamp"], key) if key else None
    if targets is not None and f"sm_{code}" in targets:
        return dict(changed=False, probe_cached=True, **found_facts(found, identity, installed, wanted_pkgs, targets))
    with tempfile.TemporaryDirectory(prefix="cuda-verify-") as work:
        source, obj = os.path.join(work, "probe.cu"), os.path.join(work, "probe.o")
        with open(source, "w", encoding="ascii") as handle:
            handle.write(PROBE)
        cmd = [nvcc, "-gencode", f"arch=compute_{code},code=sm_{code}", "-c", "-o", obj, source]
        rc, out, err = module.run_command(cmd, cwd=work)
        if rc != 0:
            raise ToolkitError(f"nvcc could not compile a kernel for sm_{code} (exit {rc}): {(err or out).strip()[-2000:]}")
        targets = gpu_code(obj)
        if f"sm_{code}" not in targets:
            raise ToolkitError(
                f"nvcc exited 0 but the object is wrong: {obj}: expected sm_{code} machine code, "
                f"found {', '.join(targets) or 'no GPU code'}"
            )
    if key and not module.check_mode:
        write_probe(p["stamp"], key, targets)
    return dict(changed=False, probe_cached=False, **found_facts(found, identity, installed, wanted_pkgs, targets))


def found_facts(found, identity, installed, wanted_pkgs, targets) -> dict:
    return dict(
        nvcc_release=found.release,
        nvcc_build=found.build,
        targets=targets,
        version=identity.release or "",
        runtime=identity.runtime or "",
        identified=identity.describe(),
        packages={name: installed[name] for name in sorted(installed) if name in wanted_pkgs},
    )


if __name__ == "__main__":
    main()
