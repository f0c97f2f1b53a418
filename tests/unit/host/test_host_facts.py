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
    FACT_KEYS,
    FACTS,
    GatheredFacts,
    HostFactsParseError,
    gather,
    iommu_mode,
    p2p_supported,
    parse_cmdline,
    parse_driver_version_file,
    parse_gcc_version,
    parse_glibc_version,
    parse_lspci,
    parse_ninja_version,
    parse_nvcc_version,
    parse_p2p,
    parse_topology,
    pcie_only,
    strip_ansi,
)
from sglang_sm120.host.nvidia_smi import parse_query_output
from sglang_sm120.launch.start_failures import Context, evaluate_entry, parse_argv, parse_host_facts, read_host_facts
from sglang_sm120_controller.toolkit_data import load_catalogue

HF = DATA / "host-facts"
H200 = HF / "h200-real"
TOOLCHAIN = ("nvcc.txt", "ninja.txt", "gcc.txt", "ldd.txt", "libc.txt")
ENTRIES = {e.id: e for e in load_catalogue()}
NEW_ENTRIES = ("nccl-p2p-acs-redirect", "nccl-p2p-iommu-translated", "flashinfer-jit-nvcc-too-old", "flashinfer-jit-toolchain-missing")


def text(host: str, name: str) -> str:
    return (HF / host / name).read_text()


class FakeHost:
    """Commands and files of a fixture folder: nvidia-smi topo -m -> topo-m.txt, lspci -vvv ->
    lspci-vvv.txt, /proc/... -> proc-....txt, /sys/kernel/iommu_groups -> iommu-groups.txt ("N
    type" lines; absent: an empty folder, as on the real H200), the toolchain from the folder or
    else from h200-real. A command whose file is absent is not installed."""

    COMMANDS: ClassVar[dict[str, str]] = {
        "nvidia-smi": "topo-m.txt",
        "nvcc": "nvcc.txt",
        "ninja": "ninja.txt",
        "gcc": "gcc.txt",
        "c++": "cxx.txt",
        "lspci": "lspci-vvv.txt",
        "ldd": "ldd.txt",
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
        if base == "c++" and not self.file("cxx.txt"):
            # the captures predate the C++ compiler probe (only `which` is asked, no output): a host
            # whose gcc was captured is taken to have the GNU C++ driver beside it
            return "/usr/bin/c++" if self.file("gcc.txt") else None
        if (name.startswith("/") and name != self.CUDA_NVCC) or base not in self.COMMANDS or not self.file(self.COMMANDS[base]):
            return None
        return name if name.startswith("/") else f"/usr/bin/{name}"

    def run(self, argv: Sequence[str]) -> tuple[int, str, str]:
        if list(argv[1:]) == ["topo", "-p2p", "r"]:  # a second capture of nvidia-smi; absent: not captured
            path = self.file("topo-p2p-r.txt")
            return (0, path.read_text(), "") if path else (1, "", "topo -p2p r not captured for this fixture host")
        path = self.file(self.COMMANDS[argv[0].rsplit("/", 1)[-1]])
        assert path is not None, argv
        return 0, path.read_text(), ""

    def read(self, path: str) -> str:
        if path.startswith("/sys/kernel/iommu_groups/"):
            group = path.split("/")[4]
            return dict(self.groups())[group] + "\n"
        local = self.file(path.strip("/").replace("/", "-") + ".txt")
        if local is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return local.read_text()

    def groups(self) -> list[tuple[str, str]]:
        listing = self.file("iommu-groups.txt")
        return [tuple(line.split()) for line in listing.read_text().splitlines()] if listing else []  # type: ignore[misc]

    def listdir(self, path: str) -> list[str]:
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


def verdicts(path: Path, argv: Sequence[str] = ("--tp-size", "8"), env: Optional[dict[str, str]] = None) -> dict[str, Any]:
    ctx = Context(flags=parse_argv(list(argv)), env=env or {}, version="0.5.9", capability="12.0", host=read_host_facts(path))
    return {i: evaluate_entry(ENTRIES[i], ctx) for i in NEW_ENTRIES}


def test_the_pcie_host_passes_the_new_entries(tmp_path: Path) -> None:
    path = saved(tmp_path, FakeHost(HF / "rtx-pro-6000-pcie"), DATA / "nvidia-smi" / "eight-rtx-pro-6000.txt")
    assert {i: v.verdict for i, v in verdicts(path).items()} == dict.fromkeys(NEW_ENTRIES, "ok")


def test_the_acs_host_is_refused_until_p2p_is_off(tmp_path: Path) -> None:
    path = saved(tmp_path, FakeHost(HF / "acs-redirect"), DATA / "nvidia-smi" / "eight-rtx-pro-6000.txt")
    found = verdicts(path)
    acs = found["nccl-p2p-acs-redirect"]
    assert acs.verdict == "refused" and "host acs_redirect true (bridges 00:03.1, 00:03.2)" in acs.text(), acs.text()
    assert found["nccl-p2p-iommu-translated"].verdict == "warning"
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
