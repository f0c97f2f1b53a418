"""The fabric check (plugins/module_utils/sglang_sm120/host/fabric.py): an all-reduce across the plan's ranks, bounded in
time. Here with torch's gloo backend on CPU, in the real SGLang 0.5.9 runtime environment (the same worker code, the
same orchestration as NCCL on the GPUs); the GPU captures are tests/data/real-gpu/fabric-h100/."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DATA
from sglang_sm120.host import fabric

SCRIPT = Path(fabric.__file__)
SMALL = (32 * 1024, 1024 * 1024)


def test_bus_bandwidth_follows_ncclS_convention() -> None:
    algbw, busbw = fabric.bus_bandwidth(1_000_000_000, 0.05, 8)
    assert algbw == pytest.approx(20.0) and busbw == pytest.approx(20.0 * 14 / 8)
    assert fabric.bus_bandwidth(1_000_000, 0.001, 1) == (pytest.approx(1.0), 0.0)
    with pytest.raises(fabric.FabricError, match="positive time"):
        fabric.bus_bandwidth(1, 0.0, 2)


def test_the_slowest_rank_decides_each_size() -> None:
    reports = {
        0: {"sizes": [{"bytes": 32768, "median_s": 20e-6}, {"bytes": 2**28, "median_s": 0.010}]},
        1: {"sizes": [{"bytes": 32768, "median_s": 30e-6}, {"bytes": 2**28, "median_s": 0.012}]},
    }
    sizes, small_us, large = fabric.combine(2, "nccl", reports)
    assert [s.bytes for s in sizes] == [32768, 2**28]
    assert small_us == 30.0 and sizes[1].median_s == 0.012
    assert large == pytest.approx(2**28 / 0.012 / 1e9, rel=1e-3)


def test_only_ncclS_environment_is_recorded() -> None:
    assert fabric.nccl_env({"NCCL_P2P_LEVEL": "SYS", "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_PROTO": "LL"}) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_PROTO": "LL",
    }


def test_judge_names_what_falls_short_with_its_source() -> None:
    ok = fabric.FabricResult("ok", 8, "nccl", 3.0, small_latency_us=48.0, large_busbw_gbs=22.2)
    limits = {"gpus": 8, "min_busbw_gbs": 30, "max_small_latency_us": 40, "source": "rtx6kpro optimization/nccl-tuning.md"}
    short = fabric.judge(ok, limits)
    assert short == [
        "bus bandwidth 22.2 GB/s is below 30 GB/s (rtx6kpro optimization/nccl-tuning.md)",
        "small all-reduce 48.0 us is above 40 us (rtx6kpro optimization/nccl-tuning.md)",
    ]
    tuned = fabric.FabricResult("ok", 8, "nccl", 3.0, small_latency_us=26.0, large_busbw_gbs=39.0)
    assert fabric.judge(tuned, limits) == []
    assert fabric.judge(fabric.FabricResult("ok", 2, "nccl", 1.0, small_latency_us=99.0, large_busbw_gbs=1.0), limits) == []


def test_two_ranks_all_reduce_and_report_each_size(sglang_runtime_python: Path) -> None:
    result = fabric.run_check(str(sglang_runtime_python), 2, 120, {"NCCL_DEBUG": "WARN"}, SMALL, iters=3, warmup=1, backend="gloo")
    assert result.status == "ok", result.as_dict()
    assert result.answered == [0, 1] and result.missing == [] and not result.errors
    assert [s.bytes for s in result.sizes] == list(SMALL)
    for size in result.sizes:
        assert size.busbw_gbs == pytest.approx(size.algbw_gbs, rel=1e-2)  # 2 (n - 1) / n = 1 for two ranks
    assert result.small_latency_us == pytest.approx(result.sizes[0].median_s * 1e6, abs=0.1)
    assert result.env == {"NCCL_DEBUG": "WARN"} and "gloo ranks" in result.message


def test_a_rank_that_never_joins_is_ended_by_the_bound_and_named(sglang_runtime_python: Path) -> None:
    started = time.monotonic()
    result = fabric.run_check(str(sglang_runtime_python), 2, 6, {}, SMALL, iters=2, warmup=1, backend="gloo", absent_ranks=[1])
    elapsed = time.monotonic() - started
    assert result.status == "timeout" and result.answered == [] and result.missing == [0, 1] and result.absent == [1]
    assert 6 <= elapsed < 20, elapsed
    assert "did not finish in 6 s" in result.message and "rank(s) 1 never started" in result.message
    # nothing of the check is left running
    left = subprocess.run(["pgrep", "-f", f"{SCRIPT} --worker"], capture_output=True, text=True)
    assert left.stdout.strip() == ""


def test_a_rank_that_fails_is_a_failure_with_its_error(tmp_path: Path) -> None:
    result = fabric.run_check(sys.executable, 1, 30, {}, SMALL, backend="gloo")  # the controller venv has no torch
    assert result.status == "failed" and result.errors and "No module named 'torch'" in result.errors["0"]
    assert result.message.startswith("all-reduce across 1 gloo ranks failed: rank 0:")


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(fabric.FabricError, match="at least one rank"):
        fabric.run_check(sys.executable, 0, 10)
    with pytest.raises(fabric.FabricError, match="positive timeout"):
        fabric.run_check(sys.executable, 1, 0)


CAPTURE = DATA / "real-gpu" / "fabric-h100"


@pytest.mark.skipif(not CAPTURE.is_dir(), reason="no GPU capture yet")
def test_the_gpu_captures_show_the_code_path_and_the_bound() -> None:
    one = json.loads((CAPTURE / "one-gpu.json").read_text())
    assert one["status"] == "ok" and one["backend"] == "nccl" and one["world_size"] == 1 and one["answered"] == [0]
    assert [s["bytes"] for s in one["sizes"]] == list(fabric.DEFAULT_SIZES)
    assert one["large_busbw_gbs"] is None and "no data moved" in one["message"]
    off = json.loads((CAPTURE / "one-gpu-p2p-disabled.json").read_text())
    assert off["status"] == "ok" and off["env"] == {"NCCL_P2P_DISABLE": "1"}
    hang = json.loads((CAPTURE / "absent-rank.json").read_text())
    assert hang["status"] == "timeout" and hang["absent"] == [1] and 1 in hang["missing"]
    bound = float(hang["message"].split("did not finish in ")[1].split(" s")[0])
    assert bound <= hang["seconds"] < bound + 15
    assert "none" in (CAPTURE / "absent-rank.stderr").read_text().split("left after the bound:")[1]
