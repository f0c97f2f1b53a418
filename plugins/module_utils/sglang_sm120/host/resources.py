"""Disk and memory checks a GPU host must pass before anything is built on it.

Plain Python, no Ansible imports (wrapped by ``plugins/modules/sglang_preflight.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class DiskNeed:
    label: str
    path: str
    min_gib: float


@dataclass(frozen=True)
class DiskState:
    label: str
    path: str
    measured_at: str
    free_gib: float
    min_gib: float

    @property
    def ok(self) -> bool:
        return self.free_gib >= self.min_gib


def nearest_existing(path: str) -> str:
    """The path itself or its closest existing parent (a release dir may not exist yet)."""
    current = os.path.abspath(path)
    while not os.path.exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def free_gib(path: str) -> float:
    stats = os.statvfs(nearest_existing(path))
    return stats.f_bavail * stats.f_frsize / GIB


def check_disk(needs: list[DiskNeed]) -> tuple[list[DiskState], list[str]]:
    states: list[DiskState] = []
    problems: list[str] = []
    for need in needs:
        where = nearest_existing(need.path)
        state = DiskState(need.label, need.path, where, round(free_gib(where), 1), need.min_gib)
        states.append(state)
        if not state.ok:
            problems.append(
                f"{need.label}: found {state.free_gib} GiB free at {need.path} (measured on {where}), expected at least {need.min_gib} GiB"
            )
    return states, problems


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> {field: kibibytes}."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[name.strip()] = int(parts[0])
    return values


def check_memory(meminfo_text: str, min_gib: float) -> tuple[float, list[str]]:
    values = parse_meminfo(meminfo_text)
    if "MemTotal" not in values:
        return 0.0, ["cannot read MemTotal from /proc/meminfo"]
    total = round(values["MemTotal"] / 1024**2, 1)
    if total < min_gib:
        return total, [f"found {total} GiB of memory, expected at least {min_gib} GiB"]
    return total, []
