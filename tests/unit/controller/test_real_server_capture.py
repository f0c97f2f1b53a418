"""The toolkit's readers on what a REAL SGLang 0.5.13 server printed and answered on an H200 while the
toolkit's own code drove it (tests/data/real-server/0.5.13-h200-toolkit/, made by
scripts/real_server_proof.py; its README says how). If one of these readers stops understanding the
real server, this fails here instead of in a report."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from conftest import BIN
from sglang_sm120.serve import evidence as server_evidence
from sglang_sm120.serve import report as bench_report

ROOT = Path(__file__).resolve().parents[3]
CAPTURE = ROOT / "tests/data/real-server/0.5.13-h200-toolkit"
SUMMARY = json.loads((CAPTURE / "summary.json").read_text())


def test_the_real_start_went_port_closed_then_503_then_healthy() -> None:
    rows = [line.split("\t") for line in (CAPTURE / "health.tsv").read_text().splitlines()[1:]]
    phases = [phase for _, _, phase, _ in rows]
    # Each phase the gate names, in the order a real start shows them, each one a block.
    order = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert order == ["port closed", "503", "healthy"]
    healthy_at = float(rows[-1][0])
    assert healthy_at == SUMMARY["start"]["healthy"] and 120 < healthy_at < 300
    assert all(status == "000" for _, status, phase, _ in rows if phase == "port closed")


def test_the_real_server_enforced_the_key_given_through_config() -> None:
    seen = {(e["path"], e["with_key"]): e["status"] for e in SUMMARY["endpoints"]}
    assert seen[("/v1/models", False)] == 401 and seen[("/server_info", False)] == 401
    assert seen[("/v1/models", True)] == 200 and seen[("/server_info", True)] == 200
    assert seen[("/health", False)] == 200 and seen[("/metrics", False)] == 200  # SGLang keeps them open
    echoed = {e["path"]: e["key_echoed"] for e in SUMMARY["endpoints"] if e["with_key"]}
    assert echoed["/server_info"] == 2 and echoed["/get_server_info"] == 2  # why the toolkit redacts
    assert "--config" in SUMMARY["argv"] and "--api-key" not in SUMMARY["argv"]


def test_the_key_redactor_kept_the_key_out_of_the_real_log() -> None:
    log = (CAPTURE / "server.log").read_text()
    assert SUMMARY["log"] == {"lines": log.count("\n"), "key_in_log": 0, "redacted_in_log": 3}
    assert re.search(r"server_args=ServerArgs\(.*api_key='<redacted>'", log)
    assert len(re.findall(r"Global server args updated! .*api_key='<redacted>'", log)) == 2
    assert SUMMARY["key_anywhere_kept"] == 0
    info = json.loads((CAPTURE / "server-info.json").read_text())
    assert info["api_key"] == "<redacted>" and info["internal_states"][0]["api_key"] == "<redacted>"
    assert SUMMARY["exit_after_sigterm"] == -15  # the launcher ends a stop as a clean SIGTERM


def test_the_judge_reads_the_real_log_and_server_info() -> None:
    lines = server_evidence.read_journal(str(CAPTURE / "server.log"))
    info = json.loads((CAPTURE / "server-info.json").read_text())
    argv = [a for a in SUMMARY["argv"] if a != "<keys file>" and a != "--config"]
    verdicts = {o["name"]: o for o in server_evidence.judge(argv, server_evidence.select_lines(lines), info, "0.5.13")}
    assert verdicts["cuda graphs"]["verdict"] == "yes"
    assert any("Capture cuda graph end" in e for e in verdicts["cuda graphs"]["evidence"])
    assert verdicts["speculative decoding"]["verdict"] == "yes"
    cli = subprocess.run(
        [str(BIN / "sglang-evidence"), "--journal", str(CAPTURE / "server.log"), "--server-info",
         str(CAPTURE / "server-info.json"), "--sglang-version", "0.5.13", "--json", "--", *argv],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert {o["name"]: o["verdict"] for o in json.loads(cli.stdout)["optimisations"]} == {
        o["name"]: o["verdict"] for o in json.loads((CAPTURE / "verdicts.json").read_text())["optimisations"]
    }


def test_both_accept_lengths_of_the_real_runs_are_read_back() -> None:
    client = bench_report.summarize(json.loads((CAPTURE / "client-c1.json").read_text()))
    assert client["ok"] and client["completed"] == 8
    requests = json.loads((CAPTURE / "client-c1.json").read_text())["requests"]
    ratio = sum(r["completion_tokens"] for r in requests) / sum(r["spec_verify_ct"] for r in requests)
    assert client["accept_length"] == round(ratio, 3) and 1.0 <= ratio < 1.05  # random weights: nothing accepted
    served = bench_report.summarize(bench_report.load_run(CAPTURE / "bench.jsonl", "eagle3", 64))
    assert served["ok"] and served["completed"] == 16 and served["accept_length"] == 1.0
    assert served["accept_source"].startswith("server counters, reset before the run")
    assert "<redacted>" in (CAPTURE / "bench.jsonl").read_text()


def test_the_canary_saw_a_setting_sglang_accepts_fail_after_the_load() -> None:
    canary = json.loads((CAPTURE / "canary-mem099/summary.json").read_text())
    assert canary["start"]["healthy"] is None and canary["start"]["port_open"] is None and canary["start"]["exit"] == 137
    assert canary["total_seconds"] < 120
    log = (CAPTURE / "canary-mem099/server.log").read_text()
    assert log.index("Load weight end.") < log.index("torch.OutOfMemoryError: CUDA out of memory")


# ------------------------------------------------------------------ the start canary's own code on the real server
# tests/data/real-server/0.5.13-h200-canary/, made by scripts/real_canary_proof.py (its README says how).

CANARY = ROOT / "tests/data/real-server/0.5.13-h200-canary"
CANARY_SUMMARY = json.loads((CANARY / "summary.json").read_text())


def _canary_lines(run: str) -> list[str]:
    return (CANARY / run / "canary.log").read_text(encoding="utf-8", errors="replace").splitlines()


def test_the_canary_caught_a_backend_without_kernels_after_the_load_in_a_minute() -> None:
    from sglang_sm120.serve import canary

    result = json.loads((CANARY / "fails" / "result.json").read_text())
    assert not result["ok"] and result["phase"] == "exited" and result["healthy_at"] is None and result["port_open_at"] is None
    assert result["seconds"] < 120  # the real model's load alone is ~10 minutes
    lines = _canary_lines("fails")
    # SGLang accepted --attention-backend fa3 (capability 9.0), loaded the weights, built the KV pool,
    # and only then failed to create the backend: a failure no check of the flags sees.
    loaded = next(i for i, line in enumerate(lines) if "Load weight end." in line)
    failed = next(i for i, line in enumerate(lines) if "Can not import FA3 in sgl_kernel" in line and "ImportError" in line)
    assert loaded < failed
    assert canary.error_line([line for line in lines if line.strip()][-25:]) == (
        "ImportError: Can not import FA3 in sgl_kernel. Please check your installation."
    )
    assert lines[-1].endswith("kill_process_tree called: parent_pid=516, include_parent=True, pid=516")  # not the cause
    backends = canary.canary_evidence(lines, result["command"][3:], None, "0.5.13")["backends"]
    assert backends["source"] == "server log (server_args)" and backends["values"]["attention_backend"] == "fa3"


def test_the_canary_served_beside_a_process_holding_the_gpu_and_showed_its_backends() -> None:
    from sglang_sm120.serve import canary

    result = json.loads((CANARY / "serves" / "result.json").read_text())
    assert result["ok"] and result["phase"] == "served" and [p for p, _ in result["phases"]] == ["port closed", "503", "healthy"]
    assert 120 < result["healthy_at"] < 300 and result["requests"]["concurrent_ok"] == result["requests"]["concurrent_total"] == 4
    lines = _canary_lines("serves")
    evidence = canary.canary_evidence(lines, result["command"][3:], result["server_info"], "0.5.13")
    assert evidence["backends"]["source"] == "/server_info"
    values = evidence["backends"]["values"]
    # The tiny Kimi's fp8 KV hint (the real checkpoint's kv_cache_quant_algo) reached the server.
    assert (
        values["kv_cache_dtype"] == "fp8_e4m3" and values["attention_backend"] == "triton" and values["speculative_algorithm"] == "EAGLE3"
    )
    verdicts = {o["name"]: o["verdict"] for o in evidence["optimisations"]}
    assert verdicts == {"cuda graphs": "yes", "speculative decoding": "yes"}
    assert result["evidence"] == evidence  # what the run recorded is what the judge reads again
    assert 0.9 < result["requests"]["accept_length"] < 1.2  # random weights: meaningless, never gated on


def _gib(lines: list[str], pattern: str) -> float:
    return float(next(m.group(1) for line in lines if (m := re.search(pattern, line))))


def test_sglang_sized_the_canary_from_the_memory_free_at_its_start_as_placement_assumes() -> None:
    from sglang_sm120.serve import canary

    held = canary.parse_gpu_memory(CANARY_SUMMARY["holder"]["nvidia_smi"])
    placement = canary.place("auto", held, [0], 0.1, 16384)
    assert placement.mode == "beside" and placement.to_dict() == CANARY_SUMMARY["placement"]
    assert canary.place("auto", held, [0], 0.1, 32768).mode == "switch-window"
    for run, free_mib in (("fails", canary.parse_gpu_memory(CANARY_SUMMARY["nvidia_smi_idle"])[0].free_mib), ("serves", held[0].free_mib)):
        lines = _canary_lines(run)
        before = _gib(lines, r"Load weight begin\. avail mem=([\d.]+) GB")
        after = _gib(lines, r"Load weight end\..*avail mem=([\d.]+) GB")
        kv = _gib(lines, r"KV Cache is allocated\..*KV size: ([\d.]+) GB")
        assert abs(before - free_mib / 1024) < 2.5  # what nvidia-smi called free is what SGLang started from
        # SGLang's rule: KV pool ~ free after the load - (1 - 0.1) x free before it, not a share of the whole GPU.
        assert abs(kv - (after - 0.9 * before)) < 0.5, (run, before, after, kv)
    assert _gib(_canary_lines("serves"), r"KV size: ([\d.]+) GB") < 0.2 * _gib(_canary_lines("fails"), r"KV size: ([\d.]+) GB")


def test_no_key_in_the_canary_captures() -> None:
    for path in CANARY.rglob("*"):
        if path.is_file():
            assert not re.search(r"proof-[0-9a-f]{24}", path.read_text(errors="replace")), path


# --- 0.5.13-h200-nvfp4-canary/: the canary's NVFP4 tiny target on the real H200 -----------------------

NVFP4 = ROOT / "tests/data/real-server/0.5.13-h200-nvfp4-canary"


def test_the_real_sglang_loaded_the_tiny_nvfp4_target_through_its_nvfp4_path() -> None:
    """The generated ModelOpt NVFP4 checkpoint (plugins/module_utils/sglang_sm120/serve/tiny_models.py) is what a
    real SGLang 0.5.13 takes for an NVFP4 export: its ModelOpt loader, quant modelopt_fp4 / NVFP4, and the
    FP8 KV cache the checkpoint's kv_cache_scheme asks for under --kv-cache-dtype auto."""
    log = (NVFP4 / "serves-canary.log").read_text()
    assert "Using ModelOptModelLoader due to ModelOpt quantization config." in log
    assert "Detected nvfp4 checkpoint." in log
    assert re.search(r"Load weight end\. .*type=DeepseekV3ForCausalLM, quant=modelopt_fp4, quant_algo=NVFP4", log)
    assert "KV Cache is allocated. dtype: torch.float8_e4m3fn" in log
    summary = json.loads((NVFP4 / "summary.json").read_text())
    generated = [d for d in summary["models"]["differences"] if d.startswith("quantization: generated as the real model's NVFP4")]
    assert len(generated) == 1, summary["models"]["differences"]
    assert "kv_cache_dtype" not in summary["models"]["launch_hints"]


def test_the_nvfp4_canary_on_hopper_spent_its_budget_compiling_marlin() -> None:
    """On SM90 SGLang 0.5.13 runs NVFP4 through Marlin, whose kernels it JIT-compiles (tvm-ffi cache) on
    the first start: the canary's 520 s went on nvcc (cicc, ptxas for sm_90) while the log stood at the
    CUDA-graph capture, and the canary stopped the server at its budget with the port never open."""
    result = json.loads((NVFP4 / "serves-result.json").read_text())
    assert (result["ok"], result["phase"], result["stopped"], result["port_open_at"]) == (False, "port closed", "SIGTERM", None)
    assert result["seconds"] >= 500
    log = (NVFP4 / "serves-canary.log").read_text().splitlines()
    assert [line for line in log if "Capture cuda graph end" in line] == []
    samples = (NVFP4 / "ps-samples.txt").read_text()
    assert "sgl_kernel_jit_gptq_marlin_repack" in samples
    compiling = [line for line in samples.splitlines() if re.search(r"nvvm/bin/cicc .*tvm-ffi/sgl_kern|ptxas -arch sm_90", line)]
    assert len(compiling) >= 10, compiling  # sampled every 20 s: minutes of compiling


def test_no_key_in_the_nvfp4_canary_captures() -> None:
    for path in NVFP4.rglob("*"):
        if path.is_file():
            assert not re.search(r"proof-[0-9a-f]{24}", path.read_text(errors="replace")), path
