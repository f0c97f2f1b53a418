"""What a host serves now, read only: its releases, the current one and why, the unit, health, the last start.

Plain Python, standard library only, no Ansible imports; plugins/modules/sglang_status.py wraps it and
playbooks/status.yml prints its lines. Nothing here changes the host: the release record is read
without its lock (a deploy writes it atomically), the unit through `systemctl show`, health with one GET.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..release.records import ReleaseError, Releases
from .health import probe, unit_state

# The states a release goes through (plugins/module_utils/sglang_sm120/release/records.py).
STATE_MEANS = {
    "building": "being made by a deploy (or one that was interrupted)",
    "ready": "built, patched and audited, never served",
    "good": "served and was healthy",
    "bad": "failed its canary, its start or its health",
}


@dataclass
class Status:
    root: str
    record: str
    releases: list[dict[str, Any]] = field(default_factory=list)  # oldest first: id, state, reason, created, removed
    current: Optional[str] = None
    current_link: Optional[str] = None
    last_good: Optional[str] = None
    why_current: str = ""
    unit: dict[str, Any] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)
    last_start: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _manifest(releases: Releases, release_id: str) -> dict[str, Any]:
    path = releases.path(release_id) / "manifest.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ReleaseError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def why_current(record: Mapping[str, Any]) -> str:
    """Why the current release is the current one, from the record's own states and reasons."""
    current = record.get("current")
    if not current:
        return "nothing was ever switched to on this host"
    entries = record.get("releases", {})
    entry = entries.get(current, {})
    order = list(record.get("order", []))
    newer = order[order.index(current) + 1 :] if current in order else []
    state = entry.get("state", "?")
    switched = [h.get("at", "") for h in record.get("history", []) if h.get("current") == current]
    since = f", current since {switched[-1]}" if switched and switched[-1] else ""
    if not newer:
        return f"the newest release, {state}: {STATE_MEANS.get(state, state)}{since}"
    bad = [r for r in newer if entries.get(r, {}).get("state") == "bad"]
    if bad:
        reason = entries[bad[-1]].get("reason", "")
        return f"{bad[-1]} after it is bad" + (f" ({reason[:200]})" if reason else "") + f"; {current} is {state}{since}"
    listed = ", ".join(f"{r}={entries.get(r, {}).get('state', '?')}" for r in newer)
    return f"rolled back or switched to by name, {state}{since}; newer: {listed}"


def last_start(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The current release's last start as its manifest records it: the health wait, the canary's phases, the fabric."""
    service = manifest.get("service") or {}
    health = service.get("health") or {}
    canary = manifest.get("canary") or {}
    fabric = manifest.get("fabric") or {}
    out: dict[str, Any] = {}
    if health:
        out["healthy_after_s"] = health.get("elapsed")
        out["phase"] = health.get("phase")
    if service.get("profile"):
        out["profile"] = service["profile"]
    if canary:
        out["canary"] = {
            "ran": bool(canary.get("ran")),
            "ok": canary.get("ok"),
            "phases": [list(p) for p in canary.get("phases", [])],
            "reason": canary.get("reason") or canary.get("message") or "",
        }
    if fabric:
        out["fabric"] = {"status": fabric.get("status", "?"), "message": fabric.get("message", "")}
    return out


def unit_fields(unit: str) -> dict[str, str]:
    """`systemctl show` of what the status reports (UnitFileState: enabled, disabled, or empty when systemd has no such unit)."""
    return unit_state(unit, "LoadState,ActiveState,SubState,NRestarts,MainPID,UnitFileState")


def read_status(
    root: str,
    unit: str,
    health_url: str,
    probe_timeout: float = 30.0,
    show: Callable[[str], Mapping[str, str]] = unit_fields,
    get: Callable[[str, float], tuple[Optional[int], str, float]] = probe,
) -> Status:
    """The host's state under ``root`` and of ``unit``; a record that cannot be read is a problem, not an error."""
    releases = Releases(root)
    status = Status(root=str(root), record=str(releases.record))
    try:
        record = releases.summary()
    except ReleaseError as exc:
        status.problems.append(str(exc))
        record = releases.empty()
    entries = record.get("releases", {})
    for release_id in record.get("order", []):
        entry = entries.get(release_id, {})
        status.releases.append(
            {
                "id": release_id,
                "state": entry.get("state", "?"),
                "reason": entry.get("reason", ""),
                "created": entry.get("created", ""),
                "removed": bool(entry.get("removed")),
            }
        )
    status.current = record.get("current")
    status.current_link = record.get("current_link")
    status.last_good = record.get("last_good")
    status.why_current = why_current(record)
    if status.current and status.current_link and Path(status.current_link).name != status.current:
        status.problems.append(f"{releases.current_link} points at {status.current_link}, the record says {status.current}")
    if status.current:
        try:
            status.last_start = last_start(_manifest(releases, status.current))
        except ReleaseError as exc:
            status.problems.append(str(exc))
    fields = show(unit)
    status.unit = {
        "name": unit,
        "load_state": fields.get("LoadState", "unknown"),
        "enabled": fields.get("UnitFileState", "") or "unknown",
        "active_state": fields.get("ActiveState", "unknown"),
        "sub_state": fields.get("SubState", "unknown"),
        "main_pid": int(fields.get("MainPID") or 0),
        "restarts": int(fields.get("NRestarts") or 0),
    }
    code, phase, seconds = get(health_url, probe_timeout)
    status.health = {"url": health_url, "status": code, "phase": phase, "seconds": seconds}
    if status.unit["active_state"] == "active" and code != 200:
        status.problems.append(f"{unit} is active but GET {health_url} answered {phase}")
    if status.current and status.unit["active_state"] != "active" and status.unit["enabled"] == "enabled":
        # enabled but not running: it should serve and does not (playbooks/service.yml's stop also disables it)
        status.problems.append(
            f"{unit} is enabled but {status.unit['active_state']}/{status.unit['sub_state']} though release {status.current} is current"
        )
    return status


def status_lines(status: Status) -> list[str]:
    """The status as an operator reads it, a line each."""
    lines = []
    if status.current:
        lines.append(f"current: {status.current} ({status.why_current})")
    else:
        lines.append(f"current: none ({status.why_current})")
    lines.append(f"last known-good: {status.last_good or 'none'}")
    listed = [f"{r['id']}={r['state']}{' (removed)' if r['removed'] else ''}" for r in status.releases]
    lines.append(f"releases ({len(listed)}, oldest first): " + (", ".join(listed) or "none"))
    unit = status.unit
    if unit["load_state"] == "not-found" and status.current:
        # systemd's disable removes the link to the release's unit: a stop with playbooks/service.yml, or a failed first deploy
        lines.append(f"unit: {unit['name']} is stopped and disabled (not linked into systemd; playbooks/service.yml starts it)")
    elif unit["load_state"] == "not-found":
        lines.append(f"unit: {unit['name']} is not installed")
    else:
        lines.append(
            f"unit: {unit['name']} {unit['active_state']}/{unit['sub_state']} ({unit['enabled']}), main PID {unit['main_pid']},"
            f" {unit['restarts']} restart(s)"
        )
    health = status.health
    lines.append(f"health: GET {health['url']} -> {health['phase']} in {health['seconds']} s")
    start = status.last_start
    if start:
        parts = []
        if start.get("healthy_after_s") is not None:
            parts.append(f"healthy {start['healthy_after_s']} s after its restart")
        canary = start.get("canary")
        if canary and canary["ran"]:
            phases = ", ".join(f"{p[0]} at {p[1]} s" for p in canary["phases"] if len(p) == 2) or "none recorded"
            parts.append(f"canary {'passed' if canary['ok'] else 'failed'} (phases: {phases})")
        elif canary:
            parts.append(f"no canary ({canary['reason']})" if canary["reason"] else "no canary")
        fabric = start.get("fabric")
        if fabric:
            parts.append(f"fabric {fabric['status']}")
        lines.append(f"last start of {status.current}: " + "; ".join(parts))
    for problem in status.problems:
        lines.append(f"PROBLEM: {problem}")
    return lines
