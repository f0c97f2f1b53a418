#!/usr/bin/python
"""Ansible module: prove a CUDA toolkit tree is the wanted release and compiles for an SM."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda_toolkit_verify
short_description: Check nvcc's version and that a tiny kernel compiles for a GPU architecture
description:
  - Runs C(CUDA_HOME/bin/nvcc --version) and compares release and build.
  - Compiles a one-line kernel with C(-gencode arch=compute_XY,code=sm_XY) in a temporary
    directory and reads the GPU architecture out of the object itself (its embedded fat
    binary), so a compiler that exits 0 without emitting sm code still fails.
  - Reads nothing but the toolkit and a temporary directory; never reports a change.
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
    description: Expected C(cuda.version) in the tree's version.json; not checked when omitted.
    type: str
  arch:
    description: Compute capability to compile for (12.0 means sm_120).
    type: str
    default: "12.0"
author: sglang-sm120 toolkit
"""

EXAMPLES = r"""
- name: Ensure nvcc is V13.0.88 and emits sm_120 code
  cuda_toolkit_verify:
    cuda_home: /usr/local/cuda-13.0
    release: "13.0"
    build: V13.0.88
    arch: "12.0"
"""

RETURN = r"""
nvcc_release: {description: The release nvcc reports., type: str, returned: success}
nvcc_build: {description: The build nvcc reports., type: str, returned: success}
targets: {description: GPU targets found in the compiled probe object., type: list, returned: success}
version: {description: cuda.version from version.json, if any., type: str, returned: success}
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda_toolkit import (
    CudaToolkitError,
    installed_version,
    parse_nvcc_version,
    require_target,
)

PROBE = "__global__ void sm_probe(float *x) { x[threadIdx.x] *= 2.0f; }\n"


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            cuda_home=dict(type="path", required=True),
            release=dict(type="str", required=True),
            build=dict(type="str", required=True),
            version=dict(type="str"),
            arch=dict(type="str", default="12.0"),
        ),
        supports_check_mode=True,
    )
    home, arch = module.params["cuda_home"], module.params["arch"]
    nvcc = os.path.join(home, "bin", "nvcc")
    if not os.access(nvcc, os.X_OK):
        module.fail_json(msg=f"expected an executable nvcc at {nvcc}, found none")
    rc, out, err = module.run_command([nvcc, "--version"])
    try:
        found = parse_nvcc_version(out if rc == 0 else err)
        recorded = installed_version(home)
    except CudaToolkitError as exc:
        module.fail_json(msg=str(exc))
    wanted = (module.params["release"], module.params["build"])
    if (found.release, found.build) != wanted:
        module.fail_json(msg=f"{nvcc}: expected release {wanted[0]}, {wanted[1]}; found release {found.release}, {found.build}")
    if module.params["version"] and recorded != module.params["version"]:
        module.fail_json(msg=f"{home}/version.json: expected CUDA {module.params['version']}, found {recorded}")

    code = arch.replace(".", "")
    with tempfile.TemporaryDirectory(prefix="cuda-verify-") as work:
        source, obj = os.path.join(work, "probe.cu"), os.path.join(work, "probe.o")
        with open(source, "w", encoding="ascii") as handle:
            handle.write(PROBE)
        cmd = [nvcc, "-gencode", f"arch=compute_{code},code=sm_{code}", "-c", "-o", obj, source]
        rc, out, err = module.run_command(cmd, cwd=work)
        if rc != 0:
            module.fail_json(msg=f"nvcc could not compile a kernel for sm_{code} (exit {rc}): {(err or out).strip()[-2000:]}")
        try:
            targets = require_target(obj, arch)
        except CudaToolkitError as exc:
            module.fail_json(msg=f"nvcc exited 0 but the object is wrong: {exc}")
    module.exit_json(changed=False, nvcc_release=found.release, nvcc_build=found.build, targets=targets, version=recorded)


if __name__ == "__main__":
    main()
