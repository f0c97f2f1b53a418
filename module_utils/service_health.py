"""Health-gated start of the SGLang unit: poll GET /health, watch the unit, read the journal.

Plain Python, standard library only, no Ansible imports; library/sglang_health.py wraps it.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional


@dataclass
class HealthPoll:
    healthy: bool
    status: Optional[int]
    active_state: str
    sub_state: str
    restarts: int
    elapsed: float
    last_line: str
    crashed: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def http_status(url: str, timeout: float = 5.0) -> Optional[int]:
    """The HTTP status of GET url, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def unit_state(unit: str) -> dict[str, str]:
    proc = subprocess.run(
        ["systemctl", "show", unit, "-p", "ActiveState,SubState,NRestarts,MainPID,ExecMainStartTimestampMonotonic,InvocationID"],
        capture_output=True,
        text=True,
        check=False,
    )
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def journal(unit: str, since_epoch: Optional[float] = None, lines: int = 40, invocation: str = "") -> list[str]:
    cmd = ["journalctl", "--no-pager", "-o", "cat", "-n", str(lines)]
    cmd += [f"_SYSTEMD_INVOCATION_ID={invocation}"] if invocation else ["-u", unit]
    if since_epoch is not None:
        cmd += ["--since", f"@{int(since_epoch)}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return [line for line in proc.stdout.splitlines() if line.strip()]


def poll(unit: str, url: str, started: float, wait_seconds: float, interval: float = 2.0, restarts_baseline: int = 0) -> HealthPoll:
    """Wait up to wait_seconds for 200 from url; return early when healthy or when the unit has crashed."""
    deadline = time.monotonic() + wait_seconds
    while True:
        state = unit_state(unit)
        status = http_status(url)
        restarts = int(state.get("NRestarts", "0") or 0)
        active, sub = state.get("ActiveState", "unknown"), state.get("SubState", "unknown")
        crashed = active in ("failed", "inactive") or sub == "auto-restart" or restarts > restarts_baseline
        healthy = status == 200 and active == "active"
        if healthy or crashed or time.monotonic() >= deadline:
            tail = journal(unit, started, 1)
            return HealthPoll(healthy, status, active, sub, restarts, round(time.time() - started, 1), tail[-1] if tail else "", crashed)
        time.sleep(min(interval, max(0.1, deadline - time.monotonic())))


def findings(lines: Sequence[str], checks: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """Journal lines that match a check's pattern: optimisations that were switched off at run time."""
    out = []
    for check in checks:
        pattern = re.compile(check["pattern"])
        for line in lines:
            if pattern.search(line):
                out.append({"meaning": check["meaning"], "line": line.strip()[:300]})
                break
    return out
