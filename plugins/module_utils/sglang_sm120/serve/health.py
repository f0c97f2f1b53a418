"""Health-gated start of the SGLang unit: poll GET /health, watch the unit, read the journal.

Plain Python, standard library only, no Ansible imports; plugins/modules/sglang_health.py wraps it.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any, Optional

# The phases of a real SGLang start, as GET /health sees them: the port stays closed while the model
# loads and CUDA graphs are captured, then /health answers 503 until SGLang's own warm-up request has
# succeeded, then 200 (each /health generates a token: >= 1 s; SGLang answers 503 itself after 20 s).
PHASES = {
    "port closed": "the port is closed: the model is still loading (or the server is not running)",
    "no answer": "the port is open but GET /health did not answer within the probe timeout",
    "503": "GET /health answers 503: SGLang's own warm-up has not succeeded (or the server is stuck)",
    "healthy": "GET /health answers 200",
}


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
    phase: str = "port closed"
    probe_seconds: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def probe(url: str, timeout: float) -> tuple[Optional[int], str, float]:
    """GET url once: (HTTP status or None, phase, seconds it took). The phase tells a closed port
    (connection refused) from a server that did not answer in time."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status: Optional[int] = int(response.status)
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        closed = isinstance(reason, ConnectionRefusedError) or isinstance(exc, ConnectionRefusedError)
        return None, "port closed" if closed else "no answer", round(time.monotonic() - started, 3)
    phase = "healthy" if status == 200 else ("503" if status == 503 else f"HTTP {status}")
    return status, phase, round(time.monotonic() - started, 3)


def http_status(url: str, timeout: float = 30.0) -> Optional[int]:
    """The HTTP status of GET url, or None when nothing answers."""
    return probe(url, timeout)[0]


UNIT_PROPERTIES = "ActiveState,SubState,NRestarts,MainPID,ExecMainStartTimestampMonotonic,InvocationID"


def unit_state(unit: str, properties: str = UNIT_PROPERTIES) -> dict[str, str]:
    """`systemctl show` of the unit's `properties` (comma-separated) as a mapping."""
    proc = subprocess.run(
        ["systemctl", "show", unit, "-p", properties],
        capture_output=True,
        text=True,
        check=False,
    )
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def journal(unit: str, since_epoch: Optional[float] = None, lines: int = 40, invocation: str = "") -> list[str]:
    """The unit's last `lines` journal lines (since `since_epoch`), oldest first. Read newest first
    (--reverse) and turned around: with --since, journalctl's -n counts from the since point, so
    `-n 30 --since X` gives the FIRST 30 lines after X (seen with systemd 252), and a start that
    printed more than that would hide its crash."""
    cmd = ["journalctl", "--no-pager", "-o", "cat", "--reverse", "-n", str(lines)]
    cmd += [f"_SYSTEMD_INVOCATION_ID={invocation}"] if invocation else ["-u", unit]
    if since_epoch is not None:
        cmd += ["--since", f"@{int(since_epoch)}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return [line for line in reversed(proc.stdout.splitlines()) if line.strip()]


def poll(
    unit: str,
    url: str,
    started: float,
    wait_seconds: float,
    interval: float = 2.0,
    restarts_baseline: int = 0,
    probe_timeout: float = 30.0,
) -> HealthPoll:
    """Wait up to wait_seconds for 200 from url; return early when healthy or when the unit has crashed.
    Each probe may take up to probe_timeout (a generating /health is slow under load), so one call can
    last up to wait_seconds + probe_timeout; at least one probe is always made."""
    deadline = time.monotonic() + wait_seconds
    while True:
        status, phase, took = probe(url, probe_timeout)
        state = unit_state(unit)
        restarts = int(state.get("NRestarts", "0") or 0)
        active, sub = state.get("ActiveState", "unknown"), state.get("SubState", "unknown")
        crashed = active in ("failed", "inactive") or sub == "auto-restart" or restarts > restarts_baseline
        healthy = status == 200 and active == "active"
        if healthy or crashed or time.monotonic() >= deadline:
            tail = journal(unit, started, 1)
            return HealthPoll(
                healthy, status, active, sub, restarts, round(time.time() - started, 1), tail[-1] if tail else "", crashed, phase, took
            )
        time.sleep(min(interval, max(0.1, deadline - time.monotonic())))
