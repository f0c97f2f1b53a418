"""playbooks/status.yml's reading of a host: the release record, why current is current, the unit, health, the last start."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from sglang_sm120.release.records import Releases
from sglang_sm120.serve.status import read_status, status_lines

UNIT = {"LoadState": "loaded", "MainPID": "0", "NRestarts": "0"}
ACTIVE = {**UNIT, "ActiveState": "active", "SubState": "running", "MainPID": "4242", "UnitFileState": "enabled"}
STOPPED = {**UNIT, "ActiveState": "inactive", "SubState": "dead", "UnitFileState": "disabled"}


def answers(code: Optional[int]):
    phase = "healthy" if code == 200 else ("port closed" if code is None else str(code))
    return lambda url, timeout: (code, phase, 0.01)


def good(rel: Releases, key: str, manifest: Optional[dict] = None) -> str:
    release_id = rel.create(key, {"k": key})
    rel.set_state(release_id, "ready")
    rel.switch(release_id)
    rel.set_state(release_id, "good", manifest=manifest)
    return release_id


def test_a_serving_host_names_its_current_release_and_last_start(tmp_path: Path) -> None:
    rel = Releases(tmp_path)
    first = good(rel, "a" * 64)
    manifest = {
        "service": {"profile": "eagle3", "health": {"elapsed": 12.5, "phase": "healthy"}},
        "canary": {"ran": True, "ok": True, "phases": [["port closed", 0.1], ["503", 4.0], ["healthy", 6.2]]},
        "fabric": {"status": "ok", "message": "2 ranks"},
    }
    second = good(rel, "b" * 64, manifest)
    status = read_status(str(tmp_path), "sglang.service", "http://127.0.0.1:30000/health", show=lambda unit: ACTIVE, get=answers(200))
    assert status.current == second and status.last_good == second and not status.problems
    assert [r["id"] for r in status.releases] == [first, second]
    lines = status_lines(status)
    assert lines[0].startswith(f"current: {second} (the newest release, good: served and was healthy, current since ")
    assert f"releases (2, oldest first): {first}=good, {second}=good" in lines
    assert "unit: sglang.service active/running (enabled), main PID 4242, 0 restart(s)" in lines
    assert lines[-1] == (
        f"last start of {second}: healthy 12.5 s after its restart; canary passed (phases: port closed at 0.1 s, 503 at 4.0 s,"
        " healthy at 6.2 s); fabric ok"
    )


def test_a_rollback_after_a_bad_release_says_why_the_older_one_is_current(tmp_path: Path) -> None:
    rel = Releases(tmp_path)
    first = good(rel, "a" * 64)
    bad = rel.create("c" * 64, {})
    rel.set_state(bad, "ready")
    rel.switch(bad)
    rel.set_state(bad, "bad", reason="sglang.service crashed")
    rel.switch(first)
    status = read_status(str(tmp_path), "sglang.service", "http://x/health", show=lambda unit: ACTIVE, get=answers(200))
    assert status.current == first
    assert status.why_current.startswith(f"{bad} after it is bad (sglang.service crashed); {first} is good, current since ")


def test_what_disagrees_is_a_problem_and_a_stop_on_purpose_is_not(tmp_path: Path) -> None:
    rel = Releases(tmp_path)
    release_id = good(rel, "a" * 64)
    # active but not answering
    status = read_status(str(tmp_path), "sglang.service", "http://x/health", show=lambda unit: ACTIVE, get=answers(503))
    assert status.problems == ["sglang.service is active but GET http://x/health answered 503"]
    # enabled but dead: it should serve and does not
    crashed = {**STOPPED, "ActiveState": "failed", "SubState": "failed", "UnitFileState": "enabled"}
    status = read_status(str(tmp_path), "sglang.service", "http://x/health", show=lambda unit: crashed, get=answers(None))
    assert status.problems == [f"sglang.service is enabled but failed/failed though release {release_id} is current"]
    assert status_lines(status)[-1] == f"PROBLEM: {status.problems[0]}"
    # stopped and disabled (playbooks/service.yml -e sglang_service_state=stopped; systemd's disable removes the
    # unit's link too): no problem
    status = read_status(str(tmp_path), "sglang.service", "http://x/health", show=lambda unit: STOPPED, get=answers(None))
    assert status.problems == []
    unlinked = {**STOPPED, "LoadState": "not-found", "UnitFileState": ""}
    status = read_status(str(tmp_path), "sglang.service", "http://x/health", show=lambda unit: unlinked, get=answers(None))
    assert status.problems == []
    assert "unit: sglang.service is stopped and disabled (not linked into systemd; playbooks/service.yml starts it)" in status_lines(status)
    assert "health: GET http://x/health -> port closed in 0.01 s" in status_lines(status)
    # the link and the record disagree
    os.replace(tmp_path / "current", tmp_path / "gone")
    os.symlink("releases/9999-ffffffff", tmp_path / "current")
    status = read_status(str(tmp_path), "sglang.service", "http://x/health", show=lambda unit: STOPPED, get=answers(None))
    assert status.problems == [f"{tmp_path / 'current'} points at releases/9999-ffffffff, the record says {release_id}"]


def test_a_host_with_nothing_deployed_and_an_unreadable_record(tmp_path: Path) -> None:
    missing = {**STOPPED, "LoadState": "not-found", "UnitFileState": ""}
    status = read_status(str(tmp_path), "sglang.service", "http://x/health", show=lambda unit: missing, get=answers(None))
    lines = status_lines(status)
    assert lines[:3] == [
        "current: none (nothing was ever switched to on this host)",
        "last known-good: none",
        "releases (0, oldest first): none",
    ]
    assert "unit: sglang.service is not installed" in lines and not status.problems
    (tmp_path / "releases.json").write_text(json.dumps({"schema": "other"}))
    status = read_status(str(tmp_path), "sglang.service", "http://x/health", show=lambda unit: missing, get=answers(None))
    assert len(status.problems) == 1 and "releases.json: expected schema" in status.problems[0]
