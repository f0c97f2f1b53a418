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
  - Also gathers the host's facts the start-failure catalogue reads (plugins/module_utils/sglang_sm120/host/facts.py),
    namely the GPU link matrix (C(nvidia-smi topo -m)), the NVIDIA kernel module
    (C(/proc/driver/nvidia/version)), the IOMMU (C(/proc/cmdline), C(/sys/kernel/iommu_groups)),
    ACS redirect on PCI bridges (C(lspci -vvv), as root), FlashInfer's JIT toolchain (nvcc,
    ninja, gcc, glibc), and the PCIe fabric's settings that hang or slow NCCL on 8x RTX PRO 6000 hosts
    (nvidia_uvm's HMM, the ASPM policy and port power management, the driver's registry, each GPU's
    power limits, persistence mode, BAR1 size, NUMA node and runtime power management, the CPU
    sockets). A fact that cannot be read is null, with the reason in RV(facts_unknown);
    it is never a problem and never fails the module.
  - The result, saved as JSON, is a C(sglang-flags --host-facts) file. With O(save_facts) the
    module writes that file itself (the GPUs, memory and the gathered facts; not the free space,
    which changes from run to run), atomically and only when its content changes; the deploy's
    start gate reads it there. The file is a record of what was measured, not a setting, so
    rewriting it never reports changed (RV(facts_saved) says whether it was rewritten).
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
  lspci:
    description: Path or name of lspci (pciutils), read for RV(acs_redirect); run as root to see the capabilities.
    type: str
    default: lspci
  cuda_home:
    description:
      - The CUDA toolkit the release's FlashInfer JIT compiles with; its C(bin/nvcc) is read for
        RV(nvcc_version), else the nvcc on PATH.
    type: path
    default: /usr/local/cuda-13.0
  setting_names:
    description:
      - The variable the caller set each option from (e.g. C(gpu_count) - C(preflight_gpu_count)); a problem an
        option decides names that variable after it, so the message says what to change.
    type: dict
    default: {}
  problems:
    description:
      - Problems the caller already found (the distribution, the Python), each naming its variable; reported with
        this module's own in one failure, so one run shows everything to fix.
    type: list
    elements: str
    default: []
  save_facts:
    description:
      - Where to save the host's facts as JSON for the start gate (its directory is created, mode
        0755); empty saves nothing. Saved also when problems are found, before the module fails.
    type: path
attributes:
  check_mode:
    description: Measures, and says whether O(save_facts) would change, without writing it; it fails exactly as a real run does.
    support: full
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.no_diff
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
facts_saved:
  description: Whether O(save_facts) was rewritten (or would be, in check mode) because the facts differ from the saved ones.
  type: bool
  returned: always
  sample: false
disks:
  description: Free space measured for each entry of O(disks).
  type: list
  elements: dict
  returned: success
  sample: [{label: build root, path: /opt/sglang/build, measured_at: /opt, free_gib: 812.4, min_gib: 200.0}]
  contains:
    label: {description: The entry's label., type: str, sample: build root}
    path: {description: The path asked about., type: str, sample: /opt/sglang/build}
    measured_at: {description: "The nearest existing parent, where free space was measured.", type: str, sample: /opt}
    free_gib: {description: Free space in GiB., type: float, sample: 812.4}
    min_gib: {description: The minimum asked for., type: float, sample: 200.0}
memory_gib:
  description: Total memory in GiB.
  type: float
  returned: success
  sample: 1007.6
gpus:
  description: GPUs reported by nvidia-smi (empty when not required).
  type: list
  elements: dict
  returned: success
  sample:
    - {index: 0, name: NVIDIA RTX PRO 6000 Blackwell Server Edition, compute_cap: "12.0", driver_version: 580.95.05,
       memory_mib: 97887}
problems:
  description: Every failed check, one sentence each.
  type: list
  elements: str
  returned: always
  sample: ["/opt/sglang/build: expected at least 200 GiB free, found 35.2 GiB (measured at /opt)"]
gpu_topology:
  description: C(nvidia-smi topo -m) as GPU -> other GPU -> link (PIX, PXB, PHB, NODE, SYS, NV#); null when unknown.
  type: dict
  returned: success
  sample: {GPU0: {GPU1: PIX, GPU2: NODE}, GPU1: {GPU0: PIX, GPU2: NODE}, GPU2: {GPU0: NODE, GPU1: NODE}}
pcie_only:
  description: True when no GPU pair is linked by NVLink; null with fewer than two GPUs or no matrix.
  type: bool
  returned: success
  sample: true
gpu_p2p_read:
  description:
    - C(nvidia-smi topo -p2p r) - GPU -> other GPU -> what the driver says of peer-to-peer reads between them (C(OK), or
      why not - C(CNS) chipset, C(GNS) GPU, C(TNS) topology not supported, C(NS) not supported, C(DR) disabled by regkey,
      C(U) unknown); null when unknown.
  type: dict
  returned: success
  sample: {GPU0: {GPU1: GNS}, GPU1: {GPU0: GNS}}
p2p_supported:
  description: True when the driver reports every GPU pair C(OK); null with fewer than two GPUs or no matrix.
  type: bool
  returned: success
  sample: false
nvidia_kernel_module:
  description: C(open) or C(proprietary), from C(/proc/driver/nvidia/version); null when unknown.
  type: str
  returned: success
  sample: open
nvidia_module_version:
  description: The kernel module's version; null when unknown.
  type: str
  returned: success
  sample: 580.82.07
nvidia_module_gcc:
  description: The GCC the kernel module was built with; null when unknown.
  type: str
  returned: success
  sample: 13.3.0
iommu_cmdline:
  description: The IOMMU switches on C(/proc/cmdline) (intel_iommu, amd_iommu, iommu, iommu.passthrough).
  type: dict
  returned: success
  sample: {amd_iommu: "on", iommu: pt}
iommu_groups:
  description: How many IOMMU groups C(/sys/kernel/iommu_groups) lists (0 - no IOMMU in use).
  type: int
  returned: success
  sample: 48
iommu_group_types:
  description: IOMMU group type -> number of groups (identity - passthrough; DMA, DMA-FQ - translated).
  type: dict
  returned: success
  sample: {identity: 48}
iommu_mode:
  description: C(off), C(passthrough) or C(translated); null when the group types and the command line do not say.
  type: str
  returned: success
  sample: passthrough
acs_redirect:
  description: True when a PCI bridge has ACS redirect on (C(lspci -vvv) ACSCtl C(ReqRedir+) or C(CmpltRedir+)).
  type: bool
  returned: success
  sample: false
acs_redirect_bridges:
  description: The bridges with ACS redirect on, as lspci names them.
  type: list
  elements: str
  returned: success
  sample: ["00:03.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge (prog-if 00 [Normal decode])"]
uvm_disable_hmm:
  description:
    - C(/sys/module/nvidia_uvm/parameters/uvm_disable_hmm) - false leaves nvidia_uvm's HMM on; null when nvidia_uvm is
      not loaded (it loads at the first CUDA use).
  type: bool
  returned: success
  sample: false
pcie_cmdline:
  description: The PCIe power-management switches on C(/proc/cmdline) (pcie_aspm, pcie_aspm.policy, pcie_port_pm).
  type: dict
  returned: success
  sample: {pcie_aspm: "off", pcie_port_pm: "off"}
pcie_aspm_policy:
  description:
    - C(off) with C(pcie_aspm=off) on the kernel command line, else the active policy of
      C(/sys/module/pcie_aspm/parameters/policy) (C(default), C(performance), C(powersave), C(powersupersave)).
  type: str
  returned: success
  sample: default
pcie_port_pm:
  description: C(off) or C(force) (C(pcie_port_pm=) on the kernel command line), else C(default).
  type: str
  returned: success
  sample: default
nvidia_registry_dwords:
  description: C(RegistryDwords) of C(/proc/driver/nvidia/params) as written (empty - none set).
  type: str
  returned: success
  sample: ForceP2P=0x11;RMForceP2PType=1;RMPcieP2PType=2;GrdmaPciTopoCheckOverride=1;EnableResizableBar=1
nvidia_dynamic_power_management:
  description: C(DynamicPowerManagement) of C(/proc/driver/nvidia/params).
  type: int
  returned: success
  sample: 3
cpu_sockets:
  description: How many CPU packages C(/sys/devices/system/cpu/cpu*/topology/physical_package_id) name.
  type: int
  returned: success
  sample: 2
gpu_bus_ids:
  description: GPU -> its PCI address as sysfs names it (C(nvidia-smi) C(pci.bus_id)).
  type: dict
  returned: success
  sample: {GPU0: "0000:41:00.0"}
gpu_numa_nodes:
  description: GPU -> C(/sys/bus/pci/devices/<address>/numa_node) (-1 - none reported).
  type: dict
  returned: success
  sample: {GPU0: 0}
gpu_runtime_pm:
  description: GPU -> C(/sys/bus/pci/devices/<address>/power/control) (C(auto) or C(on)).
  type: dict
  returned: success
  sample: {GPU0: "on"}
persistence_mode:
  description: GPU -> persistence mode on (C(nvidia-smi) C(persistence_mode)).
  type: dict
  returned: success
  sample: {GPU0: true}
power_limit_w:
  description: GPU -> its power limit in W (C(power.limit)).
  type: dict
  returned: success
  sample: {GPU0: 600.0}
power_default_limit_w:
  description: GPU -> its default power limit in W (C(power.default_limit)).
  type: dict
  returned: success
  sample: {GPU0: 600.0}
power_max_limit_w:
  description: GPU -> the highest power limit it takes in W (C(power.max_limit)).
  type: dict
  returned: success
  sample: {GPU0: 600.0}
gpus_power_below_default:
  description: The GPUs whose power limit is below their default.
  type: list
  elements: str
  returned: success
  sample: [GPU2]
bar1_total_mib:
  description: GPU -> its BAR1 size in MiB (C(nvidia-smi -q -d MEMORY), BAR1 Memory Usage Total).
  type: dict
  returned: success
  sample: {GPU0: 98304}
gpus_bar1_below_memory:
  description: The GPUs whose BAR1 is smaller than their memory (FB Memory Usage Total).
  type: list
  elements: str
  returned: success
  sample: []
nvcc_path:
  description: The nvcc read (O(cuda_home)/bin/nvcc, else PATH).
  type: str
  returned: success
  sample: /usr/local/cuda-13.0/bin/nvcc
nvcc_version:
  description: That nvcc's release, X.Y.
  type: str
  returned: success
  sample: "13.0"
ninja_version:
  description: C(ninja --version), its leading X.Y.Z.
  type: str
  returned: success
  sample: 1.13.2
gcc_version:
  description: C(gcc --version).
  type: str
  returned: success
  sample: 13.3.0
glibc_version:
  description: The C library's version.
  type: str
  returned: success
  sample: "2.39"
jit_tools_missing:
  description: Which of nvcc, ninja, gcc and the C++ compiler (C($CXX), else C(c++)) were not found.
  type: list
  elements: str
  returned: success
  sample: [ninja]
cxx_path:
  description: The C++ compiler FlashInfer's JIT build files name (C($CXX), else C(c++) on PATH); null when not found.
  type: str
  returned: success
  sample: /usr/bin/c++
cuda_cccl_headers:
  description:
    - Whether the CUDA C++ core library headers (C(cuda/std)) are beside the nvcc found (C(include/cccl) as CUDA 13 lays
      them out, or C(include) as CUDA 12 did); JIT kernels include them. Null when no nvcc was found.
  type: bool
  returned: success
  sample: true
python_headers:
  description:
    - Whether C(Python.h) is in the include directory of the Python the module ran with (Triton compiles its CUDA
      launcher against it at the server's first kernel).
  type: bool
  returned: success
  sample: false
python_include:
  description: That include directory (sysconfig's C(include) path).
  type: str
  returned: success
  sample: /usr/include/python3.11
facts_unknown:
  description: Fact -> why it is null (a command or file absent, unreadable or not in the expected format).
  type: dict
  returned: success
  sample: {acs_redirect: "lspci not found (install pciutils to read the bridges' ACS settings)"}
"""

import json
import os
import sysconfig
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import ToolkitError, run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.files import write_changed
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.host.facts import DEFAULT_CUDA_HOME, gather
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.host.nvidia_smi import QUERY_ARGS, GpuExpectation, gpu_report
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.host.resources import DiskNeed, check_disk, check_memory


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


ARGUMENT_SPEC = dict(
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
    lspci=dict(type="str", default="lspci"),
    cuda_home=dict(type="path", default=DEFAULT_CUDA_HOME),
    save_facts=dict(type="path"),
    setting_names=dict(type="dict", default={}),
    problems=dict(type="list", elements="str", default=[]),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: preflight(module, module.params))


# Which option decides a problem, by the words the checks (plugins/module_utils/sglang_sm120/host) use for it.
PROBLEM_OPTIONS = (
    (" GPUs, expected ", "gpu_count"),
    ("expected a name matching", "gpu_name_pattern"),
    (" has compute capability ", "gpu_compute_cap"),
    (" runs driver ", "gpu_min_driver"),
    ("cannot list GPUs", "nvidia_smi"),
    (" GiB free at ", "disks"),
    (" GiB of memory, expected ", "min_memory_gib"),
)


def name_the_settings(problems: list[str], names: dict) -> list[str]:
    """Each problem with the variable its option was set from after it, where the caller named it."""
    out = []
    for problem in problems:
        option = next((option for words, option in PROBLEM_OPTIONS if words in problem), None)
        out.append(f"{problem} ({names[option]})" if option and names.get(option) else problem)
    return out


def preflight(module: AnsibleModule, params: dict) -> dict:
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

    facts = gather(
        lambda argv: module.run_command(argv, environ_update={"LC_ALL": "C"}, errors="surrogate_or_replace", handle_exceptions=False),
        read_text,
        which=module.get_bin_path,
        listdir=os.listdir,
        nvidia_smi=params["nvidia_smi"],
        lspci=params["lspci"],
        cuda_home=params["cuda_home"],
        python_include=sysconfig.get_path("include"),
        cxx=os.environ.get("CXX") or None,
    )

    saved = dict(facts.as_dict(), memory_gib=memory_gib, gpus=gpus)
    # A record of what was measured, not a setting of the host: rewriting it is never a change (the
    # facts differ once CUDA is installed, after preflight ran first); facts_saved says whether it was.
    rewritten = save_facts(params["save_facts"], saved, module.check_mode) if params["save_facts"] else False
    result = dict(
        facts.as_dict(),
        changed=False,
        facts_saved=rewritten,
        disks=[dict(label=s.label, path=s.path, measured_at=s.measured_at, free_gib=s.free_gib, min_gib=s.min_gib) for s in disks],
        memory_gib=memory_gib,
        gpus=gpus,
        problems=problems,
    )
    if problems or params["problems"]:
        problems = list(params["problems"]) + name_the_settings(problems, params["setting_names"])
        result["problems"] = problems
        # The problems only: the facts measured are in the saved file (where one is kept), not in the failure's output.
        kept = f" (the host facts read are in {params['save_facts']})" if params["save_facts"] and not module.check_mode else ""
        raise ToolkitError(
            f"preflight found {len(problems)} problem(s): {'; '.join(problems)}{kept}", problems=problems, facts_saved=rewritten
        )
    return result


def save_facts(path: str, facts: dict, check_mode: bool) -> bool:
    """Write the facts file when its content differs; whether it changed (or would, in check mode)."""
    return write_changed(Path(path), (json.dumps(facts, indent=2, sort_keys=True) + "\n").encode(), 0o644, check_mode)


if __name__ == "__main__":
    main()
