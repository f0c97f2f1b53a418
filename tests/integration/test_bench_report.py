"""Benchmark figures, verdict and gate, report (plugins/module_utils/sglang_sm120/serve/report.py), the controller's
matplotlib chart (bench_chart.py), and the toolkit's client against the stand-in server on 127.0.0.1.

tests/data/bench/standin-*.json are runs recorded by the toolkit's client against the stand-in
server (TEST FIXTURE, no GPU): they pin the record format and real streamed timings, not a GPU result.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import DATA, ROOT, free_port, standin_server
from sglang_sm120.serve import bench_client
from sglang_sm120.serve.report import (
    BenchError,
    build_report,
    effective_optimisations,
    figure_lines,
    from_bench_serving,
    history_from_record,
    load_run,
    percentile,
    record_entry,
    render_markdown,
    summarize,
    verdict,
    write_report_dir,
)
from sglang_sm120_controller import chart as bench_chart

BENCH = DATA / "bench"
SGLANG_0_5_9 = ROOT / ".cache/sglang/0.5.9/sglang"


def run_of(requests: list[dict], duration: float = 2.0, profile: str = "eagle3", concurrency: int = 1, **extra) -> dict:
    return {
        "tool": "toolkit-client",
        "profile": profile,
        "concurrency": concurrency,
        "output_len": 4,
        "duration_s": duration,
        "requests": requests,
        **extra,
    }


def ok_request(ttft: float, itl: list[float], tokens: int) -> dict:
    return {"ok": True, "ttft_s": ttft, "itl_s": itl, "latency_s": ttft + sum(itl), "output_tokens": tokens, "error": ""}


def figures_for(c1_tok_s: dict[str, float]) -> dict:
    """Clean figures per profile with a given concurrency-1 throughput (1 s runs)."""
    out = {}
    for profile, tok_s in c1_tok_s.items():
        n = int(tok_s)
        out[profile] = {"c1": summarize(run_of([ok_request(0.01, [0.001] * (n - 1), n)], duration=1.0, profile=profile))}
    return out


# ------------------------------------------------------------------ figures


def test_summary_figures_follow_bench_serving_definitions() -> None:
    run = run_of([ok_request(0.100, [0.010, 0.020, 0.030], 4), ok_request(0.300, [0.040, 0.050, 0.060], 4)], duration=2.0)
    fig = summarize(run)
    assert fig["ok"] and fig["problem"] == ""
    assert fig["completed"] == 2 and fig["failed"] == 0
    assert fig["output_tokens"] == 8 and fig["output_tok_s"] == 4.0 and fig["request_per_s"] == 1.0
    assert fig["ttft_ms"] == {"mean": 200.0, "median": 200.0, "p99": 298.0}
    assert fig["itl_ms"]["mean"] == 35.0 and fig["itl_ms"]["median"] == 35.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5 and percentile([], 50) is None


def test_recorded_standin_runs_summarize_consistently() -> None:
    c1 = summarize(load_run(BENCH / "standin-eagle3-c1.json", "eagle3", 32))
    batch = summarize(load_run(BENCH / "standin-eagle3-batch.json", "eagle3", 32))
    base = summarize(load_run(BENCH / "standin-baseline-c1.json", "baseline", 32))
    for fig in (c1, batch, base):
        assert fig["ok"], fig["problem"]
        assert fig["completed"] == 8 and fig["output_tokens"] == 8 * 32
        assert fig["output_tok_s"] == pytest.approx(fig["output_tokens"] / fig["duration_s"], rel=0.01)
        assert 0 < fig["ttft_ms"]["median"] <= fig["ttft_ms"]["p99"]
    assert c1["accept_length"] == 2.5 and c1["accept_source"] == "server_info"
    assert base["accept_length"] is None
    # More requests in flight: more tokens per second; speculation: more tokens per step at concurrency 1.
    assert batch["output_tok_s"] > c1["output_tok_s"] > base["output_tok_s"]
    assert c1["itl_ms"]["mean"] < base["itl_ms"]["mean"]


def test_an_empty_run_is_not_ok_and_has_no_throughput() -> None:
    fig = summarize(run_of([], duration=0.0))
    assert not fig["ok"] and "no requests were run" in fig["problem"]
    assert fig["output_tok_s"] is None and fig["request_per_s"] is None
    assert fig["ttft_ms"] == {"mean": None, "median": None, "p99": None}
    assert figure_lines({"eagle3": {"c1": fig}}) == [f"eagle3 concurrency 1: {fig['problem']}"]


def test_a_failed_run_says_why() -> None:
    failed = {
        "ok": False,
        "ttft_s": None,
        "itl_s": [],
        "latency_s": None,
        "output_tokens": 0,
        "error": "HTTP 503 Service Unavailable: loading",
    }
    fig = summarize(run_of([failed, failed]))
    assert not fig["ok"] and fig["problem"].startswith("all 2 requests failed: HTTP 503")
    assert fig["output_tok_s"] is None
    partial = summarize(run_of([ok_request(0.1, [0.01], 2), failed]))
    assert not partial["ok"] and partial["problem"].startswith("1 of 2 requests failed")
    assert partial["output_tok_s"] == 1.0  # the completed request's tokens still count
    crashed = summarize(run_of([], error="warm-up request failed: connection refused"))
    assert not crashed["ok"] and "connection refused" in crashed["problem"]


def test_a_run_record_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="missing concurrency, requests"):
        summarize({"tool": "toolkit-client", "profile": "x"})
    with pytest.raises(BenchError, match="tool must be one of"):
        summarize(run_of([]) | {"tool": "curl"})
    with pytest.raises(BenchError, match=r"nope\.json: No such file"):
        load_run(tmp_path / "nope.json", "eagle3", 4)
    (tmp_path / "empty.json").write_text("")
    with pytest.raises(BenchError, match="is empty"):
        load_run(tmp_path / "empty.json", "eagle3", 4)
    (tmp_path / "cut.json").write_text('{"tool": "toolkit-client", "requ')
    with pytest.raises(BenchError, match="is not JSON"):
        load_run(tmp_path / "cut.json", "eagle3", 4)


def test_bench_serving_output_fields_exist_in_sglang_0_5_9() -> None:
    """The fields from_bench_serving reads are the ones SGLang 0.5.9's bench_serving writes."""
    source = (SGLANG_0_5_9 / "bench_serving.py").read_text()
    for key in ("duration", "max_concurrency", "accept_length", "ttfts", "itls", "output_lens", "errors"):
        assert re.search(rf'"{key}":', source), key
    for flag in ("--output-details", "--output-file", "--max-concurrency", "--sharegpt-output-len", "--warmup-requests", "--disable-tqdm"):
        assert f'"{flag}"' in source, flag


def test_a_bench_serving_line_becomes_a_run(tmp_path: Path) -> None:
    line = {
        "duration": 4.0,
        "max_concurrency": 8,
        "accept_length": 2.2,
        "ttfts": [0.2, 0.0],
        "itls": [[0.01, 0.01, 0.02], []],
        "output_lens": [4, 0],
        "errors": ["", "Traceback ...\nClientConnectorError: refused"],
    }
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"duration": 1}) + "\n" + json.dumps(line) + "\n")
    run = load_run(path, "eagle3", 4)
    assert run["tool"] == "bench_serving" and run["concurrency"] == 8
    fig = summarize(run)
    assert fig["completed"] == 1 and fig["failed"] == 1 and fig["output_tok_s"] == 1.0
    assert fig["errors"] == ["ClientConnectorError: refused"] and fig["accept_length"] == 2.2
    with pytest.raises(BenchError, match="--output-details"):
        from_bench_serving({"duration": 1.0}, "eagle3", 4)


# ------------------------------------------------------------------ verdict and gate


def test_the_gate_passes_when_eagle3_is_faster() -> None:
    v = verdict(figures_for({"baseline": 90, "eagle3": 120}), "baseline", "eagle3", "fail", 1.0)
    assert v["status"] == "pass" and v["faster"] == "eagle3" and v["ratio"] == pytest.approx(1.3333, abs=1e-4)
    assert "eagle3 is faster" in v["message"] and "33.3% faster" in v["message"]


@pytest.mark.parametrize("gate", ["warn", "fail"])
def test_the_gate_trips_when_eagle3_is_slower(gate: str) -> None:
    # The numbers the user found by hand: EAGLE-3 at 54.1 tok/s against a 92.6 tok/s baseline.
    figures = figures_for({"baseline": 92, "eagle3": 54})
    v = verdict(figures, "baseline", "eagle3", gate, 1.0)
    assert v["status"] == gate and v["faster"] == "baseline"
    assert "slower" in v["message"] and f"gate {gate}" in v["message"]


def test_the_threshold_moves_the_gate_and_off_never_trips() -> None:
    figures = figures_for({"baseline": 100, "eagle3": 105})
    assert verdict(figures, "baseline", "eagle3", "fail", 1.0)["status"] == "pass"
    assert verdict(figures, "baseline", "eagle3", "fail", 1.1)["status"] == "fail"
    assert verdict(figures, "baseline", "eagle3", "off", 1.1)["status"] == "off"


def test_nothing_is_compared_without_both_clean_figures() -> None:
    one = verdict(figures_for({"eagle3": 100}), "baseline", "eagle3", "fail", 1.0)
    assert one["status"] == "not-compared" and "baseline not measured" in one["message"]
    broken = figures_for({"baseline": 100}) | {"eagle3": {"c1": summarize(run_of([]))}}
    v = verdict(broken, "baseline", "eagle3", "fail", 1.0)
    assert v["status"] == "not-compared" and "no clean concurrency-1 figures for eagle3" in v["message"]
    with pytest.raises(BenchError, match="sglang_benchmark_gate must be one of warn, fail, off, found 'block'"):
        verdict({}, "baseline", "eagle3", "block", 1.0)
    with pytest.raises(BenchError, match="sglang_benchmark_gate_threshold must be a number > 0, found 0"):
        verdict({}, "baseline", "eagle3", "warn", 0)


# ------------------------------------------------------------------ report and chart


MANIFEST = {
    "id": "0002-abcdef12",
    "key": "abcdef12" * 8,
    "state": "good",
    "sglang": {"version": "0.5.9"},
    "cuda": {"cuda_version": "13.0.1", "nvcc_build": "V13.0.88", "arch": "12.0"},
    "artifacts": {
        "sglang": {
            "package": "sglang",
            "key": "k" * 64,
            "origin": "downloaded",
            "build_seconds": 81,
            "wheels": [{"wheel": "sglang-0.5.9-py3-none-any.whl", "sha256": "s" * 64}],
        },
        # as the pipeline records an index wheel taken (apply_choices' origin) and a source build after a refusal
        "torch": {
            "package": "torch",
            "key": "t" * 64,
            "origin": "prebuilt",
            "build_seconds": 6,
            "prebuilt_origin": "the package index's own wheel, torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl: CUDA 13, sm_120+sm_120a",
            "wheels": [{"wheel": "torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl", "sha256": "a" * 64}],
        },
        "sgl_kernel": {
            "package": "sgl-kernel",
            "key": "g" * 64,
            "origin": "built",
            "build_seconds": 4321,
            "prebuilt_rejected": "prebuilt wheel not used: common_ops.so: links libcudart.so.12, expected libcudart.so.13",
            "wheels": [{"wheel": "sgl_kernel-0.3.21+cu130-cp310-abi3-linux_x86_64.whl", "sha256": "b" * 64}],
        },
    },
    "patches": {
        "state": "present",
        "patches": {"kimi_k25_eagle3_delegation": "applied"},
        "audit": {"ok": True, "model_class": "K", "algorithm": "EAGLE3"},
    },
    "service": {
        "profile": "eagle3",
        "argv": ["--speculative-algorithm", "EAGLE3", "--enable-torch-symm-mem", "--enable-flashinfer-allreduce-fusion", "--tp-size", "8"],
        "flag_warnings": ["--enable-flashinfer-allreduce-fusion is a no-op on SM120: gated to SM90/SM100"],
        # As the launch plan's start gate records it (plugins/module_utils/sglang_sm120/launch/plan.py start_gate).
        "start_gate": {
            "summary": "25 known start failures checked (SGLang 0.5.9, capability 12.0): 20 ok, 1 unknown, 4 n/a",
            "counts": {"ok": 20, "unknown": 1, "n/a": 4},
            "verdicts": [
                {"id": "fp8-kv-from-checkpoint", "verdict": "ok", "text": "ok: [fp8-kv-from-checkpoint] ..."},
                {"id": "driver-too-old", "verdict": "unknown", "text": "unknown: [driver-too-old] the driver: host driver_version unknown"},
            ],
        },
        # As sglang_health records them (server_evidence.findings of the start-up journal).
        "runtime_findings": [
            {
                "name": "torch symm-mem",
                "meaning": "torch symm-mem off at start: server log: TorchSymmMemCommunicator: torch symmetric memory multicast "
                "operations are not supported.",
                "line": "TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported.",
            }
        ],
        "health": {"status": 200, "elapsed": 5.5},
    },
}


SPEC_INFO = {"speculative_algorithm": "EAGLE3", "internal_states": [{"avg_spec_accept_length": 2.5}], "version": "0.5.9"}


def opts_of(argv=None, findings=(), warnings=(), server_info=None, log=(), version="0.5.9") -> dict:
    argv = MANIFEST["service"]["argv"] + ["--cuda-graph-max-bs", "64", "--enable-mixed-chunk"] if argv is None else argv
    return {o["flag"]: o for o in effective_optimisations(argv, findings, warnings, server_info, log, version)}


# Lines as SGLang prints them (server_evidence's table reads them from each release's wheel).
CAPTURE_0_5_9 = "[2026-12-01 12:08:36] Capture cuda graph end. Time elapsed: 12.30 s. mem usage=1.20 GB. avail mem=70.00 GB."
MULTICAST = "[2026-12-01 12:08:37] TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported."


def test_optimisations_are_never_yes_without_evidence() -> None:
    opts = opts_of()
    assert set(opts) == {
        "--speculative-algorithm",
        "--enable-torch-symm-mem",
        "--enable-flashinfer-allreduce-fusion",
        "--cuda-graph-max-bs",
        "--enable-mixed-chunk",
    }
    assert {o["state"] for o in opts.values()} == {"unknown"} and all(o["verdict"] == o["state"] for o in opts.values())
    assert all(o["evidence"] == [] and "no /server_info answer was recorded" in o["note"] for o in opts.values())
    assert opts["--speculative-algorithm"]["note"].startswith("nothing seen: looked for the draft model's CUDA graphs captured")
    assert opts["--enable-torch-symm-mem"]["note"].startswith("SGLang logs nothing when torch symm-mem all-reduce is on")
    # The server echoing the flags it was given is not evidence that an optimisation works.
    echo = {
        "enable_torch_symm_mem": True,
        "enable_flashinfer_allreduce_fusion": True,
        "speculative_algorithm": "EAGLE3",
        "internal_states": [{}],
    }
    opts = opts_of(server_info=echo)
    assert {o["state"] for o in opts.values()} == {"unknown"}
    assert "no accept length yet" in opts["--speculative-algorithm"]["note"]
    # Lines no SGLang release prints are not evidence either (the old table's guesses).
    made_up = ["TorchSymmMemCommunicator: enabled (world size 8)", "FlashInfer allreduce fusion disabled", "Capture cuda graph end"]
    assert {o["state"] for o in opts_of(log=made_up).values()} == {"unknown"}


def test_optimisations_are_yes_only_on_positive_evidence_and_no_on_negative() -> None:
    opts = opts_of(
        findings=MANIFEST["service"]["runtime_findings"],
        warnings=MANIFEST["service"]["flag_warnings"],
        server_info=SPEC_INFO,
        log=[CAPTURE_0_5_9],
    )
    spec = opts["--speculative-algorithm"]
    assert spec["state"] == "yes" and spec["value"] == "EAGLE3"
    assert spec["evidence"] == ["/server_info: internal_states[0].avg_spec_accept_length=2.5"]
    symm = opts["--enable-torch-symm-mem"]
    assert symm["state"] == "no" and symm["evidence"][0].startswith("journal at start: torch symm-mem off at start: server log:")
    fusion = opts["--enable-flashinfer-allreduce-fusion"]
    assert fusion["state"] == "no" and fusion["evidence"] == [f"flag check: {MANIFEST['service']['flag_warnings'][0]}"]
    graphs = opts["--cuda-graph-max-bs"]
    assert graphs["state"] == "yes" and graphs["evidence"] == [f"server log: {CAPTURE_0_5_9}"]
    assert opts["--enable-mixed-chunk"]["state"] == "unknown"
    # The resolved settings SGLang answers decide where they can: mixed chunk as the server resolved it.
    assert opts_of(server_info={"enable_mixed_chunk": True})["--enable-mixed-chunk"]["state"] == "yes"
    eagle = ["[2026-12-01 12:07:08] Mixed chunked prefill is disabled because of using eagle speculative decoding."]
    assert opts_of(log=eagle)["--enable-mixed-chunk"]["evidence"] == [f"server log: {eagle[0]}"]
    # The fusion's workspace line is its only "yes"; each release's own wording, 0.5.23's refusal is a "no".
    workspace = ["[2026-12-01 12:08:40] FlashInfer workspace initialized for rank 0, world_size 8"]
    assert opts_of(log=workspace)["--enable-flashinfer-allreduce-fusion"]["state"] == "yes"
    assert opts_of(log=workspace, version="0.5.23")["--enable-flashinfer-allreduce-fusion"]["state"] == "unknown"
    refused = ["ValueError: FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs."]
    assert opts_of(log=refused, version="0.5.23")["--enable-flashinfer-allreduce-fusion"]["state"] == "no"


def test_negative_evidence_wins_and_the_server_can_say_no() -> None:
    opts = opts_of(log=[CAPTURE_0_5_9, MULTICAST], server_info={"speculative_algorithm": None, "disable_cuda_graph": True})
    assert opts["--enable-torch-symm-mem"]["state"] == "no"
    assert opts["--enable-torch-symm-mem"]["evidence"] == [f"server log: {MULTICAST}"]
    assert opts["--speculative-algorithm"]["state"] == "no" and opts["--speculative-algorithm"]["evidence"] == [
        "/server_info: speculative_algorithm=null"
    ]
    graphs = opts["--cuda-graph-max-bs"]
    assert graphs["state"] == "no" and graphs["evidence"] == ["/server_info: disable_cuda_graph=true"]
    assert graphs["note"] == f"negative evidence wins; also seen: server log: {CAPTURE_0_5_9}"
    off = opts_of(argv=["--cuda-graph-max-bs", "8", "--disable-cuda-graph"], log=[CAPTURE_0_5_9])
    assert off["--disable-cuda-graph"]["state"] == "no" and off["--disable-cuda-graph"]["evidence"][0] == "flags: --disable-cuda-graph"
    decode = {"decode": [SPEC_INFO]}  # disaggregated: the decode server's answer counts
    assert opts_of(server_info=decode)["--speculative-algorithm"]["state"] == "yes"
    # A start-up finding of an older release record (meaning and journal line) is judged by its line.
    old = [{"meaning": "torch symmetric-memory all-reduce disabled at run time (NCCL is used instead)", "line": MULTICAST}]
    assert opts_of(findings=old)["--enable-torch-symm-mem"]["evidence"] == [f"server log: {MULTICAST}"]
    # Nothing asked for: CUDA graphs only (on unless switched off), judged all the same.
    assert list(opts_of(argv=[], log=[CAPTURE_0_5_9])) == [None]  # no flag: on by default
    assert opts_of(argv=[], log=[CAPTURE_0_5_9])[None]["state"] == "yes"


def test_the_report_carries_versions_patches_flags_figures_and_verdict() -> None:
    figures = figures_for({"baseline": 90, "eagle3": 120})
    v = verdict(figures, "baseline", "eagle3", "warn", 1.0)
    report = build_report("gpu-1", MANIFEST, figures, v, "eagle3", [], {"num_prompts": 1, "output_len": 4, "client": "toolkit-client"})
    assert report["release"] == "0002-abcdef12" and report["versions"]["sglang"] == "0.5.9" and report["versions"]["cuda"] == "13.0.1"
    # each artifact's own version, read from its wheel's name (what makes two reports' numbers differ)
    assert report["versions"]["artifacts"] == {"sgl_kernel": "0.3.21+cu130", "sglang": "0.5.9", "torch": "2.11.0"}
    assert report["reference"] == []
    assert report["artifacts"]["sglang"]["wheels"][0]["sha256"] == "s" * 64
    # how each artifact was made, from its build record: the index's wheel taken, a source build after a refusal
    made = {name: art["made"] for name, art in report["artifacts"].items()}
    assert made == {
        "sglang": "downloaded from the package index in 81 s",
        "torch": "prebuilt: the package index's own wheel, torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl: CUDA 13, "
        "sm_120+sm_120a, verified on the host in 6 s",
        "sgl_kernel": "built from source on the host in 4321 s; its prebuilt wheel was refused: prebuilt wheel not used: "
        "common_ops.so: links libcudart.so.12, expected libcudart.so.13",
    }
    assert report["patches"]["patches"] == {"kimi_k25_eagle3_delegation": "applied"} and report["audit"]["ok"] is True
    assert report["service"]["argv"][:2] == ["--speculative-algorithm", "EAGLE3"]
    assert report["benchmark"]["verdict"]["status"] == "pass"
    md = render_markdown(report)
    assert "**pass**: eagle3 is faster" in md
    assert re.search(r"\| eagle3 \| 1 \| 120\.0 \|", md) and re.search(r"\| baseline \| 1 \| 90\.0 \|", md)
    assert "kimi_k25_eagle3_delegation: applied" in md and "sglang-0.5.9-py3-none-any.whl" in md
    assert "- versions: sgl_kernel 0.3.21+cu130, sglang 0.5.9, torch 2.11.0" in md
    assert "## Others' measurements on this hardware (not this host)\n\n- none given" in md
    assert re.search(r"- torch \(key `t{12}`\): torch-2\.11\.0-\S+ \(sha256 a{12}\); prebuilt: the package index", md)
    assert "torch symm-mem (--enable-torch-symm-mem): **no**: journal at start: torch symm-mem off at start: server log: TorchSymm" in md
    assert "speculative decoding (--speculative-algorithm EAGLE3): **unknown**: nothing seen" in md
    assert report["optimisations_seen"]["error"] == "no evidence recorded for profile eagle3"
    # the start gate: its summary, each entry it could not decide in full, the ok and n/a ones by id (the console
    # shows only the counts and the unknown ones)
    assert "- start gate: 25 known start failures checked (SGLang 0.5.9, capability 12.0): 20 ok, 1 unknown, 4 n/a" in md
    assert "- start gate unknown: [driver-too-old] the driver: host driver_version unknown" in md
    assert "- start gate ok (1): fp8-kv-from-checkpoint" in md
    assert "ok: [fp8-kv-from-checkpoint]" not in md
    seen = {"eagle3": {"server_info": SPEC_INFO, "log": [], "error": ""}}
    report = build_report("gpu-1", MANIFEST, figures, v, "eagle3", [], {"client": "bench_serving (SGLang 0.5.9)"}, seen)
    spec = next(o for o in report["optimisations"] if o["flag"] == "--speculative-algorithm")
    assert spec["state"] == "yes" and report["optimisations_seen"] == {
        "profile": "eagle3",
        "server_info": True,
        "log_lines": 0,
        "error": "",
    }
    md = render_markdown(report)
    assert (
        "speculative decoding (--speculative-algorithm EAGLE3): **yes**: /server_info: internal_states[0].avg_spec_accept_length=2.5" in md
    )
    assert "client: bench_serving (SGLang 0.5.9)." in md


CANARY = {
    "ran": True,
    "ok": True,
    "mode": "beside",
    "reason": "every GPU it uses has 0.15 of its memory free: beside the serving server",
    "placement": {"mode": "beside", "mem_fraction": 0.11},
    "phase": "served",
    "message": "canary served: healthy at 141.2 s, the streamed request and 4/4 concurrent requests completed",
    "seconds": 143.9,
    "healthy_at": 141.2,
    "evidence": {
        "backends": {
            "source": "/server_info",
            "values": {"attention_backend": "flashinfer", "kv_cache_dtype": "fp8_e4m3", "page_size": None},
        },
        "optimisations": [{"name": "cuda graphs", "verdict": "yes", "evidence": ["server log: Capture cuda graph end."], "note": ""}],
    },
    "accept_length": 1.03,
    "models": {
        "key": "k" * 64,
        "target": "DeepseekV3ForCausalLM",
        "draft": "LlamaForCausalLMEagle3",
        "differences": ["vision tower: left out"],
    },
    "log": "/opt/sglang/releases/0002-abcdef12/logs/canary.log",
    "graphs": "CUDA graphs captured for batch sizes 1 4 only, piecewise prefill graphs for 64 and 256 tokens: a capture failure shows",
}


def test_the_report_shows_the_start_canary_and_never_reads_its_accept_length_as_a_figure() -> None:
    figures = figures_for({"baseline": 90, "eagle3": 120})
    v = verdict(figures, "baseline", "eagle3", "warn", 1.0)
    report = build_report("gpu-1", {**MANIFEST, "canary": CANARY}, figures, v, "eagle3", [], {})
    canary = report["canary"]
    assert canary["ran"] and canary["ok"] and canary["mode"] == "beside" and canary["mem_fraction"] == 0.11
    assert canary["backends"] == {"attention_backend": "flashinfer", "kv_cache_dtype": "fp8_e4m3", "page_size": None}
    assert canary["accept_length"] == 1.03 and "meaningless on random weights" in canary["accept_note"]
    md = render_markdown(report)
    assert "## Start canary" in md and "**served** beside the serving server, in 143.9 s (healthy after 141.2 s)" in md
    assert "- backends (from /server_info): attention_backend flashinfer, kv_cache_dtype fp8_e4m3" in md and "page_size" not in md
    assert "- cuda graphs: **yes**: server log: Capture cuda graph end." in md
    assert "- CUDA graphs captured for batch sizes 1 4 only, piecewise prefill graphs for 64 and 256 tokens" in md
    assert "- accept length 1.03: meaningless on random weights" in md and "  - vision tower: left out" in md
    assert v["status"] == "pass"  # the gate read the benchmark's figures, not the canary's
    failed = build_report("gpu-1", {**MANIFEST, "canary": {**CANARY, "ok": False, "phase": "exited"}}, figures, v, "eagle3", [], {})
    assert "**FAILED in phase exited**" in render_markdown(failed)
    skipped = {"ran": False, "mode": "skipped", "reason": "no start canary: the release was already current or proven good before"}
    md = render_markdown(build_report("gpu-1", {**MANIFEST, "canary": skipped}, figures, v, "eagle3", [], {}))
    assert "- **skipped** (skipped): no start canary: the release was already current" in md
    md = render_markdown(build_report("gpu-1", MANIFEST, figures, v, "eagle3", [], {}))
    assert "- **skipped** (not recorded): no start canary recorded for this release" in md


FABRIC = {
    "status": "short",
    "message": "all-reduce across 8 GPUs: 22.2 GB/s bus bandwidth at 256 MiB, 48.0 us at 32 KiB",
    "world_size": 8,
    "planned_gpus": 8,
    "backend": "nccl",
    "seconds": 6.4,
    "large_busbw_gbs": 22.2,
    "small_latency_us": 48.0,
    "env": {"NCCL_P2P_LEVEL": "SYS"},
    "shortfalls": ["bus bandwidth 22.2 GB/s is below 30 GB/s (rtx6kpro nccl-tuning.md)"],
    "thresholds": {"gpus": 8, "min_busbw_gbs": 30, "max_small_latency_us": 40, "source": "rtx6kpro nccl-tuning.md"},
    "candidates": [
        {"name": "ll-16-channels", "env": {"NCCL_PROTO": "LL"}, "status": "ok", "large_busbw_gbs": 38.1, "small_latency_us": 27.0}
    ],
    "chosen": {"name": "ll-16-channels"},
    "host": {"uvm_disable_hmm": True, "iommu_mode": "off", "power_limit_w": {"0": 600.0}},
}


def test_the_report_shows_the_fabric_figures_with_the_host_facts_beside_them() -> None:
    figures = figures_for({"baseline": 90, "eagle3": 120})
    v = verdict(figures, "baseline", "eagle3", "warn", 1.0)
    report = build_report("gpu-1", {**MANIFEST, "fabric": FABRIC}, figures, v, "eagle3", [], {})
    assert report["fabric"]["large_busbw_gbs"] == 22.2 and report["fabric"]["host"]["iommu_mode"] == "off"
    md = render_markdown(report)
    assert "## Fabric (all-reduce before the load)" in md and "- **short**: all-reduce across 8 GPUs" in md
    assert "- 8 ranks, backend nccl: bus bandwidth 22.2 GB/s, small all-reduce 48.0 us, in 6.4 s" in md
    assert "- NCCL environment: NCCL_P2P_LEVEL=SYS" in md and "- short: bus bandwidth 22.2 GB/s is below 30 GB/s" in md
    assert "- candidate ll-16-channels (NCCL_PROTO=LL): ok, 38.1 GB/s, 27.0 us" in md
    assert "- kept in the release's fabric.env: **ll-16-channels**" in md
    assert "- host facts beside the figures:\n  - uvm_disable_hmm: True\n  - iommu_mode: off\n  - power_limit_w: 0=600.0" in md
    stand_in = {**FABRIC, "world_size": 2, "backend": "gloo", "candidates": [], "chosen": {}}
    assert "- 2 ranks (the plan uses 8), backend gloo" in render_markdown(
        build_report("gpu-1", {**MANIFEST, "fabric": stand_in}, figures, v, "eagle3", [], {})
    )
    md = render_markdown(build_report("gpu-1", MANIFEST, figures, v, "eagle3", [], {}))
    assert "- **not recorded**: no fabric check recorded for this release" in md


def test_the_report_says_where_the_worker_stood_in_its_router_and_how_long_it_drained() -> None:
    figures = figures_for({"baseline": 90, "eagle3": 120})
    v = verdict(figures, "baseline", "eagle3", "warn", 1.0)
    # what deploy.yml passes: the leave's result and module sglang_drain's (its RETURN sample's shape)
    drain = {
        "drained": True,
        "elapsed_s": 41.3,
        "polls": 43,
        "last": {"running": 0, "waiting": 0, "source": "/v1/loads", "in_flight": 0},
        "history": [[0.0, 4], [12.1, 3], [40.2, 0]],
    }
    router = {"url": "http://10.0.0.5:30200", "worker_url": "http://10.0.0.7:30000", "left": True, "healthy_before": 3, "drain": drain}
    report = build_report("gpu-1", MANIFEST, figures, v, "eagle3", [], {}, None, router)
    assert report["router"] == {
        "url": "http://10.0.0.5:30200",
        "worker_url": "http://10.0.0.7:30000",
        "left": True,
        "healthy_before": 3,
        "drained_s": 41.3,
        "in_flight_at_leave": 4,
        "load_source": "/v1/loads",
    }
    md = render_markdown(report)
    assert "## Router" in md
    assert (
        "- worker http://10.0.0.7:30000 left http://10.0.0.5:30200 before the restart (3 healthy workers listed then), "
        "drained in 41.3 s (4 requests in flight when it left, read from /v1/loads)"
    ) in md
    assert "joins again after the benchmark" in md
    # without a router: no section, and report.json says so with {}
    alone = build_report("gpu-1", MANIFEST, figures, v, "eagle3", [], {})
    assert alone["router"] == {} and "## Router" not in render_markdown(alone)
    stayed = render_markdown(build_report("gpu-1", MANIFEST, figures, v, "eagle3", [], {}, None, {**router, "left": False, "drain": {}}))
    assert "not taken out in this deploy" in stayed and "drained" not in stayed


def test_the_report_dir_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "report"
    report = {"release": "r1"}
    files = write_report_dir(target, report, "# r1\n", b"png1")
    assert [Path(f).name for f in files] == ["report.json", "report.md", "chart.png"]
    assert [Path(f).name for f in write_report_dir(tmp_path / "plain", report, "# r1\n")] == ["report.json", "report.md"]
    assert not (tmp_path / "plain" / "chart.png").exists()
    assert json.loads((target / "report.json").read_text()) == report
    with pytest.raises(TypeError):
        write_report_dir(target, {"release": "r2"}, "# r2\n", "not bytes")  # type: ignore[arg-type]
    assert (target / "report.md").read_text() == "# r1\n" and (target / "chart.png").read_bytes() == b"png1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", "report"]  # no temporary left behind


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_history_feeds_a_matplotlib_chart_of_every_panel(tmp_path: Path) -> None:
    record = {"order": ["0001-aaaaaaaa", "0002-bbbbbbbb", "0003-cccccccc"], "releases": {}}
    first = figures_for({"baseline": 90, "eagle3": 54})
    first["eagle3"]["c1"]["accept_length"] = 1.8
    record["releases"]["0001-aaaaaaaa"] = {"benchmark": record_entry(first, {"status": "warn"})}
    record["releases"]["0002-bbbbbbbb"] = {}  # never benchmarked
    figures = figures_for({"baseline": 92, "eagle3": 120})
    record["releases"]["0003-cccccccc"] = {"benchmark": record_entry(figures, {"status": "pass"})}
    history = history_from_record(record)
    assert [(h["release"], h["profile"], h["c1"], h["accept_length"]) for h in history] == [
        ("0001-aaaaaaaa", "baseline", 90.0, None),
        ("0001-aaaaaaaa", "eagle3", 54.0, 1.8),
        ("0003-cccccccc", "baseline", 92.0, None),
        ("0003-cccccccc", "eagle3", 120.0, None),
    ]
    report = build_report(
        "gpu-1", MANIFEST | {"id": "0003-cccccccc"}, figures, verdict(figures, "baseline", "eagle3"), "eagle3", history, {}
    )
    data = bench_chart.series(report)
    assert data["releases"] == ["0001-aaaaaaaa", "0003-cccccccc"] and data["tok_s"]["c1"][("0003-cccccccc", "eagle3")] == 120.0
    assert data["accept"][("0001-aaaaaaaa", "eagle3")] == 1.8 and [r[0] for r in data["runs"]] == ["baseline c1", "eagle3 c1"]
    png, bars = bench_chart.draw(report)
    assert png_size(png) == (1200, 800) and 20_000 < len(png) < 1_000_000
    # 4 concurrency-1 bars (no batch recorded); 3 percentiles x 2 runs for TTFT and ITL; one accept length.
    assert bars == {"tok_s": 4, "ttft": 6, "itl": 6, "accept": 1}
    (tmp_path / "report.json").write_text(json.dumps(report))
    out = tmp_path / "chart.png"
    assert bench_chart.main(["--report", str(tmp_path / "report.json"), "--out", str(out)]) == 0
    assert png_size(out.read_bytes()) == (1200, 800)
    assert bench_chart.main(["--report", str(tmp_path / "nope.json"), "--out", str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()


def test_a_host_without_figures_still_gets_a_chart() -> None:
    png, bars = bench_chart.draw({"host": "gpu-1", "release": "r", "history": [], "benchmark": {"profiles": {}}})
    assert bars == {"tok_s": 0, "ttft": 0, "itl": 0, "accept": 0} and png_size(png) == (1200, 800) and len(png) > 10_000


def test_the_grid_chart_maps_the_ratio_over_concurrency_and_context(tmp_path: Path) -> None:
    from test_grid import shaped_cells

    from sglang_sm120.serve.grid import grid_section

    grid = grid_section(shaped_cells(), "baseline", "eagle3", 0.05)
    contexts, concurrencies, matrix = bench_chart.grid_matrix(grid)
    assert (contexts, concurrencies) == ([0, 32768], [1, 32, 128])
    assert matrix[0][0] == 1.3 and matrix[1][1] == pytest.approx(0.84, abs=0.001)
    report = {"host": "gpu-1", "release": "r", "history": [], "benchmark": {"profiles": {}, "grid": grid}}
    png, counts = bench_chart.draw_grid(report)
    assert counts == {"measured": 6} and len(png) > 10_000 and png_size(png)[0] > 400
    (tmp_path / "report.json").write_text(json.dumps(report))
    argv = ["--report", str(tmp_path / "report.json"), "--out", str(tmp_path / "chart.png"), "--grid-out", str(tmp_path / "grid.png")]
    assert bench_chart.main(argv) == 0 and png_size((tmp_path / "grid.png").read_bytes()) == png_size(png)
    # a report without a grid gets its chart and no grid.png
    (tmp_path / "plain.json").write_text(json.dumps({**report, "benchmark": {"profiles": {}}}))
    argv = ["--report", str(tmp_path / "plain.json"), "--out", str(tmp_path / "c2.png"), "--grid-out", str(tmp_path / "g2.png")]
    assert bench_chart.main(argv) == 0 and (tmp_path / "c2.png").exists() and not (tmp_path / "g2.png").exists()
    with pytest.raises(ValueError, match="the report has no benchmark grid"):
        bench_chart.draw_grid({"benchmark": {}})


def test_importing_the_chart_module_needs_no_matplotlib() -> None:
    probe = "import sys; sys.modules['matplotlib'] = None; from sglang_sm120_controller import chart; print(chart.series({})['releases'])"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT / "plugins" / "module_utils", capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr
    assert "ansible" not in (ROOT / "plugins/plugin_utils/sglang_sm120_controller/chart.py").read_text()


# ------------------------------------------------------------------ the client


def test_the_shipped_prompt_set_is_deterministic_and_usable_by_bench_serving() -> None:
    path = ROOT / "roles/sglang_benchmark/files/prompts.json"
    data = json.loads(path.read_text())
    assert len(data) >= 16  # the role's default sglang_benchmark_num_prompts
    for item in data:  # bench_serving drops conversations with fewer than 2 turns or tiny texts
        turns = item["conversations"]
        assert turns[0]["from"] == "human" and turns[1]["from"] == "gpt"
        assert len(turns[0]["value"].split()) >= 4 and len(turns[1]["value"].split()) >= 2
    assert bench_client.load_prompts(str(path), 3) == [d["conversations"][0]["value"] for d in data[:3]]


def test_the_client_refuses_a_bad_prompt_file(tmp_path: Path) -> None:
    with pytest.raises(bench_client.PromptError, match=r"missing\.json: No such file"):
        bench_client.load_prompts(str(tmp_path / "missing.json"), 1)
    (tmp_path / "few.json").write_text(
        json.dumps([{"conversations": [{"from": "human", "value": "a b"}, {"from": "gpt", "value": "c d"}]}])
    )
    with pytest.raises(bench_client.PromptError, match="has 1 prompts, 2 requested"):
        bench_client.load_prompts(str(tmp_path / "few.json"), 2)
    (tmp_path / "flat.json").write_text(json.dumps(["just a prompt"]))
    with pytest.raises(bench_client.PromptError, match="entry 0 needs conversations"):
        bench_client.load_prompts(str(tmp_path / "flat.json"), 1)


@pytest.fixture()
def standin(request: pytest.FixtureRequest):
    """The stand-in server (TEST FIXTURE) on a free 127.0.0.1 port; param: extra argv."""
    env = {"SGLANG_STANDIN_LOAD_SECONDS": "0", "SGLANG_STANDIN_TOKEN_MS": "2"}
    with standin_server(getattr(request, "param", []), env) as url:
        yield url


@pytest.mark.parametrize("standin", [["--speculative-algorithm", "EAGLE3"]], indirect=True)
def test_the_client_measures_a_streaming_server(standin: str, tmp_path: Path) -> None:
    prompts = str(ROOT / "roles/sglang_benchmark/files/prompts.json")
    out, progress = tmp_path / "run.json", tmp_path / "progress.txt"
    argv = ["--url", standin, "--prompts", prompts, "--num-prompts", "6", "--output-len", "10", "--concurrency", "3"]
    assert bench_client.main([*argv, "--profile", "eagle3", "--out", str(out), "--progress", str(progress)]) == 0
    fig = summarize(json.loads(out.read_text()))
    assert fig["ok"] and fig["completed"] == 6 and fig["output_tokens"] == 60
    # 6 requests of 10 tokens in steps of 2.5: 24 verify steps, too few for an accept length (tests/unit/host/test_accept_length.py).
    assert fig["accept_length"] is None and fig["accept_source"] == bench_client.ACCEPT_SOURCE_REQUESTS
    assert fig["accept_note"].startswith("run too short to measure: "), fig["accept_note"]
    # As in SGLang, the prefill gives the first token alone (TTFT); the 9 tokens after it come in decode
    # steps of 2.5 on average (2, 3, 2, 2) and each gets an ITL.
    first = json.loads(out.read_text())["requests"][0]
    assert len(first["itl_s"]) == 9 and first["ttft_s"] > 0
    assert progress.read_text().splitlines()[-1].startswith("eagle3 concurrency 3: 6/6 requests")


@pytest.mark.parametrize("standin", [[]], indirect=True)
def test_the_client_builds_prompts_of_the_asked_length_that_share_no_prefix(standin: str, tmp_path: Path) -> None:
    prompts = bench_client.load_prompts(str(ROOT / "roles/sglang_benchmark/files/prompts.json"), 8)
    built = bench_client.long_prompts(standin, prompts, 600, 5, None, 30.0)
    lengths = [bench_client.prompt_length(standin, p, None, 30.0) for p in built]
    assert all(abs(n - 600) <= 30 for n in lengths), lengths
    # no two share even their first line: SGLang's radix cache would serve a shared prefix from memory
    assert len({p.split("\n", 1)[0] for p in built}) == 5 and len({p[:200] for p in built}) == 5
    out, progress = tmp_path / "cell.json", tmp_path / "progress.txt"
    argv = ["--url", standin, "--prompts", str(ROOT / "roles/sglang_benchmark/files/prompts.json"), "--num-prompts", "8"]
    argv += ["--output-len", "8", "--concurrency", "2", "--profile", "baseline", "--out", str(out), "--progress", str(progress)]
    assert bench_client.main([*argv, "--requests", "3", "--context-tokens", "400", "--warmup-seconds", "0.5"]) == 0
    record = json.loads(out.read_text())
    assert record["context_tokens"] == 400 and len(record["requests"]) == 3
    assert record["warmup"]["requests"] >= 1 and record["warmup"]["failed"] == 0
    assert abs(summarize(record)["prompt_tokens"] - 400) <= 20
    assert progress.read_text().splitlines()[-1].startswith("baseline concurrency 2 context 400: 3/3 requests")


def grid_point(url: str, tmp_path: Path, profile: str, concurrency: int, context: int = 0) -> float:
    out = tmp_path / f"{profile}-{concurrency}-{context}.json"
    argv = ["--url", url, "--prompts", str(ROOT / "roles/sglang_benchmark/files/prompts.json"), "--num-prompts", "8", "--output-len", "24"]
    argv += ["--concurrency", str(concurrency), "--requests", str(2 * concurrency), "--context-tokens", str(context), "--profile", profile]
    assert bench_client.main([*argv, "--out", str(out)]) == 0
    return summarize(json.loads(out.read_text()))["output_tok_s"]


def test_the_standin_makes_speculation_pay_at_low_concurrency_and_lose_at_high(tmp_path: Path) -> None:
    """TEST FIXTURE behaviour the lab's grid relies on (the stand-in's PassCost): a decode pass costs more once the
    tokens it computes outweigh its fixed time, and EAGLE-3 verifies 4 tokens per request where the baseline runs 1.
    The losing point is a batch of long prompts, where the passes' cost (~130 ms for EAGLE-3) dwarfs the stand-in's own
    per-pass Python overhead on a loaded machine; on short prompts alone that overhead could hide the cost."""
    env = {"SGLANG_STANDIN_LOAD_SECONDS": "0", "SGLANG_STANDIN_TOKEN_MS": "5", "SGLANG_STANDIN_ATTENTION_MS_PER_KTOKEN": "4"}
    spec = ["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "4"]
    with standin_server([], env) as base_url, standin_server(spec, env) as spec_url:
        points = {"short, alone": (1, 0), "2000 tokens, 4 at once": (4, 2000)}
        ratios = {
            k: grid_point(spec_url, tmp_path, "eagle3", *p) / grid_point(base_url, tmp_path, "baseline", *p) for k, p in points.items()
        }
    assert ratios["short, alone"] > 1.3 and ratios["2000 tokens, 4 at once"] < 0.9, ratios


def test_the_client_reports_a_server_that_does_not_answer(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = bench_client.stream_one(url, "hello there", 4, None, 2.0)
    assert not result["ok"] and "ConnectionRefusedError" in result["error"]
    argv = ["--url", url, "--prompts", str(ROOT / "roles/sglang_benchmark/files/prompts.json"), "--num-prompts", "1", "--output-len", "4"]
    assert bench_client.main([*argv, "--concurrency", "1", "--profile", "x", "--out", str(tmp_path / "o.json")]) == 3
    assert not (tmp_path / "o.json").exists()


# ------------------------------------------------------------------ the module, through real Ansible


def test_the_report_module_records_and_writes_or_changes_nothing(tmp_path: Path) -> None:
    from test_modules import run_module

    from sglang_sm120.release.records import Releases

    releases = Releases(tmp_path / "opt")
    rid = releases.create("f" * 64, {})
    releases.set_state(rid, "ready")
    releases.update_manifest(rid, {k: v for k, v in MANIFEST.items() if k not in ("id", "key", "state")})
    runs = [
        {"profile": "baseline", "slot": "c1", "path": str(BENCH / "standin-baseline-c1.json")},
        {"profile": "eagle3", "slot": "c1", "path": str(BENCH / "standin-eagle3-c1.json")},
        {"profile": "eagle3", "slot": "batch", "path": str(BENCH / "standin-eagle3-batch.json")},
    ]
    args = {
        "root": str(tmp_path / "opt"),
        "release": rid,
        "host": "gpu-1",
        "output_len": 32,
        "configured_profile": "eagle3",
        "gate": "fail",
    }

    bad = run_module("sglang_report", args | {"runs": [*runs, {"profile": "eagle3", "slot": "c1", "path": str(tmp_path / "gone.json")}]})
    assert bad.get("failed") and "gone.json" in bad["msg"]
    assert not (releases.path(rid) / "report").exists()
    assert "benchmark" not in json.loads((releases.path(rid) / "manifest.json").read_text())

    reference = yaml.safe_load((ROOT / "roles/sglang_benchmark/files/reference-figures.yml").read_text())
    unreadable = run_module("sglang_report", args | {"runs": runs, "reference": [{**reference[0], "cells": []}]})
    assert unreadable.get("failed") and "reference, entry kimi-k25-nvfp4-sglang: cells must be a non-empty list" in unreadable["msg"]
    assert not (releases.path(rid) / "report").exists()

    seen = tmp_path / "eagle3-evidence.json"
    seen.write_text(json.dumps({"server_info": SPEC_INFO, "log": [], "error": ""}))
    result = run_module("sglang_report", args | {"runs": runs, "threshold": 1.5, "evidence": {"eagle3": str(seen)}, "reference": reference})
    assert not result.get("failed"), result.get("msg")
    assert result["verdict"]["status"] == "pass" and result["verdict"]["faster"] == "eagle3"
    report = json.loads((releases.path(rid) / "report/report.json").read_text())
    assert report["benchmark"]["profiles"]["eagle3"]["batch"]["concurrency"] == 4
    assert [r["id"] for r in report["reference"]] == ["kimi-k25-nvfp4-sglang", "kimi-k26-int4-vllm-grid"]
    assert "| 128 | 0 | 2164.7 | 2044.3 | 0.94 |" in (releases.path(rid) / "report/report.md").read_text()
    assert sorted(p.name for p in (releases.path(rid) / "report").iterdir()) == [
        "report.json",
        "report.md",
    ]  # the chart is the controller's
    assert [Path(f).name for f in result["files"]] == ["report.json", "report.md"]
    states = {o["flag"]: o["state"] for o in result["optimisations"]}
    assert states == {
        None: "unknown",  # CUDA graphs (no flag: on by default): nothing recorded shows them
        "--speculative-algorithm": "yes",
        "--enable-torch-symm-mem": "no",
        "--enable-flashinfer-allreduce-fusion": "no",
    }
    manifest = json.loads((releases.path(rid) / "manifest.json").read_text())
    assert manifest["benchmark"]["verdict"]["status"] == "pass"
    entry = releases.load()["releases"][rid]["benchmark"]
    assert entry["profiles"]["baseline"]["c1"] == report["benchmark"]["profiles"]["baseline"]["c1"]["output_tok_s"]

    tripped = run_module("sglang_report", args | {"runs": runs, "threshold": 5.0})
    assert tripped["verdict"]["status"] == "fail" and "below baseline x 5" in tripped["verdict"]["message"]


def test_the_api_key_comes_from_the_keys_file_never_the_command_line(tmp_path: Path) -> None:
    keys = tmp_path / "api-keys.yaml"
    keys.write_text('# managed\n---\napi-key: "k\\"ey\\\\1"\nadmin-api-key: "adm"\n')
    assert bench_client.read_keys(str(keys)) == {"api-key": 'k"ey\\1', "admin-api-key": "adm"}
    assert bench_client.read_keys(str(tmp_path / "absent.yaml")) == {}
    client = str(ROOT / "plugins/module_utils/sglang_sm120/serve/bench_client.py")
    probe = "import os, sys; print(os.environ.get('OPENAI_API_KEY')); print(' '.join(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, client, "--keys-file", str(keys), "--exec", "--", sys.executable, "-c", probe, "--port", "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.splitlines() == ['k"ey\\1', "--port 1"]


def test_a_keys_file_the_service_did_not_write_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    keys = tmp_path / "api-keys.yaml"
    keys.write_text("api-key: unquoted-value\n")
    with pytest.raises(bench_client.KeysFileError, match=r"api-keys.yaml line 1: expected name: \"value\""):
        bench_client.read_keys(str(keys))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "plugins/module_utils/sglang_sm120/serve/bench_client.py"),
            "--keys-file",
            str(keys),
            "--evidence",
            "x",
            "--url",
            "http://127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "unquoted-value" not in proc.stderr + proc.stdout and "line 1" in proc.stderr


def test_bench_serving_output_keeps_no_key_the_server_echoed(tmp_path: Path) -> None:
    """SGLang's bench_serving records the server's /server_info in its output file, and SGLang echoes
    api_key there (seen on a real 0.5.13 server): --redact-after removes it once the client is done."""
    keys = tmp_path / "api-keys.yaml"
    keys.write_text('api-key: "sk-echo\\"d"\nadmin-api-key: "adm-1"\n')
    out = tmp_path / "bench.jsonl"
    writer = (
        "import json, os, sys; k = os.environ['OPENAI_API_KEY']; "
        "open(sys.argv[1], 'w').write(json.dumps({'server_info': {'api_key': k, 'admin_api_key': 'adm-1', "
        "'internal_states': [{'api_key': k}]}, 'duration': 1.0}) + '\\n'); sys.exit(4)"
    )
    client = str(ROOT / "plugins/module_utils/sglang_sm120/serve/bench_client.py")
    proc = subprocess.run(
        [
            sys.executable,
            client,
            "--keys-file",
            str(keys),
            "--redact-after",
            str(out),
            "--exec",
            "--",
            sys.executable,
            "-c",
            writer,
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 4  # the client's own status
    text = out.read_text()
    assert "sk-echo" not in text and "adm-1" not in text
    record = json.loads(text)
    assert record["server_info"]["api_key"] == "<redacted>" and record["server_info"]["internal_states"][0]["api_key"] == "<redacted>"
    assert record["duration"] == 1.0


def test_report_md_is_plain_text_without_html_entities() -> None:
    figures = figures_for({"baseline": 90, "eagle3": 120})
    v = verdict(figures, "baseline", "eagle3", "warn", 1.0)
    odd = {**FABRIC, "message": "the release's <b>log</b> said: a | b & c"}
    md = render_markdown(build_report("gpu-1", {**MANIFEST, "fabric": odd}, figures, v, "eagle3", [], {}))
    assert "- **short**: the release's \\<b\\>log\\</b\\> said: a \\| b & c" in md
    assert not re.search(r"&(#x?[0-9a-f]+|[a-z]+);", md), re.findall(r"&\S+;", md)


def test_the_grid_module_lays_out_the_cells_and_refuses_a_grid_over_its_bound() -> None:
    from test_modules import run_module

    args = {"grid": {"concurrency": [1, 8], "context_tokens": ["short", 4096]}, "profiles": ["eagle3", "baseline"], "output_len": 64}
    ok = run_module("sglang_bench_grid", args | {"assumed": {"restart_s": 60}})
    assert not ok.get("failed") and not ok["changed"], ok
    assert [c["slot"] for c in ok["cells"][:4]] == ["c1-x0", "c8-x0", "c1-x4096", "c8-x4096"] and len(ok["cells"]) == 8
    assert ok["message"].startswith("8 cells (2 profiles x 2 contexts x 2 concurrencies, ") and "60 s a restart" in ok["message"]
    over = run_module("sglang_bench_grid", args | {"max_minutes": 1})
    assert over.get("failed") and "over sglang_benchmark_grid_max_minutes (1): 8 cells" in over["msg"], over
    unknown = run_module("sglang_bench_grid", args | {"assumed": {"decode": 5}})
    assert unknown.get("failed") and "sglang_benchmark_grid_assumed: unknown key decode" in unknown["msg"], unknown


def test_the_report_module_judges_the_greedy_agreement_and_the_grid_it_is_given(tmp_path: Path) -> None:
    """Through real Ansible, with the greedy records and a grid cell from the real GPU capture (0.5.13-h100-grid)."""
    from test_modules import run_module

    from sglang_sm120.release.records import Releases

    capture = DATA / "real-server/0.5.13-h100-grid"
    releases = Releases(tmp_path / "opt")
    rid = releases.create("c" * 64, {})
    releases.set_state(rid, "ready")
    greedy = {name: json.loads((capture / f"greedy-{name}.json").read_text()) for name in ("eagle3", "baseline")}
    runs = [
        {"profile": name, "slot": "grid", "context_tokens": 0, "path": str(capture / f"run-{name}-c1-x0.json")}
        for name in ("eagle3", "baseline")
    ]
    args = {"root": str(tmp_path / "opt"), "release": rid, "host": "gpu-1", "output_len": 64, "configured_profile": "eagle3", "runs": runs}
    result = run_module(
        "sglang_report", args | {"greedy": greedy, "agreement_min": 0.25, "workload": {"concurrency": 1, "context_tokens": 0}}
    )
    assert not result.get("failed"), result.get("msg")
    agreement = result["verdict"]["agreement"]
    assert (agreement["agreed"], agreement["prompts"], agreement["passed"]) == (2, 8, True)
    assert result["grid"]["ratios"][0]["class"] == "loses" and result["grid"]["workload"]["profile"] == "baseline"
    strict = run_module("sglang_report", args | {"greedy": greedy, "agreement_min": 0.5, "gate": "fail"})
    assert strict["verdict"]["status"] == "fail" and strict["verdict"]["message"].endswith("eagle3's outputs leave the target's")
