"""One deploy at a time per host: a lock file naming its holder, written atomically.

Plain Python, standard library only, no Ansible imports. Two sides use it:
- the host (library/sglang_lock.py): create, take over or remove the lock file;
- the controller (playbooks/lookup_plugins/sglang_lock_holder.py): name this run (user,
  controller, the ansible-playbook process and its start time) and say whether the process that
  holds a lock still runs there.

The lock file is never visible empty: the full record is written to a temporary file in the same
directory, then hard-linked to the lock path (the link fails if the lock exists, so creation is
exclusive). Creating, taking over and removing happen under an flock of the lock's directory, so
two runs that both find a dead run's lock cannot both take it.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import multiprocessing
import os
import pwd
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from ..errors import ToolkitError
from ..files import directory_lock

# How to break a lock by hand, unless the caller names a better way (the playbook command).
BREAK_HINT = "remove {path} on the host"


class LockError(ToolkitError):
    """Another run holds the lock; the message names it and how to break it."""


# ---------------------------------------------------------------------------------------------
# The controller side: who is this run, and does the process of a lock's holder still run here?


def controller_user() -> str:
    """The controller's real user, from the password database ($USER may be unset or wrong)."""
    try:
        name = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        name = getpass.getuser()
    sudo_user = os.environ.get("SUDO_USER")
    return f"{name} (sudo from {sudo_user})" if sudo_user and sudo_user != name else name


def controller_id() -> str:
    """Names this controller and its pid namespace: hostname, /etc/machine-id, pid namespace.

    Two controllers (or two containers of one machine) never share it, so a pid recorded under it
    can be checked only where it means the same process."""
    parts = [socket.gethostname()]
    for source in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        with contextlib.suppress(OSError):
            machine = Path(source).read_text(encoding="ascii").strip()
            if machine:
                parts.append(machine)
                break
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return "/".join(parts)


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    return ""


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), or None if no such process."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    return data.rsplit(")", 1)[1].split()


def process_start(pid: int) -> str | None:
    """When the process started, as a string that differs for any later process with the same pid.

    Linux: boot id and /proc/<pid>/stat starttime (clock ticks since boot); elsewhere `ps -o lstart`.
    None if there is no such process."""
    if Path("/proc/self/stat").exists():
        fields = _proc_stat(pid)
        # starttime is field 22 of stat; the list starts at field 3 (state).
        return None if fields is None else f"{_boot_id()}:{fields[19]}"
    try:
        out = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, check=False)
    except OSError:
        return None
    return out.stdout.strip() or None


def process_state(pid: int, start: str) -> str:
    """running, gone (no such process, or a zombie), reused (another process has the pid now) or unknown."""
    if Path("/proc/self/stat").exists():
        fields = _proc_stat(pid)
        if fields is None or fields[0] == "Z":
            return "gone"
        return "running" if f"{_boot_id()}:{fields[19]}" == start else "reused"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        pass  # another user's process: it exists
    now = process_start(pid)
    if now is None:
        return "unknown"
    return "running" if now == start else "reused"


def playbook_pid() -> int:
    """The pid of the ansible-playbook process this code runs in or under.

    Ansible templates a task (and so runs lookups) in a worker forked from the ansible-playbook
    process; the worker is a multiprocessing child whose parent is that process."""
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and parent.pid else os.getpid()


def run_holder(playbook: str = "?", pid: int | None = None) -> dict[str, Any]:
    """This run's holder record: run_id, user, controller, pid, playbook, controller_id, pid_start."""
    pid = playbook_pid() if pid is None else pid
    cid = controller_id()
    start = process_start(pid) or "?"
    run_id = hashlib.sha256(f"{cid}|{pid}|{start}".encode()).hexdigest()[:12]
    return {
        "run_id": run_id,
        "user": controller_user(),
        "controller": socket.gethostname(),
        "pid": pid,
        "playbook": playbook,
        "controller_id": cid,
        "pid_start": start,
    }


def check_holder(held: dict[str, Any], me: dict[str, Any]) -> dict[str, Any]:
    """The controller's verdict on a lock's holder: dead only if it ran here and its process is gone.

    Returns run_id and since (so the host takes over only that exact lock), dead and why."""
    verdict = {"run_id": held.get("run_id"), "since": held.get("since"), "dead": False}
    if held.get("controller_id") != me.get("controller_id") or not isinstance(held.get("pid"), int):
        return {**verdict, "why": f"it was started from another controller ({held.get('controller', '?')})"}
    pid, where = held["pid"], held.get("controller", "?")
    state = process_state(pid, str(held.get("pid_start", "?")))
    why = {
        "gone": f"its process {pid} no longer exists on {where}",
        "reused": f"its process {pid} no longer exists on {where} (the pid now belongs to a later process)",
        "running": f"its process {pid} is still running on {where}",
        "unknown": f"whether its process {pid} still runs on {where} cannot be told",
    }[state]
    return {**verdict, "dead": state in ("gone", "reused"), "why": why}


# ---------------------------------------------------------------------------------------------
# The host side: the lock file.


def describe(record: dict[str, Any]) -> str:
    """run_id=..., user=..., controller=..., pid=..., playbook=..., since <UTC time>."""
    who = ", ".join(f"{key}={record[key]}" for key in ("run_id", "user", "controller", "pid", "playbook") if key in record)
    since = record.get("since")
    if isinstance(since, (int, float)):
        who += ", since " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
    return who


def read(path: str) -> dict[str, Any] | None:
    """The lock's record; None if there is no lock. An unreadable lock (not written by this code)
    is reported as run_id=? since its modification time."""
    lock = Path(path)
    try:
        text = lock.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
        if isinstance(record, dict) and "run_id" in record:
            return record
    except ValueError:
        pass
    try:
        return {"run_id": "?", "since": lock.stat().st_mtime, "unreadable": True}
    except FileNotFoundError:
        return None


def _create(lock: Path, record: dict[str, Any]) -> None:
    """Write the full record to a temporary file beside the lock, then link it to the lock path:
    exclusive (FileExistsError if a lock exists) and never visible empty."""
    tmp = lock.with_name(f".{lock.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, lock)
    finally:
        tmp.unlink(missing_ok=True)


def _same_controller(held: dict[str, Any], holder: dict[str, Any]) -> bool:
    return bool(held.get("controller_id")) and held.get("controller_id") == holder.get("controller_id") and isinstance(held.get("pid"), int)


def acquire(
    path: str,
    holder: dict[str, Any],
    stale_minutes: float,
    *,
    holder_check: dict[str, Any] | None = None,
    defer_same_controller: bool = False,
    break_hint: str = BREAK_HINT,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Take the lock for holder, or raise LockError naming the run that holds it.

    A lock of this same run is re-entered. A lock whose run was started from this controller is
    taken over only when holder_check (the controller's check_holder verdict on that very lock)
    says its process is dead, never because of its age; without a verdict, defer_same_controller
    returns blocked_by so the caller can ask the controller. A lock from another controller (or
    unreadable) is taken over once it is older than stale_minutes. dry_run changes nothing.

    Returns acquired (this call took it), held (the run holds it afterwards, or would), holder,
    and took_over plus message when a dead or stale run's lock was taken over."""
    lock = Path(path)
    record = {**holder, "since": time.time()}
    if not dry_run:
        lock.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.nullcontext() if dry_run else directory_lock(lock.parent):
        current = read(path)
        if current is None:
            if not dry_run:
                _create(lock, record)
            return {"acquired": not dry_run, "held": True, "holder": record}
        if current.get("run_id") == holder.get("run_id"):
            return {"acquired": False, "held": True, "holder": current}
        age = (time.time() - float(current.get("since") or 0)) / 60
        hint = break_hint.format(path=path)
        if _same_controller(current, holder):
            matches = bool(holder_check) and (holder_check.get("run_id"), holder_check.get("since")) == (
                current.get("run_id"),
                current.get("since"),
            )
            if matches and holder_check.get("dead"):
                message = f"took over the lock of a dead run: {describe(current)} ({holder_check.get('why')})"
            elif defer_same_controller and not matches:
                return {"acquired": False, "held": False, "holder": record, "blocked_by": current}
            else:
                why = holder_check.get("why") if matches else "it was started from this controller and its process was not checked"
                raise LockError(
                    f"another deploy holds {path} ({describe(current)}; {age:.0f} min ago): {why}. "
                    f"A live run's lock is never taken over: wait for it, or stop it; if it is gone, break the lock: {hint}"
                )
        elif age >= stale_minutes:
            message = f"took over a stale lock ({age:.0f} min old, more than {stale_minutes:g} min): {describe(current)}"
        else:
            raise LockError(
                f"another deploy holds {path} ({describe(current)}; {age:.0f} min ago), started from another controller "
                f"(its process cannot be checked from here). Wait for it; if that run is gone, break the lock: {hint} "
                f"(a lock from another controller is taken over after {stale_minutes:g} min)"
            )
        record["took_over"] = {key: value for key, value in current.items() if key != "took_over"}
        if not dry_run:
            lock.unlink()
            _create(lock, record)
        return {"acquired": not dry_run, "held": True, "holder": record, "took_over": record["took_over"], "message": message}


def release(path: str, run_id: str) -> bool:
    """Remove the lock if run_id holds it; returns whether it was removed."""
    lock = Path(path)
    if not lock.parent.is_dir():
        return False
    with directory_lock(lock.parent):
        current = read(path)
        if current is None or current.get("run_id") != run_id:
            return False
        lock.unlink()
        return True


def break_lock(path: str, dry_run: bool = False) -> dict[str, Any] | None:
    """Remove the lock whoever holds it (the operator's decision); returns the record removed, or None."""
    lock = Path(path)
    if not lock.parent.is_dir():
        return None
    with contextlib.nullcontext() if dry_run else directory_lock(lock.parent):
        current = read(path)
        if current is not None and not dry_run:
            lock.unlink()
        return current
