"""One deploy at a time per host: an exclusive lock file naming its holder.

Plain Python, standard library only, no Ansible imports; library/sglang_lock.py wraps it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class LockError(Exception):
    """Another run holds the lock; the message names it."""


def acquire(path: str, holder: dict[str, Any], stale_minutes: float) -> dict[str, Any]:
    """Create the lock; refuse when another run holds it, unless that lock is older than stale_minutes."""
    lock = Path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    record = {**holder, "since": time.time()}
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            current = read(path)
            if current.get("run_id") == holder.get("run_id"):
                return {"acquired": False, "held": True, "holder": current}
            age = (time.time() - float(current.get("since", 0))) / 60
            if age < stale_minutes:
                who = ", ".join(f"{k}={v}" for k, v in current.items() if k != "since")
                raise LockError(
                    f"another deploy holds {path} ({who}; for {age:.0f} min). Wait for it, or if it died, "
                    f"remove {path} (taken over automatically after {stale_minutes:.0f} min)"
                ) from None
            lock.unlink(missing_ok=True)
            record["took_over"] = current
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        return {"acquired": True, "held": True, "holder": record}
    raise LockError(f"could not take {path}")


def read(path: str) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"run_id": "?", "since": 0}


def release(path: str, run_id: str) -> bool:
    """Remove the lock if this run holds it; returns whether it was removed."""
    current = read(path)
    if not Path(path).exists() or current.get("run_id") != run_id:
        return False
    Path(path).unlink()
    return True
