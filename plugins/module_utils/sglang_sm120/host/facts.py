"""The host's facts the start-failure catalogue reads, gathered once by the preflight module.

Plain Python, standard library only (it ships to the hosts inside ``plugins/modules/sglang_preflight.py``);
no Ansible imports. Each ``parse_*`` takes the text a command printed or a file held and returns
typed values, or raises ``HostFactsParseError`` saying what it expected. ``gather`` runs the
commands and reads the files through callables it is given, so the tests need no host; a command
or file that is absent makes its facts null, with the reason in ``facts_unknown``, never an error.

What is read, and from where:

- ``nvidia-smi topo -m``: the GPU x GPU link matrix (``gpu_topology``) and ``pcie_only`` (no pair
  linked by ``NV#``; null with fewer than two GPUs);
- ``nvidia-smi topo -p2p r``: what the driver says of peer-to-peer reads between each GPU pair
  (``gpu_p2p_read``: OK, or why not: CNS chipset, GNS GPU, TNS topology, NS, DR disabled by regkey,
  U unknown) and ``p2p_supported`` (every pair OK; null with fewer than two GPUs). NCCL's P2P
  transport and CUDA IPC all-reduce kernels need it; without it NCCL goes through host memory;
- ``/proc/driver/nvidia/version``: ``nvidia_kernel_module`` (open / proprietary), its version and
  the GCC it was built with;
- ``/proc/cmdline``: the IOMMU switches (``iommu_cmdline``);
- ``/sys/kernel/iommu_groups``: ``iommu_groups`` (how many), their ``type`` files
  (``iommu_group_types``) and from those ``iommu_mode`` (off / passthrough / translated);
- ``lspci -vvv`` (as root): ``acs_redirect``, whether a PCI bridge redirects peer-to-peer requests
  (``ACSCtl: ReqRedir+`` or ``CmpltRedir+``), and those bridges;
- the PCIe fabric's settings operators of 8x RTX PRO 6000 hosts found to hang or slow NCCL
  (voipmonitor/rtx6kpro hardware/pcie-bandwidth.md, optimization/nccl-tuning.md,
  troubleshooting/common-issues.md): ``uvm_disable_hmm`` (``/sys/module/nvidia_uvm/parameters``),
  ``pcie_aspm_policy`` and ``pcie_port_pm`` (``/proc/cmdline``'s ``pcie_aspm=``, ``pcie_aspm.policy=``,
  ``pcie_port_pm=``: ``pcie_cmdline``; ``/sys/module/pcie_aspm/parameters/policy``), the driver's
  ``RegistryDwords`` (``ForceP2P`` and the like) and ``DynamicPowerManagement``
  (``/proc/driver/nvidia/params``), ``cpu_sockets`` (``/sys/devices/system/cpu/cpu*/topology/physical_package_id``);
- per GPU (keyed ``GPU<index>`` as in ``gpu_topology``): ``nvidia-smi --query-gpu=index,pci.bus_id,
  persistence_mode,power.limit,power.default_limit,power.max_limit`` (``gpu_bus_ids`` as sysfs names
  them, ``persistence_mode``, ``power_limit_w``, ``power_default_limit_w``, ``power_max_limit_w`` and
  ``gpus_power_below_default``), ``nvidia-smi -q -d MEMORY`` (``bar1_total_mib`` and
  ``gpus_bar1_below_memory``, a BAR1 smaller than the GPU's memory), and from
  ``/sys/bus/pci/devices/<address>/``: ``numa_node`` (``gpu_numa_nodes``) and ``power/control``
  (``gpu_runtime_pm``: auto lets the kernel power the device down, on keeps it up);
- the JIT toolchain (FlashInfer's and SGLang's own kernels compiled at first use): ``nvcc --version``
  (``<cuda_home>/bin/nvcc``, else the one on PATH), ``ninja --version``, ``gcc --version``, the C++
  compiler FlashInfer's build files name (``$CXX``, else ``c++``), glibc (``os.confstr``, else ``ldd
  --version``), ``jit_tools_missing``; the CUDA C++ core library headers beside that nvcc
  (``cuda_cccl_headers``: ``<cuda_home>/include/cccl/cuda/std/version`` as CUDA 13 lays them out, or
  ``<cuda_home>/include/cuda/std/version`` as CUDA 12 did), and Python's headers (``python_headers``:
  ``Python.h`` in the include directory of the Python running this code, which FlashInfer's build
  files pass with ``-isystem`` and its logging module includes).

The GPUs themselves (``gpus``) stay with ``nvidia_smi.py``, which the module already runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, TypeVar

from ..errors import ToolkitError
from .nvidia_smi import csv_rows

T = TypeVar("T")

DEFAULT_CUDA_HOME = "/usr/local/cuda-13.0"
IOMMU_GROUPS = "/sys/kernel/iommu_groups"
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
CMDLINE = "/proc/cmdline"
# Kernel parameters that switch the IOMMU or its mode (Documentation/admin-guide/kernel-parameters).
IOMMU_SWITCHES = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough")
IOMMU_MODES = ("off", "passthrough", "translated")
UVM_DISABLE_HMM = "/sys/module/nvidia_uvm/parameters/uvm_disable_hmm"
ASPM_POLICY = "/sys/module/pcie_aspm/parameters/policy"
NVIDIA_PARAMS = "/proc/driver/nvidia/params"
PCI_DEVICES = "/sys/bus/pci/devices"
CPUS = "/sys/devices/system/cpu"
# Kernel parameters of PCIe power management (Documentation/admin-guide/kernel-parameters).
PCIE_SWITCHES = ("pcie_aspm", "pcie_aspm.policy", "pcie_port_pm")
# The kernel's ASPM policies (drivers/pci/pcie/aspm.c), and off: pcie_aspm=off on the command line.
ASPM_POLICIES = ("off", "default", "performance", "powersave", "powersupersave")
PORT_PM = ("off", "force", "default")  # pcie_port_pm=off / =force, else the kernel's default
RUNTIME_PM = ("auto", "on")
GPU_QUERY = (
    "--query-gpu=index,pci.bus_id,persistence_mode,power.limit,power.default_limit,power.max_limit",
    "--format=csv,noheader,nounits",
)
MEMORY_QUERY = ("-q", "-d", "MEMORY")
KERNEL_MODULES = ("open", "proprietary")
JIT_TOOLS = ("nvcc", "ninja", "gcc", "c++")
P2P_STATUSES = ("X", "OK", "CNS", "GNS", "TNS", "NS", "DR", "U")

# Every fact a preflight result carries besides gpus, with what it holds (the schema
# start_failures.parse_host_facts checks a host-facts file against).
FACTS: dict[str, str] = {
    "gpu_topology": "nvidia-smi topo -m: GPU -> other GPU -> link (X, PIX, PXB, PHB, NODE, SYS, NV#)",
    "pcie_only": "no GPU pair linked by NVLink (NV#); null with fewer than two GPUs",
    "gpu_p2p_read": "nvidia-smi topo -p2p r: GPU -> other GPU -> the driver's peer-to-peer read status (OK, CNS, GNS, TNS, NS, DR, U)",
    "p2p_supported": "every GPU pair can read its peer's memory directly (all OK); null with fewer than two GPUs",
    "nvidia_kernel_module": "open or proprietary (/proc/driver/nvidia/version)",
    "nvidia_module_version": "the kernel module's version (/proc/driver/nvidia/version)",
    "nvidia_module_gcc": "the GCC the kernel module was built with",
    "iommu_cmdline": "IOMMU switches on /proc/cmdline (intel_iommu, amd_iommu, iommu, iommu.passthrough)",
    "iommu_groups": "how many entries /sys/kernel/iommu_groups has (0: no IOMMU in use)",
    "iommu_group_types": "type -> number of IOMMU groups (identity: passthrough; DMA, DMA-FQ: translated)",
    "iommu_mode": "off, passthrough or translated",
    "acs_redirect": "a PCI bridge redirects peer-to-peer requests (lspci -vvv ACSCtl ReqRedir+ or CmpltRedir+)",
    "acs_redirect_bridges": "the bridges that redirect, as lspci names them",
    "uvm_disable_hmm": "nvidia_uvm's uvm_disable_hmm parameter (/sys/module/nvidia_uvm/parameters): false leaves HMM on",
    "pcie_cmdline": "PCIe power-management switches on /proc/cmdline (pcie_aspm, pcie_aspm.policy, pcie_port_pm)",
    "pcie_aspm_policy": "off (pcie_aspm=off on the kernel command line), else the active policy of /sys/module/pcie_aspm/parameters/policy",
    "pcie_port_pm": "off or force (pcie_port_pm= on the kernel command line), else default (the kernel may suspend PCIe ports)",
    "nvidia_registry_dwords": "RegistryDwords of /proc/driver/nvidia/params as written (ForceP2P=...; empty: none set)",
    "nvidia_dynamic_power_management": "DynamicPowerManagement of /proc/driver/nvidia/params (3: the GPU may be powered down when idle)",
    "cpu_sockets": "how many CPU packages /sys/devices/system/cpu/cpu*/topology/physical_package_id name",
    "gpu_bus_ids": "GPU -> its PCI address as sysfs names it (nvidia-smi pci.bus_id)",
    "gpu_numa_nodes": "GPU -> its NUMA node (/sys/bus/pci/devices/<address>/numa_node; -1: none reported)",
    "gpu_runtime_pm": "GPU -> /sys/bus/pci/devices/<address>/power/control (auto: the kernel may power it down; on: kept up)",
    "persistence_mode": "GPU -> persistence mode on (nvidia-smi persistence_mode)",
    "power_limit_w": "GPU -> its power limit in W (nvidia-smi power.limit)",
    "power_default_limit_w": "GPU -> its default power limit in W (nvidia-smi power.default_limit)",
    "power_max_limit_w": "GPU -> the highest power limit it takes in W (nvidia-smi power.max_limit)",
    "gpus_power_below_default": "the GPUs whose power limit is below their default limit",
    "bar1_total_mib": "GPU -> its BAR1 size in MiB (nvidia-smi -q -d MEMORY, BAR1 Memory Usage Total)",
    "gpus_bar1_below_memory": "the GPUs whose BAR1 is smaller than their memory (FB Memory Usage Total)",
    "nvcc_path": "the nvcc FlashInfer's JIT would use (<cuda_home>/bin/nvcc, else PATH)",
    "nvcc_version": "its release, X.Y",
    "ninja_version": "ninja --version (its leading X.Y.Z)",
    "gcc_version": "gcc --version",
    "glibc_version": "the C library's version",
    "jit_tools_missing": "which of nvcc, ninja, gcc, c++ ($CXX, else c++) were not found",
    "cxx_path": "the C++ compiler FlashInfer's JIT calls ($CXX, else c++ on PATH)",
    "cuda_cccl_headers": "the CUDA C++ core library headers (cuda/std) are beside that nvcc (include/cccl or include)",
    "python_headers": "Python.h is in the include directory of the Python the module ran with",
    "python_include": "that include directory (sysconfig's include path)",
}
FACT_KEYS = (*FACTS, "facts_unknown")
DOTTED_RE = re.compile(r"^\d+(\.\d+)*$")


class HostFactsParseError(ToolkitError):
    """A command's output or a file is not what the parser reads; says what it expected."""


# --- nvidia-smi topo -m ----------------------------------------------------------------------

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_RE = re.compile(r"^GPU\d+$")
_LINK_RE = re.compile(r"^(X|PIX|PXB|PHB|NODE|SYS|SOC|NV\d+)$")


def strip_ansi(text: str) -> str:
    """The text without terminal escapes (nvidia-smi underlines its header line with them)."""
    return _ANSI_RE.sub("", text)


def parse_topology(text: str) -> dict[str, dict[str, str]]:
    """``nvidia-smi topo -m`` -> {"GPU0": {"GPU1": "PIX", ...}, ...}, the links between GPUs
    (each GPU's own X left out; NIC columns and rows, affinities and the legend ignored)."""
    lines = [line for line in strip_ansi(text).splitlines() if line.strip()]
    if not lines:
        raise HostFactsParseError("nvidia-smi topo -m printed nothing; expected a GPU x GPU matrix")
    header = lines[0].split()
    columns: list[str] = []
    for token in header:
        if not _GPU_RE.match(token):
            break
        columns.append(token)
    if not columns:
        raise HostFactsParseError(f"expected a header line starting with GPU0, found {lines[0].strip()!r}")
    matrix: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        cells = line.split()
        if not _GPU_RE.match(cells[0]):
            if cells[0] == "Legend:":
                break
            continue  # a NIC row
        links = cells[1 : 1 + len(columns)]
        bad = [link for link in links if not _LINK_RE.match(link)]
        if len(links) != len(columns) or bad:
            raise HostFactsParseError(
                f"row {cells[0]}: expected {len(columns)} links (X, PIX, PXB, PHB, NODE, SYS or NV#) under {' '.join(columns)},"
                f" found {line.strip()!r}"
            )
        _add_row(matrix, columns, cells[0], links)
    return _complete(matrix, columns)


def _add_row(matrix: dict[str, dict[str, str]], columns: Sequence[str], gpu: str, values: Sequence[str]) -> None:
    """One GPU's row of an nvidia-smi GPU x GPU matrix, its own X on the diagonal left out."""
    row = dict(zip(columns, values))
    if row.get(gpu) != "X":
        raise HostFactsParseError(f"row {gpu}: expected X in its own column, found {row.get(gpu)!r}")
    matrix[gpu] = {other: value for other, value in row.items() if other != gpu}


def _complete(matrix: dict[str, dict[str, str]], columns: Sequence[str]) -> dict[str, dict[str, str]]:
    if sorted(matrix) != sorted(columns):
        raise HostFactsParseError(f"expected a row for each of {', '.join(columns)}, found rows {', '.join(matrix) or 'none'}")
    return matrix


def parse_p2p(text: str) -> dict[str, dict[str, str]]:
    """``nvidia-smi topo -p2p r`` -> {"GPU0": {"GPU1": "OK", ...}, ...}: the driver's peer-to-peer
    read status of each GPU pair (each GPU's own X left out; the legend ignored)."""
    lines = [line for line in strip_ansi(text).splitlines() if line.strip()]
    if not lines:
        raise HostFactsParseError("nvidia-smi topo -p2p r printed nothing; expected a GPU x GPU matrix")
    columns = [token for token in lines[0].split() if _GPU_RE.match(token)]
    if not columns or lines[0].split()[0] != columns[0]:
        raise HostFactsParseError(f"expected a header line starting with GPU0, found {lines[0].strip()!r}")
    matrix: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        cells = line.split()
        if cells[0] == "Legend:":
            break
        statuses = cells[1:]
        if not _GPU_RE.match(cells[0]) or len(statuses) != len(columns) or set(statuses) - set(P2P_STATUSES):
            raise HostFactsParseError(
                f"expected a row GPU<n> with {len(columns)} of {', '.join(P2P_STATUSES)} under {' '.join(columns)}, found {line.strip()!r}"
            )
        _add_row(matrix, columns, cells[0], statuses)
    return _complete(matrix, columns)


def p2p_supported(matrix: Mapping[str, Mapping[str, str]]) -> tuple[Optional[bool], str]:
    """(True when the driver reports every GPU pair OK, False when one is not, None with fewer than two GPUs; why)."""
    if len(matrix) < 2:
        return None, f"{len(matrix)} GPU in nvidia-smi topo -p2p r: no GPU pair"
    refused = sorted(f"{a}->{b} {status}" for a, row in matrix.items() for b, status in row.items() if status != "OK")
    if refused:
        return False, "not OK: " + ", ".join(refused[:8]) + (f" and {len(refused) - 8} more" if len(refused) > 8 else "")
    return True, "every pair OK"


def pcie_only(matrix: Mapping[str, Mapping[str, str]]) -> tuple[Optional[bool], str]:
    """(True when no GPU pair is linked by NV#, False when one is, None with fewer than two GPUs; why)."""
    if len(matrix) < 2:
        return None, f"{len(matrix)} GPU in nvidia-smi topo -m: no GPU pair whose link could be NVLink"
    nvlinked = sorted(f"{a}-{b}" for a, row in matrix.items() for b, link in row.items() if link.startswith("NV") and a < b)
    if nvlinked:
        return False, f"NVLink (NV#) between {len(nvlinked)} GPU pair(s), {nvlinked[0]} first"
    return True, f"no NV# link between the {len(matrix)} GPUs"


# --- /proc/driver/nvidia/version -------------------------------------------------------------

_NVRM_RE = re.compile(r"NVRM version: NVIDIA UNIX (?:(?P<open>Open Kernel Module for \S+)|\S+ Kernel Module)\s+(?P<version>\d+(?:\.\d+)+)")
_MODULE_GCC_RE = re.compile(r"^GCC version:\s+gcc version (\d+(?:\.\d+)*)", re.MULTILINE)


@dataclass(frozen=True)
class KernelModule:
    flavour: str  # open / proprietary
    version: str
    gcc: Optional[str]


def parse_driver_version_file(text: str) -> KernelModule:
    """/proc/driver/nvidia/version: "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ..." is
    the open module, "NVIDIA UNIX x86_64 Kernel Module  570.172.08 ..." the proprietary one."""
    match = _NVRM_RE.search(text)
    if not match:
        first = text.strip().splitlines()[0] if text.strip() else ""
        raise HostFactsParseError(
            f"expected 'NVRM version: NVIDIA UNIX ... Kernel Module  <version>' in {DRIVER_VERSION_FILE}, found {first!r}"
        )
    gcc = _MODULE_GCC_RE.search(text)
    return KernelModule("open" if match.group("open") else "proprietary", match.group("version"), gcc.group(1) if gcc else None)


# --- /proc/cmdline and /sys/kernel/iommu_groups -----------------------------------------------


def _switches(text: str, names: Sequence[str]) -> dict[str, str]:
    """The named switches among the kernel's parameters (those before a lone ``--``, which go to
    init); the last of a repeated switch wins, as the kernel reads them."""
    switches: dict[str, str] = {}
    for token in text.split():
        if token == "--":
            break
        name, _, value = token.partition("=")
        if name in names:
            switches[name] = value
    return switches


def parse_cmdline(text: str) -> dict[str, str]:
    """The IOMMU switches on /proc/cmdline (intel_iommu, amd_iommu, iommu, iommu.passthrough)."""
    return _switches(text, IOMMU_SWITCHES)


def parse_pcie_cmdline(text: str) -> dict[str, str]:
    """The PCIe power-management switches on /proc/cmdline (pcie_aspm, pcie_aspm.policy, pcie_port_pm)."""
    return _switches(text, PCIE_SWITCHES)


def _passthrough_on_cmdline(cmdline: Mapping[str, str]) -> Optional[bool]:
    """True when the command line asks for passthrough, False when it asks for translation, None when silent."""
    if "pt" in cmdline.get("iommu", "").split(","):
        return True
    setting = cmdline.get("iommu.passthrough", "").lower()
    if setting in ("1", "y", "yes", "on", "true"):
        return True
    if setting in ("0", "n", "no", "off", "false"):
        return False
    return None


def iommu_mode(
    groups: Optional[int], types: Optional[Mapping[str, int]], cmdline: Optional[Mapping[str, str]]
) -> tuple[Optional[str], str]:
    """(off / passthrough / translated, or None; why). No IOMMU groups: off. Groups of type
    DMA or DMA-FQ: translated (peer-to-peer DMA goes through the IOMMU); all identity: passthrough.
    Without the group types (kernels before 5.11) only an explicit passthrough switch decides; without
    the groups only ``iommu=off`` (which both the Intel and the AMD IOMMU driver obey) does."""
    if groups is None:
        if "off" in (cmdline or {}).get("iommu", "").split(","):
            return "off", "no IOMMU groups to read, and iommu=off on the kernel command line"
        return None, "the IOMMU groups could not be listed"
    if groups == 0:
        return "off", f"{IOMMU_GROUPS} is empty: no IOMMU in use"
    if types:
        translated = sum(n for kind, n in types.items() if kind.startswith("DMA"))
        if translated:
            return "translated", f"{translated} of {groups} IOMMU groups translate DMA (type DMA/DMA-FQ)"
        if types.get("identity"):
            return "passthrough", f"the IOMMU groups are identity-mapped ({types['identity']} of {groups})"
        return None, f"IOMMU group types {dict(types)} say neither translated nor passthrough"
    switch = _passthrough_on_cmdline(cmdline or {})
    if switch is True:
        return "passthrough", f"{groups} IOMMU groups, passthrough asked on the kernel command line"
    if switch is False:
        return "translated", f"{groups} IOMMU groups, iommu.passthrough=0 on the kernel command line"
    return None, f"{groups} IOMMU groups whose type could not be read, and the kernel command line does not say passthrough"


# --- lspci -vvv --------------------------------------------------------------------------------

_DEVICE_RE = re.compile(r"^(?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] ")


@dataclass(frozen=True)
class AcsReport:
    redirect: bool
    bridges: list[str] = field(default_factory=list)  # "00:03.1 PCI bridge: ..." of those that redirect


def parse_lspci(text: str) -> AcsReport:
    """``lspci -vvv`` -> whether any PCI bridge has ACS redirect on (``ACSCtl:`` with ``ReqRedir+``
    or ``CmpltRedir+``), naming them. Run as a user that is not root, lspci prints
    ``Capabilities: <access denied>``: that is an error, not "no redirect"."""
    devices: list[list[str]] = []
    for line in text.splitlines():
        if _DEVICE_RE.match(line):
            devices.append([line])
        elif devices and line.strip():
            devices[-1].append(line)
    if not devices:
        raise HostFactsParseError("expected lspci -vvv output (lines such as '00:01.1 PCI bridge: ...'), found none")
    denied = [d[0].split()[0] for d in devices if any("Capabilities: <access denied>" in line for line in d[1:])]
    if denied:
        raise HostFactsParseError(
            f"lspci -vvv could not read the capabilities of {len(denied)} device(s) ({', '.join(denied[:3])}, ...):"
            " '<access denied>', it must run as root"
        )
    redirecting = []
    for device in devices:
        if "PCI bridge" not in device[0]:
            continue
        for line in device[1:]:
            if line.strip().startswith("ACSCtl:"):
                bits = line.split(":", 1)[1].split()
                if "ReqRedir+" in bits or "CmpltRedir+" in bits:
                    redirecting.append(device[0].strip())
                break
    return AcsReport(bool(redirecting), redirecting)


# --- the PCIe fabric: nvidia_uvm, ASPM, the driver's registry, the GPUs' power and BAR1 -----------

_BUS_ID_RE = re.compile(r"^([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")


def parse_module_bool(text: str, path: str) -> bool:
    """A kernel module's bool parameter as ``/sys/module/<module>/parameters/<name>`` shows it: Y or N
    (1 or 0 where the parameter is an integer)."""
    value = text.strip()
    if value in ("Y", "1"):
        return True
    if value in ("N", "0"):
        return False
    raise HostFactsParseError(f"expected Y or N (or 1 or 0) in {path}, found {value[:40]!r}")


def parse_aspm_policy(text: str) -> str:
    """/sys/module/pcie_aspm/parameters/policy lists the kernel's ASPM policies with the active one
    in brackets: "[default] performance powersave powersupersave" -> "default"."""
    tokens = text.split()
    active = [t[1:-1] for t in tokens if t.startswith("[") and t.endswith("]")]
    named = {t.strip("[]") for t in tokens}
    if len(active) != 1 or not named <= set(ASPM_POLICIES[1:]):
        raise HostFactsParseError(
            f"expected the ASPM policies ({', '.join(ASPM_POLICIES[1:])}) with the active one in [brackets] in {ASPM_POLICY},"
            f" found {text.strip()[:80]!r}"
        )
    return active[0]


def aspm_policy(pcie: Optional[Mapping[str, str]], policy: Optional[str], why: str) -> tuple[Optional[str], str]:
    """(off / default / performance / powersave / powersupersave, or None; why). ``pcie_aspm=off`` on
    the kernel command line is off (the kernel changes no link's ASPM; the operators' fix), else the
    active policy; a policy other than performance with no command line to read is undecided."""
    if pcie is not None and pcie.get("pcie_aspm") == "off":
        return "off", "pcie_aspm=off on the kernel command line"
    if policy is None:
        return None, why
    if pcie is None and policy != "performance":
        return None, f"ASPM policy {policy}, and /proc/cmdline could not be read to see whether pcie_aspm=off"
    return policy, f"the active policy of {ASPM_POLICY}"


def pcie_port_pm(pcie: Mapping[str, str]) -> str:
    """pcie_port_pm=off / =force on the kernel command line, else default (the kernel may suspend a
    PCIe port whose devices are idle; another value is ignored by the kernel)."""
    value = pcie.get("pcie_port_pm", "")
    return value if value in ("off", "force") else "default"


def sysfs_address(bus_id: str) -> str:
    """nvidia-smi's PCI bus id ("00000000:18:00.0") as sysfs names the device ("0000:18:00.0")."""
    match = _BUS_ID_RE.match(bus_id.strip())
    if not match:
        raise HostFactsParseError(f"expected a PCI bus id such as 00000000:18:00.0, found {bus_id!r}")
    return f"{int(match.group(1), 16):04x}:{match.group(2).lower()}"


@dataclass(frozen=True)
class GpuPower:
    index: int
    address: str  # as sysfs names it
    persistence_mode: Optional[bool]
    power_limit_w: Optional[float]
    power_default_limit_w: Optional[float]
    power_max_limit_w: Optional[float]


def _watts(cell: str, what: str, number: int) -> Optional[float]:
    if cell.startswith("[") or cell == "N/A":  # [N/A], [Not Supported]
        return None
    try:
        return float(cell)
    except ValueError:
        raise HostFactsParseError(f"line {number}: {what} should be watts such as 600.00 or [N/A], found {cell!r}") from None


def parse_gpu_power(text: str) -> list[GpuPower]:
    """``nvidia-smi --query-gpu=index,pci.bus_id,persistence_mode,power.limit,power.default_limit,power.max_limit
    --format=csv,noheader,nounits``, one line a GPU: "0, 00000000:18:00.0, Enabled, 600.00, 600.00, 600.00"
    ([N/A] where the GPU does not say)."""
    gpus: list[GpuPower] = []
    for number, line, cells in csv_rows(text):
        if len(cells) != 6:
            raise HostFactsParseError(
                f"line {number}: expected 6 comma-separated fields (index, pci.bus_id, persistence_mode, power.limit,"
                f" power.default_limit, power.max_limit), found {len(cells)}: {line!r}"
            )
        index, bus_id, persistence, limit, default, highest = cells
        if not index.isdigit():
            raise HostFactsParseError(f"line {number}: GPU index is not a number: {index!r}")
        if persistence not in ("Enabled", "Disabled") and not persistence.startswith("["):
            raise HostFactsParseError(f"line {number}: persistence_mode should be Enabled or Disabled, found {persistence!r}")
        gpus.append(
            GpuPower(
                int(index),
                sysfs_address(bus_id),
                None if persistence.startswith("[") else persistence == "Enabled",
                _watts(limit, "power.limit", number),
                _watts(default, "power.default_limit", number),
                _watts(highest, "power.max_limit", number),
            )
        )
    if not gpus:
        raise HostFactsParseError("nvidia-smi --query-gpu printed no GPU; expected one line a GPU")
    return gpus


_MIB_RE = re.compile(r"^(\d+) MiB$")
MEMORY_SECTIONS = {"FB Memory Usage": "fb", "BAR1 Memory Usage": "bar1"}


def parse_memory_report(text: str) -> dict[str, tuple[int, int]]:
    """``nvidia-smi -q -d MEMORY`` -> {address as sysfs names it: (FB total MiB, BAR1 total MiB)}, from
    each "GPU 00000000:18:00.0" block's "FB Memory Usage" and "BAR1 Memory Usage" "Total : N MiB"."""
    found: dict[str, dict[str, int]] = {}
    gpu: Optional[str] = None
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("GPU ") and _BUS_ID_RE.match(line[4:].strip()):
            gpu = sysfs_address(line[4:])
            found[gpu] = {}
            section = ""
        elif gpu is None or not line:
            continue
        elif ":" not in line:
            section = line
        elif section in MEMORY_SECTIONS and line.split(":", 1)[0].strip() == "Total":
            value = line.split(":", 1)[1].strip()
            match = _MIB_RE.match(value)
            if not match:
                raise HostFactsParseError(f"GPU {gpu} {section}: expected 'Total : N MiB', found {line!r}")
            found[gpu][MEMORY_SECTIONS[section]] = int(match.group(1))
    if not found:
        raise HostFactsParseError("expected nvidia-smi -q -d MEMORY output (a 'GPU 00000000:18:00.0' line a GPU), found none")
    lacking = sorted(g for g, sizes in found.items() if set(sizes) != set(MEMORY_SECTIONS.values()))
    if lacking:
        raise HostFactsParseError(f"GPU {lacking[0]}: expected FB Memory Usage and BAR1 Memory Usage with a Total each")
    return {g: (sizes["fb"], sizes["bar1"]) for g, sizes in found.items()}


@dataclass(frozen=True)
class DriverParams:
    registry_dwords: str
    dynamic_power_management: Optional[int]


def parse_nvidia_params(text: str) -> DriverParams:
    """/proc/driver/nvidia/params ("Name: value" a line): RegistryDwords as written, without its quotes
    (what ``options nvidia NVreg_RegistryDwords=...`` set: ForceP2P, RMForceP2PType, ...), and
    DynamicPowerManagement."""
    params: dict[str, str] = {}
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if colon and name.strip() and " " not in name.strip():
            params[name.strip()] = value.strip()
    if "RegistryDwords" not in params:
        raise HostFactsParseError(
            f"expected a 'RegistryDwords: \"...\"' line in {NVIDIA_PARAMS}, found none among its {len(params)} parameters"
        )
    dwords = params["RegistryDwords"]
    if len(dwords) >= 2 and dwords[0] == dwords[-1] == '"':
        dwords = dwords[1:-1]
    power = params.get("DynamicPowerManagement", "")
    return DriverParams(dwords, int(power) if re.fullmatch(r"\d+", power) else None)


# --- the FlashInfer JIT toolchain --------------------------------------------------------------


def parse_nvcc_version(text: str) -> str:
    """``nvcc --version`` -> its release, "13.0" from "Cuda compilation tools, release 13.0, V13.0.88"."""
    match = re.search(r"\brelease (\d+\.\d+)\b", text)
    if not match:
        raise HostFactsParseError(f"expected 'Cuda compilation tools, release X.Y, ...' from nvcc --version, found {text.strip()[-120:]!r}")
    return match.group(1)


def _leading_version(text: str, what: str, expected: str) -> str:
    match = re.match(r"\s*(\d+(?:\.\d+)+)", text)
    if not match:
        raise HostFactsParseError(f"expected {expected} from {what}, found {text.strip()[:120]!r}")
    return match.group(1)


def parse_ninja_version(text: str) -> str:
    """``ninja --version`` -> "1.13.2" (from "1.13.2.git.kitware.jobserver-pipe-1", the pip package's)."""
    version = _leading_version(text, "ninja --version", "a version such as 1.11.1")
    return ".".join(version.split(".")[:3])


def parse_gcc_version(text: str) -> str:
    """``gcc -dumpfullversion`` ("13.3.0") or ``gcc --version``, whose first line ends in the version
    ("gcc (Ubuntu 13.3.0-6ubuntu2~24.04.1) 13.3.0")."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    if DOTTED_RE.match(first):
        return first
    match = re.search(r"\)\s+(\d+(?:\.\d+)+)\s*$", first)
    if not (first.startswith(("gcc", "cc")) and match):
        raise HostFactsParseError(f"expected 'gcc (...) X.Y.Z' from gcc --version, found {first!r}")
    return match.group(1)


def parse_glibc_version(text: str) -> str:
    """``os.confstr("CS_GNU_LIBC_VERSION")`` ("glibc 2.39") or ``ldd --version``, whose first line
    ends in it ("ldd (Ubuntu GLIBC 2.39-0ubuntu8.9) 2.39")."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    match = re.fullmatch(r"glibc (\d+\.\d+(?:\.\d+)?)", first) or re.fullmatch(
        r"ldd \(.*(?:GLIBC|GNU libc).*\) (\d+\.\d+(?:\.\d+)?)", first
    )
    if not match:
        raise HostFactsParseError(f"expected 'glibc X.Y' or 'ldd (... GLIBC ...) X.Y', found {first!r} (not glibc?)")
    return match.group(1)


# --- gathering -----------------------------------------------------------------------------------

Run = Callable[[Sequence[str]], "tuple[int, str, str]"]  # argv -> (rc, stdout, stderr); may raise OSError
Read = Callable[[str], str]  # path -> text; raises OSError
Which = Callable[[str], Optional[str]]  # name or path -> the executable's path, None when absent
ListDir = Callable[[str], list[str]]  # path -> names; raises OSError


def _local_libc() -> Optional[str]:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass
class GatheredFacts:
    gpu_topology: Optional[dict[str, dict[str, str]]] = None
    pcie_only: Optional[bool] = None
    gpu_p2p_read: Optional[dict[str, dict[str, str]]] = None
    p2p_supported: Optional[bool] = None
    nvidia_kernel_module: Optional[str] = None
    nvidia_module_version: Optional[str] = None
    nvidia_module_gcc: Optional[str] = None
    iommu_cmdline: Optional[dict[str, str]] = None
    iommu_groups: Optional[int] = None
    iommu_group_types: Optional[dict[str, int]] = None
    iommu_mode: Optional[str] = None
    acs_redirect: Optional[bool] = None
    acs_redirect_bridges: Optional[list[str]] = None
    uvm_disable_hmm: Optional[bool] = None
    pcie_cmdline: Optional[dict[str, str]] = None
    pcie_aspm_policy: Optional[str] = None
    pcie_port_pm: Optional[str] = None
    nvidia_registry_dwords: Optional[str] = None
    nvidia_dynamic_power_management: Optional[int] = None
    cpu_sockets: Optional[int] = None
    gpu_bus_ids: Optional[dict[str, str]] = None
    gpu_numa_nodes: Optional[dict[str, int]] = None
    gpu_runtime_pm: Optional[dict[str, str]] = None
    persistence_mode: Optional[dict[str, Optional[bool]]] = None
    power_limit_w: Optional[dict[str, Optional[float]]] = None
    power_default_limit_w: Optional[dict[str, Optional[float]]] = None
    power_max_limit_w: Optional[dict[str, Optional[float]]] = None
    gpus_power_below_default: Optional[list[str]] = None
    bar1_total_mib: Optional[dict[str, int]] = None
    gpus_bar1_below_memory: Optional[list[str]] = None
    nvcc_path: Optional[str] = None
    nvcc_version: Optional[str] = None
    ninja_version: Optional[str] = None
    gcc_version: Optional[str] = None
    glibc_version: Optional[str] = None
    jit_tools_missing: Optional[list[str]] = None
    cxx_path: Optional[str] = None
    cuda_cccl_headers: Optional[bool] = None
    python_headers: Optional[bool] = None
    python_include: Optional[str] = None
    facts_unknown: dict[str, str] = field(default_factory=dict)

    def unknown(self, reason: str, *facts: str) -> None:
        for fact in facts:
            self.facts_unknown[fact] = reason

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _command(run: Run, argv: Sequence[str]) -> tuple[Optional[str], str]:
    """(stdout, "") when the command ran and exited 0, else (None, why)."""
    try:
        rc, out, err = run(list(argv))
    except OSError as exc:
        return None, f"{' '.join(argv)} could not run: {exc.strerror or exc}"
    if rc != 0:
        said = (err or out or "").strip().splitlines()
        return None, f"{' '.join(argv)} exited {rc}" + (f": {said[-1][:200]}" if said else "")
    return out, ""


def _read(read: Read, path: str) -> tuple[Optional[str], str]:
    try:
        return read(path), ""
    except FileNotFoundError:
        return None, f"{path} does not exist"
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"


def _gpu_matrix(
    facts: GatheredFacts,
    run: Run,
    which: Which,
    nvidia_smi: str,
    args: Sequence[str],
    parse: Callable[[str], dict[str, dict[str, str]]],
    judge: Callable[[Mapping[str, Mapping[str, str]]], tuple[Optional[bool], str]],
    names: tuple[str, str],
) -> None:
    """One nvidia-smi GPU x GPU matrix (``nvidia-smi <args>``) into the fact names[0] and its verdict
    into names[1]; each null with the reason when it cannot be read or decided."""
    binary = which(nvidia_smi)
    if binary is None:
        facts.unknown(f"{nvidia_smi} not found (is the NVIDIA driver installed?)", *names)
        return
    out, why = _command(run, [binary, *args])
    if out is None:
        facts.unknown(why, *names)
        return
    try:
        matrix = parse(out)
    except HostFactsParseError as exc:
        facts.unknown(f"cannot read {binary} {' '.join(args)}: {exc}", *names)
        return
    verdict, why = judge(matrix)
    setattr(facts, names[0], matrix)
    setattr(facts, names[1], verdict)
    if verdict is None:
        facts.unknown(why, names[1])


def _driver_file(facts: GatheredFacts, read: Read, path: str, parse: Callable[[str], T], names: tuple[str, ...]) -> Optional[T]:
    """A file of the NVIDIA kernel module, parsed; None (and the facts `names` unknown, with the reason) otherwise."""
    text, why = _read(read, path)
    if text is None:
        facts.unknown(f"{why} (is the NVIDIA kernel module loaded?)", *names)
        return None
    try:
        return parse(text)
    except HostFactsParseError as exc:
        facts.unknown(str(exc), *names)
        return None


def _kernel_module(facts: GatheredFacts, read: Read) -> None:
    names = ("nvidia_kernel_module", "nvidia_module_version", "nvidia_module_gcc")
    module = _driver_file(facts, read, DRIVER_VERSION_FILE, parse_driver_version_file, names)
    if module is None:
        return
    facts.nvidia_kernel_module, facts.nvidia_module_version, facts.nvidia_module_gcc = module.flavour, module.version, module.gcc
    if module.gcc is None:
        facts.unknown(f"{DRIVER_VERSION_FILE} has no 'GCC version:' line", "nvidia_module_gcc")


def _iommu(facts: GatheredFacts, read: Read, listdir: ListDir, cmdline: tuple[Optional[str], str]) -> None:
    text, why = cmdline
    if text is None:
        facts.unknown(why, "iommu_cmdline")
    else:
        facts.iommu_cmdline = parse_cmdline(text)
    try:
        groups = sorted(listdir(IOMMU_GROUPS))
    except OSError as exc:
        missing = isinstance(exc, FileNotFoundError)
        why = f"{IOMMU_GROUPS} does not exist" if missing else f"cannot list {IOMMU_GROUPS}: {exc.strerror or exc}"
        facts.unknown(why, "iommu_groups", "iommu_group_types")
        facts.iommu_mode, _ = iommu_mode(None, None, facts.iommu_cmdline)  # only iommu=off decides without the groups
        if facts.iommu_mode is None:
            facts.unknown(why, "iommu_mode")
        return
    facts.iommu_groups = len(groups)
    types: dict[str, int] = {}
    for group in groups:
        kind, why = _read(read, f"{IOMMU_GROUPS}/{group}/type")
        if kind is None:
            types = {}
            facts.unknown(f"{why} (kernels before 5.11 have no type files)", "iommu_group_types")
            break
        types[kind.strip()] = types.get(kind.strip(), 0) + 1
    if types or not groups:
        facts.iommu_group_types = types
    facts.iommu_mode, why = iommu_mode(facts.iommu_groups, types, facts.iommu_cmdline)
    if facts.iommu_mode is None:
        facts.unknown(why, "iommu_mode")


def _uvm(facts: GatheredFacts, read: Read) -> None:
    text, why = _read(read, UVM_DISABLE_HMM)
    if text is None:
        facts.unknown(f"{why} (nvidia_uvm is not loaded: it loads at the first CUDA use; or not on x86_64)", "uvm_disable_hmm")
        return
    try:
        facts.uvm_disable_hmm = parse_module_bool(text, UVM_DISABLE_HMM)
    except HostFactsParseError as exc:
        facts.unknown(str(exc), "uvm_disable_hmm")


def _pcie(facts: GatheredFacts, read: Read, cmdline: tuple[Optional[str], str]) -> None:
    """pcie_cmdline, pcie_port_pm (the command line alone) and pcie_aspm_policy (the command line and the policy file)."""
    text, why = cmdline
    pcie = parse_pcie_cmdline(text) if text is not None else None
    if pcie is None:
        facts.unknown(why, "pcie_cmdline", "pcie_port_pm")
    else:
        facts.pcie_cmdline, facts.pcie_port_pm = pcie, pcie_port_pm(pcie)
    policy_text, why = _read(read, ASPM_POLICY)
    policy = None
    if policy_text is None:
        why = f"{why} (a kernel without PCIe ASPM support)"
    else:
        try:
            policy = parse_aspm_policy(policy_text)
        except HostFactsParseError as exc:
            why = str(exc)
    facts.pcie_aspm_policy, why = aspm_policy(pcie, policy, why)
    if facts.pcie_aspm_policy is None:
        facts.unknown(why, "pcie_aspm_policy")


def _driver_params(facts: GatheredFacts, read: Read) -> None:
    names = ("nvidia_registry_dwords", "nvidia_dynamic_power_management")
    params = _driver_file(facts, read, NVIDIA_PARAMS, parse_nvidia_params, names)
    if params is None:
        return
    facts.nvidia_registry_dwords, facts.nvidia_dynamic_power_management = params.registry_dwords, params.dynamic_power_management
    if params.dynamic_power_management is None:
        facts.unknown(f"{NVIDIA_PARAMS} has no 'DynamicPowerManagement: N' line", "nvidia_dynamic_power_management")


def _cpu_sockets(facts: GatheredFacts, read: Read, listdir: ListDir) -> None:
    """Distinct physical_package_id of the CPUs (an offline CPU has no topology folder: left out)."""
    try:
        cpus = sorted(name for name in listdir(CPUS) if re.fullmatch(r"cpu\d+", name))
    except OSError as exc:
        facts.unknown(f"cannot list {CPUS}: {exc.strerror or exc}", "cpu_sockets")
        return
    packages: set[str] = set()
    for cpu in cpus:
        text, why = _read(read, f"{CPUS}/{cpu}/topology/physical_package_id")
        if text is None and why.endswith("does not exist"):
            continue
        if text is None or not re.fullmatch(r"-?\d+", text.strip()):
            said = (text or "").strip()[:40]
            facts.unknown(why or f"{CPUS}/{cpu}/topology/physical_package_id holds {said!r}, not a number", "cpu_sockets")
            return
        packages.add(text.strip())
    if not packages:
        facts.unknown(f"no CPU under {CPUS} has topology/physical_package_id", "cpu_sockets")
        return
    facts.cpu_sockets = len(packages)


GPU_FACTS = (
    "gpu_bus_ids",
    "gpu_numa_nodes",
    "gpu_runtime_pm",
    "persistence_mode",
    "power_limit_w",
    "power_default_limit_w",
    "power_max_limit_w",
    "gpus_power_below_default",
    "bar1_total_mib",
    "gpus_bar1_below_memory",
)


def below(values: Mapping[str, Optional[float]], bounds: Mapping[str, Optional[float]], what: str) -> tuple[Optional[list[str]], str]:
    """(the GPUs whose value is below its bound, or None when none is and one cannot be compared; why)."""
    compared = [g for g in values if values[g] is not None and bounds.get(g) is not None]
    found = sorted((g for g in compared if values[g] < bounds[g]), key=_gpu_order)  # type: ignore[operator]
    unread = sorted((g for g in values if values[g] is None or bounds.get(g) is None), key=_gpu_order)
    if unread and not found:
        return None, f"{what} not reported for {', '.join(unread)}"
    return found, ""


def _gpu_order(name: str) -> int:
    return int(name[3:]) if name[3:].isdigit() else -1


def _gpus(facts: GatheredFacts, run: Run, read: Read, which: Which, nvidia_smi: str) -> None:
    """The per-GPU facts: one GPU query, the memory report, and each GPU's sysfs folder."""
    binary = which(nvidia_smi)
    if binary is None:
        facts.unknown(f"{nvidia_smi} not found (is the NVIDIA driver installed?)", *GPU_FACTS)
        return
    out, why = _command(run, [binary, *GPU_QUERY])
    try:
        gpus = parse_gpu_power(out) if out is not None else None
    except HostFactsParseError as exc:
        gpus, why = None, f"cannot read {binary} {' '.join(GPU_QUERY)}: {exc}"
    if gpus is None:
        facts.unknown(why, *GPU_FACTS)
        return
    names = {gpu.address: f"GPU{gpu.index}" for gpu in gpus}
    facts.gpu_bus_ids = {f"GPU{g.index}": g.address for g in gpus}
    facts.persistence_mode = {f"GPU{g.index}": g.persistence_mode for g in gpus}
    facts.power_limit_w = {f"GPU{g.index}": g.power_limit_w for g in gpus}
    facts.power_default_limit_w = {f"GPU{g.index}": g.power_default_limit_w for g in gpus}
    facts.power_max_limit_w = {f"GPU{g.index}": g.power_max_limit_w for g in gpus}
    facts.gpus_power_below_default, why = below(facts.power_limit_w, facts.power_default_limit_w, "power.limit or power.default_limit")
    if facts.gpus_power_below_default is None:
        facts.unknown(why, "gpus_power_below_default")
    for fact, attribute, parse in (("gpu_numa_nodes", "numa_node", int), ("gpu_runtime_pm", "power/control", str)):
        values: dict[str, Any] = {}
        for gpu in gpus:
            path = f"{PCI_DEVICES}/{gpu.address}/{attribute}"
            text, why = _read(read, path)
            value = (text or "").strip()
            if text is None or not (re.fullmatch(r"-?\d+", value) if parse is int else value in RUNTIME_PM):
                facts.unknown(why or f"{path} holds {value[:40]!r}", fact)
                break
            values[f"GPU{gpu.index}"] = parse(value)
        else:
            setattr(facts, fact, values)
    out, why = _command(run, [binary, *MEMORY_QUERY])
    try:
        memory = parse_memory_report(out) if out is not None else None
    except HostFactsParseError as exc:
        memory, why = None, f"cannot read {binary} {' '.join(MEMORY_QUERY)}: {exc}"
    if memory is not None and set(memory) != set(names):
        memory, why = None, f"{binary} {' '.join(MEMORY_QUERY)} lists GPUs {sorted(memory)}, the GPU query {sorted(names)}"
    if memory is None:
        facts.unknown(why, "bar1_total_mib", "gpus_bar1_below_memory")
        return
    facts.bar1_total_mib = {names[address]: bar1 for address, (_, bar1) in memory.items()}
    framebuffer = {names[address]: float(fb) for address, (fb, _) in memory.items()}
    facts.gpus_bar1_below_memory, _ = below({g: float(v) for g, v in facts.bar1_total_mib.items()}, framebuffer, "BAR1")


def _acs(facts: GatheredFacts, run: Run, which: Which, lspci: str) -> None:
    binary = which(lspci)
    if binary is None:
        facts.unknown(f"{lspci} not found (install pciutils to read the bridges' ACS settings)", "acs_redirect", "acs_redirect_bridges")
        return
    out, why = _command(run, [binary, "-vvv"])
    if out is None:
        facts.unknown(why, "acs_redirect", "acs_redirect_bridges")
        return
    try:
        report = parse_lspci(out)
    except HostFactsParseError as exc:
        facts.unknown(str(exc), "acs_redirect", "acs_redirect_bridges")
        return
    facts.acs_redirect, facts.acs_redirect_bridges = report.redirect, report.bridges


CCCL_MARKERS = ("include/cccl/cuda/std/version", "include/cuda/std/version")


def _headers(facts: GatheredFacts, exists: Callable[[str], Optional[bool]], python_include: Optional[str]) -> None:
    """cuda_cccl_headers beside the nvcc found, python_headers. The toolkit root is the nvcc's
    <root>/bin/nvcc as found, links not followed: FlashInfer's JIT takes $CUDA_HOME (the unit sets it to
    the toolkit preflight looks in first), else the directory above `which nvcc`'s, the same way.
    exists answers None when it cannot tell (the fact stays unknown)."""
    if facts.nvcc_path is None:
        facts.unknown("no nvcc found, so no CUDA toolkit to look in", "cuda_cccl_headers")
    else:
        root = os.path.dirname(os.path.dirname(facts.nvcc_path))
        found = [exists(os.path.join(root, marker)) for marker in CCCL_MARKERS]
        if True in found or all(f is False for f in found):
            facts.cuda_cccl_headers = True in found
        else:
            facts.unknown(f"cannot tell whether {root}/include holds cccl/cuda/std or cuda/std", "cuda_cccl_headers")
    if not python_include:
        facts.unknown("no include path of the server's Python was given (sysconfig)", "python_headers", "python_include")
        return
    facts.python_include = python_include
    header = exists(os.path.join(python_include, "Python.h"))
    if header is None:
        facts.unknown(f"cannot tell whether {python_include}/Python.h exists", "python_headers")
    else:
        facts.python_headers = header


def _toolchain(
    facts: GatheredFacts, run: Run, which: Which, cuda_home: str, libc: Callable[[], Optional[str]], cxx: Optional[str] = None
) -> None:
    nvcc_at = f"{cuda_home.rstrip('/')}/bin/nvcc"
    facts.nvcc_path = which(nvcc_at) or which("nvcc")
    facts.cxx_path = which(cxx or "c++")
    probes = (
        ("nvcc", "nvcc_version", facts.nvcc_path, f"at {nvcc_at} nor on PATH", parse_nvcc_version),
        ("ninja", "ninja_version", which("ninja"), "on PATH", parse_ninja_version),
        ("gcc", "gcc_version", which("gcc"), "on PATH", parse_gcc_version),
    )
    facts.jit_tools_missing = [tool for tool, _, binary, _, _ in probes if binary is None]
    if facts.cxx_path is None:
        facts.jit_tools_missing.append("c++")
        facts.unknown(f"{'$CXX ' + repr(cxx) if cxx else 'c++'} not found on PATH", "cxx_path")
    if facts.nvcc_path is None:
        facts.unknown(f"nvcc not found at {nvcc_at} nor on PATH", "nvcc_path")
    for tool, name, binary, where, parse in probes:
        if binary is None:
            facts.unknown(f"{tool} not found {where}", name)
            continue
        out, why = _command(run, [binary, "--version"])
        if out is None:
            facts.unknown(why, name)
            continue
        try:
            setattr(facts, name, parse(out))
        except HostFactsParseError as exc:
            facts.unknown(f"{binary}: {exc}", name)
    text, source = libc(), "os.confstr('CS_GNU_LIBC_VERSION')"
    if not text:
        ldd = which("ldd")
        text, why = _command(run, [ldd, "--version"]) if ldd else (None, "ldd not found on PATH")
        source = "ldd --version"
        if text is None:
            facts.unknown(f"no glibc version from os.confstr, and {why}", "glibc_version")
            return
    try:
        facts.glibc_version = parse_glibc_version(text)
    except HostFactsParseError as exc:
        facts.unknown(f"{source}: {exc}", "glibc_version")


def gather(
    run: Run,
    read: Read,
    *,
    which: Which,
    listdir: ListDir = os.listdir,
    libc: Callable[[], Optional[str]] = _local_libc,
    nvidia_smi: str = "nvidia-smi",
    lspci: str = "lspci",
    cuda_home: str = DEFAULT_CUDA_HOME,
    exists: Callable[[str], Optional[bool]] = os.path.exists,
    python_include: Optional[str] = None,
    cxx: Optional[str] = None,
) -> GatheredFacts:
    """Every fact in FACTS, each null with its reason in facts_unknown when it cannot be read.
    python_include: the include directory of the Python the server runs with (sysconfig's); cxx: $CXX."""
    facts = GatheredFacts()
    _gpu_matrix(facts, run, which, nvidia_smi, ["topo", "-m"], parse_topology, pcie_only, ("gpu_topology", "pcie_only"))
    _gpu_matrix(facts, run, which, nvidia_smi, ["topo", "-p2p", "r"], parse_p2p, p2p_supported, ("gpu_p2p_read", "p2p_supported"))
    _kernel_module(facts, read)
    cmdline = _read(read, CMDLINE)
    _iommu(facts, read, listdir, cmdline)
    _acs(facts, run, which, lspci)
    _uvm(facts, read)
    _pcie(facts, read, cmdline)
    _driver_params(facts, read)
    _cpu_sockets(facts, read, listdir)
    _gpus(facts, run, read, which, nvidia_smi)
    _toolchain(facts, run, which, cuda_home, libc, cxx)
    _headers(facts, exists, python_include)
    return facts


# --- checking a saved result ---------------------------------------------------------------------


def _str_map(value: Any, of: type) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, of) and not isinstance(v, bool) for k, v in value.items())


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def check_facts(data: Mapping[str, Any]) -> list[str]:
    """What is wrong with the facts in a saved result (a host-facts file), one sentence each;
    absent or null facts are fine (unknown)."""
    problems = []
    dotted = ("nvidia_module_version", "nvidia_module_gcc", "nvcc_version", "ninja_version", "gcc_version", "glibc_version")
    for key in dotted:
        value = data.get(key)
        if value is not None and not (isinstance(value, str) and DOTTED_RE.match(value)):
            problems.append(f"{key} must be a dotted version such as '13.0' or null, found {value!r}")
    for key in ("pcie_only", "p2p_supported", "acs_redirect", "cuda_cccl_headers", "python_headers"):
        if data.get(key) is not None and not isinstance(data[key], bool):
            problems.append(f"{key} must be true, false or null, found {data[key]!r}")
    module = data.get("nvidia_kernel_module")
    if module is not None and module not in KERNEL_MODULES:
        problems.append(f"nvidia_kernel_module must be 'open' or 'proprietary', found {module!r}")
    mode = data.get("iommu_mode")
    if mode is not None and mode not in IOMMU_MODES:
        problems.append(f"iommu_mode must be one of {', '.join(IOMMU_MODES)} or null, found {mode!r}")
    groups = data.get("iommu_groups")
    if groups is not None and (isinstance(groups, bool) or not isinstance(groups, int) or groups < 0):
        problems.append(f"iommu_groups must be a count (an integer >= 0) or null, found {groups!r}")
    for key, what in (("gpu_topology", "link"), ("gpu_p2p_read", "status")):
        matrix = data.get(key)
        if matrix is not None and not (isinstance(matrix, dict) and all(_str_map(row, str) for row in matrix.values())):
            problems.append(f"{key} must map each GPU to {{other GPU: {what}}} or be null, found {matrix!r}")
    for key, of in (("iommu_cmdline", str), ("iommu_group_types", int), ("facts_unknown", str)):
        if data.get(key) is not None and not _str_map(data[key], of):
            problems.append(f"{key} must be a mapping of names to {'counts' if of is int else 'text'} or null, found {data[key]!r}")
    for key in ("acs_redirect_bridges", "jit_tools_missing"):
        if data.get(key) is not None and not _str_list(data[key]):
            problems.append(f"{key} must be a list of names or null, found {data[key]!r}")
    missing = data.get("jit_tools_missing")
    if _str_list(missing) and set(missing) - set(JIT_TOOLS):
        problems.append(f"jit_tools_missing names only {', '.join(JIT_TOOLS)}, found {missing!r}")
    for key in ("nvcc_path", "cxx_path", "python_include"):
        if data.get(key) is not None and not isinstance(data[key], str):
            problems.append(f"{key} must be a path or null, found {data[key]!r}")
    problems += _check_fabric(data)
    return problems


def _number(value: Any, kind: type = float) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)


def _gpu_map(value: Any, valid: Callable[[Any], bool]) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _GPU_RE.match(k) and valid(v) for k, v in value.items())


def _check_fabric(data: Mapping[str, Any]) -> list[str]:
    """What is wrong with the PCIe-fabric facts (check_facts' part for them)."""
    problems = []
    if data.get("uvm_disable_hmm") is not None and not isinstance(data["uvm_disable_hmm"], bool):
        problems.append(f"uvm_disable_hmm must be true, false or null, found {data['uvm_disable_hmm']!r}")
    for key, allowed in (("pcie_aspm_policy", ASPM_POLICIES), ("pcie_port_pm", PORT_PM)):
        if data.get(key) is not None and data[key] not in allowed:
            problems.append(f"{key} must be one of {', '.join(allowed)} or null, found {data[key]!r}")
    if data.get("pcie_cmdline") is not None and not _str_map(data["pcie_cmdline"], str):
        problems.append(f"pcie_cmdline must be a mapping of names to text or null, found {data['pcie_cmdline']!r}")
    if data.get("nvidia_registry_dwords") is not None and not isinstance(data["nvidia_registry_dwords"], str):
        problems.append(f"nvidia_registry_dwords must be text or null, found {data['nvidia_registry_dwords']!r}")
    for key, least in (("nvidia_dynamic_power_management", 0), ("cpu_sockets", 1)):
        value = data.get(key)
        if value is not None and not (_number(value, int) and value >= least):
            problems.append(f"{key} must be an integer >= {least} or null, found {value!r}")
    maps: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
        ("gpu_bus_ids", "a PCI address", lambda v: isinstance(v, str) and _BUS_ID_RE.match(v) is not None),
        ("gpu_numa_nodes", "a NUMA node (an integer, -1: none)", lambda v: _number(v, int) and v >= -1),
        ("gpu_runtime_pm", "auto or on", lambda v: v in RUNTIME_PM),
        ("persistence_mode", "true, false or null", lambda v: v is None or isinstance(v, bool)),
        ("power_limit_w", "watts or null", lambda v: v is None or _number(v)),
        ("power_default_limit_w", "watts or null", lambda v: v is None or _number(v)),
        ("power_max_limit_w", "watts or null", lambda v: v is None or _number(v)),
        ("bar1_total_mib", "MiB (an integer)", lambda v: _number(v, int) and v >= 0),
    )
    for key, what, valid in maps:
        if data.get(key) is not None and not _gpu_map(data[key], valid):
            problems.append(f"{key} must map GPU<n> to {what}, or be null, found {data[key]!r}")
    for key in ("gpus_power_below_default", "gpus_bar1_below_memory"):
        value = data.get(key)
        if value is not None and not (_str_list(value) and all(_GPU_RE.match(v) for v in value)):
            problems.append(f"{key} must be a list of GPU<n> or null, found {value!r}")
    return problems
