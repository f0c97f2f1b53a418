#!/usr/bin/python
"""Ansible module: check a host's disk, memory and GPUs before anything is built on it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_preflight
short_description: Check free disk, memory and the GPUs a host must have
description:
  - Measures free space where builds and releases will live (the nearest existing parent of
    each path), total memory, and, when O(gpu_required=true), the GPUs reported by
    C(nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv,noheader).
  - Reports every problem at once, each saying what was expected and what was found.
  - Never changes anything.
options:
  disks:
    description: Places that need free space.
    type: list
    elements: dict
    default: []
    suboptions:
      label: {description: What the space is for., type: str, required: true}
      path: {description: Where it will live (may not exist yet)., type: path, required: true}
      min_gib: {description: Free space needed there in GiB., type: float, required: true}
  min_memory_gib:
    description: Total memory needed in GiB.
    type: float
    default: 0
  gpu_required:
    description: Whether the host must have the GPUs described by the gpu_* options.
    type: bool
    default: true
  nvidia_smi:
    description: Path or name of nvidia-smi.
    type: str
    default: nvidia-smi
  gpu_count:
    description: Number of GPUs expected.
    type: int
    default: 8
  gpu_name_pattern:
    description: Regular expression every GPU name must match.
    type: str
    default: RTX PRO 6000
  gpu_compute_cap:
    description: Compute capability every GPU must report.
    type: str
    default: "12.0"
  gpu_min_driver:
    description: Oldest acceptable driver version.
    type: str
    default: "580.65.06"
attributes:
  check_mode:
    description: Measures only; a check-mode run measures and fails exactly as a real run does.
    support: full
  diff_mode:
    description: No diff; nothing is changed.
    support: none
author: sglang-sm120 toolkit
"""

EXAMPLES = r"""
- name: Ensure the host has room, memory and eight SM120 GPUs
  sglang_preflight:
    disks:
      - {label: releases, path: /opt/sglang, min_gib: 100}
    min_memory_gib: 256
    gpu_count: 8
"""

RETURN = r"""
disks:
  description: Free space measured for each entry of O(disks).
  type: list
  elements: dict
  returned: always
  sample: [{label: build root, path: /opt/sglang/build, measured_at: /opt, free_gib: 812.4, min_gib: 200.0}]
  contains:
    label: {description: The entry's label., type: str, sample: build root}
    path: {description: The path asked about., type: str, sample: /opt/sglang/build}
    measured_at: {description: The nearest existing parent, where free space was measured., type: str, sample: /opt}
    free_gib: {description: Free space in GiB., type: float, sample: 812.4}
    min_gib: {description: The minimum asked for., type: float, sample: 200.0}
memory_gib:
  description: Total memory in GiB.
  type: float
  returned: always
  sample: 1007.6
gpus:
  description: GPUs reported by nvidia-smi (empty when not required).
  type: list
  elements: dict
  returned: always
  sample:
    - {index: 0, name: NVIDIA RTX PRO 6000 Blackwell Server Edition, compute_cap: "12.0", driver_version: 580.95.05,
       memory_mib: 97887}
problems:
  description: Every failed check, one sentence each.
  type: list
  elements: str
  returned: always
  sample: ["/opt/sglang/build: expected at least 200 GiB free, found 35.2 GiB (measured at /opt)"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_checks import DiskNeed, check_disk, check_memory
from ansible.module_utils.nvidia_smi import QUERY_ARGS, GpuExpectation, gpu_report


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            disks=dict(
                type="list",
                elements="dict",
                default=[],
                options=dict(
                    label=dict(type="str", required=True),
                    path=dict(type="path", required=True),
                    min_gib=dict(type="float", required=True),
                ),
            ),
            min_memory_gib=dict(type="float", default=0),
            gpu_required=dict(type="bool", default=True),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            gpu_count=dict(type="int", default=8),
            gpu_name_pattern=dict(type="str", default="RTX PRO 6000"),
            gpu_compute_cap=dict(type="str", default="12.0"),
            gpu_min_driver=dict(type="str", default="580.65.06"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    needs = [DiskNeed(d["label"], d["path"], d["min_gib"]) for d in params["disks"]]
    disks, problems = check_disk(needs)
    with open("/proc/meminfo", encoding="ascii") as handle:
        memory_gib, memory_problems = check_memory(handle.read(), params["min_memory_gib"])
    problems += memory_problems

    gpus: list[dict[str, object]] = []
    if params["gpu_required"]:
        expected = GpuExpectation(
            count=params["gpu_count"],
            name_pattern=params["gpu_name_pattern"],
            compute_cap=params["gpu_compute_cap"],
            min_driver=params["gpu_min_driver"],
        )
        binary = module.get_bin_path(params["nvidia_smi"])
        if binary is None:
            report = gpu_report(None, expected, f"{params['nvidia_smi']} not found on PATH (is the NVIDIA driver installed?)")
        else:
            rc, out, err = module.run_command([binary, *QUERY_ARGS])
            report = gpu_report(None, expected, f"{binary} exited {rc}: {(err or out).strip()}") if rc != 0 else gpu_report(out, expected)
        gpus = [gpu.as_dict() for gpu in report.gpus]
        problems += report.problems

    result = dict(
        changed=False,
        disks=[dict(label=s.label, path=s.path, measured_at=s.measured_at, free_gib=s.free_gib, min_gib=s.min_gib) for s in disks],
        memory_gib=memory_gib,
        gpus=gpus,
        problems=problems,
    )
    if problems:
        module.fail_json(msg=f"preflight found {len(problems)} problem(s): {'; '.join(problems)}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
