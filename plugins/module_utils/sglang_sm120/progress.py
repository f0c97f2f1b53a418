"""Progress of a long wait (a build, a start, a canary, a benchmark): the record a polling module
returns and the one line the controller prints for it.

Plain Python, no Ansible imports. The polling modules (sglang_build state=finished, sglang_health)
return ``progress`` as ``Progress.to_dict()``; the stdout callback plugins/callback/sglang_progress.py
reads it back with ``Progress.from_dict()``, prints ``progress_line()`` and, with ``Throttle``,
does so at a steady interval whatever the poll interval is.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional

PROGRESS_FIELDS = ("what", "phase", "elapsed_s", "timeout_s", "last_log_line")
LINE_WIDTH = 200  # a log line longer than this is cut (a ninja line can be 2000 characters)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# `== 2026-01-01T12:00:00Z build`: the phase markers build.sh writes into a build's log.
_MARKER = re.compile(r"^== \S+ (?P<phase>.+)$")


@dataclass(frozen=True)
class Progress:
    """Where one long wait stands: what runs, its phase, seconds since it started, its time limit, its log's last line."""

    what: str
    phase: str
    elapsed_s: float
    timeout_s: float
    last_log_line: str = ""

    @property
    def remaining_s(self) -> float:
        """Seconds left before the wait's time limit (0 once past it)."""
        return max(0.0, self.timeout_s - self.elapsed_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Optional[Progress]:
        """The record a module returned, or None when `data` is not one (a task that is not progress-aware)."""
        if not isinstance(data, Mapping) or not data.get("what"):
            return None
        try:
            return cls(
                what=str(data["what"]),
                phase=str(data.get("phase") or ""),
                elapsed_s=float(data.get("elapsed_s") or 0),
                timeout_s=float(data.get("timeout_s") or 0),
                last_log_line=str(data.get("last_log_line") or ""),
            )
        except (TypeError, ValueError):
            return None


def clean_line(line: str, width: int = LINE_WIDTH) -> str:
    """One log line as a terminal should show it: the text after its last carriage return (a progress
    bar redraws itself with \\r), no colour escapes, no trailing blanks, cut to `width` characters."""
    line = _ANSI.sub("", line.rstrip("\r").rsplit("\r", 1)[-1]).rstrip()
    line = "".join(ch if ch.isprintable() else " " for ch in line)
    return line if len(line) <= width else line[: width - 3] + "..."


def last_text_line(text: str | Sequence[str], width: int = LINE_WIDTH) -> str:
    """The last line of `text` (or of a list of lines) that is not blank, cleaned; "" when there is none."""
    lines = text.split("\n") if isinstance(text, str) else list(text)
    for line in reversed(lines):
        cleaned = clean_line(line, width)
        if cleaned.strip():
            return cleaned
    return ""


def last_log_line(path: str | os.PathLike[str], width: int = LINE_WIDTH, window: int = 16384) -> str:
    """The last non-blank line of the log at `path`, read from its last `window` bytes; "" when the
    log is missing or empty (a wait must never fail because its log cannot be read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - window))
            return last_text_line(handle.read().decode("utf-8", "replace"), width)
    except OSError:
        return ""


def log_phase(path: str | os.PathLike[str], default: str, window: int = 65536) -> str:
    """The phase a build log's last `== <time> <phase>` marker names (start, build, prebuilt: ...), else `default`."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - window))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return default
    for line in reversed(text.splitlines()):
        match = _MARKER.match(line.strip())
        if match:
            return clean_line(match.group("phase"), 80)
    return default


def build_progress(item: Mapping[str, Any], running: Mapping[str, Any]) -> dict[str, Any]:
    """The progress record of a running build: `item` is the plan's entry, `running` what the build
    pipeline's wait() returned for it (phase, elapsed, log)."""
    return Progress(
        what=f"build of {item['name']} {item['key'][:12]}",
        phase=f"{running.get('phase') or 'source'}: {log_phase(running['log'], 'start')}",
        elapsed_s=float(running["elapsed"]),
        timeout_s=float(item["spec"].get("timeout_minutes", 600)) * 60,
        last_log_line=last_log_line(running["log"]),
    ).to_dict()


def job_finished(results_file: str | os.PathLike[str]) -> bool:
    """Whether the background job (an Ansible `async` task) whose results file this is has ended.

    Ansible's async wrapper writes ``{"started": 1, "finished": 0, ...}`` there while the job runs
    and replaces it with the module's own result when it ends (the rule ``async_status`` applies).
    A file that is missing or half-written reads as still running."""
    try:
        with open(results_file, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return False
    return isinstance(data, Mapping) and ("started" not in data or bool(data.get("finished")))


def wait_job(
    results_file: str | os.PathLike[str], wait_seconds: float, sleep: Callable[[float], None] = time.sleep, step: float = 0.5
) -> bool:
    """Wait up to `wait_seconds` for the background job to end; whether it has."""
    deadline = time.monotonic() + max(0.0, wait_seconds)
    while not job_finished(results_file):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sleep(min(step, left))
    return True


def clock(seconds: float) -> str:
    """Seconds as H:MM:SS (or M:SS under an hour)."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_line(host: str, progress: Progress) -> str:
    """The line printed for one poll of a long wait."""
    line = f"WAITING [{host}]: {progress.what}"
    if progress.phase:
        line += f" ({progress.phase})"
    line += f": {clock(progress.elapsed_s)} elapsed"
    if progress.timeout_s > 0:
        line += f", {clock(progress.remaining_s)} left of {clock(progress.timeout_s)}"
    if progress.last_log_line:
        line += f" | {progress.last_log_line}"
    return line


def retry_line(host: str, task: str, attempts: int, retries: int, elapsed_s: Optional[float] = None) -> str:
    """The line printed for a retry of a task that returns no progress: still waiting, not failed."""
    line = f"WAITING [{host}]: {task}: attempt {attempts}, {max(0, retries - attempts)} retries left"
    if elapsed_s is not None:
        line += f", {clock(elapsed_s)} elapsed"
    return line


class Throttle:
    """Says when a wait's next line is due: at its first poll, then once every `interval_s` seconds
    (0: every poll). One per callback; keyed by (host, task)."""

    def __init__(self, interval_s: float, now: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = max(0.0, float(interval_s))
        self._now = now
        self._last: dict[Hashable, float] = {}
        self._first: dict[Hashable, float] = {}

    def due(self, key: Hashable) -> bool:
        """Whether to print now for `key`; records the time when it is."""
        now = self._now()
        self._first.setdefault(key, now)
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            return False
        self._last[key] = now
        return True

    def since_first(self, key: Hashable) -> float:
        """Seconds since the first poll of `key` was seen (0 if never)."""
        first = self._first.get(key)
        return 0.0 if first is None else self._now() - first

    def forget(self, key: Hashable) -> None:
        """The wait of `key` ended: its next wait starts afresh."""
        self._last.pop(key, None)
        self._first.pop(key, None)
