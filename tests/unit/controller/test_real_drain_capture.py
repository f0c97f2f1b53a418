"""The toolkit's drain, answer check and start-failure catalogue on what a REAL SGLang 0.5.13 server did on an H100
(tests/data/real-server/0.5.13-h100-drain/, made by scripts/real_drain_proof.py; the README section says how)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from sglang_sm120.fleet import drain
from sglang_sm120.launch import start_failures
from sglang_sm120.serve import answers

ROOT = Path(__file__).resolve().parents[3]
CAPTURE = ROOT / "tests/data/real-server/0.5.13-h100-drain"
DRAIN = json.loads((CAPTURE / "drain.json").read_text())
SUMMARY = json.loads((CAPTURE / "summary.json").read_text())


def test_the_drain_read_real_loads_and_ended_only_after_the_last_streamed_request() -> None:
    requests = DRAIN["requests"]
    assert [r["output_len"] for r in requests] == [96, 192, 288, 384, 480, 576]
    assert all(r["ok"] and r["tokens"] == r["output_len"] for r in requests)
    assert DRAIN["result"]["drained"] and DRAIN["drained_after_last_request"]
    last = max(r["ended"] for r in requests)
    assert DRAIN["last_request_ended"] == last and DRAIN["drained_at"] >= last
    counts = [n for _, n in DRAIN["result"]["history"]]
    assert max(counts) == 6 and counts[-1] == 0
    six = counts.index(6)  # the first poll saw the requests the scheduler had taken in so far, then all six
    assert all(later < earlier for earlier, later in zip(counts[six:], counts[six + 1 :])), counts
    # the last zero was read after the last request ended (drain_started + its elapsed time)
    assert DRAIN["drain_started"] + DRAIN["result"]["history"][-1][0] >= last - 0.25


def test_v1_loads_answered_500_under_enable_metrics_and_the_drain_read_get_load_naming_why() -> None:
    assert (CAPTURE / "loads-v1_loads.txt").read_text().startswith("500\n")
    status, body = (CAPTURE / "loads-get_load.txt").read_text().split("\n", 1)
    assert status == "200" and drain.parse_get_load(json.loads(body)) == (1, 0)
    assert {p["path"] for p in DRAIN["polls"]} == {"/get_load"}
    assert all("v1-loads-500-metrics-middleware-fastapi-0137" in p["note"] for p in DRAIN["polls"])
    assert SUMMARY["fastapi"] == "0.165.0" and SUMMARY["sglang_version"] == "0.5.13" and "--enable-metrics" in SUMMARY["argv"]
    assert SUMMARY["key_anywhere_kept"] == 0


def test_the_answer_check_reads_what_the_real_parser_left_of_a_random_models_call() -> None:
    """Random weights run the call's free index digits to max_tokens: the kimi_k2 parser finds no complete call, SGLang
    returns the markup as content, and the check says so (a real Kimi model closes the call; not shown here)."""
    tool = SUMMARY["tool_call"]
    assert not tool["ok"] and "--tool-call-parser" in SUMMARY["argv"]
    assert tool["reason"].startswith("no structured tool_calls: the call came back as text in content ('<|tool_calls_section_begin|>")
    assert "functions.get_weather:" in tool["reason"]
    assert answers.judge_tool_call(200, json.dumps({"choices": [{"message": {"content": "x", "tool_calls": None}}]}), "kimi_k2")


def test_the_reasoning_parser_stop_is_named_by_its_catalogue_entry() -> None:
    log = (CAPTURE / "reasoning-parser-server.log").read_text().splitlines()
    assert json.loads((CAPTURE / "reasoning-parser-summary.json").read_text())["start"]["exit"] == 137
    entries = start_failures.parse_catalogue(yaml.safe_load((ROOT / "roles/sglang_launch/files/start-failures.yml").read_text()))
    found = start_failures.match_log(log, "exited", start_failures.log_signatures(entries, "0.5.13"))
    assert found and found["name"] == "reasoning-parser-think-end-not-one-token"
    assert not [s for s in start_failures.log_signatures(entries, "0.5.17") if s["id"] == found["name"]]
