#!/usr/bin/python
"""Ansible module: start or wait for one artifact's detached build, verify it, cache it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_build
short_description: Build one artifact of the SM120 build pipeline into the host wheelhouse
description:
  - Thin wrapper around module_utils/build_pipeline.py.
  - C(state=started) starts the build detached (its own session) unless a verified build of the
    same key is cached (changed=false) or already running. C(state=finished) waits up to
    O(wait_seconds) and returns progress, or, once the build has ended, verifies every wheel
    (sm_120 code in each CUDA shared object, the expected libcudart major) and renames it into
    the cache. A failure removes the work directory and fails with the log's tail.
options:
  item:
    description: One entry of sglang_build_plan's C(plan).
    type: dict
    required: true
  root:
    description: Build root on the host (wheelhouse/, work/, logs/).
    type: path
    required: true
  state:
    description: started or finished.
    type: str
    choices: [started, finished]
    default: started
  staged:
    description: Host directory holding the copied controller-side source (path and wheelhouse sources).
    type: path
  python:
    description: Python that creates the build venv.
    type: str
    default: python3
  dep_dirs:
    description: Package name -> cache directory of each dependency's wheels.
    type: dict
    default: {}
  jobs:
    description: Parallel compile jobs; 0 derives min(cores, memory / the spec's mem_per_job_gib).
    type: int
    default: 0
  max_jobs:
    description: Upper bound for derived jobs (0, none).
    type: int
    default: 0
  cuda_home:
    description: CUDA toolkit the build uses.
    type: path
    required: true
  cuobjdump:
    description: cuobjdump to read GPU targets with (default, the built-in ELF/fatbin reader).
    type: path
  wait_seconds:
    description: How long C(finished) waits before returning progress.
    type: float
    default: 30
author: sglang-sm120 toolkit
"""

EXAMPLES = r"""
- name: Start the torch build
  sglang_build:
    item: "{{ sglang_build_planned.plan[0] }}"
    root: /opt/sglang/build
    cuda_home: /usr/local/cuda-13.0
    jobs: 16
"""

RETURN = r"""
status:
  description: cached, running, started, would-build (start); running, built, cached (finished).
  type: str
  returned: success
artifact:
  description: The cache record (key, wheels with sha256 and verification evidence).
  type: dict
  returned: when done
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.build_pipeline import BuildError, derive_jobs, host_resources, start, wait


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            item=dict(type="dict", required=True),
            root=dict(type="path", required=True),
            state=dict(type="str", choices=["started", "finished"], default="started"),
            staged=dict(type="path"),
            python=dict(type="str", default="python3"),
            dep_dirs=dict(type="dict", default={}),
            jobs=dict(type="int", default=0),
            max_jobs=dict(type="int", default=0),
            cuda_home=dict(type="path", required=True),
            cuobjdump=dict(type="path"),
            wait_seconds=dict(type="float", default=30),
        ),
        supports_check_mode=True,
    )
    p = module.params
    jobs = p["jobs"] or derive_jobs(*host_resources(), float(p["item"]["spec"].get("mem_per_job_gib", 4)), p["max_jobs"])
    try:
        if p["state"] == "started":
            result = start(p["item"], p["root"], p["staged"], p["python"], p["dep_dirs"], jobs, p["cuda_home"], check=module.check_mode)
            result["jobs"] = jobs
            module.exit_json(**result)
        if module.check_mode:
            module.exit_json(changed=False, done=True, status="check-mode")
        result = wait(p["item"], p["root"], p["wait_seconds"], p["cuobjdump"])
    except BuildError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=result["status"] == "built", **result)


if __name__ == "__main__":
    main()
