"""Which of the builds still to do run together: independent artifacts (flashinfer-jit-cache and
sgl-kernel both only need torch) start at once when the host has the cores and memory for all of
them, each with its share of the compile jobs.

Plain Python, no Ansible imports; sglang_build (state=cached) returns ``build_groups()`` of the
plan's missing items, and the sglang_build role starts each group's builds together, then waits
for them.

The jobs setting bounds a group. ``jobs`` > 0 gives every build that many jobs: builds run together
only while their jobs add up to no more than the cores and their memory (jobs x mem_per_job_gib)
to no more than the host's. ``jobs`` = 0 splits the host: each of n builds gets
``derive_jobs(cores // n, memory / n, its mem_per_job_gib, max_jobs)``, and n builds run together
only if every one of them still gets at least ``min_jobs``. ``parallel`` caps n (1: one at a time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any, Optional

from .pipeline import derive_jobs


@dataclass(frozen=True)
class Host:
    """What the builds share, and the settings that bound them."""

    cores: int
    mem_gib: float
    jobs: int = 0  # > 0: every build's compile jobs, as set; 0: derived from the share of the host
    max_jobs: int = 0  # cap on derived jobs (0: none)
    parallel: int = 1  # most builds at once
    min_jobs: int = 4  # fewest derived jobs a build may get to run beside another


@dataclass
class Group:
    """Builds started together, in plan order, with each one's compile jobs and why they were grouped so."""

    names: list[str]
    jobs: dict[str, int]
    why: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mem_per_job(item: Mapping[str, Any]) -> float:
    return max(float(item["spec"].get("mem_per_job_gib", 4)), 0.1)


def share_jobs(items: Sequence[Mapping[str, Any]], host: Host) -> Optional[dict[str, int]]:
    """Each item's compile jobs when all of `items` build at once on `host`; None when the host cannot afford them together."""
    count = len(items)
    if count == 0:
        return {}
    if count == 1:
        item = items[0]
        return {item["name"]: host.jobs or derive_jobs(host.cores, host.mem_gib, _mem_per_job(item), host.max_jobs)}
    if count > max(host.parallel, 1):
        return None
    if host.jobs > 0:
        fits = count * host.jobs <= host.cores and sum(host.jobs * _mem_per_job(item) for item in items) <= host.mem_gib
        return {item["name"]: host.jobs for item in items} if fits else None
    cores, mem_gib = host.cores // count, host.mem_gib / count
    # A build capped at max_jobs needs no more than that to be worth running beside another.
    need = max(1, min(host.min_jobs, host.max_jobs) if host.max_jobs > 0 else host.min_jobs)
    if cores < need or any(int(mem_gib // _mem_per_job(item)) < need for item in items):
        return None
    return {item["name"]: derive_jobs(cores, mem_gib, _mem_per_job(item), host.max_jobs) for item in items}


def levels(items: Sequence[Mapping[str, Any]], missing: Sequence[str]) -> dict[str, int]:
    """Each missing item's wave, counting only what is still to build: as early as its dependencies
    allow, then as late as what depends on it allows (a build nothing waits for soon, sgl_kernel
    after torch, moves to the wave of flashinfer_jit_cache, which also waits for flashinfer, so the
    two long builds run together). `items` are in plan order (dependencies first)."""
    todo = set(missing)
    wave: dict[str, int] = {}
    for item in items:
        if item["name"] in todo:
            deps = [wave[dep] for dep in item.get("depends_on", []) if dep in wave]
            wave[item["name"]] = max(deps) + 1 if deps else 0
    for item in reversed(items):
        if item["name"] not in todo:
            continue
        dependents = [wave[other["name"]] for other in items if other["name"] in todo and item["name"] in other.get("depends_on", [])]
        if dependents:
            wave[item["name"]] = max(wave[item["name"]], min(dependents) - 1)
    return wave


def _why(group: list[Mapping[str, Any]], jobs: dict[str, int], host: Host, peers: Sequence[Mapping[str, Any]]) -> str:
    resources = f"{host.cores} cores, {host.mem_gib:.0f} GiB"
    if len(group) > 1:
        each = ", ".join(f"{item['name']} {jobs[item['name']]}" for item in group)
        return f"together (independent of each other; {resources}; jobs: {each})"
    item = group[0]
    name = item["name"]
    others = [peer for peer in peers if peer["name"] != name]
    if not others:
        return f"alone (nothing else to build is independent of it; {resources}; {jobs[name]} jobs)"
    if host.parallel <= 1:
        return f"alone (sglang_build_parallel is 1; {jobs[name]} jobs)"
    pair = Host(host.cores, host.mem_gib, host.jobs, host.max_jobs, 2, host.min_jobs)
    if any(share_jobs([item, other], pair) is not None for other in others):
        return f"alone (at most sglang_build_parallel={host.parallel} builds at once; {jobs[name]} jobs)"
    setting = f"sglang_build_jobs={host.jobs}" if host.jobs else f"sglang_build_parallel_min_jobs={host.min_jobs}"
    return f"alone ({resources} cannot give it and another build the jobs {setting} asks for each; {jobs[name]} jobs)"


def build_groups(items: Sequence[Mapping[str, Any]], missing: Sequence[str], host: Host) -> list[Group]:
    """The missing items of the plan as groups to build one after the other, the items of one group at once.

    A group holds items of one wave only (none depends on another still to build), in plan order,
    packed greedily while share_jobs() affords them together."""
    wave = levels(items, missing)
    groups: list[Group] = []
    for level in sorted(set(wave.values())):
        members = [item for item in items if wave.get(item["name"]) == level]
        current: list[Mapping[str, Any]] = []
        packed: list[list[Mapping[str, Any]]] = []
        for item in members:
            if current and share_jobs([*current, item], host) is not None:
                current.append(item)
                continue
            if current:
                packed.append(current)
            current = [item]
        if current:
            packed.append(current)
        for group in packed:
            jobs = share_jobs(group, host) or {}
            groups.append(Group([item["name"] for item in group], jobs, _why(group, jobs, host, members)))
    return groups


def build_plan_lines(
    items: Sequence[Mapping[str, Any]], missing: Sequence[str], estimates: Mapping[str, Sequence[float]]
) -> tuple[list[str], list[float]]:
    """What the deploy fetches or builds, one line per missing artifact (where it comes from, and for a
    source build its estimated hours, ``estimates``: name -> [low, high], not measured), and the sum of the
    source builds' estimates [low, high] (a prebuilt wheel counts nothing, its source fallback is named; a controller
    wheelhouse with no matching wheel is no prebuilt wheel: its source build and hours count)."""
    lines: list[str] = []
    low = high = 0.0
    names = set(missing)
    for item in items:
        if item["name"] not in names:
            continue
        spec = item["spec"]
        guess = estimates.get(item["name"])
        hours = f"{float(guess[0]):g}-{float(guess[1]):g} h (estimate)" if guess else "hours not estimated"
        source = f"source build ({item.get('kind', '?')}), {hours}"
        prebuilt = spec.get("prebuilt")
        # a prebuilt wheel from a controller wheelhouse counts only when a wheel is there (the plan's prebuilt_files);
        # else the source build behind it runs, and its hours count
        shelf_empty = isinstance(prebuilt, Mapping) and "wheelhouse" in prebuilt and not item.get("prebuilt_files")
        if isinstance(prebuilt, Mapping) and not shelf_empty:
            origin = prebuilt.get("origin") or next((f"{k} {prebuilt[k]}" for k in ("wheel", "url", "wheelhouse") if k in prebuilt), "?")
            lines.append(f"{item['name']}: prebuilt wheel ({origin}); if it fails verification: {source}")
        elif shelf_empty and item.get("kind") in ("git", "sdist", "path"):
            where = f"{prebuilt['wheelhouse']}/{prebuilt.get('pattern', '*.whl')}"
            lines.append(f"{item['name']}: no prebuilt wheel matches {where} on the controller, so {source}")
            if guess:
                low, high = low + float(guess[0]), high + float(guess[1])
        elif item.get("kind") in ("git", "sdist", "path"):
            lines.append(f"{item['name']}: {source}")
            if guess:
                low, high = low + float(guess[0]), high + float(guess[1])
        elif item.get("lock"):
            locked = PurePath(str(item["lock"].get("file", "?"))).name
            lines.append(
                f"{item['name']}: fetched ({item.get('kind', '?')} source, its closure held to the lock {locked}), verified as a build"
            )
        elif spec.get("source", {}).get("with_deps"):
            lines.append(
                f"{item['name']}: fetched ({item.get('kind', '?')} source, its closure NOT locked: no lock file), verified as a build"
            )
        else:
            lines.append(f"{item['name']}: fetched ({item.get('kind', '?')} source), verified as a build")
    return lines, [low, high]
