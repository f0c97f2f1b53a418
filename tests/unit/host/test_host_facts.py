"""The host's facts (plugins/module_utils/sglang_sm120/host/facts.py): each parser on the real H200 captures and on
hosts built from their format (tests/data/host-facts/README.md says which is which), malformed
input, gathering through stand-in commands and files, and a gathered result read back as a
--host-facts file and evaluated by the start-failure catalogue."""

from __future__ import annotations

import errno
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Optional

import pytest

from conftest import DATA
from sglang_sm120.host.facts import (
    CPUS,
    FACT_KEYS,
    FACTS,
    GPU_FACTS,
    GPU_QUERY,
    MEMORY_QUERY,
    PCI_DEVICES,
    GatheredFacts,
    HostFactsParseError,
    aspm_policy,
    below,
    check_facts,
    gather,
    iommu_mode,
    p2p_supported,
    parse_aspm_policy,
    parse_cmdline,
    parse_driver_version_file,
    parse_gcc_version,
    parse_glibc_version,
    parse_gpu_power,
    parse_lspci,
    parse_memory_report,
    parse_module_bool,
    parse_ninja_version,
    parse_nvcc_version,
    parse_nvidia_params,
    parse_p2p,
    parse_pcie_cmdline,
    parse_topology,
    pcie_only,
    pcie_port_pm,
    strip_ansi,
    sysfs_address,
)
from sglang_sm120.host.nvidia_smi import parse_query_output
from sglang_sm120.launch.start_failures import Context, evaluate_entry, parse_argv, parse_host_facts, read_host_facts
from sglang_sm120_controller.toolkit_data import load_catalogue

HF = DATA / "host-facts"
H200 = HF / "h200-real"
TOOLCHAIN = ("nvcc.txt", "ninja.txt", "gcc.txt", "ldd.txt", "libc.txt")
ENTRIES = {e.id: e for e in load_catalogue()}
NEW_ENTRIES = ("nccl-p2p-acs-redirect", "nccl-p2p-iommu-translated", "flashinfer-jit-nvcc-too-old", "flashinfer-jit-toolchain-missing")
# the PCIe fabric's entries: the three that hang NCCL (refused) and the two that only slow it (warnings)
FABRIC_REFUSALS = ("nccl-p2p-iommu-translated", "nccl-p2p-uvm-hmm-on", "pcie-aspm-surprise-link-down")
FABRIC_WARNINGS = ("gpu-power-limit-below-default", "gpu-bar1-below-memory")
FABRIC_ENTRIES = FABRIC_REFUSALS + FABRIC_WARNINGS
EIGHT_GPUS = DATA / "nvidia-smi" / "eight-rtx-pro-6000.txt"
UVM = "/sys/module/nvidia_uvm/parameters/uvm_disable_hmm"
ASPM = "/sys/module/pcie_aspm/parameters/policy"
QUERY = " ".join(GPU_QUERY)


def text(host: str, name: str) -> str:
    return (HF / host / name).read_text()


class FakeHost:
    """Commands and files of a fixture folder: nvidia-smi topo -m -> topo-m.txt (the other nvidia-smi
    captures in NVIDIA_SMI), lspci -vvv -> lspci-vvv.txt, /proc/... and /sys/module/... ->
    proc-....txt / sys-module-....txt, /sys/kernel/iommu_groups -> iommu-groups.txt ("N type" lines;
    absent: an empty folder, as on the real H200), /sys/bus/pci/devices/<address>/<attribute> ->
    pci-devices.txt ("address attribute value" lines), /sys/devices/system/cpu/cpuN/topology/
    physical_package_id -> cpu-packages.txt ("cpuN package" lines), the toolchain from the folder or
    else from h200-real. A command whose file is absent is not installed; nvidia-smi is installed when
    one of its captures is there, and answers what was not captured with an error."""

    COMMANDS: ClassVar[dict[str, str]] = {
        "nvcc": "nvcc.txt",
        "ninja": "ninja.txt",
        "gcc": "gcc.txt",
        "c++": "cxx.txt",
        "lspci": "lspci-vvv.txt",
        "ldd": "ldd.txt",
    }
    NVIDIA_SMI: ClassVar[dict[tuple[str, ...], str]] = {
        ("topo", "-m"): "topo-m.txt",
        ("topo", "-p2p", "r"): "topo-p2p-r.txt",
        GPU_QUERY: "gpu-query.txt",
        MEMORY_QUERY: "q-memory.txt",
    }
    CUDA_NVCC = "/usr/local/cuda-13.0/bin/nvcc"  # the only absolute path installed: the build's CUDA

    def __init__(self, folder: Path, toolchain: Optional[Path] = H200) -> None:
        self.folder, self.toolchain = folder, toolchain

    def file(self, name: str) -> Optional[Path]:
        for where in (self.folder, self.toolchain if name in TOOLCHAIN else None):
            if where is not None and (where / name).exists():
                return where / name
        return None

    def which(self, name: str) -> Optional[str]:
        base = name.rsplit("/", 1)[-1]
        if base == "nvidia-smi":
            return f"/usr/bin/{name}" if any(self.file(capture) for capture in self.NVIDIA_SMI.values()) else None
        if base == "c++" and not self.file("cxx.txt"):
            # the captures predate the C++ compiler probe (only `which` is asked, no output): a host
            # whose gcc was captured is taken to have the GNU C++ driver beside it
            return "/usr/bin/c++" if self.file("gcc.txt") else None
        if (name.startswith("/") and name != self.CUDA_NVCC) or base not in self.COMMANDS or not self.file(self.COMMANDS[base]):
            return None
        return name if name.startswith("/") else f"/usr/bin/{name}"

    def run(self, argv: Sequence[str]) -> tuple[int, str, str]:
        if argv[0].endswith("nvidia-smi"):
            path = self.file(self.NVIDIA_SMI.get(tuple(argv[1:]), "-"))
            return (0, path.read_text(), "") if path else (1, "", f"{' '.join(argv[1:])} not captured for this fixture host")
        path = self.file(self.COMMANDS[argv[0].rsplit("/", 1)[-1]])
        assert path is not None, argv
        return 0, path.read_text(), ""

    def read(self, path: str) -> str:
        if path.startswith("/sys/kernel/iommu_groups/"):
            group = path.split("/")[4]
            return dict(self.groups())[group] + "\n"
        listed = {
            f"{PCI_DEVICES}/": ("pci-devices.txt", lambda line: f"{PCI_DEVICES}/{line[0]}/{line[1]}"),
            f"{CPUS}/": ("cpu-packages.txt", lambda line: f"{CPUS}/{line[0]}/topology/physical_package_id"),
        }
        for prefix, (name, where) in listed.items():
            if path.startswith(prefix):
                values = {where(line.split()): " ".join(line.split()[-1:]) for line in self.lines(name)}
                if path not in values:
                    raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
                return values[path] + "\n"
        local = self.file(path.strip("/").replace("/", "-") + ".txt")
        if local is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return local.read_text()

    def lines(self, name: str) -> list[str]:
        listing = self.file(name)
        return [line for line in listing.read_text().splitlines() if line.strip()] if listing else []

    def groups(self) -> list[tuple[str, str]]:
        return [tuple(line.split()) for line in self.lines("iommu-groups.txt")]  # type: ignore[misc]

    def listdir(self, path: str) -> list[str]:
        if path == CPUS:
            if not self.file("cpu-packages.txt"):
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
            # what else the real folder holds, which is no CPU
            return [line.split()[0] for line in self.lines("cpu-packages.txt")] + ["cpufreq", "cpuidle", "online", "possible"]
        assert path == "/sys/kernel/iommu_groups"
        return [group for group, _ in self.groups()]

    def libc(self) -> Optional[str]:
        libc = self.file("libc.txt")
        return libc.read_text().splitlines()[1] if libc else None

    def exists(self, path: str) -> Optional[bool]:
        """Whether path exists, from the fixture's paths.txt (one path a line); None (cannot tell) without one."""
        listing = self.file("paths.txt")
        return None if listing is None else path in listing.read_text().split()

    def gather(self, **kw: Any) -> GatheredFacts:
        return gather(self.run, self.read, which=self.which, listdir=self.listdir, libc=self.libc, exists=self.exists, **kw)


def assert_unknown_has_reasons(facts: GatheredFacts) -> None:
    """A fact is null exactly when facts_unknown says why."""
    values = facts.as_dict()
    assert sorted(k for k in FACTS if values[k] is None) == sorted(facts.facts_unknown), facts.facts_unknown
    assert all(reason.strip() for reason in facts.facts_unknown.values())


# --- the real H200 capture ----------------------------------------------------------------------


def test_real_h200_gathered_exactly() -> None:
    facts = FakeHost(H200).gather()
    assert_unknown_has_reasons(facts)
    assert facts.as_dict() == {
        "gpu_topology": {"GPU0": {}},
        "pcie_only": None,
        "gpu_p2p_read": {"GPU0": {}},
        "p2p_supported": None,
        "nvidia_kernel_module": "open",
        "nvidia_module_version": "580.159.04",
        "nvidia_module_gcc": "15.3.0",
        "iommu_cmdline": {},
        "iommu_groups": 0,
        "iommu_group_types": {},
        "iommu_mode": "off",
        "acs_redirect": None,
        "acs_redirect_bridges": None,
        # the capture predates the PCIe-fabric facts: only the command line was there to read
        "uvm_disable_hmm": None,
        "pcie_cmdline": {},
        "pcie_aspm_policy": None,
        "pcie_port_pm": "default",
        "nvidia_registry_dwords": None,
        "nvidia_dynamic_power_management": None,
        "cpu_sockets": None,
        **dict.fromkeys(GPU_FACTS),
        "nvcc_path": "/usr/local/cuda-13.0/bin/nvcc",
        "nvcc_version": "13.0",
        "ninja_version": "1.13.2",
        "gcc_version": "13.3.0",
        "glibc_version": "2.39",
        # the capture (2026-12-01) predates the C++ compiler and header probes: no cxx.txt, no paths.txt
        "jit_tools_missing": [],
        "cxx_path": "/usr/bin/c++",
        "cuda_cccl_headers": None,
        "python_headers": None,
        "python_include": None,
        "facts_unknown": {
            "cuda_cccl_headers": "cannot tell whether /usr/local/cuda-13.0/include holds cccl/cuda/std or cuda/std",
            "python_headers": "no include path of the server's Python was given (sysconfig)",
            "python_include": "no include path of the server's Python was given (sysconfig)",
            "pcie_only": "1 GPU in nvidia-smi topo -m: no GPU pair whose link could be NVLink",
            "p2p_supported": "1 GPU in nvidia-smi topo -p2p r: no GPU pair",
            "acs_redirect": "lspci not found (install pciutils to read the bridges' ACS settings)",
            "acs_redirect_bridges": "lspci not found (install pciutils to read the bridges' ACS settings)",
            "uvm_disable_hmm": f"{UVM} does not exist (nvidia_uvm is not loaded: it loads at the first CUDA use; or not on x86_64)",
            "pcie_aspm_policy": "/sys/module/pcie_aspm/parameters/policy does not exist (a kernel without PCIe ASPM support)",
            "nvidia_registry_dwords": "/proc/driver/nvidia/params does not exist (is the NVIDIA kernel module loaded?)",
            "nvidia_dynamic_power_management": "/proc/driver/nvidia/params does not exist (is the NVIDIA kernel module loaded?)",
            "cpu_sockets": "cannot list /sys/devices/system/cpu: No such file or directory",
            **dict.fromkeys(GPU_FACTS, f"/usr/bin/nvidia-smi {QUERY} exited 1: {QUERY} not captured for this fixture host"),
        },
    }


def test_real_topology_header_carries_underline_escapes() -> None:
    raw = text("h200-real", "topo-m.txt")
    assert raw.splitlines()[0] == "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"
    assert strip_ansi(raw.splitlines()[0]).split()[0] == "GPU0"
    assert parse_topology(raw) == {"GPU0": {}}


def test_real_toolchain_versions() -> None:
    assert parse_nvcc_version(text("h200-real", "nvcc.txt")) == "13.0"
    assert parse_ninja_version(text("h200-real", "ninja.txt")) == "1.13.2"
    assert parse_gcc_version(text("h200-real", "gcc.txt")) == "13.3.0"
    assert parse_gcc_version("13.3.0\n") == "13.3.0"  # gcc -dumpfullversion
    assert parse_glibc_version(text("h200-real", "ldd.txt")) == "2.39"
    assert parse_glibc_version(text("h200-real", "libc.txt").splitlines()[1]) == "2.39"


def test_real_cmdline_has_no_iommu_switch_and_init_arguments_are_not_read() -> None:
    assert parse_cmdline(text("h200-real", "proc-cmdline.txt")) == {}
    assert parse_cmdline("ro intel_iommu=on iommu=off iommu=pt -- iommu=off amd_iommu=on") == {"intel_iommu": "on", "iommu": "pt"}


# --- hosts built from the real format -------------------------------------------------------------


def test_eight_gpu_pcie_host() -> None:
    facts = FakeHost(HF / "rtx-pro-6000-pcie").gather()
    assert_unknown_has_reasons(facts)
    # no peer-to-peer answer was written for this constructed host (the real one's is not known), and
    # no include path of a Python was given; its paths.txt has CUDA 13's CCCL headers
    assert sorted(facts.facts_unknown) == ["gpu_p2p_read", "p2p_supported", "python_headers", "python_include"]
    assert facts.cuda_cccl_headers is True and facts.cxx_path == "/usr/bin/c++"
    with_python = FakeHost(HF / "rtx-pro-6000-pcie").gather(python_include="/usr/include/python3.11")
    assert with_python.python_headers is False and with_python.python_include == "/usr/include/python3.11"
    assert facts.pcie_only is True and sorted(facts.gpu_topology or {}) == [f"GPU{i}" for i in range(8)]
    assert facts.gpu_topology["GPU0"] == {  # type: ignore[index]
        "GPU1": "PIX",
        "GPU2": "NODE",
        "GPU3": "NODE",
        "GPU4": "SYS",
        "GPU5": "SYS",
        "GPU6": "SYS",
        "GPU7": "SYS",
    }
    assert (facts.nvidia_kernel_module, facts.nvidia_module_version, facts.nvidia_module_gcc) == ("open", "580.82.07", "13.3.0")
    assert facts.iommu_cmdline == {"amd_iommu": "on", "iommu": "pt"}
    assert (facts.iommu_groups, facts.iommu_group_types, facts.iommu_mode) == (48, {"identity": 48}, "passthrough")
    assert (facts.acs_redirect, facts.acs_redirect_bridges) == (False, [])
    # the operators' fixes applied (voipmonitor/rtx6kpro): HMM off, ASPM and port PM off, ForceP2P
    assert facts.uvm_disable_hmm is True
    assert (facts.pcie_cmdline, facts.pcie_aspm_policy, facts.pcie_port_pm) == ({"pcie_aspm": "off", "pcie_port_pm": "off"}, "off", "off")
    forced = "ForceP2P=0x11;RMForceP2PType=1;RMPcieP2PType=2;GrdmaPciTopoCheckOverride=1;EnableResizableBar=1"
    assert (facts.nvidia_registry_dwords, facts.nvidia_dynamic_power_management, facts.cpu_sockets) == (forced, 3, 2)
    gpus = [f"GPU{i}" for i in range(8)]
    assert facts.gpu_bus_ids == dict(zip(gpus, [f"0000:{b}:00.0" for b in ("41", "42", "61", "62", "c1", "c2", "e1", "e2")]))
    assert facts.gpu_numa_nodes == dict(zip(gpus, [0, 0, 0, 0, 1, 1, 1, 1])) and facts.gpu_runtime_pm == dict.fromkeys(gpus, "on")
    assert facts.persistence_mode == dict.fromkeys(gpus, True)
    assert facts.power_limit_w == facts.power_default_limit_w == facts.power_max_limit_w == dict.fromkeys(gpus, 600.0)
    assert facts.bar1_total_mib == dict.fromkeys(gpus, 98304)
    assert facts.gpus_power_below_default == facts.gpus_bar1_below_memory == []


def test_the_stock_host_reads_as_installed() -> None:
    """The same host before the operators' fixes: HMM on, ASPM left to the default policy, the IOMMU
    translating, no registry settings, persistence off, two GPUs power-limited, BAR1 at 256 MiB."""
    facts = FakeHost(HF / "rtx-pro-6000-stock").gather()
    assert_unknown_has_reasons(facts)
    assert facts.uvm_disable_hmm is False and facts.iommu_mode == "translated"
    assert (facts.pcie_cmdline, facts.pcie_aspm_policy, facts.pcie_port_pm) == ({}, "default", "default")
    assert (facts.nvidia_registry_dwords, facts.nvidia_dynamic_power_management) == ("", 3)
    assert facts.persistence_mode == {f"GPU{i}": False for i in range(8)}
    assert facts.gpu_runtime_pm == {f"GPU{i}": "auto" for i in range(8)}
    assert facts.gpus_power_below_default == ["GPU2", "GPU3"] and facts.power_limit_w["GPU2"] == 300.0  # type: ignore[index]
    assert facts.bar1_total_mib == {f"GPU{i}": 256 for i in range(8)} and facts.gpus_bar1_below_memory == [f"GPU{i}" for i in range(8)]


def test_real_h100_fabric_facts() -> None:
    """The project's GPU machine as captured on 2026-12-06 (h100-real/README.md): one H100 in a VM,
    nvidia_uvm loaded with HMM on (N), the kernel's default ASPM policy, no IOMMU, one socket."""
    facts = FakeHost(HF / "h100-real").gather()
    assert_unknown_has_reasons(facts)
    assert (facts.uvm_disable_hmm, facts.pcie_aspm_policy, facts.pcie_port_pm, facts.iommu_mode) == (False, "default", "default", "off")
    assert (facts.nvidia_registry_dwords, facts.nvidia_dynamic_power_management, facts.cpu_sockets) == ("", 3, 1)
    assert (facts.gpu_bus_ids, facts.gpu_numa_nodes, facts.gpu_runtime_pm) == ({"GPU0": "0000:00:06.0"}, {"GPU0": -1}, {"GPU0": "on"})
    assert facts.persistence_mode == {"GPU0": True}
    assert (facts.power_limit_w, facts.power_default_limit_w, facts.power_max_limit_w) == ({"GPU0": 700.0},) * 3
    assert (facts.bar1_total_mib, facts.gpus_bar1_below_memory, facts.gpus_power_below_default) == ({"GPU0": 131072}, [], [])
    assert parse_memory_report(text("h100-real", "q-memory.txt")) == {"0000:00:06.0": (81559, 131072)}
    # not captured there: the matrices (their own capture is the H200's), lspci
    assert facts.facts_unknown["gpu_topology"].endswith("topo -m not captured for this fixture host")


def test_malformed_fabric_files_are_unknown_with_what_was_expected() -> None:
    facts = FakeHost(HF / "fabric-malformed").gather()
    assert_unknown_has_reasons(facts)
    unknown = facts.facts_unknown
    assert unknown["uvm_disable_hmm"] == f"expected Y or N (or 1 or 0) in {UVM}, found 'maybe'"
    assert unknown["pcie_aspm_policy"].startswith("expected the ASPM policies (default, performance, powersave, powersupersave)")
    assert "with the active one in [brackets]" in unknown["pcie_aspm_policy"]
    assert unknown["nvidia_registry_dwords"].startswith("expected a 'RegistryDwords: \"...\"' line in /proc/driver/nvidia/params")
    assert unknown["cpu_sockets"] == f"{CPUS}/cpu0/topology/physical_package_id holds 'x', not a number"
    for fact in GPU_FACTS:  # the identity query's line, not the fabric query's
        assert "line 1: expected 6 comma-separated fields (index, pci.bus_id, persistence_mode" in unknown[fact], fact
    assert facts.pcie_port_pm == "default"  # the command line was readable
    with pytest.raises(HostFactsParseError, match=r"GPU 0000:41:00.0: expected FB Memory Usage and BAR1 Memory Usage with a Total each"):
        parse_memory_report(text("fabric-malformed", "q-memory.txt"))


def test_nvlink_host_is_not_pcie_only_and_nics_are_left_out() -> None:
    matrix = parse_topology(text("nvlink-8gpu", "topo-m.txt"))
    assert sorted(matrix) == [f"GPU{i}" for i in range(8)]
    assert matrix["GPU7"] == {f"GPU{i}": "NV18" for i in range(7)}
    value, why = pcie_only(matrix)
    assert value is False and why == "NVLink (NV#) between 28 GPU pair(s), GPU0-GPU1 first"


def test_one_nvlink_pair_among_pcie_links_is_enough() -> None:
    raw = text("rtx-pro-6000-pcie", "topo-m.txt")
    for row in ("GPU6\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\t X \t", "GPU7\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\t"):
        assert row + "PIX" in raw
        raw = raw.replace(row + "PIX", row + "NV4")
    assert pcie_only(parse_topology(raw)) == (False, "NVLink (NV#) between 1 GPU pair(s), GPU6-GPU7 first")


def test_proprietary_module() -> None:
    module = parse_driver_version_file(text("proprietary-module", "proc-driver-nvidia-version.txt"))
    assert (module.flavour, module.version, module.gcc) == ("proprietary", "570.172.08", "12.3.0")


def test_acs_redirect_host() -> None:
    facts = FakeHost(HF / "acs-redirect").gather()
    assert_unknown_has_reasons(facts)
    assert facts.acs_redirect is True
    assert facts.acs_redirect_bridges == [
        "00:03.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge (prog-if 00 [Normal decode])",
        "00:03.2 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge (prog-if 00 [Normal decode])",
    ]
    assert (facts.iommu_cmdline, facts.iommu_group_types, facts.iommu_mode) == ({}, {"DMA-FQ": 48}, "translated")


def test_lspci_as_a_user_is_unknown_not_clean() -> None:
    facts = FakeHost(HF / "lspci-not-root").gather()
    assert facts.acs_redirect is None
    assert "'<access denied>', it must run as root" in facts.facts_unknown["acs_redirect"]


def test_redirect_on_an_endpoint_is_not_a_bridge_redirect() -> None:
    acs = "\tCapabilities: [2a0 v1] Access Control Services\n\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+\n"
    driver = "\tKernel driver in use: nvidia\n"
    raw = text("rtx-pro-6000-pcie", "lspci-vvv.txt").replace(driver, acs + driver)
    assert "ReqRedir+" in raw and parse_lspci(raw).redirect is False


# --- malformed input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "given", "message"),
    [
        (parse_topology, "", "printed nothing"),
        (parse_topology, (DATA / "nvidia-smi" / "eight-rtx-pro-6000.txt").read_text(), "expected a header line starting with GPU0"),
        (parse_topology, "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-15\n", "expected a row for each of GPU0, GPU1, found rows GPU0"),
        (parse_topology, "\tGPU0\tGPU1\nGPU0\t X \nGPU1\tPIX\t X \n", "row GPU0: expected 2 links"),
        (parse_topology, "\tGPU0\tGPU1\nGPU0\t X \tFAST\nGPU1\tPIX\t X \n", "row GPU0: expected 2 links"),
        (parse_topology, "\tGPU0\tGPU1\nGPU0\tPIX\t X \nGPU1\tPIX\t X \n", "row GPU0: expected X in its own column"),
        (parse_driver_version_file, "NVRM version: something else\n", "expected 'NVRM version: NVIDIA UNIX ... Kernel Module  <version>'"),
        (parse_lspci, "no devices here\n", "expected lspci -vvv output"),
        (parse_nvcc_version, "nvcc: command not found\n", "expected 'Cuda compilation tools, release X.Y"),
        (parse_ninja_version, "ninja: unknown\n", "expected a version such as 1.11.1 from ninja --version"),
        (parse_gcc_version, "Ubuntu clang version 18.1.3 (1ubuntu1)\n", "expected 'gcc (...) X.Y.Z'"),
        (parse_glibc_version, "musl libc (x86_64)\nVersion 1.2.4\n", "(not glibc?)"),
        (lambda t: parse_module_bool(t, UVM), "", f"expected Y or N (or 1 or 0) in {UVM}, found ''"),
        (parse_aspm_policy, "[default] [performance]\n", "with the active one in [brackets]"),
        (parse_aspm_policy, "[fast] performance\n", "expected the ASPM policies"),
        (sysfs_address, "GPU-1234", "expected a PCI bus id such as 00000000:18:00.0, found 'GPU-1234'"),
        (parse_gpu_power, "", "printed no GPU"),
        (parse_gpu_power, "x, 00000000:01:00.0, Enabled, 1, 1, 1\n", "line 1: GPU index is not a number: 'x'"),
        (parse_gpu_power, "0, 00000000:01:00.0, On, 1, 1, 1\n", "persistence_mode should be Enabled or Disabled, found 'On'"),
        (parse_gpu_power, "0, 00000000:01:00.0, Enabled, 600 W, 1, 1\n", "power.limit should be watts such as 600.00 or [N/A]"),
        (parse_memory_report, "NVIDIA-SMI has failed\n", "expected nvidia-smi -q -d MEMORY output"),
        (parse_memory_report, "GPU 00000000:01:00.0\n    BAR1 Memory Usage\n        Total : lots\n", "expected 'Total : N MiB'"),
        (parse_nvidia_params, "", "expected a 'RegistryDwords: \"...\"' line in /proc/driver/nvidia/params"),
    ],
)
def test_malformed_input_says_what_was_expected(parse: Any, given: str, message: str) -> None:
    with pytest.raises(HostFactsParseError) as info:
        parse(given)
    assert message in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("groups", "types", "cmdline", "mode", "why"),
    [
        (None, None, None, None, "could not be listed"),
        (0, {}, {"intel_iommu": "on"}, "off", "is empty"),
        (4, {"DMA-FQ": 3, "identity": 1}, {}, "translated", "3 of 4 IOMMU groups translate DMA"),
        (4, {"identity": 4}, {}, "passthrough", "identity-mapped"),
        (4, {"unmanaged": 4}, {}, None, "say neither"),
        (4, {}, {"iommu": "pt"}, "passthrough", "passthrough asked"),
        (4, {}, {"iommu.passthrough": "0"}, "translated", "iommu.passthrough=0"),
        (4, {}, {"amd_iommu": "on"}, None, "does not say passthrough"),
    ],
)
def test_iommu_mode(groups: Any, types: Any, cmdline: Any, mode: Optional[str], why: str) -> None:
    assert iommu_mode(groups, types, cmdline)[0] == mode
    assert why in iommu_mode(groups, types, cmdline)[1]


# --- absent commands and files ------------------------------------------------------------------


def test_a_bare_host_gives_every_fact_unknown_with_a_reason() -> None:
    def absent(path: str) -> str:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)

    def no_folder(path: str) -> list[str]:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)

    def never(argv: Sequence[str]) -> tuple[int, str, str]:
        raise AssertionError(f"nothing is installed, yet {argv} ran")

    facts = gather(never, absent, which=lambda name: None, listdir=no_folder, libc=lambda: None, cuda_home="/opt/cuda")
    assert_unknown_has_reasons(facts)
    assert facts.jit_tools_missing == ["nvcc", "ninja", "gcc", "c++"]
    assert all(facts.as_dict()[k] is None for k in FACTS if k != "jit_tools_missing")
    unknown = facts.facts_unknown
    assert unknown["gpu_topology"] == "nvidia-smi not found (is the NVIDIA driver installed?)"
    assert unknown["nvidia_kernel_module"] == "/proc/driver/nvidia/version does not exist (is the NVIDIA kernel module loaded?)"
    assert unknown["iommu_mode"] == "/sys/kernel/iommu_groups does not exist"
    assert unknown["nvcc_version"] == "nvcc not found at /opt/cuda/bin/nvcc nor on PATH"
    assert unknown["glibc_version"] == "no glibc version from os.confstr, and ldd not found on PATH"


def test_failing_commands_are_unknown_with_what_they_said() -> None:
    host = FakeHost(HF / "rtx-pro-6000-pcie")

    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        if argv[1:] == ["topo", "-m"]:
            return 9, (DATA / "nvidia-smi" / "driver-not-loaded.txt").read_text(), ""
        if argv[0].endswith("lspci"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return host.run(argv)

    facts = gather(run, host.read, which=host.which, listdir=host.listdir, libc=lambda: None)
    assert_unknown_has_reasons(facts)
    assert facts.facts_unknown["pcie_only"].startswith("/usr/bin/nvidia-smi topo -m exited 9: NVIDIA-SMI has failed")
    assert facts.facts_unknown["acs_redirect"] == "/usr/bin/lspci -vvv could not run: Permission denied"
    assert facts.glibc_version == "2.39"  # from ldd --version when os.confstr has none


def test_nvcc_is_the_builds_cuda_first_then_path() -> None:
    ran: list[str] = []
    host = FakeHost(H200)

    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        ran.append(argv[0])
        return host.run(argv)

    facts = gather(run, host.read, which=host.which, listdir=host.listdir, libc=host.libc)
    assert facts.nvcc_path == "/usr/local/cuda-13.0/bin/nvcc" and "/usr/local/cuda-13.0/bin/nvcc" in ran
    elsewhere = gather(run, host.read, which=host.which, listdir=host.listdir, libc=host.libc, cuda_home="/usr/local/cuda-12.8")
    assert elsewhere.nvcc_path == "/usr/bin/nvcc" and elsewhere.nvcc_version == "13.0"


# --- a gathered result as a --host-facts file, evaluated ------------------------------------------


def saved(tmp_path: Path, host: FakeHost, query: Path) -> Path:
    """What a saved preflight result holds: gpus (nvidia_smi.py's parse) and the gathered facts."""
    result = {"changed": False, "gpus": [g.as_dict() for g in parse_query_output(query.read_text())], **host.gather().as_dict()}
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(result))
    return path


def verdicts(
    path: Path, argv: Sequence[str] = ("--tp-size", "8"), env: Optional[dict[str, str]] = None, ids: Sequence[str] = NEW_ENTRIES
) -> dict[str, Any]:
    ctx = Context(flags=parse_argv(list(argv)), env=env or {}, version="0.5.9", capability="12.0", host=read_host_facts(path))
    return {i: evaluate_entry(ENTRIES[i], ctx) for i in ids}


def test_the_pcie_host_passes_the_new_entries(tmp_path: Path) -> None:
    path = saved(tmp_path, FakeHost(HF / "rtx-pro-6000-pcie"), EIGHT_GPUS)
    assert {i: v.verdict for i, v in verdicts(path).items()} == dict.fromkeys(NEW_ENTRIES, "ok")
    found = verdicts(path, ids=FABRIC_ENTRIES)
    assert {i: v.verdict for i, v in found.items()} == dict.fromkeys(FABRIC_ENTRIES, "ok"), [v.text() for v in found.values()]
    assert "host uvm_disable_hmm true" in found["nccl-p2p-uvm-hmm-on"].text()
    assert "host pcie_aspm_policy off" in found["pcie-aspm-surprise-link-down"].text()
    assert "host gpus_power_below_default: none" in found["gpu-power-limit-below-default"].text()


def test_the_stock_host_is_refused_for_each_fabric_condition(tmp_path: Path) -> None:
    """A multi-GPU plan on the host as installed: the three conditions that hang NCCL refused, naming
    the fact and the fix, the two that only slow it warned about with their figures; one GPU is refused nothing."""
    path = saved(tmp_path, FakeHost(HF / "rtx-pro-6000-stock"), EIGHT_GPUS)
    found = verdicts(path, ids=FABRIC_ENTRIES)
    assert {i: v.verdict for i, v in found.items()} == {
        **dict.fromkeys(FABRIC_REFUSALS, "refused"),
        **dict.fromkeys(FABRIC_WARNINGS, "warning"),
    }
    for entry_id, fact in (
        ("nccl-p2p-iommu-translated", "host iommu_mode translated"),
        ("nccl-p2p-uvm-hmm-on", "host uvm_disable_hmm false"),
        ("pcie-aspm-surprise-link-down", "host pcie_aspm_policy default"),
        ("gpu-power-limit-below-default", "host gpus_power_below_default: GPU2 300 W (default 600 W), GPU3 300 W (default 600 W)"),
        ("gpu-bar1-below-memory", "host gpus_bar1_below_memory: GPU0 BAR1 256 MiB, GPU1 BAR1 256 MiB"),
    ):
        assert fact in found[entry_id].text() and ENTRIES[entry_id].fix in found[entry_id].text(), found[entry_id].text()
    one_gpu = verdicts(path, argv=(), ids=FABRIC_REFUSALS)
    assert {i: v.verdict for i, v in one_gpu.items()} == dict.fromkeys(FABRIC_REFUSALS, "ok")
    # the power limit slows one GPU as much as eight
    assert verdicts(path, argv=(), ids=["gpu-power-limit-below-default"])["gpu-power-limit-below-default"].verdict == "warning"


def test_fabric_facts_not_read_are_unknown_never_ok(tmp_path: Path) -> None:
    """The real H200 capture has none of the new files, the malformed host none that reads: every
    fabric entry that needs them is unknown for a multi-GPU plan, with the reason."""
    for folder in (H200, HF / "fabric-malformed"):
        found = verdicts(saved(tmp_path, FakeHost(folder), EIGHT_GPUS), ids=FABRIC_ENTRIES[1:])
        assert {i: v.verdict for i, v in found.items()} == dict.fromkeys(FABRIC_ENTRIES[1:], "unknown"), folder
    hmm = verdicts(saved(tmp_path, FakeHost(H200), EIGHT_GPUS), ids=["nccl-p2p-uvm-hmm-on"])["nccl-p2p-uvm-hmm-on"]
    assert f"host uvm_disable_hmm unknown ({UVM} does not exist (nvidia_uvm is not loaded" in hmm.text(), hmm.text()


def test_the_acs_host_is_refused_until_p2p_is_off(tmp_path: Path) -> None:
    path = saved(tmp_path, FakeHost(HF / "acs-redirect"), EIGHT_GPUS)
    found = verdicts(path)
    acs = found["nccl-p2p-acs-redirect"]
    assert acs.verdict == "refused" and "host acs_redirect true (bridges 00:03.1, 00:03.2)" in acs.text(), acs.text()
    assert found["nccl-p2p-iommu-translated"].verdict == "refused"
    off = verdicts(path, env={"NCCL_P2P_DISABLE": "1"})
    assert off["nccl-p2p-acs-redirect"].verdict == off["nccl-p2p-iommu-translated"].verdict == "ok"
    one_gpu = verdicts(path, argv=())
    assert one_gpu["nccl-p2p-acs-redirect"].verdict == "ok" and "--tp-size / --pp-size not given" in one_gpu["nccl-p2p-acs-redirect"].text()


def test_the_real_h200_without_lspci_is_unknown_not_ok(tmp_path: Path) -> None:
    path = saved(tmp_path, FakeHost(H200), DATA / "start-failures" / "nvidia-smi-query-h200.txt")
    found = verdicts(path)
    acs = found["nccl-p2p-acs-redirect"]
    assert acs.verdict == "unknown" and "host acs_redirect unknown (lspci not found" in acs.text(), acs.text()
    assert found["nccl-p2p-iommu-translated"].verdict == "ok" and "host iommu_mode off" in found["nccl-p2p-iommu-translated"].text()
    assert found["flashinfer-jit-nvcc-too-old"].verdict == "ok"
    assert "host nvcc_version 13.0 (needs 12.9 or newer)" in found["flashinfer-jit-nvcc-too-old"].text()
    assert found["flashinfer-jit-toolchain-missing"].verdict == "ok"


def test_the_h200_fixture_is_the_gathered_capture() -> None:
    """tests/data/start-failures/host-h200.json is the nvidia-smi query's parse plus what gather reads from h200-real."""
    saved_file = json.loads((DATA / "start-failures" / "host-h200.json").read_text())
    assert {k: v for k, v in saved_file.items() if k != "gpus"} == FakeHost(H200).gather().as_dict()
    assert parse_host_facts(saved_file).unknown["acs_redirect"].startswith("lspci not found")


def test_fact_keys_are_the_gathered_fields() -> None:
    assert sorted(FACT_KEYS) == sorted(GatheredFacts().as_dict())


def test_the_drivers_peer_to_peer_answer_is_read_per_pair() -> None:
    """nvidia-smi topo -p2p r: the real H200 capture (one GPU, underlined header), a constructed 8-GPU
    host whose driver allows every pair, and one that refuses them (GNS, as consumer Blackwell reports)."""
    real = parse_p2p(text("h200-real", "topo-p2p-r.txt"))
    assert real == {"GPU0": {}} and p2p_supported(real) == (None, "1 GPU in nvidia-smi topo -p2p r: no GPU pair")
    allowed = parse_p2p(text("nvlink-8gpu", "topo-p2p-r.txt"))
    assert sorted(allowed) == [f"GPU{i}" for i in range(8)] and allowed["GPU3"]["GPU7"] == "OK"
    assert p2p_supported(allowed) == (True, "every pair OK")
    refused = parse_p2p(text("p2p-refused", "topo-p2p-r.txt"))
    assert refused == {"GPU0": {"GPU1": "GNS"}, "GPU1": {"GPU0": "GNS"}}
    assert p2p_supported(refused) == (False, "not OK: GPU0->GPU1 GNS, GPU1->GPU0 GNS")
    facts = FakeHost(HF / "p2p-refused").gather()
    assert facts.gpu_p2p_read == refused and facts.p2p_supported is False
    assert "p2p_supported" not in facts.facts_unknown
    # a fixture host whose p2p answer was not captured: unknown, with the reason
    facts = FakeHost(HF / "rtx-pro-6000-pcie").gather()
    assert facts.gpu_p2p_read is None and facts.p2p_supported is None
    assert facts.facts_unknown["p2p_supported"].endswith("exited 1: topo -p2p r not captured for this fixture host")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "printed nothing"),
        (" \tGPU0\tGPU1\t\n GPU0\tX\tYES\t\n GPU1\tOK\tX\t\n", "expected a row GPU<n> with 2 of X, OK, CNS"),
        (" \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n", "expected a row for each of GPU0, GPU1"),
        (" \tGPU0\tGPU1\t\n GPU0\tOK\tX\t\n GPU1\tOK\tX\t\n", "row GPU0: expected X in its own column"),
        ("Legend:\n", "expected a header line starting with GPU0"),
    ],
)
def test_a_p2p_matrix_of_another_shape_says_what_it_expected(raw: str, message: str) -> None:
    with pytest.raises(HostFactsParseError, match=re.escape(message)):
        parse_p2p(raw)


def test_a_catalogue_condition_reads_the_drivers_p2p_answer() -> None:
    """{host: p2p_supported, is: false} on a saved facts file: true for the refused pair, false where every
    pair is OK, unknown (with the reason) where the driver's answer could not be read."""
    from sglang_sm120.launch.start_failures import Entry

    entry = Entry(
        id="p2p-probe",
        title="t",
        row=None,
        versions=("0.0.0", None),
        severity="warn",
        evidence="unconfirmed",
        message="m",
        fix="f",
        refs=["r"],
        trigger=[{"host": "p2p_supported", "is": False}],
        unconfirmed="u",
    )

    def verdict(host: Path) -> Any:
        saved = {"gpus": [], **FakeHost(host).gather().as_dict()}
        return evaluate_entry(entry, Context(flags={}, env={}, version="0.5.9", capability="12.0", host=parse_host_facts(saved)))

    refused = verdict(HF / "p2p-refused")
    assert refused.verdict == "warning" and "host p2p_supported false" in refused.text()
    assert verdict(HF / "nvlink-8gpu").verdict == "ok"
    unread = verdict(HF / "rtx-pro-6000-pcie")
    assert unread.verdict == "unknown" and "topo -p2p r not captured" in unread.text()


def test_cccl_headers_are_read_where_the_real_toolkit_keeps_them(cuda_home: Path, tmp_path: Path) -> None:
    """The markers against NVIDIA's own CUDA 13.0.1 layout (the controller's toolkit from NVIDIA's wheels:
    include/cccl/cuda/std/version), CUDA 12's (include/cuda/std/version), and a toolkit with nvcc but
    neither; the root is the one above nvcc's bin/, as FlashInfer derives it."""

    def facts(home: Path, exists: Any = None) -> GatheredFacts:
        nvcc = str(home / "bin" / "nvcc")

        def absent(path: str) -> str:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)

        return gather(
            lambda argv: (1, "", "not run here"), absent, which=lambda name: nvcc if name in (nvcc, "nvcc") else None,
            listdir=lambda path: [], libc=lambda: None, cuda_home=str(home), **({"exists": exists} if exists else {}),
        )  # fmt: skip

    assert facts(cuda_home).cuda_cccl_headers is True
    cuda12 = {"/opt/cuda/include/cuda/std/version"}
    assert facts(Path("/opt/cuda"), exists=lambda path: path in cuda12).cuda_cccl_headers is True
    bare = tmp_path / "bare"
    (bare / "bin").mkdir(parents=True)
    (bare / "bin" / "nvcc").write_text("")
    assert facts(bare).cuda_cccl_headers is False


# --- the PCIe fabric's parsers ----------------------------------------------------------------------


def test_module_bool_and_aspm_policy() -> None:
    assert [parse_module_bool(v, UVM) for v in ("Y\n", "N\n", "1", "0")] == [True, False, True, False]
    real = text("h100-real", "sys-module-pcie_aspm-parameters-policy.txt")
    assert real == "[default] performance powersave powersupersave \n" and parse_aspm_policy(real) == "default"
    assert parse_aspm_policy("default [performance] powersave powersupersave\n") == "performance"
    assert parse_aspm_policy("default performance [powersave]\n") == "powersave"  # kernels before powersupersave


@pytest.mark.parametrize(
    ("pcie", "policy", "expected"),
    [
        ({"pcie_aspm": "off"}, None, ("off", "pcie_aspm=off on the kernel command line")),
        ({"pcie_aspm": "off", "pcie_port_pm": "off"}, "default", ("off", "pcie_aspm=off on the kernel command line")),
        ({"pcie_aspm": "force"}, "powersave", ("powersave", f"the active policy of {'/sys/module/pcie_aspm/parameters/policy'}")),
        (
            {"pcie_aspm.policy": "performance"},
            "performance",
            ("performance", "the active policy of /sys/module/pcie_aspm/parameters/policy"),
        ),
        ({}, None, (None, "the file's reason")),
        (None, "performance", ("performance", "the active policy of /sys/module/pcie_aspm/parameters/policy")),
        (None, "default", (None, "ASPM policy default, and /proc/cmdline could not be read to see whether pcie_aspm=off")),
    ],
)
def test_aspm_policy_is_off_only_from_the_command_line(pcie: Any, policy: Optional[str], expected: tuple[Optional[str], str]) -> None:
    assert aspm_policy(pcie, policy, "the file's reason") == expected


def test_pcie_switches_and_port_pm() -> None:
    line = "ro pcie_aspm=off pcie_port_pm=off pcie_aspm.policy=performance iommu=pt -- pcie_port_pm=force"
    assert parse_pcie_cmdline(line) == {"pcie_aspm": "off", "pcie_port_pm": "off", "pcie_aspm.policy": "performance"}
    assert parse_cmdline(line) == {"iommu": "pt"}
    assert [pcie_port_pm(p) for p in ({"pcie_port_pm": "off"}, {"pcie_port_pm": "force"}, {"pcie_port_pm": "on"}, {})] == [
        "off",
        "force",
        "default",
        "default",
    ]
    assert parse_pcie_cmdline(text("h100-real", "proc-cmdline.txt")) == {}


def test_gpu_query_memory_report_and_driver_params() -> None:
    assert sysfs_address("00000000:C1:00.0") == "0000:c1:00.0" and sysfs_address("0001:02:00.1") == "0001:02:00.1"
    (real,) = parse_gpu_power(text("h100-real", "gpu-query.txt"))
    assert (real.index, real.address, real.persistence_mode, real.power_limit_w) == (0, "0000:00:06.0", True, 700.0)
    odd = parse_gpu_power("0, 00000000:01:00.0, [N/A], [N/A], [Not Supported], 450.00\n")[0]
    assert (odd.persistence_mode, odd.power_limit_w, odd.power_default_limit_w, odd.power_max_limit_w) == (None, None, None, 450.0)
    report = parse_memory_report(text("rtx-pro-6000-stock", "q-memory.txt"))
    assert len(report) == 8 and report["0000:c1:00.0"] == (97887, 256)
    real_params = parse_nvidia_params(text("h100-real", "proc-driver-nvidia-params.txt"))
    assert (real_params.registry_dwords, real_params.dynamic_power_management) == ("", 3)
    tuned = parse_nvidia_params(text("rtx-pro-6000-pcie", "proc-driver-nvidia-params.txt"))
    assert tuned.registry_dwords.startswith("ForceP2P=0x11;RMForceP2PType=1;")


def test_iommu_off_on_the_command_line_decides_without_groups() -> None:
    assert iommu_mode(None, None, {"iommu": "off"}) == ("off", "no IOMMU groups to read, and iommu=off on the kernel command line")
    assert iommu_mode(None, None, {"amd_iommu": "off"})[0] is None  # the other vendor's IOMMU would still be on

    def no_groups(path: str) -> list[str]:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)

    host = FakeHost(HF / "rtx-pro-6000-stock")
    off = lambda path: "ro iommu=off\n" if path == "/proc/cmdline" else host.read(path)  # noqa: E731
    facts = gather(host.run, off, which=host.which, listdir=no_groups, libc=host.libc, exists=host.exists)
    assert facts.iommu_mode == "off" and facts.facts_unknown["iommu_groups"] == "/sys/kernel/iommu_groups does not exist"
    assert "iommu_mode" not in facts.facts_unknown and facts.cpu_sockets is None  # the CPUs are listed the same way


def test_a_gpu_folder_or_memory_report_that_does_not_read_leaves_only_its_facts_unknown() -> None:
    host = FakeHost(HF / "rtx-pro-6000-pcie")

    def read(path: str) -> str:
        if path == f"{PCI_DEVICES}/0000:62:00.0/numa_node":
            return "zero\n"
        if path.endswith("/power/control"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return host.read(path)

    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        if tuple(argv[1:]) == MEMORY_QUERY:  # another host's report: other GPUs
            return 0, text("h100-real", "q-memory.txt"), ""
        return host.run(argv)

    facts = gather(run, read, which=host.which, listdir=host.listdir, libc=host.libc, exists=host.exists)
    assert_unknown_has_reasons(facts)
    assert facts.facts_unknown["gpu_numa_nodes"] == f"{PCI_DEVICES}/0000:62:00.0/numa_node holds 'zero'"
    assert facts.facts_unknown["gpu_runtime_pm"] == f"cannot read {PCI_DEVICES}/0000:41:00.0/power/control: Permission denied"
    assert "lists GPUs ['0000:00:06.0'], the GPU query" in facts.facts_unknown["bar1_total_mib"]
    assert facts.gpu_bus_ids and facts.power_limit_w and facts.gpus_power_below_default == []


def test_a_power_limit_not_reported_is_unknown_unless_another_gpu_is_below() -> None:
    bounds = {"GPU0": 600.0, "GPU1": 600.0}
    assert below({"GPU0": None, "GPU1": 600.0}, bounds, "power.limit") == (None, "power.limit not reported for GPU0")
    assert below({"GPU0": None, "GPU1": 300.0}, bounds, "power.limit") == (["GPU1"], "")
    assert below({"GPU10": 1.0, "GPU2": 1.0}, {"GPU10": 2.0, "GPU2": 2.0}, "x") == (["GPU2", "GPU10"], "")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"uvm_disable_hmm": "N"}, "uvm_disable_hmm must be true, false or null, found 'N'"),
        ({"pcie_aspm_policy": "on"}, "pcie_aspm_policy must be one of off, default, performance, powersave, powersupersave or null"),
        ({"pcie_port_pm": "on"}, "pcie_port_pm must be one of off, force, default or null, found 'on'"),
        ({"cpu_sockets": 0}, "cpu_sockets must be an integer >= 1 or null, found 0"),
        ({"power_limit_w": {"GPU0": "600 W"}}, "power_limit_w must map GPU<n> to watts or null, or be null"),
        ({"gpu_numa_nodes": {"0": 0}}, "gpu_numa_nodes must map GPU<n> to a NUMA node"),
        ({"gpus_bar1_below_memory": ["0000:41:00.0"]}, "gpus_bar1_below_memory must be a list of GPU<n> or null"),
    ],
)
def test_a_saved_fabric_fact_of_the_wrong_type_is_named(data: dict[str, Any], message: str) -> None:
    assert any(message in problem for problem in check_facts(data)), check_facts(data)
    assert check_facts({k: v for k, v in FakeHost(HF / "rtx-pro-6000-stock").gather().as_dict().items()}) == []
