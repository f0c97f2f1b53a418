"""The deploy lock, the journal checks and the stand-in server fixture."""

from __future__ import annotations

import json
import multiprocessing
import os
import pwd
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, dead_run, free_port
from sglang_sm120.release import lock as deploy_lock
from sglang_sm120.release.lock import LockError, acquire, release
from sglang_sm120.serve.health import http_status


def foreign(run_id: str, since: float, **extra: object) -> dict:
    """A lock record of a run started from another controller."""
    return {
        "run_id": run_id,
        "user": "bob",
        "controller": "ctl-b",
        "controller_id": "ctl-b/0000/pid:[1]",
        "pid": 4242,
        "since": since,
        **extra,
    }


def test_a_second_run_is_refused_naming_the_holder_and_the_way_to_break_it(tmp_path: Path) -> None:
    lock = str(tmp_path / "deploy.lock")
    me = deploy_lock.run_holder(playbook="deploy")
    assert acquire(lock, me, 240)["acquired"]
    assert json.loads(Path(lock).read_text())["pid"] == os.getpid()
    other = {**me, "run_id": "two", "controller_id": "elsewhere"}
    with pytest.raises(
        LockError,
        match=rf"another deploy holds .*run_id={me['run_id']}, user={me['user']}, controller={me['controller']}, pid={os.getpid()}",
    ) as refused:
        acquire(lock, other, 240, break_hint="ansible-playbook playbooks/unlock.yml -l h1 -e sglang_unlock_force=true")
    assert "ansible-playbook playbooks/unlock.yml -l h1 -e sglang_unlock_force=true" in str(refused.value)
    assert acquire(lock, me, 240)["held"]  # the holder itself may re-enter
    assert release(lock, "two") is False and Path(lock).exists()
    assert release(lock, me["run_id"]) is True and not Path(lock).exists()


def test_the_lock_names_the_real_user_when_USER_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("USER", "LOGNAME", "SUDO_USER"):
        monkeypatch.delenv(name, raising=False)
    holder = deploy_lock.run_holder()
    assert holder["user"] == pwd.getpwuid(os.getuid()).pw_name
    assert holder["controller"] == socket.gethostname() and holder["controller_id"].startswith(socket.gethostname())


def _report_playbook_pid(queue: multiprocessing.Queue) -> None:
    queue.put((deploy_lock.playbook_pid(), os.getpid()))


def test_a_forked_worker_names_the_process_that_forked_it() -> None:
    """Ansible runs lookups in workers forked from ansible-playbook: the lock names that parent."""
    assert deploy_lock.playbook_pid() == os.getpid()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    worker = ctx.Process(target=_report_playbook_pid, args=(queue,))
    worker.start()
    named, worker_pid = queue.get(timeout=30)
    worker.join(30)
    assert worker_pid != os.getpid() and named == os.getpid()


def _write_and_remove(path: str, rounds: int) -> None:
    for n in range(rounds):
        holder = {"run_id": f"w{n}", "user": "writer", "pad": "x" * 20000}
        acquire(path, holder, 240)
        release(path, holder["run_id"])


def test_the_lock_file_is_never_seen_empty_or_half_written(tmp_path: Path) -> None:
    """A reader racing a writer in another process sees either no lock or a whole record."""
    lock = tmp_path / "deploy.lock"
    writer = multiprocessing.get_context("fork").Process(target=_write_and_remove, args=(str(lock), 400))
    writer.start()
    seen, bad = 0, []
    while writer.is_alive() or writer.exitcode is None:
        try:
            text = lock.read_text()
        except FileNotFoundError:
            continue
        seen += 1
        try:
            assert json.loads(text)["user"] == "writer"
        except (ValueError, KeyError, AssertionError):
            bad.append(text[:80])
    writer.join()
    assert writer.exitcode == 0
    assert seen > 20, f"the reader saw the lock only {seen} times: the race was not exercised"
    assert bad == [], f"{len(bad)} of {seen} reads found an empty or partial lock: {bad[:3]}"
    assert not list(tmp_path.iterdir()), "temporary files were left behind"


def test_a_dead_runs_lock_from_this_controller_is_taken_over(tmp_path: Path) -> None:
    lock = str(tmp_path / "deploy.lock")
    dead, pid = dead_run(lock, 240)
    me = deploy_lock.run_holder(playbook="deploy")
    # Without the controller's check, the host does not decide: it asks.
    blocked = acquire(lock, me, 240, defer_same_controller=True)
    assert not blocked["held"] and blocked["blocked_by"]["pid"] == pid
    verdict = deploy_lock.check_holder(blocked["blocked_by"], me)
    assert verdict["dead"] and f"process {pid} no longer exists" in verdict["why"]
    result = acquire(lock, me, 240, holder_check=verdict)
    assert result["acquired"] and result["took_over"]["pid"] == pid
    assert result["message"].startswith(f"took over the lock of a dead run: run_id={dead['run_id']}, user={dead['user']}")
    assert f"pid={pid}" in result["message"] and ", since " in result["message"]
    assert json.loads(Path(lock).read_text())["run_id"] == me["run_id"]


def test_a_live_runs_lock_is_never_taken_over_even_when_old(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    proc = subprocess.Popen(["sleep", "60"])
    try:
        live = {**deploy_lock.run_holder(pid=proc.pid), "since": time.time() - 10 * 3600}
        lock.write_text(json.dumps(live))
        me = deploy_lock.run_holder()
        verdict = deploy_lock.check_holder(live, me)
        assert not verdict["dead"] and f"process {proc.pid} is still running" in verdict["why"]
        with pytest.raises(LockError, match=rf"pid={proc.pid}.*is still running.*never taken over"):
            acquire(str(lock), me, 30, holder_check=verdict)
        # A forged verdict for another lock changes nothing either.
        with pytest.raises(LockError, match="never taken over"):
            acquire(str(lock), me, 30, holder_check={**verdict, "run_id": "other", "dead": True})
        assert json.loads(lock.read_text()) == live
    finally:
        proc.kill()
        proc.wait()


def test_a_reused_pid_is_told_apart_by_its_start_time(tmp_path: Path) -> None:
    """A lock naming a pid that now belongs to a later process (here: this test's own) is dead."""
    me = deploy_lock.run_holder()
    earlier = {**me, "run_id": "earlier", "pid_start": me["pid_start"].rsplit(":", 1)[0] + ":1", "since": time.time()}
    verdict = deploy_lock.check_holder(earlier, me)
    assert verdict["dead"] and "belongs to a later process" in verdict["why"]
    assert not deploy_lock.check_holder({**earlier, "pid_start": me["pid_start"]}, me)["dead"]


def test_two_runs_taking_over_one_dead_lock_cannot_both_win(tmp_path: Path) -> None:
    lock = str(tmp_path / "deploy.lock")
    proc = subprocess.Popen(["true"])
    proc.wait()
    dead = {**deploy_lock.run_holder(pid=os.getpid()), "pid": proc.pid, "run_id": "dead", "since": time.time()}
    Path(lock).write_text(json.dumps(dead))
    verdict = deploy_lock.check_holder(dead, deploy_lock.run_holder())
    assert verdict["dead"]
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    racers = [ctx.Process(target=_race, args=(lock, f"racer{n}", verdict, barrier, results)) for n in range(4)]
    for racer in racers:
        racer.start()
    outcomes = sorted(results.get(timeout=30) for _ in racers)
    for racer in racers:
        racer.join(30)
    winners = [who for who, outcome in outcomes if outcome == "took over"]
    assert len(winners) == 1, outcomes
    assert all(outcome.startswith("another deploy holds") for who, outcome in outcomes if who not in winners)
    assert json.loads(Path(lock).read_text())["run_id"] == winners[0]


def _race(lock: str, run_id: str, verdict: dict, barrier, results) -> None:
    holder = {**deploy_lock.run_holder(), "run_id": run_id}
    barrier.wait()
    try:
        acquire(lock, holder, 240, holder_check=verdict)
        results.put((run_id, "took over"))
    except LockError as exc:
        results.put((run_id, str(exc)))


def test_an_empty_or_unreadable_lock_is_not_taken_over_at_once(tmp_path: Path) -> None:
    """An empty file (left by the former create-then-write lock) counts from its modification time."""
    lock = tmp_path / "deploy.lock"
    lock.write_text("")
    with pytest.raises(LockError, match=r"run_id=\?"):
        acquire(str(lock), deploy_lock.run_holder(), 30)
    old = time.time() - 3600
    os.utime(lock, (old, old))
    assert acquire(str(lock), deploy_lock.run_holder(), 30)["took_over"]["run_id"] == "?"


def test_check_mode_changes_nothing(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    assert acquire(str(lock), deploy_lock.run_holder(), 30, dry_run=True)["held"]
    assert not lock.exists()
    lock.write_text(json.dumps(foreign("b3", time.time() - 3600)))
    assert acquire(str(lock), deploy_lock.run_holder(), 30, dry_run=True)["took_over"]["run_id"] == "b3"
    assert json.loads(lock.read_text())["run_id"] == "b3"
    assert deploy_lock.break_lock(str(lock), dry_run=True)["run_id"] == "b3" and lock.exists()
    assert deploy_lock.break_lock(str(lock))["run_id"] == "b3" and not lock.exists()


@pytest.mark.parametrize("mode", ["healthy", "never-healthy", "crash"])
def test_the_standin_server_obeys_its_mode(mode: str) -> None:
    port = free_port()
    env = {
        **os.environ,
        "SGLANG_STANDIN_MODE": mode,
        "SGLANG_STANDIN_LOAD_SECONDS": "0.5",
        "SGLANG_STANDIN_WARMUP_SECONDS": "2",  # the port opens, then 503 while SGLang's own warm-up runs
        "SGLANG_STANDIN_HEALTH_SECONDS": "0.05",
        "PYTHONPATH": str(ROOT / "tests/fixtures/sglang-standin"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang_standin", "--model-path", "/m", "--port", str(port)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        if mode == "crash":
            assert proc.wait(timeout=60) == 1
            return
        deadline = time.monotonic() + 60
        first = None
        while first is None and time.monotonic() < deadline:
            first = http_status(f"http://127.0.0.1:{port}/health")
            time.sleep(0.1)
        assert first == 503  # the first answer, well inside the 2 s warm-up even on a loaded machine
        time.sleep(2.5)
        assert http_status(f"http://127.0.0.1:{port}/health") == (200 if mode == "healthy" else 503)
        if mode == "healthy":
            body = json.dumps({"prompt": "hello", "max_tokens": 4}).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=5) as response:
                first = json.loads(response.read())
            with urllib.request.urlopen(request, timeout=5) as response:
                second = json.loads(response.read())
            assert (second["choices"], second["usage"]) == (first["choices"], first["usage"])  # deterministic (ids differ, as SGLang's)
            assert first["usage"]["completion_tokens"] == 4
    finally:
        proc.kill()
        proc.wait()
