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
from typing import Any, Callable, Optional

from ..errors import ToolkitError

DEFAULT_CUDA_HOME = "/usr/local/cuda-13.0"
IOMMU_GROUPS = "/sys/kernel/iommu_groups"
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
CMDLINE = "/proc/cmdline"
# Kernel parameters that switch the IOMMU or its mode (Documentation/admin-guide/kernel-parameters).
IOMMU_SWITCHES = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough")
IOMMU_MODES = ("off", "passthrough", "translated")
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


def parse_cmdline(text: str) -> dict[str, str]:
    """The IOMMU switches among the kernel's parameters (those before a lone ``--``, which go to
    init); the last of a repeated switch wins, as the kernel reads them."""
    switches: dict[str, str] = {}
    for token in text.split():
        if token == "--":
            break
        name, _, value = token.partition("=")
        if name in IOMMU_SWITCHES:
            switches[name] = value
    return switches


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
    Without the group types (kernels before 5.11) only an explicit passthrough switch decides."""
    if groups is None:
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


def _kernel_module(facts: GatheredFacts, read: Read) -> None:
    names = ("nvidia_kernel_module", "nvidia_module_version", "nvidia_module_gcc")
    text, why = _read(read, DRIVER_VERSION_FILE)
    if text is None:
        facts.unknown(f"{why} (is the NVIDIA kernel module loaded?)", *names)
        return
    try:
        module = parse_driver_version_file(text)
    except HostFactsParseError as exc:
        facts.unknown(str(exc), *names)
        return
    facts.nvidia_kernel_module, facts.nvidia_module_version, facts.nvidia_module_gcc = module.flavour, module.version, module.gcc
    if module.gcc is None:
        facts.unknown(f"{DRIVER_VERSION_FILE} has no 'GCC version:' line", "nvidia_module_gcc")


def _iommu(facts: GatheredFacts, read: Read, listdir: ListDir) -> None:
    text, why = _read(read, CMDLINE)
    if text is None:
        facts.unknown(why, "iommu_cmdline")
    else:
        facts.iommu_cmdline = parse_cmdline(text)
    try:
        groups = sorted(listdir(IOMMU_GROUPS))
    except FileNotFoundError:
        facts.unknown(f"{IOMMU_GROUPS} does not exist", "iommu_groups", "iommu_group_types", "iommu_mode")
        return
    except OSError as exc:
        facts.unknown(f"cannot list {IOMMU_GROUPS}: {exc.strerror or exc}", "iommu_groups", "iommu_group_types", "iommu_mode")
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
    _iommu(facts, read, listdir)
    _acs(facts, run, which, lspci)
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
    return problems
