"""The fabric check as the deploy runs it (plugins/module_utils/sglang_sm120/host/fabric_check.py): the plan's GPU
count, thresholds with their source, the host facts that explain a hang, the record reused while its key holds,
candidates and the one kept, the refusal. The runner is faked where the figures must be chosen; one test runs the
real worker (written out of the module, as on a host) with gloo in the real SGLang 0.5.9 runtime environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import DATA
from sglang_sm120.host import fabric, fabric_check

PLAN = ["--model-path", "/data/Kimi-K2.5-NVFP4", "--tp-size", "8"]
LIMITS = [{"gpus": 8, "min_busbw_gbs": 30, "max_small_latency_us": 40, "source": "rtx6kpro nccl-tuning.md"}]
GOOD_FACTS = {"gpus": [{"index": i} for i in range(8)], "uvm_disable_hmm": True, "iommu_mode": "off", "pcie_aspm_policy": "performance"}


@pytest.mark.parametrize(
    ("argv", "gpus"),
    [
        (PLAN, 8),
        (["--tp", "4", "--pp-size", "2"], 8),
        (["--tp-size=2", "--dp-size", "2"], 4),
        (["--tp-size", "4", "--dp-size", "4", "--enable-dp-attention"], 4),
        (["--model-path", "m"], 1),
        (["--tp-size", "2", "--tp-size", "8"], 8),  # argparse keeps the last
    ],
)
def test_plan_gpus_multiplies_what_sglang_multiplies(argv: list[str], gpus: int) -> None:
    assert fabric_check.plan_gpus(argv) == gpus


def test_plan_gpus_refuses_what_is_not_a_count() -> None:
    with pytest.raises(fabric_check.FabricCheckError, match="--tp-size must be a whole number, found 'eight'"):
        fabric_check.plan_gpus(["--tp-size", "eight"])
    with pytest.raises(fabric_check.FabricCheckError, match="--pp-size must be at least 1, found 0"):
        fabric_check.plan_gpus(["--pp-size", "0"])


def test_thresholds_apply_per_gpu_count_and_name_their_source() -> None:
    assert fabric_check.thresholds_for(LIMITS, 8) == LIMITS[0]
    assert fabric_check.thresholds_for(LIMITS, 2) is None
    with pytest.raises(fabric_check.FabricCheckError, match="every entry names its source"):
        fabric_check.thresholds_for([{"gpus": 8, "min_busbw_gbs": 30}], 8)


def test_explain_names_the_facts_that_hang_nccl_with_the_fix() -> None:
    bad = {"uvm_disable_hmm": False, "iommu_mode": "translated", "pcie_aspm_policy": "powersave", "acs_redirect": True}
    reasons = fabric_check.explain(bad)
    assert len(reasons) == 4
    assert "host_tuning_uvm_disable_hmm" in reasons[0] and "host_tuning_iommu: off" in reasons[1]
    assert "powersave" in reasons[3] and "host_tuning_pcie_aspm_off" in reasons[3]
    assert fabric_check.explain(GOOD_FACTS) == []


def test_snapshot_says_unknown_with_preflights_reason() -> None:
    shown = fabric_check.snapshot({"uvm_disable_hmm": None, "facts_unknown": {"uvm_disable_hmm": "nvidia_uvm is not loaded"}})
    assert shown["uvm_disable_hmm"] == "unknown: nvidia_uvm is not loaded"
    assert shown["iommu_mode"] == "unknown: not in the host facts" and shown["gpus"] == 0


class FakeRunner:
    """Stands for fabric.run_check: returns the figures a test chooses (per NCCL_P2P_LEVEL), counts its calls."""

    def __init__(self, busbw: dict[str, float], status: str = "ok", errors: dict[str, str] | None = None) -> None:
        self.busbw, self.status, self.errors, self.calls = busbw, status, errors or {}, []

    def __call__(self, python: str, gpus: int, timeout: float, env: dict[str, str], *args: Any) -> fabric.FabricResult:
        self.calls.append(dict(env))
        level = env.get("NCCL_P2P_LEVEL", "default")
        if self.status != "ok":
            return fabric.FabricResult(
                self.status,
                gpus,
                "nccl",
                timeout,
                missing=[7] if self.status == "timeout" else [],
                errors=self.errors,
                message=f"all-reduce across {gpus} GPUs {self.status}",
            )
        bw = self.busbw[level]
        return fabric.FabricResult(
            "ok",
            gpus,
            "nccl",
            2.0,
            fabric.nccl_env(env),
            small_latency_us=1000 / bw,
            large_busbw_gbs=bw,
            answered=list(range(gpus)),
            message=f"{bw} GB/s",
        )


def request(tmp_path: Path, facts: dict[str, Any] | None = None, **kw: Any) -> fabric_check.CheckRequest:
    facts_file = tmp_path / "host-facts.json"
    facts_file.write_text(json.dumps(GOOD_FACTS if facts is None else facts))
    base = dict(
        python="/venv/bin/python",
        argv=PLAN,
        env={"NCCL_P2P_LEVEL": "SYS", "CUDA_HOME": "/usr/local/cuda"},
        record=str(tmp_path / "fabric.json"),
        env_file=str(tmp_path / "fabric.env"),
        host_facts=str(facts_file),
        thresholds=LIMITS,
        boot_id="boot-1",
    )
    return fabric_check.CheckRequest(**{**base, **kw})


def test_a_good_fabric_is_recorded_and_reused_until_the_boot_changes(tmp_path: Path) -> None:
    runner = FakeRunner({"SYS": 39.5})
    record = fabric_check.run(request(tmp_path), runner=runner)
    assert record["status"] == "ok" and record["ran"] and record["shortfalls"] == [] and record["world_size"] == 8
    assert record["env"] == {"NCCL_P2P_LEVEL": "SYS"} and record["host"]["iommu_mode"] == "off"
    assert json.loads((tmp_path / "fabric.json").read_text())["key"] == record["key"]
    assert (tmp_path / "fabric_worker.py").read_text() == Path(fabric.__file__).read_text()
    again = fabric_check.run(request(tmp_path), runner=runner)
    assert again["reused"] and not again["ran"] and len(runner.calls) == 1
    rebooted = fabric_check.run(request(tmp_path, boot_id="boot-2"), runner=runner)
    assert rebooted["ran"] and len(runner.calls) == 2


def test_an_untuned_fabric_is_short_with_the_source(tmp_path: Path) -> None:
    record = fabric_check.run(request(tmp_path), runner=FakeRunner({"SYS": 22.2}))
    assert record["status"] == "short"
    assert record["shortfalls"][0] == "bus bandwidth 22.2 GB/s is below 30 GB/s (rtx6kpro nccl-tuning.md)"


def test_a_hang_refuses_naming_the_facts_that_explain_it_and_keeps_the_record(tmp_path: Path) -> None:
    facts = {**GOOD_FACTS, "uvm_disable_hmm": False, "iommu_mode": "translated"}
    with pytest.raises(fabric_check.FabricCheckError) as refused:
        fabric_check.run(request(tmp_path, facts), runner=FakeRunner({}, status="timeout"))
    text = str(refused.value)
    assert "refused the deploy before the canary" in text and "HMM on" in text and "translates DMA" in text
    assert refused.value.result["fabric"]["status"] == "timeout"
    assert json.loads((tmp_path / "fabric.json").read_text())["explained_by"] == refused.value.result["fabric"]["explained_by"]


def test_a_hang_under_policy_warn_is_recorded_and_run_again_next_time(tmp_path: Path) -> None:
    runner = FakeRunner({}, status="timeout")
    record = fabric_check.run(request(tmp_path, policy="warn"), runner=runner)
    assert record["status"] == "timeout" and record["explained_by"] == []
    fabric_check.run(request(tmp_path, policy="warn"), runner=runner)
    assert len(runner.calls) == 2  # a failed outcome is never reused


def test_out_of_memory_beside_a_serving_release_is_not_measured(tmp_path: Path) -> None:
    runner = FakeRunner({}, status="failed", errors={"0": "torch.OutOfMemoryError: CUDA out of memory"})
    record = fabric_check.run(request(tmp_path, serving=True), runner=runner)
    assert record["status"] == "unchecked" and "holds the GPUs' memory" in record["message"]
    with pytest.raises(fabric_check.FabricCheckError):
        fabric_check.run(request(tmp_path, serving=False), runner=runner)


def test_tuning_keeps_the_fastest_candidate_in_the_env_file_and_removes_it_when_off(tmp_path: Path) -> None:
    candidates = [{"name": "phb", "env": {"NCCL_P2P_LEVEL": "PHB"}}, {"name": "ll", "env": {"NCCL_P2P_LEVEL": "LL"}}]
    runner = FakeRunner({"SYS": 25.0, "PHB": 38.0, "LL": 31.0})
    record = fabric_check.run(request(tmp_path, tune=True, candidates=candidates), runner=runner)
    assert [c["name"] for c in record["candidates"]] == ["phb", "ll"] and record["chosen"]["name"] == "phb"
    assert record["status"] == "ok" and record["shortfalls"] == []  # judged on the environment kept
    assert 'NCCL_P2P_LEVEL="PHB"' in (tmp_path / "fabric.env").read_text()
    slower = FakeRunner({"SYS": 40.0, "PHB": 38.0, "LL": 31.0})
    record = fabric_check.run(request(tmp_path, tune=True, candidates=candidates, boot_id="b2"), runner=slower)
    assert record["chosen"] == {} and "NCCL_P2P_LEVEL" not in (tmp_path / "fabric.env").read_text()
    fabric_check.run(request(tmp_path, boot_id="b3"), runner=slower)
    assert not (tmp_path / "fabric.env").exists()


def test_nothing_runs_without_gpus_in_check_mode_or_off(tmp_path: Path) -> None:
    runner = FakeRunner({"SYS": 40.0})
    assert fabric_check.run(request(tmp_path, {"gpus": []}), runner=runner)["status"] == "unchecked"
    assert fabric_check.run(request(tmp_path, policy="off"), runner=runner)["status"] == "unchecked"
    assert fabric_check.run(request(tmp_path), check_mode=True, runner=runner)["status"] == "would-check"
    assert runner.calls == [] and not (tmp_path / "fabric.json").exists()


def test_the_real_worker_written_out_runs_gloo_ranks(tmp_path: Path, sglang_runtime_python: Path) -> None:
    req = request(
        tmp_path,
        python=str(sglang_runtime_python),
        backend="gloo",
        ranks=2,
        sizes=[32768, 1048576],
        iters=2,
        warmup=1,
        timeout=120,
        facts={},
    )
    record = fabric_check.run(req)
    assert record["status"] == "ok", record
    assert record["world_size"] == 2 and record["planned_gpus"] == 8 and record["answered"] == [0, 1]
    assert record["large_busbw_gbs"] > 0 and record["small_latency_us"] > 0
    assert record["host_facts_missing"] == "" and record["host"]["gpus"] == 0


def test_a_plan_on_more_gpus_than_the_host_lists_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    runner = FakeRunner({"SYS": 40.0})
    four = {**GOOD_FACTS, "gpus": [{"index": i} for i in range(4)]}
    with pytest.raises(fabric_check.FabricCheckError, match=r"the plan uses 8 GPUs .* but the host facts list 4: not started"):
        fabric_check.run(request(tmp_path, four), runner=runner)
    assert runner.calls == [] and json.loads((tmp_path / "fabric.json").read_text())["status"] == "failed"
    assert fabric_check.run(request(tmp_path, four, policy="warn"), runner=runner)["status"] == "failed"


CAPTURE = DATA / "real-gpu" / "fabric-check-h100"


def test_the_h100_captures_show_the_record_the_refusals_and_the_bound() -> None:
    summary = json.loads((CAPTURE / "summary.json").read_text())
    plan = json.loads((CAPTURE / "plan" / "fabric.json").read_text())
    assert plan["status"] == "ok" and plan["backend"] == "nccl" and plan["world_size"] == 1 and plan["env"] == {"NCCL_DEBUG": "WARN"}
    assert plan["host"]["uvm_disable_hmm"] is False and plan["host"]["iommu_mode"] == "off" and plan["host"]["gpus"] == 1
    assert summary["again"]["record"]["reused"] and summary["again"]["record"]["key"] == plan["key"]
    too_many = json.loads((CAPTURE / "too-many" / "fabric.json").read_text())
    assert too_many["status"] == "failed" and "the host facts list 1: not started" in too_many["message"] and "seconds" not in too_many
    bound = json.loads((CAPTURE / "bound" / "fabric.json").read_text())
    assert bound["status"] == "timeout" and bound["missing"] == [0, 1] and summary["bound"]["refused"]
    assert 90 <= bound["seconds"] < 105 and "killed at the bound" in bound["message"]
    assert "left after the bound: 0 processes" in (CAPTURE / "stderr.txt").read_text()
    # the facts the H100 machine really has explain a hang where facts were given (HMM on, ASPM default)
    facts, _ = fabric_check.read_host_facts(str(CAPTURE / "host-facts.json"))
    assert [r.split(" (")[0] for r in fabric_check.explain(facts)] == [
        "nvidia_uvm runs with HMM on",
        "PCIe ASPM policy default: set host_tuning_pcie_aspm_off",
    ]
