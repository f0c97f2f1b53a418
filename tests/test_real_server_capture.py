"""The toolkit's readers on what a REAL SGLang 0.5.13 server printed and answered on an H200 while the
toolkit's own code drove it (tests/data/real-server/0.5.13-h200-toolkit/, made by
scripts/real_server_proof.py; its README says how). If one of these readers stops understanding the
real server, this fails here instead of in a report."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import server_evidence

import bench_report

ROOT = Path(__file__).resolve().parent.parent
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
        [sys.executable, str(ROOT / "bin/sglang-evidence"), "--journal", str(CAPTURE / "server.log"), "--server-info",
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
