"""The 0.5.13 lock's own check (issue 50, item 2) on a REAL SGLang 0.5.13 server on an H100: the release's closure as
roles/toolkit_defaults/files/locks/sglang-0.5.13.txt locks it (fastapi held below 0.137) served with --enable-metrics,
and the toolkit's drain read GET /v1/loads, which the index's fastapi of the day (0.165.0) turned into a 500
(tests/data/real-server/0.5.13-h100-drain/). Made by scripts/real_drain_proof.py; the README section says how."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sglang_sm120.fleet import drain

ROOT = Path(__file__).resolve().parents[3]
CAPTURE = ROOT / "tests/data/real-server/0.5.13-h100-drain-locked"
UNLOCKED = ROOT / "tests/data/real-server/0.5.13-h100-drain"
DRAIN = json.loads((CAPTURE / "drain.json").read_text())
SUMMARY = json.loads((CAPTURE / "summary.json").read_text())
LOCK = (ROOT / "roles/toolkit_defaults/files/locks/sglang-0.5.13.txt").read_text()


def locked(name: str, python: str = "3.12") -> str:
    """The version the lock gives `name` on that Python (its line without a marker, or with one naming it)."""
    for match in re.finditer(rf"^{re.escape(name)}==(\S+)(?: ; (.*?))? \\$", LOCK, re.M):
        if match.group(2) is None or f'"{python}"' in match.group(2):
            return match.group(1)
    raise AssertionError(f"{name} is not in the lock")


def test_the_server_ran_the_locked_fastapi_and_starlette() -> None:
    assert (SUMMARY["sglang_version"], SUMMARY["python"][:4]) == ("0.5.13", "3.12")
    assert SUMMARY["fastapi"] == locked("fastapi") == "0.136.3" and SUMMARY["starlette"] == locked("starlette")
    assert "--enable-metrics" in SUMMARY["argv"] and SUMMARY["key_anywhere_kept"] == 0
    assert json.loads((UNLOCKED / "summary.json").read_text())["fastapi"] == "0.165.0"  # the unlocked run's


def test_v1_loads_answered_200_under_enable_metrics_and_the_drain_read_it() -> None:
    status, body = (CAPTURE / "loads-v1_loads.txt").read_text().split("\n", 1)
    assert status == "200" and drain.parse_v1_loads(json.loads(body)) == (1, 0)
    assert (UNLOCKED / "loads-v1_loads.txt").read_text().startswith("500\n")
    assert {p["path"] for p in DRAIN["polls"]} == {"/v1/loads"} and all(p["note"] == "" for p in DRAIN["polls"])
    assert SUMMARY["endpoints_during_load"]["/v1/loads"]["status"] == 200


def test_the_drain_ended_only_after_the_last_streamed_request() -> None:
    requests = DRAIN["requests"]
    assert all(r["ok"] and r["tokens"] == r["output_len"] for r in requests) and len(requests) == 6
    assert DRAIN["result"]["drained"] and DRAIN["drained_after_last_request"]
    last = max(r["ended"] for r in requests)
    assert DRAIN["drained_at"] >= last and DRAIN["drain_started"] + DRAIN["result"]["history"][-1][0] >= last - 0.25
    counts = [n for _, n in DRAIN["result"]["history"]]
    assert max(counts) == 6 and counts[-1] == 0
