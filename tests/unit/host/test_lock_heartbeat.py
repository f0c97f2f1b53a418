"""The deploy lock's heartbeat: the holder renews it while it lives; it is taken over only when the
holder is known to be gone (its heartbeat stopped for longer than the bound, or its process is gone
on this controller), never because of its age (plugins/module_utils/sglang_sm120/release/lock.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import dead_run
from sglang_sm120.release import lock as deploy_lock
from sglang_sm120.release.lock import Heartbeat, LockError, acquire, renew

HOUR = 3600.0


def foreign(run_id: str, since: float, renewed_at: float | None = None) -> dict:
    """A lock record of a run started from another controller (its process cannot be checked here)."""
    record = {
        "run_id": run_id,
        "user": "bob",
        "controller": "ctl-b",
        "controller_id": "ctl-b/0000/pid:[1]",
        "pid": 4242,
        "playbook": "Build, release and start SGLang",
        "since": since,
    }
    return record if renewed_at is None else {**record, "renewed_at": renewed_at}


def test_a_fresh_heartbeat_keeps_an_old_lock_from_being_taken_over(tmp_path: Path) -> None:
    """A 12-hour build renewed a minute ago is refused, whatever its age; the refusal names the holder,
    when it last renewed and the bound."""
    lock = tmp_path / "deploy.lock"
    held = foreign("b1", time.time() - 12 * HOUR, renewed_at=time.time() - 60)
    lock.write_text(json.dumps(held))
    with pytest.raises(LockError) as refused:
        acquire(str(lock), deploy_lock.run_holder(), 15, defer_same_controller=True)
    message = str(refused.value)
    assert (
        f"another deploy holds {lock} (run_id=b1, user=bob, controller=ctl-b, pid=4242, playbook=Build, release and start SGLang" in message
    )
    assert ", last renewed " + time.strftime("%Y-%m-%d %H:%M", time.gmtime(held["renewed_at"])) in message
    assert re.search(r"last renewed 6\d s ago; heartbeat bound 15 min", message), message
    assert "started from another controller" in message and "never taken over, whatever its age" in message
    assert json.loads(lock.read_text()) == held


def test_a_stopped_heartbeat_is_taken_over_and_the_message_prints_the_bound(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    lock.write_text(json.dumps(foreign("b2", time.time() - 2 * HOUR, renewed_at=time.time() - 16 * 60)))
    me = deploy_lock.run_holder(playbook="deploy")
    result = acquire(str(lock), me, 15)
    assert result["acquired"] and result["took_over"]["run_id"] == "b2"
    assert result["message"].startswith(
        "took over the lock of a run whose heartbeat stopped 16 min ago, longer than the heartbeat bound of 15 min"
    )
    assert "run_id=b2, user=bob, controller=ctl-b, pid=4242" in result["message"]
    written = json.loads(lock.read_text())
    assert written["run_id"] == me["run_id"] and written["took_over"]["run_id"] == "b2"
    assert written["renewed_at"] == written["since"] and abs(written["since"] - time.time()) < 60


def test_the_bound_counts_from_the_last_renewal_not_from_the_start(tmp_path: Path) -> None:
    """Just inside the bound: refused; just past it: taken over. A lock written before renewals
    existed (no renewed_at) counts from since."""
    lock = tmp_path / "deploy.lock"
    lock.write_text(json.dumps(foreign("b3", time.time() - 5 * HOUR, renewed_at=time.time() - 14 * 60)))
    with pytest.raises(LockError, match="last renewed 14 min ago; heartbeat bound 15 min"):
        acquire(str(lock), deploy_lock.run_holder(), 15)
    lock.write_text(json.dumps(foreign("b4", time.time() - 16 * 60)))
    assert acquire(str(lock), deploy_lock.run_holder(), 15)["took_over"]["run_id"] == "b4"


def test_an_unreadable_lock_counts_from_its_modification_time(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    lock.write_text("")
    with pytest.raises(LockError, match=r"run_id=\?"):
        acquire(str(lock), deploy_lock.run_holder(), 15)
    old = time.time() - 20 * 60
    os.utime(lock, (old, old))
    assert acquire(str(lock), deploy_lock.run_holder(), 15)["took_over"]["run_id"] == "?"


def test_a_dead_process_of_this_controller_is_taken_over_even_with_a_fresh_heartbeat(tmp_path: Path) -> None:
    lock = str(tmp_path / "deploy.lock")
    _, pid = dead_run(lock, 15)
    renewed = json.loads(Path(lock).read_text())["renewed_at"]
    assert time.time() - renewed < 60, "the heartbeat is fresh: only the process check can tell it is gone"
    me = deploy_lock.run_holder(playbook="deploy")
    verdict = deploy_lock.check_holder(acquire(lock, me, 15, defer_same_controller=True)["blocked_by"], me)
    assert verdict["dead"] and verdict["state"] == "gone"
    result = acquire(lock, me, 15, holder_check=verdict)
    assert result["took_over"]["pid"] == pid and result["message"].startswith("took over the lock of a dead run")


def test_a_live_process_of_this_controller_keeps_its_lock_even_when_its_heartbeat_stopped(tmp_path: Path) -> None:
    """On this controller the process check decides: a live run (paused, say) is not taken over."""
    lock = tmp_path / "deploy.lock"
    proc = subprocess.Popen(["sleep", "60"])
    try:
        live = {**deploy_lock.run_holder(pid=proc.pid), "since": time.time() - 12 * HOUR, "renewed_at": time.time() - HOUR}
        lock.write_text(json.dumps(live))
        me = deploy_lock.run_holder()
        verdict = deploy_lock.check_holder(live, me)
        assert verdict["state"] == "running"
        with pytest.raises(LockError, match=r"is still running.*never taken over"):
            acquire(str(lock), me, 15, holder_check=verdict)
        assert json.loads(lock.read_text()) == live
    finally:
        proc.kill()
        proc.wait()


def test_when_this_controller_cannot_tell_the_heartbeat_decides(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    me = deploy_lock.run_holder()
    held = {**me, "run_id": "u1", "pid": 999999, "since": time.time() - HOUR, "renewed_at": time.time() - 60}
    lock.write_text(json.dumps(held))
    unknown = {"run_id": "u1", "since": held["since"], "dead": False, "state": "unknown", "why": "cannot be told"}
    with pytest.raises(LockError, match="cannot be told"):
        acquire(str(lock), me, 15, holder_check=unknown)
    lock.write_text(json.dumps({**held, "renewed_at": time.time() - 20 * 60}))
    result = acquire(str(lock), me, 15, holder_check=unknown)
    assert result["took_over"]["run_id"] == "u1" and "heartbeat bound of 15 min" in result["message"]


def test_renew_moves_the_heartbeat_and_keeps_the_rest(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    me = deploy_lock.run_holder(playbook="build")
    first = acquire(str(lock), me, 15)["holder"]
    time.sleep(0.05)
    renewed = renew(str(lock), me["run_id"])
    written = json.loads(lock.read_text())
    assert written == renewed and written["renewed_at"] > first["renewed_at"]
    assert {k: v for k, v in written.items() if k != "renewed_at"} == {k: v for k, v in first.items() if k != "renewed_at"}
    assert [p.name for p in tmp_path.iterdir()] == ["deploy.lock"], "a renewal left a temporary file"


def test_a_run_that_lost_its_lock_is_told_so_by_its_next_renewal(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    me = deploy_lock.run_holder()
    acquire(str(lock), me, 15)
    taken = foreign("b5", time.time())
    lock.write_text(json.dumps(taken))
    with pytest.raises(LockError, match=rf"run_id={me['run_id']}\) no longer holds the deploy lock .*run_id=b5, user=bob.*holds it now"):
        renew(str(lock), me["run_id"])
    assert json.loads(lock.read_text()) == taken, "a renewal must not touch another run's lock"
    lock.unlink()
    with pytest.raises(LockError, match=r"no longer holds the deploy lock .*it was removed"):
        renew(str(lock), me["run_id"])
    assert not lock.exists()


def test_re_entering_renews(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    me = deploy_lock.run_holder()
    first = acquire(str(lock), me, 15)["holder"]
    time.sleep(0.05)
    again = acquire(str(lock), me, 15)
    assert not again["acquired"] and again["held"] and again["holder"]["renewed_at"] > first["renewed_at"]
    assert again["holder"]["since"] == first["since"]


def test_a_bound_of_zero_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LockError, match="heartbeat bound must be more than 0 minutes, got 0"):
        acquire(str(tmp_path / "deploy.lock"), deploy_lock.run_holder(), 0)
    assert not (tmp_path / "deploy.lock").exists()


def test_a_renewing_holder_is_never_taken_over_and_a_stopped_one_is_within_the_bound(tmp_path: Path) -> None:
    """Real time, a bound of 3 s: a holder renewing every 0.1 s for 7 s (past twice the bound from its
    start) keeps its lock against a run trying every 50 ms; once it stops, the lock is taken over
    after the bound and well before three times the bound (slack for a loaded CI machine)."""
    lock = str(tmp_path / "deploy.lock")
    bound_min = 0.05
    holder = foreign("beating", time.time())
    Path(lock).write_text(json.dumps(holder))
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.1):
            renew(lock, "beating")

    beater = threading.Thread(target=beat)
    beater.start()
    me = deploy_lock.run_holder()
    try:
        started = time.monotonic()
        refusals = 0
        while time.monotonic() - started < 7.0:
            with pytest.raises(LockError, match="run_id=beating"):
                acquire(lock, me, bound_min)
            refusals += 1
            time.sleep(0.05)
    finally:
        stop.set()
        beater.join()
    last_beat = json.loads(Path(lock).read_text())["renewed_at"]
    assert time.time() - json.loads(Path(lock).read_text())["since"] > 2 * bound_min * 60, "the lock was not older than the bound"
    assert refusals > 20
    while True:
        try:
            result = acquire(lock, me, bound_min)
            break
        except LockError:
            assert time.time() - last_beat < 3 * bound_min * 60, "not taken over within the heartbeat bound"
            time.sleep(0.05)
    silent = time.time() - last_beat
    assert bound_min * 60 <= silent < 3 * bound_min * 60
    assert result["took_over"]["run_id"] == "beating" and "heartbeat bound of 0.05 min" in result["message"]


def test_the_heartbeat_thread_renews_while_a_module_blocks_and_reports_a_lost_lock(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    me = deploy_lock.run_holder()
    acquire(str(lock), me, 15)
    with Heartbeat(str(lock), me["run_id"], every_seconds=0.05):
        first = json.loads(lock.read_text())["renewed_at"]
        time.sleep(0.3)
        assert json.loads(lock.read_text())["renewed_at"] > first, "the thread did not renew"
    beat = Heartbeat(str(lock), me["run_id"], every_seconds=0.05).start()
    lock.write_text(json.dumps(foreign("b6", time.time())))
    time.sleep(0.3)
    with pytest.raises(LockError, match=r"no longer holds the deploy lock .*run_id=b6"):
        beat.stop()
    assert json.loads(lock.read_text())["run_id"] == "b6"


def test_a_polling_module_renews_only_when_asked_and_never_in_check_mode(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    lock.write_text(json.dumps(foreign("poller", time.time() - 600, renewed_at=time.time() - 600)))
    before = json.loads(lock.read_text())
    deploy_lock.renew_while_polling(None, check_mode=False)  # no lock_renewal passed: nothing to renew
    deploy_lock.renew_while_polling({"path": str(lock), "run_id": "poller"}, check_mode=True)
    assert json.loads(lock.read_text()) == before
    deploy_lock.renew_while_polling({"path": str(lock), "run_id": "poller"}, check_mode=False)
    assert json.loads(lock.read_text())["renewed_at"] > before["renewed_at"] + 500
    with pytest.raises(LockError, match="run_id=someone-else"):  # a lock lost meanwhile stops the poll
        deploy_lock.renew_while_polling({"path": str(lock), "run_id": "someone-else"}, check_mode=False)
