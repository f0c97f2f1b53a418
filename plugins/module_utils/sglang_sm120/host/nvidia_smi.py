"""Parse ``nvidia-smi --query-gpu`` output and compare it with what a host must have.

Plain Python, no Ansible imports: driven by pytest directly, wrapped by
``plugins/modules/sglang_preflight.py`` and ``gpu-check``.

The query the role runs is ``QUERY_FIELDS`` with ``--format=csv,noheader``; one line a GPU::

    0, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 12.0, 580.82.07, 97887 MiB
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from ..errors import ToolkitError

QUERY_FIELDS = ("index", "name", "compute_cap", "driver_version", "memory.total")
QUERY_ARGS = (
    "--query-gpu=" + ",".join(QUERY_FIELDS),
    "--format=csv,noheader",
)


class NvidiaSmiParseError(ToolkitError):
    """The text is not what ``nvidia-smi --query-gpu ... --format=csv,noheader`` prints."""


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_cap: str
    driver_version: str
    memory_mib: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class GpuExpectation:
    count: int = 8
    name_pattern: str = "RTX PRO 6000"
    compute_cap: str = "12.0"
    min_driver: str = "580.65.06"


@dataclass
class GpuReport:
    gpus: list[Gpu] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


_MEMORY = re.compile(r"^(\d+)\s*MiB$")
_DRIVER = re.compile(r"^\d+(\.\d+)*$")
_CAP = re.compile(r"^\d+\.\d+$")


def csv_rows(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """nvidia-smi's ``--format=csv,noheader``: (line number, line, its cells) for each line that is not empty."""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line:
            yield number, line, [cell.strip() for cell in line.split(",")]


def parse_query_output(text: str) -> list[Gpu]:
    """Return one ``Gpu`` a line; raise ``NvidiaSmiParseError`` naming the bad line."""
    gpus: list[Gpu] = []
    for number, line, cells in csv_rows(text):
        if len(cells) != len(QUERY_FIELDS):
            raise NvidiaSmiParseError(
                f"line {number}: expected {len(QUERY_FIELDS)} comma-separated fields "
                f"({', '.join(QUERY_FIELDS)}), found {len(cells)}: {line!r}"
            )
        index, name, cap, driver, memory = cells
        if not index.isdigit():
            raise NvidiaSmiParseError(f"line {number}: GPU index is not a number: {index!r}")
        if not _CAP.match(cap):
            raise NvidiaSmiParseError(f"line {number}: compute capability should look like '12.0', found {cap!r}")
        if not _DRIVER.match(driver):
            raise NvidiaSmiParseError(f"line {number}: driver version should look like '580.82.07', found {driver!r}")
        match = _MEMORY.match(memory)
        if not match:
            raise NvidiaSmiParseError(f"line {number}: memory.total should look like '97887 MiB', found {memory!r}")
        gpus.append(Gpu(int(index), name, cap, driver, int(match.group(1))))
    return gpus


def version_tuple(version: str) -> tuple[int, ...]:
    """'580.82.07' -> (580, 82, 7); raise ValueError on anything else."""
    if not _DRIVER.match(version.strip()):
        raise ValueError(f"not a dotted version number: {version!r}")
    return tuple(int(part) for part in version.strip().split("."))


def check_gpus(gpus: list[Gpu], expected: GpuExpectation) -> list[str]:
    """Return every way ``gpus`` differs from ``expected``, each as a sentence."""
    problems: list[str] = []
    if len(gpus) != expected.count:
        problems.append(f"found {len(gpus)} GPUs, expected {expected.count}")
    pattern = re.compile(expected.name_pattern)
    for gpu in gpus:
        if not pattern.search(gpu.name):
            problems.append(f"GPU {gpu.index} is {gpu.name!r}, expected a name matching {expected.name_pattern!r}")
        if gpu.compute_cap != expected.compute_cap:
            problems.append(f"GPU {gpu.index} has compute capability {gpu.compute_cap}, expected {expected.compute_cap}")
        if version_tuple(gpu.driver_version) < version_tuple(expected.min_driver):
            problems.append(
                f"GPU {gpu.index} runs driver {gpu.driver_version}, expected {expected.min_driver} or newer (required by CUDA 13.0)"
            )
    drivers = sorted({gpu.driver_version for gpu in gpus})
    if len(drivers) > 1:
        problems.append(f"GPUs report different drivers {drivers}, expected one")
    return problems


def gpu_report(output: str | None, expected: GpuExpectation, error: str = "") -> GpuReport:
    """Build the report from nvidia-smi's stdout, or from why it could not run.

    ``output`` is None when nvidia-smi is missing or failed; ``error`` then says why.
    """
    if output is None:
        reason = error or "nvidia-smi did not run"
        return GpuReport(problems=[f"cannot list GPUs: {reason}; expected {expected.count} GPUs"])
    try:
        gpus = parse_query_output(output)
    except NvidiaSmiParseError as exc:
        return GpuReport(problems=[f"cannot read nvidia-smi output: {exc}"])
    return GpuReport(gpus=gpus, problems=check_gpus(gpus, expected))
