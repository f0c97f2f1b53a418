"""Independent builds in parallel (plugins/module_utils/sglang_sm120/build/parallel.py): which builds of the
production plan start together, with how many compile jobs each, on hosts of several sizes; and two
real detached builds of one group that run at the same time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT
from sglang_sm120.build.parallel import Host, build_groups, levels, share_jobs
from sglang_sm120.build.pipeline import Workspace, derive_jobs, plan, start, wait

CONTEXT = {"cuda_version": "13.0.1", "nvcc_build": "V13.0.88", "cuda_home": "/usr/local/cuda-13.0", "arch": "12.0"}


def spec(name: str, depends_on: tuple[str, ...] = (), mem: float = 4, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"git": f"https://example.invalid/{name}", "ref": "v1"},
        "depends_on": list(depends_on),
        "build": "true",
        "build_requires": [],
        "mem_per_job_gib": mem,
        "verify": {"device_code": "none"},
        **extra,
    }


def production_shape() -> list[dict[str, Any]]:
    """The production specs' names, dependencies and memory per job (roles/toolkit_defaults/defaults/main/build.yml)."""
    text = (ROOT / "roles/toolkit_defaults/defaults/main/build.yml").read_text()
    specs = {}
    for entry in yaml.safe_load(text)["sglang_build_core_specs"]:
        deps = entry.get("depends_on", [])
        specs[entry["name"]] = spec(entry["name"], tuple(deps if isinstance(deps, list) else []), entry.get("mem_per_job_gib", 4))
    companions = [name for name in specs if name not in ("torch", "flashinfer", "flashinfer_jit_cache", "sgl_kernel")]
    specs["sglang"] = spec("sglang", ("torch", "flashinfer", "flashinfer_jit_cache", "sgl_kernel", *companions))
    return list(specs.values())


def items(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p.to_dict() for p in plan(specs, CONTEXT)]


def names(groups: Any) -> list[list[str]]:
    return [group.names for group in groups]


# ---------------------------------------------------------------- the jobs one group gets


def test_two_builds_split_a_big_host_and_one_build_keeps_it_whole() -> None:
    host = Host(cores=64, mem_gib=512, parallel=2)
    a, b = items([spec("a", mem=6), spec("b", mem=6)])
    assert share_jobs([a], host) == {"a": derive_jobs(64, 512, 6)} == {"a": 64}
    assert share_jobs([a, b], host) == {"a": 32, "b": 32}


def test_memory_bounds_the_shares() -> None:
    a, b = items([spec("a", mem=8), spec("b", mem=8)])
    assert share_jobs([a, b], Host(cores=64, mem_gib=128, parallel=2)) == {"a": 8, "b": 8}  # 64 GiB each / 8 GiB a job
    assert share_jobs([a, b], Host(cores=64, mem_gib=48, parallel=2)) is None  # 24 GiB each: 3 jobs, under min_jobs 4


def test_a_small_host_builds_one_at_a_time() -> None:
    a, b = items([spec("a"), spec("b")])
    assert share_jobs([a, b], Host(cores=6, mem_gib=64, parallel=2)) is None  # 3 cores each, under 4
    assert share_jobs([a, b], Host(cores=6, mem_gib=64, parallel=2, min_jobs=3)) == {"a": 3, "b": 3}


def test_a_set_jobs_value_must_fit_every_build_of_the_group() -> None:
    a, b = items([spec("a", mem=6), spec("b", mem=6)])
    assert share_jobs([a, b], Host(cores=64, mem_gib=512, jobs=32, parallel=2)) == {"a": 32, "b": 32}
    assert share_jobs([a, b], Host(cores=48, mem_gib=512, jobs=32, parallel=2)) is None  # 64 jobs on 48 cores
    assert share_jobs([a, b], Host(cores=64, mem_gib=300, jobs=32, parallel=2)) is None  # 2 x 32 x 6 GiB = 384 GiB


def test_max_jobs_caps_each_share_and_lowers_the_need() -> None:
    a, b = items([spec("a"), spec("b")])
    assert share_jobs([a, b], Host(cores=64, mem_gib=512, max_jobs=8, parallel=2)) == {"a": 8, "b": 8}
    assert share_jobs([a, b], Host(cores=6, mem_gib=64, max_jobs=2, parallel=2)) == {"a": 2, "b": 2}  # they only ever get 2


def test_parallel_caps_the_group() -> None:
    a, b, c = items([spec("a"), spec("b"), spec("c")])
    assert share_jobs([a, b, c], Host(cores=96, mem_gib=1024, parallel=2)) is None
    assert share_jobs([a, b, c], Host(cores=96, mem_gib=1024, parallel=3)) == {"a": 32, "b": 32, "c": 32}


# ---------------------------------------------------------------- the groups of the production plan


def test_production_plan_builds_flashinfer_jit_cache_and_sgl_kernel_together() -> None:
    plan_items = items(production_shape())
    every = [item["name"] for item in plan_items]
    groups = build_groups(plan_items, every, Host(cores=64, mem_gib=512, parallel=2))
    together = [group for group in groups if len(group.names) > 1]
    assert ["flashinfer_jit_cache", "sgl_kernel"] in [sorted(group.names) for group in together], names(groups)
    pair = next(group for group in groups if sorted(group.names) == ["flashinfer_jit_cache", "sgl_kernel"])
    assert pair.jobs == {"flashinfer_jit_cache": 32, "sgl_kernel": 32}
    assert pair.why.startswith("together (independent of each other; 64 cores, 512 GiB; jobs:")
    # every item once, each after everything it depends on
    order = [name for group in groups for name in group.names]
    assert sorted(order) == sorted(every)
    position = {name: i for i, group in enumerate(groups) for name in group.names}
    for item in plan_items:
        assert all(position[dep] < position[item["name"]] for dep in item["depends_on"]), (item["name"], names(groups))
    assert names(groups)[0] == ["torch"] and names(groups)[-1] == ["sglang"]


def test_production_plan_on_a_small_host_is_one_build_at_a_time_and_says_why() -> None:
    plan_items = items(production_shape())
    groups = build_groups(plan_items, [item["name"] for item in plan_items], Host(cores=8, mem_gib=32, parallel=2))
    assert all(len(group.names) == 1 for group in groups)
    kernel = next(group for group in groups if group.names == ["sgl_kernel"])
    assert kernel.why == (
        "alone (8 cores, 32 GiB cannot give it and another build the jobs sglang_build_parallel_min_jobs=4 asks for each; 5 jobs)"
    )
    assert kernel.jobs == {"sgl_kernel": derive_jobs(8, 32, 6)}


def test_parallel_one_keeps_the_old_order() -> None:
    plan_items = items(production_shape())
    every = [item["name"] for item in plan_items]
    groups = build_groups(plan_items, every, Host(cores=64, mem_gib=512, parallel=1))
    assert all(len(group.names) == 1 for group in groups)
    assert next(group for group in groups if group.names == ["sgl_kernel"]).why == "alone (sglang_build_parallel is 1; 64 jobs)"


def test_a_cached_dependency_does_not_hold_a_build_back() -> None:
    plan_items = items([spec("torch"), spec("kernel", ("torch",)), spec("jit", ("torch",))])
    assert levels(plan_items, ["kernel", "jit"]) == {"kernel": 0, "jit": 0}
    assert names(build_groups(plan_items, ["kernel", "jit"], Host(64, 512, parallel=2))) == [["kernel", "jit"]]
    assert names(build_groups(plan_items, ["kernel"], Host(64, 512, parallel=2))) == [["kernel"]]
    assert build_groups(plan_items, [], Host(64, 512, parallel=2)) == []


def test_a_build_that_waits_for_another_never_joins_it() -> None:
    plan_items = items([spec("base"), spec("dependent", ("base",)), spec("solo")])
    groups = build_groups(plan_items, ["base", "dependent", "solo"], Host(64, 512, parallel=3))
    assert names(groups) == [["base", "solo"], ["dependent"]]
    assert groups[1].why.startswith("alone (nothing else to build is independent of it")


def test_a_third_independent_build_waits_when_parallel_is_two() -> None:
    plan_items = items([spec("a"), spec("b"), spec("c")])
    groups = build_groups(plan_items, ["a", "b", "c"], Host(96, 1024, parallel=2))
    assert names(groups) == [["a", "b"], ["c"]]
    assert groups[1].why == "alone (at most sglang_build_parallel=2 builds at once; 96 jobs)"


# ---------------------------------------------------------------- two builds of a group really run at once


def test_the_builds_of_a_group_run_at_the_same_time(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()

    def timed(name: str) -> dict[str, Any]:
        build = (
            f'date +%s.%N > "{tmp_path}/{name}.began"; sleep 2; date +%s.%N > "{tmp_path}/{name}.ended"\n'
            'python3 -c \'import os, zipfile; zipfile.ZipFile(os.environ["WHEEL_DIR"] + "/' + name + '-1.0-py3-none-any.whl", "w")'
            '.writestr("x.py", "")\''
        )
        return {**spec(name, mem=1), "source": {"path": str(src)}, "build": build}

    plan_items = items([timed("left"), timed("right")])
    (group,) = build_groups(plan_items, ["left", "right"], Host(cores=2, mem_gib=8, parallel=2, min_jobs=1))
    assert group.names == ["left", "right"] and group.jobs == {"left": 1, "right": 1}
    began = time.monotonic()
    for item in plan_items:  # as group.yml does: start every build of the group, then wait for each
        assert (
            start(item, Workspace(str(tmp_path / "root"), "python3", str(tmp_path), group.jobs[item["name"]], staged=str(src)))["status"]
            == "started"
        )
    for item in plan_items:
        while not (result := wait(item, str(tmp_path / "root"), 1))["done"]:
            assert result["status"] == "running"
        assert result["status"] == "built"
    took = time.monotonic() - began
    spans = {name: [float((tmp_path / f"{name}.{edge}").read_text()) for edge in ("began", "ended")] for name in ("left", "right")}
    assert spans["left"][0] < spans["right"][1] and spans["right"][0] < spans["left"][1], json.dumps(spans)  # they overlapped
    assert took < 120  # every wait returned (that they ran side by side is the overlap above, not a clock)


@pytest.mark.parametrize("cores,mem,expected", [(2, 8, [["base", "solo"], ["dependent"]]), (1, 8, [["base"], ["solo"], ["dependent"]])])
def test_the_lab_fixture_plan_groups(cores: int, mem: float, expected: list[list[str]]) -> None:
    """molecule/build's three fixture artifacts with its sglang_build_parallel_min_jobs 1: base and solo together on 2 cores."""
    plan_items = items([spec("base", mem=1), spec("dependent", ("base",), mem=1), spec("solo", mem=1)])
    assert names(build_groups(plan_items, ["base", "dependent", "solo"], Host(cores, mem, parallel=2, min_jobs=1))) == expected
