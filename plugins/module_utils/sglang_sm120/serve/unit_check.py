"""The unit's own checks before it is linked or started, made with systemd's tools: ``systemd-analyze verify``
(any line it prints fails) and ``systemd-analyze security --offline`` (the exposure it rates must be at most the
ceiling). Both outcomes are recorded beside the unit with the key of what decided them (the unit's bytes, the
ceiling, the systemd-analyze binary), so a converge that changed none of these does not run systemd-analyze again.

Ships to the host inside the module ``sglang_unit_check``; standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from ..errors import ToolkitError

EXPOSURE = re.compile(r"Overall exposure level for [^:]+: ([0-9.]+)")

# argv -> (rc, stdout, stderr)
Runner = Callable[[Sequence[str]], "tuple[int, str, str]"]


class UnitCheckError(ToolkitError):
    """The unit fails systemd's own checks; nothing was switched or restarted."""


@dataclass(frozen=True)
class UnitCheck:
    score: float
    security_line: str
    cached: bool

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def check_key(unit: str | os.PathLike[str], ceiling: float, analyze: str) -> str:
    """What decides both checks: the unit's bytes, the ceiling, and which systemd-analyze (path, size, mtime)."""
    found = os.stat(analyze)
    digest = hashlib.sha256(Path(unit).read_bytes())
    digest.update(json.dumps([float(ceiling), os.path.realpath(analyze), found.st_size, int(found.st_mtime)]).encode())
    return digest.hexdigest()


def read_stamp(stamp: str | os.PathLike[str], key: str) -> Optional[UnitCheck]:
    """The outcome recorded under ``key`` by an earlier passing check, or None."""
    try:
        data = json.loads(Path(stamp).read_text(encoding="utf-8"))
        if data.get("key") != key:
            return None
        return UnitCheck(float(data["score"]), str(data["security_line"]), True)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_stamp(stamp: str | os.PathLike[str], key: str, outcome: UnitCheck) -> None:
    """Record a passing check atomically; a failure to write only costs the next converge the checks."""
    path = Path(stamp)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"key": key, "score": outcome.score, "security_line": outcome.security_line}, handle)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:
        pass


def exposure(text: str) -> Optional[float]:
    """The overall exposure ``systemd-analyze security`` printed, or None when it printed none."""
    found = EXPOSURE.findall(text)
    return float(found[0]) if found else None


def check_unit(unit: str, ceiling: float, analyze: str, run: Runner, stamp: Optional[str] = None, record: bool = True) -> UnitCheck:
    """Both checks, or their recorded outcome when nothing that decides them changed. Raises UnitCheckError
    naming the unit and what systemd-analyze said; ``record``: write the stamp after a pass (not in check mode)."""
    key = check_key(unit, ceiling, analyze) if stamp else ""
    if stamp:
        kept = read_stamp(stamp, key)
        if kept is not None and kept.score <= ceiling:
            return kept
    rc, out, err = run([analyze, "verify", unit])
    said = (out + err).strip()
    if rc != 0 or said:
        raise UnitCheckError(f"{unit}: systemd-analyze verify says (exit {rc}): {said or 'nothing'}; nothing was switched or restarted")
    rc, out, err = run([analyze, "security", "--offline=true", "--no-pager", unit])
    score = exposure(out)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if score is None or score > ceiling:
        rated = score if score is not None else f"unreadable ({last or err.strip() or f'exit {rc}'})"
        raise UnitCheckError(
            f"{unit}: systemd-analyze security rates its exposure {rated}, expected at most "
            f"sglang_service_security_ceiling={ceiling}; nothing was switched or restarted"
        )
    outcome = UnitCheck(score, last, False)
    if stamp and record:
        write_stamp(stamp, key, outcome)
    return outcome
