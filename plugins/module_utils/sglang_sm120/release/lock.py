"""One deploy at a time per host: a lock file naming its holder, written atomically.

Plain Python, standard library only, no Ansible imports. Two sides use it:
- the host (plugins/modules/sglang_lock.py): create, take over or remove the lock file;
- the controller (plugins/lookup/sglang_lock_holder.py): name this run (user,
  controller, the ansible-playbook process and its start time) and say whether the process that
  holds a lock still runs there.

The lock file is never visible empty: the full record is written to a temporary file in the same
directory, then hard-linked to the lock path (the link fails if the lock exists, so creation is
exclusive); a renewal replaces it by rename. Creating, renewing, taking over and removing happen
under an flock of the lock's directory, so two runs that both find a dead run's lock cannot both
take it.

The holder renews the lock while it lives (renew(), called by every poll of a long wait, and by
a Heartbeat around a module that blocks): the record's renewed_at is its heartbeat. A lock is
taken over only when its holder is known to be gone - its process no longer exists on this
controller, or (from another controller) its heartbeat stopped for longer than a bound that does
not depend on how long a build takes - never because of its age.
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
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Optional

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

    Returns run_id and since (so the host takes over only that exact lock), dead, state (running,
    gone, reused, unknown, or elsewhere for a run of another controller) and why."""
    verdict = {"run_id": held.get("run_id"), "since": held.get("since"), "dead": False}
    if held.get("controller_id") != me.get("controller_id") or not isinstance(held.get("pid"), int):
        return {**verdict, "state": "elsewhere", "why": f"it was started from another controller ({held.get('controller', '?')})"}
    pid, where = held["pid"], held.get("controller", "?")
    state = process_state(pid, str(held.get("pid_start", "?")))
    why = {
        "gone": f"its process {pid} no longer exists on {where}",
        "reused": f"its process {pid} no longer exists on {where} (the pid now belongs to a later process)",
        "running": f"its process {pid} is still running on {where}",
        "unknown": f"whether its process {pid} still runs on {where} cannot be told",
    }[state]
    return {**verdict, "dead": state in ("gone", "reused"), "state": state, "why": why}


# ---------------------------------------------------------------------------------------------
# The host side: the lock file.


def _utc(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def _duration(seconds: float) -> str:
    """12 s, 7 min, 3.5 h: how long ago, for a message."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def heartbeat(record: Mapping[str, Any]) -> float:
    """When the holder last showed it lives: renewed_at, else since (a lock written before renewals
    existed, or an unreadable one: its modification time)."""
    for key in ("renewed_at", "since"):
        value = record.get(key)
        if isinstance(value, (int, float)):
            return float(value)
    return 0.0


def describe(record: Mapping[str, Any]) -> str:
    """run_id=..., user=..., controller=..., pid=..., playbook=..., since <UTC time>, last renewed <UTC time>."""
    who = ", ".join(f"{key}={record[key]}" for key in ("run_id", "user", "controller", "pid", "playbook") if key in record)
    since = record.get("since")
    if isinstance(since, (int, float)):
        who += ", since " + _utc(since)
    renewed = record.get("renewed_at")
    if isinstance(renewed, (int, float)):
        who += ", last renewed " + _utc(renewed)
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


def _write_beside(lock: Path, record: Mapping[str, Any]) -> Path:
    """The full record in a new temporary file beside the lock, flushed to disk."""
    tmp = lock.with_name(f".{lock.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _put(lock: Path, record: Mapping[str, Any], place: Callable[[Path, Path], None]) -> None:
    """Write the whole record beside the lock, then `place` it at the lock path; the temporary file goes either way."""
    tmp = _write_beside(lock, record)
    try:
        place(tmp, lock)
    finally:
        tmp.unlink(missing_ok=True)


def _create(lock: Path, record: Mapping[str, Any]) -> None:
    """Link a full record to the lock path: exclusive (FileExistsError if a lock exists), never visible empty."""
    _put(lock, record, os.link)


def _replace(lock: Path, record: Mapping[str, Any]) -> None:
    """Replace the lock's record by rename: a reader sees the old record or the new one, never part of one."""
    _put(lock, record, os.replace)


def _same_controller(held: Mapping[str, Any], holder: Mapping[str, Any]) -> bool:
    return bool(held.get("controller_id")) and held.get("controller_id") == holder.get("controller_id") and isinstance(held.get("pid"), int)


def acquire(
    path: str,
    holder: dict[str, Any],
    heartbeat_timeout_minutes: float,
    *,
    holder_check: dict[str, Any] | None = None,
    defer_same_controller: bool = False,
    break_hint: str = BREAK_HINT,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Take the lock for holder, or raise LockError naming the run that holds it.

    A lock of this same run is re-entered (and renewed). A lock whose run was started from this
    controller is taken over only when holder_check (the controller's check_holder verdict on that
    very lock) says its process is gone; when the controller cannot tell, by the heartbeat rule
    below; without a verdict, defer_same_controller returns blocked_by so the caller can ask the
    controller. A lock from another controller (or unreadable) is taken over only once its holder
    has not renewed it for heartbeat_timeout_minutes: never because of its age. dry_run changes nothing.

    Returns acquired (this call took it), held (the run holds it afterwards, or would), holder,
    and took_over plus message when a gone run's lock was taken over."""
    lock = Path(path)
    now = time.time()
    record = {**holder, "since": now, "renewed_at": now}
    bound = float(heartbeat_timeout_minutes)
    if not bound > 0:
        raise LockError(f"the heartbeat bound must be more than 0 minutes, got {bound:g}: with it, a live run's lock would be taken over")
    if not dry_run:
        lock.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.nullcontext() if dry_run else directory_lock(lock.parent):
        current = read(path)
        if current is None:
            if not dry_run:
                _create(lock, record)
            return {"acquired": not dry_run, "held": True, "holder": record}
        if current.get("run_id") == holder.get("run_id"):
            if not dry_run and not current.get("unreadable"):
                current = {**current, "renewed_at": now}
                _replace(lock, current)
            return {"acquired": False, "held": True, "holder": current}
        silent = now - heartbeat(current)
        stopped = silent >= bound * 60
        heard = f"last renewed {_duration(silent)} ago; heartbeat bound {bound:g} min"
        hint = break_hint.format(path=path)
        if _same_controller(current, holder):
            matches = bool(holder_check) and (holder_check.get("run_id"), holder_check.get("since")) == (
                current.get("run_id"),
                current.get("since"),
            )
            if matches and holder_check.get("dead"):
                message = f"took over the lock of a dead run: {describe(current)} ({holder_check.get('why')})"
            elif matches and holder_check.get("state") == "unknown" and stopped:
                message = (
                    f"took over the lock of a run whose heartbeat stopped {_duration(silent)} ago, longer than the heartbeat bound "
                    f"of {bound:g} min ({holder_check.get('why')}): {describe(current)}"
                )
            elif defer_same_controller and not matches:
                return {"acquired": False, "held": False, "holder": record, "blocked_by": current}
            else:
                why = holder_check.get("why") if matches else "it was started from this controller and its process was not checked"
                raise LockError(
                    f"another deploy holds {path} ({describe(current)}; {heard}): {why}. "
                    f"A live run's lock is never taken over: wait for it, or stop it; if it is gone, break the lock: {hint}"
                )
        elif stopped:
            message = (
                f"took over the lock of a run whose heartbeat stopped {_duration(silent)} ago, longer than the heartbeat bound "
                f"of {bound:g} min: {describe(current)}"
            )
        else:
            raise LockError(
                f"another deploy holds {path} ({describe(current)}; {heard}), started from another controller: its process "
                f"cannot be checked from here, and its heartbeat is alive. A live run's lock is never taken over, whatever its age: "
                f"wait for it. It is taken over once its holder has not renewed it for {bound:g} min; if that run is gone, "
                f"break the lock: {hint}"
            )
        record["took_over"] = {key: value for key, value in current.items() if key != "took_over"}
        if not dry_run:
            lock.unlink()
            _create(lock, record)
        return {"acquired": not dry_run, "held": True, "holder": record, "took_over": record["took_over"], "message": message}


def renew_while_polling(renewal: Optional[Mapping[str, Any]], check_mode: bool) -> None:
    """What a module that polls something long (a build, a start, a benchmark, a drain) does on each
    poll: renew the deploy lock's heartbeat when the play passed lock_renewal ({path, run_id}); a
    check-mode run writes nothing, so it renews nothing."""
    if renewal and not check_mode:
        renew(**renewal)


def renew(path: str, run_id: str) -> dict[str, Any]:
    """Renew the heartbeat (renewed_at) of the lock run_id holds; returns the record written.

    Raises LockError when run_id no longer holds the lock (it was broken by hand, or taken over
    because no renewal came for longer than the bound): the caller stops, so two deploys never
    run side by side."""
    lock = Path(path)
    stop = "Stopping here so that two deploys never run side by side; run the playbook again to take the lock."
    if not lock.parent.is_dir():
        raise LockError(f"this run (run_id={run_id}) no longer holds the deploy lock {path}: its directory is gone. {stop}")
    with directory_lock(lock.parent):
        current = read(path)
        if current is None:
            raise LockError(f"this run (run_id={run_id}) no longer holds the deploy lock {path}: it was removed (broken by hand?). {stop}")
        if current.get("run_id") != run_id:
            raise LockError(f"this run (run_id={run_id}) no longer holds the deploy lock {path}: {describe(current)} holds it now. {stop}")
        record = {**current, "renewed_at": time.time()}
        _replace(lock, record)
        return record


class Heartbeat:
    """Renews the lock every every_seconds from a thread while a module blocks for minutes (the start
    canary): start() renews at once and starts it; stop() ends it and raises the LockError of a
    renewal that found the lock no longer run_id's (renewing stops there). Also a context manager."""

    def __init__(self, path: str, run_id: str, every_seconds: float = 30.0) -> None:
        self.path, self.run_id, self.every_seconds = path, run_id, every_seconds
        self._stop = threading.Event()
        self._lost: list[LockError] = []
        self._thread = threading.Thread(target=self._beat, name="deploy-lock-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.every_seconds):
            try:
                renew(self.path, self.run_id)
            except LockError as exc:
                self._lost.append(exc)
                return
            except OSError:
                continue  # a passing I/O error: the next beat tries again

    def start(self) -> Heartbeat:
        renew(self.path, self.run_id)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._lost:
            raise self._lost[0]

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.stop()
        else:
            self._stop.set()  # the block's own error wins


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
