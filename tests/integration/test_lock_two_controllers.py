"""The deploy lock between two controllers, with real ansible-playbook runs (connection local).

The holder runs tests/playbooks/lock_poll.yml: the role's lock.yml, then a flat until/retries loop
of a real polling module (sglang_health) that renews the lock on each poll, as a deploy's long waits
do. The other controller is an ansible-playbook in its own pid namespace (unshare --pid --fork
--mount-proc): controller_id() (hostname, machine-id, pid namespace) differs, so it cannot check the
holder's process and only the heartbeat tells it whether the holder lives.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

POLL = ROOT / "tests/playbooks/lock_poll.yml"
HOLD = ROOT / "tests/playbooks/lock_hold.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
BOUND_MIN = 0.1  # the other controller's heartbeat bound: 6 s


def other_controller() -> list[str]:
    """A command prefix that runs a process as another controller: its own pid namespace."""
    for prefix in (
        ["unshare", "--pid", "--fork", "--mount-proc"],
        ["unshare", "--user", "--map-current-user", "--pid", "--fork", "--mount-proc"],
    ):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, check=False).returncode == 0:
                return prefix
        except OSError:
            break
    pytest.skip("unshare cannot create a pid namespace here (needs root or unprivileged user namespaces)")


def start(playbook: Path, lock: Path, *args: str, prefix: list[str] | None = None) -> subprocess.Popen:
    """ansible-playbook as an operator starts it, in its own process group."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    env["ANSIBLE_CACHE_PLUGIN"] = "memory"
    env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
    env["ANSIBLE_LOOKUP_PLUGINS"] = str(ROOT / "plugins/lookup")
    cmd = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(playbook), "-e", f"sglang_service_lock_file={lock}", *args]
    return subprocess.Popen(
        [*(prefix or []), *cmd], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def finish(proc: subprocess.Popen, timeout: float = 120) -> str:
    out, _ = proc.communicate(timeout=timeout)
    return " ".join(out.split())


def wait_for_lock(lock: Path, proc: subprocess.Popen, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lock.exists():
            return json.loads(lock.read_text())
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no run took {lock}: {finish(proc) if proc.poll() is not None else '(running)'}")


def kill(proc: subprocess.Popen) -> None:
    """The controller dies at once (SIGKILL to its process group): no always:, no unlock.

    ansible-core's task workers detach into sessions of their own (setsid), so the group kill misses
    a worker that is running a task; once its parent is gone it blocks for ever on the result pipe.
    Those are killed too (every process whose command line is the holder's), or each run of this
    test would leave one behind."""
    argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == argv:
                os.kill(int(entry.name), signal.SIGKILL)
        except OSError:  # gone already, or not ours to read
            pass


def test_a_deploy_from_another_controller_is_refused_while_the_holder_renews_and_takes_over_once_it_died(tmp_path: Path) -> None:
    other = other_controller()
    lock, release = tmp_path / "deploy.lock", tmp_path / "release"
    holder = start(POLL, lock, "-e", f"lock_poll_release={release}")
    try:
        record = wait_for_lock(lock, holder)
        assert record["pid"] == holder.pid
        # The lock grows older than the other controller's bound while its holder polls and renews it.
        while time.time() - record["since"] < BOUND_MIN * 60 + 2:
            assert holder.poll() is None, finish(holder)
            time.sleep(0.2)
        second = start(HOLD, lock, "-e", f"sglang_service_lock_heartbeat_timeout_minutes={BOUND_MIN}", prefix=other)
        refusal = finish(second)
        now = json.loads(lock.read_text())
        assert second.returncode == 2, refusal
        assert holder.poll() is None, "the holder stopped: it must go on polling beside the refusal"
        assert now["run_id"] == record["run_id"] and now["since"] == record["since"]
        assert now["renewed_at"] - record["since"] > BOUND_MIN * 60, "the holder's polls did not renew the lock"
        holder_named = f"(run_id={record['run_id']}, user={record['user']}, controller={record['controller']}, pid={holder.pid}"
        assert f"another deploy holds {lock} {holder_named}" in refusal
        assert "started from another controller" in refusal, "the second run was not another controller"
        assert f"heartbeat bound {BOUND_MIN:g} min" in refusal and "last renewed" in refusal
        assert "never taken over, whatever its age" in refusal and "took over" not in refusal
    finally:
        if holder.poll() is None:
            kill(holder)
    assert holder.returncode != 0
    last_beat = json.loads(lock.read_text())["renewed_at"]
    # The holder died: the other controller tries again until it takes the lock over.
    attempts = []
    while True:
        second = start(HOLD, lock, "-e", f"sglang_service_lock_heartbeat_timeout_minutes={BOUND_MIN}", prefix=other)
        output = finish(second)
        attempts.append(second.returncode)
        if second.returncode == 0:
            break
        assert f"run_id={record['run_id']}" in output and "heartbeat bound" in output, output
        assert time.time() - last_beat < BOUND_MIN * 60 + 60, f"not taken over within the heartbeat bound: {output}"
        time.sleep(1)
    assert "took over the lock of a run whose heartbeat stopped" in output
    assert f"longer than the heartbeat bound of {BOUND_MIN:g} min: run_id={record['run_id']}, user={record['user']}" in output
    assert f"pid={holder.pid}" in output
    assert not lock.exists(), "the second controller did not give the lock back"


def test_a_holder_that_lost_its_lock_stops_at_its_next_poll(tmp_path: Path) -> None:
    """Its lock taken over (here, rewritten as another controller's), the holder's next renewal fails
    the play, naming the new holder, and leaves the new holder's lock alone."""
    lock, release = tmp_path / "deploy.lock", tmp_path / "release"
    holder = start(POLL, lock, "-e", f"lock_poll_release={release}")
    try:
        record = wait_for_lock(lock, holder)
        now = time.time()
        taker = {
            "run_id": "f00d",
            "user": "bob",
            "controller": "ctl-b",
            "controller_id": "ctl-b/1/pid:[1]",
            "pid": 77,
            "since": now,
            "renewed_at": now,
        }
        lock.write_text(json.dumps(taker))
        output = finish(holder, timeout=60)
    finally:
        if holder.poll() is None:
            kill(holder)
    assert holder.returncode == 2, output
    assert f"this run (run_id={record['run_id']}) no longer holds the deploy lock {lock}: run_id=f00d, user=bob, controller=ctl-b" in output
    assert "two deploys never run side by side" in output
    assert json.loads(lock.read_text()) == taker
