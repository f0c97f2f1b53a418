"""The deploy lock under real, concurrent ansible-playbook runs on this controller (connection local).

tests/playbooks/lock_hold.yml takes the lock through roles/sglang_service/tasks/lock.yml and gives
it back through unlock.yml, as playbooks/deploy.yml does, with the lock file in tmp_path.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT

PLAYBOOK = ROOT / "tests/playbooks/lock_hold.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
BREAK_COMMAND = "ansible-playbook playbooks/unlock.yml -l localhost -e sglang_unlock_force=true"


def start(playbook: Path, lock: Path, *args: str) -> subprocess.Popen:
    """ansible-playbook as an operator starts it (its own process group, as a terminal gives it)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    env["ANSIBLE_CACHE_PLUGIN"] = "memory"
    env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
    # The lookup lives next to the project's playbooks; this test playbook is elsewhere.
    env["ANSIBLE_LOOKUP_PLUGINS"] = str(ROOT / "plugins/lookup")
    env.pop("USER", None)  # the lock must name the user without it
    cmd = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(playbook), "-e", f"sglang_service_lock_file={lock}", *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float = 60) -> str:
    out, _ = proc.communicate(timeout=timeout)
    return " ".join(out.split())


def wait_for_lock(lock: Path, procs: list[subprocess.Popen], timeout: float = 40) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lock.exists():
            return json.loads(lock.read_text())
        if all(proc.poll() is not None for proc in procs):
            break
        time.sleep(0.05)
    outputs = [finish(proc) if proc.poll() is not None else "(running)" for proc in procs]
    raise AssertionError(f"no run took {lock}: {outputs}")


def test_two_concurrent_runs_exactly_one_takes_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    runs = [start(PLAYBOOK, lock, "-e", "lock_hold_seconds=8") for _ in range(2)]
    record = wait_for_lock(lock, runs)
    outputs = [finish(run) for run in runs]
    codes = [run.returncode for run in runs]
    assert sorted(codes) == [0, 2], f"exit codes {codes}: {outputs}"
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    # The lock named the winner: its real user, this controller and its ansible-playbook process.
    assert record["pid"] == runs[winner].pid
    assert record["user"] == pwd.getpwuid(os.getuid()).pw_name and record["controller"] == socket.gethostname()
    refusal = outputs[loser]
    assert f"another deploy holds {lock} (run_id={record['run_id']}, user={record['user']}" in refusal
    assert f"pid={runs[winner].pid}" in refusal and f"its process {runs[winner].pid} is still running" in refusal
    assert BREAK_COMMAND in refusal
    assert "took over" not in " ".join(outputs)
    assert not lock.exists(), "the winner did not give the lock back"


def test_a_new_run_takes_over_the_lock_of_a_run_stopped_by_ctrl_c(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    first = start(PLAYBOOK, lock, "-e", "lock_hold_seconds=120")
    record = wait_for_lock(lock, [first])
    assert record["pid"] == first.pid
    os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole process group
    try:
        first.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=20)
    interrupted = finish(first)
    assert first.returncode != 0, interrupted
    assert json.loads(lock.read_text()) == record, "the interrupted run was expected to leave its lock behind"
    second = start(PLAYBOOK, lock)
    output = finish(second)
    assert second.returncode == 0, output
    assert f"took over the lock of a dead run: run_id={record['run_id']}, user={record['user']}" in output
    assert f"pid={first.pid}" in output and f"its process {first.pid} no longer exists" in output
    assert not lock.exists(), "the second run did not give the lock back"


def test_the_unlock_playbook_breaks_a_lock_only_when_forced(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    foreign = {"run_id": "f00d", "user": "bob", "controller": "ctl-b", "controller_id": "ctl-b/1/pid:[1]", "pid": 77, "since": time.time()}
    lock.write_text(json.dumps(foreign))
    unlock = ROOT / "playbooks/unlock.yml"
    refused = start(unlock, lock, "-e", "ansible_become=false")
    output = finish(refused)
    assert refused.returncode != 0 and "rerun with -l HOST -e sglang_unlock_force=true" in output, output
    assert json.loads(lock.read_text()) == foreign
    forced = start(unlock, lock, "-e", "ansible_become=false", "-e", "sglang_unlock_force=true")
    output = finish(forced)
    assert forced.returncode == 0, output
    assert "broke the deploy lock" in output and "run_id=f00d, user=bob, controller=ctl-b, pid=77" in output
    assert not lock.exists()
