"""Progress on long waits: the record the polling modules return (plugins/module_utils/sglang_sm120/progress.py),
the toolkit's stdout callback that prints it at a steady interval instead of FAILED - RETRYING
(plugins/callback/sglang_progress.py), and a real ansible-playbook run polling a real detached build."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from sglang_sm120.progress import (
    Progress,
    Throttle,
    build_progress,
    clean_line,
    clock,
    job_finished,
    last_log_line,
    last_text_line,
    log_phase,
    progress_line,
    retry_line,
    wait_job,
)

# ---------------------------------------------------------------- the helper


def test_last_log_line_skips_blank_lines_and_keeps_the_last_redraw_of_a_progress_bar(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_bytes(b"== 2026-12-01T10:00:00Z build\n[1/9] cc a.o\r[2/9] \x1b[32mnvcc b.o\x1b[0m\r\n\n   \n")
    assert last_log_line(log) == "[2/9] nvcc b.o"


def test_last_log_line_reads_only_the_end_of_a_big_log(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text("x" * 100 + "\n" + "filler line\n" * 200_000 + "[5120/5120] Linking torch_cuda\n")
    assert last_log_line(log) == "[5120/5120] Linking torch_cuda"


def test_last_log_line_of_a_missing_or_empty_log_is_empty(tmp_path: Path) -> None:
    (tmp_path / "empty.log").write_text("")
    assert last_log_line(tmp_path / "missing.log") == "" and last_log_line(tmp_path / "empty.log") == ""


def test_a_long_line_is_cut_and_control_characters_are_blanked() -> None:
    cut = clean_line("a" * 500, width=50)
    assert len(cut) == 50 and cut.endswith("...")
    assert clean_line("tab\there\x07bell") == "tab here bell"
    assert last_text_line(["first", "second", "  "]) == "second"


def test_log_phase_is_the_last_marker_of_the_build_script(tmp_path: Path) -> None:
    log = tmp_path / "b.log"
    log.write_text("== 2026-12-01T10:00:00Z start\nCollecting ninja\n== 2026-12-01T10:01:00Z build\n[1/4] nvcc\n")
    assert log_phase(log, "start") == "build"
    assert log_phase(tmp_path / "none.log", "start") == "start"


def test_clock_and_remaining_time() -> None:
    assert clock(0) == "0:00" and clock(65) == "1:05" and clock(3 * 3600 + 62) == "3:01:02"
    progress = Progress("build of torch 3f2a9c1d0e4b", "source: build", 1845, 43200, "[1742/5120] nvcc")
    assert progress.remaining_s == 43200 - 1845
    assert Progress("x", "", 900, 600).remaining_s == 0  # past its timeout: nothing left, never negative


def test_progress_round_trips_and_other_dicts_are_not_progress() -> None:
    progress = Progress("start of sglang.service", "/health 503, unit active", 184.2, 1800, "Load weight end.")
    assert Progress.from_dict(progress.to_dict()) == progress
    assert Progress.from_dict(None) is None and Progress.from_dict({"healthy": False}) is None
    assert Progress.from_dict({"what": "x", "elapsed_s": "not a number"}) is None


def test_progress_line_says_what_phase_elapsed_left_and_last_log_line() -> None:
    line = progress_line("gpu-01", Progress("build of torch 3f2a9c1d0e4b", "source: build", 1845, 43200, "[1742/5120] nvcc x.cu"))
    assert (
        line
        == "WAITING [gpu-01]: build of torch 3f2a9c1d0e4b (source: build): 30:45 elapsed, 11:29:15 left of 12:00:00 | [1742/5120] nvcc x.cu"
    )
    assert progress_line("h", Progress("run", "", 5, 0)) == "WAITING [h]: run: 0:05 elapsed"  # no timeout: nothing left to say


def test_retry_line_counts_retries_left() -> None:
    assert retry_line("h", "Wait for the port", 3, 60, 95) == "WAITING [h]: Wait for the port: attempt 3, 57 retries left, 1:35 elapsed"


def test_throttle_prints_the_first_poll_then_once_per_interval() -> None:
    now = [100.0]
    throttle = Throttle(30, now=lambda: now[0])
    printed = []
    for _ in range(200):  # 200 polls, 0.5 s apart: 100 s
        printed.append(throttle.due("build"))
        now[0] += 0.5
    assert printed[0] is True and sum(printed) == 4  # at 0, 30, 60 and 90 s
    assert throttle.due("start") is True  # another wait has its own clock
    throttle.forget("build")
    assert throttle.due("build") is True and throttle.since_first("build") == 0


def test_throttle_of_zero_prints_every_poll() -> None:
    throttle = Throttle(0, now=lambda: 5.0)
    assert all(throttle.due("k") for _ in range(10))


# ---------------------------------------------------------------- the callback plugin, fed results


@pytest.fixture()
def callback(monkeypatch: pytest.MonkeyPatch) -> Any:
    from ansible.plugins.loader import callback_loader

    callback_loader.add_directory(str(ROOT / "plugins" / "callback"))
    plugin = callback_loader.get("sglang_progress")
    assert plugin is not None, "ansible cannot load plugins/callback/sglang_progress.py"
    plugin.set_options(direct={"progress_interval": 30})
    plugin.now = [1000.0]
    plugin._throttle = Throttle(30, now=lambda: plugin.now[0])
    plugin.lines = []
    monkeypatch.setattr(plugin._display, "display", lambda msg, **kw: plugin.lines.append(msg))
    return plugin


def _result(return_data: dict[str, Any], name: str = "Wait for the build, one retry per poll, of torch", task: Any = None) -> Any:
    from ansible.executor.task_result import CallbackTaskResult
    from ansible.inventory.host import Host
    from ansible.playbook.task import Task

    return CallbackTaskResult(Host("gpu-01"), task or Task(), return_data, {"name": name})


def _build_poll(attempt: int, elapsed: float) -> dict[str, Any]:
    progress = Progress("build of torch 3f2a9c1d0e4b", "source: build", elapsed, 43200, f"[{attempt}/5120] Building CUDA object")
    return {"attempts": attempt, "retries": 1445, "done": False, "status": "running", "progress": progress.to_dict()}


def test_callback_prints_progress_at_its_interval_and_never_failed_retrying(callback: Any) -> None:
    from ansible.playbook.task import Task

    task = Task()
    for attempt in range(1, 121):  # 120 polls, 2 s apart: 4 minutes
        callback.v2_runner_retry(_result(_build_poll(attempt, attempt * 2.0), task=task))
        callback.now[0] += 2
    assert len(callback.lines) == 8  # every 30 s of the 240: the first poll, then 7 more
    assert not any("FAILED" in line or "RETRYING" in line for line in callback.lines)
    assert callback.lines[0] == (
        "WAITING [gpu-01]: build of torch 3f2a9c1d0e4b (source: build): 0:02 elapsed, 11:59:58 left of 12:00:00"
        " | [1/5120] Building CUDA object"
    )
    assert callback.lines[1].startswith("WAITING [gpu-01]: build of torch 3f2a9c1d0e4b (source: build): 0:32 elapsed")


def test_callback_interval_comes_from_its_option(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.plugins.loader import callback_loader

    callback_loader.add_directory(str(ROOT / "plugins" / "callback"))
    monkeypatch.setenv("SGLANG_PROGRESS_INTERVAL", "7.5")
    plugin = callback_loader.get("sglang_progress")
    plugin.set_options()
    assert plugin._throttle.interval_s == 7.5


def test_callback_shows_a_retry_without_progress_as_still_waiting(callback: Any) -> None:
    callback.v2_runner_retry(_result({"attempts": 2, "retries": 60}, name="Wait for the port"))
    assert callback.lines == ["WAITING [gpu-01]: Wait for the port: attempt 2, 58 retries left, 0:00 elapsed"]


def test_callback_prints_every_retry_of_a_failing_module_with_its_message(callback: Any) -> None:
    from ansible.playbook.task import Task

    task = Task()
    for attempt in (1, 2):
        callback.v2_runner_retry(_result({"attempts": attempt, "retries": 3, "failed": True, "msg": "connection refused"}, "Fetch", task))
    assert callback.lines == [
        "RETRYING [gpu-01]: Fetch after a failure (2 retries left): connection refused",
        "RETRYING [gpu-01]: Fetch after a failure (1 retries left): connection refused",
    ]


def test_callback_shows_the_final_failure_as_the_default_callback_does(callback: Any) -> None:
    callback.v2_runner_on_failed(_result({"failed": True, "msg": "torch: build failed with exit status 1 after 3012 s"}))
    assert any("fatal: [gpu-01]: FAILED!" in line and "build failed with exit status 1" in line for line in callback.lines)


def test_callback_starts_afresh_after_a_wait_ends(callback: Any) -> None:
    from ansible.playbook.task import Task

    task = Task()
    callback.v2_runner_retry(_result(_build_poll(1, 1), task=task))
    callback.v2_runner_on_ok(_result({"done": True, "status": "built", "changed": True}, task=task))
    callback.v2_runner_retry(_result(_build_poll(1, 1), task=task))  # the next include of the same wait, 0 s later
    assert sum(line.startswith("WAITING") for line in callback.lines) == 2


# ---------------------------------------------------------------- the modules return progress


def test_sglang_build_progress_of_a_running_build(tmp_path: Path) -> None:
    log = tmp_path / "torch.log"
    log.write_text("== 2026-12-01T10:00:00Z start\n== 2026-12-01T10:05:00Z build\n[17/5120] Building CUDA object a.cu.o\n")
    item = {"name": "torch", "key": "3f2a9c1d0e4b" + "0" * 52, "spec": {"timeout_minutes": 720}}
    progress = build_progress(item, {"phase": "source", "elapsed": 1845, "log": str(log)})
    assert progress == {
        "what": "build of torch 3f2a9c1d0e4b",
        "phase": "source: build",
        "elapsed_s": 1845.0,
        "timeout_s": 43200.0,
        "last_log_line": "[17/5120] Building CUDA object a.cu.o",
    }


# ---------------------------------------------------------------- a real run: ansible-playbook polling a real detached build

PLAYBOOK = """
- name: Build one small artifact and wait for it, as the role does
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    item_: "{{ lookup('ansible.builtin.file', work ~ '/item.json') | from_json }}"
  tasks:
    - name: Start the detached build
      sm120.sglang.sglang_build:
        {item: "{{ item_ }}", root: "{{ work }}/root", state: started, staged: "{{ work }}/src", cuda_home: "{{ work }}"}

    - name: Wait for the build, one retry per poll, of tiny
      sm120.sglang.sglang_build: {item: "{{ item_ }}", root: "{{ work }}/root", state: finished, cuda_home: "{{ work }}", wait_seconds: 0.2}
      register: waited
      until: waited.done | default(false) or waited.failed | default(false)
      retries: 400
      delay: 0

    - name: Wait for a task that returns no progress
      ansible.builtin.stat: {path: "{{ work }}"}
      register: other
      until: other.attempts | default(1) >= 3
      retries: 5
      delay: 1

    - name: Keep the number of polls
      ansible.builtin.copy: {content: "{{ {'attempts': waited.attempts} | to_json }}", dest: "{{ work }}/polls.json", mode: "0644"}
"""


def run_playbook(work: Path, playbook: str, interval: str, *args: str) -> str:
    """ansible-playbook (this venv's) of `playbook` on localhost with -e work=WORK, printed by the toolkit's
    callback at SGLANG_PROGRESS_INTERVAL `interval`: its stdout, once it passed and printed no RETRYING."""
    (work / "play.yml").write_text(textwrap.dedent(playbook))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "SGLANG_PROGRESS_INTERVAL": interval, "ANSIBLE_NOCOLOR": "1"}
    env.pop("ANSIBLE_STDOUT_CALLBACK", None)
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(work / "play.yml"), "-e", f"work={work}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
    assert "FAILED - RETRYING" not in out and "RETRYING" not in out
    return out


def test_a_playbook_polling_a_real_build_prints_progress_lines_and_no_failed_retrying(tmp_path: Path) -> None:
    from sglang_sm120.build.pipeline import plan

    src = tmp_path / "src"
    src.mkdir()
    spec = {
        "name": "tiny",
        "source": {"path": str(src)},
        "build": (
            "echo compiling step 1; sleep 4; echo compiling step 2; sleep 4\n"
            'python3 -c \'import os, zipfile; zipfile.ZipFile(os.environ["WHEEL_DIR"] + "/tiny-1.0-py3-none-any.whl", "w")'
            '.writestr("tiny/__init__.py", "")\''
        ),
        "build_requires": [],
        "verify": {"device_code": "none"},
        "timeout_minutes": 5,
    }
    item = plan([spec], {"cuda_version": "13.0.1", "arch": "12.0"})[0].to_dict()
    (tmp_path / "item.json").write_text(json.dumps(item))
    out = run_playbook(tmp_path, PLAYBOOK, "3")
    progress = re.findall(
        r"^WAITING \[localhost\]: build of tiny [0-9a-f]{12} \(source: (\w+)\): (\d+):(\d\d) elapsed, \d+:\d\d left of 5:00 \| (.*)$",
        out,
        re.M,
    )
    polls = json.loads((tmp_path / "polls.json").read_text())["attempts"]
    assert len(progress) >= 2, out
    # polled every 0.2 s (plus the module's own start), printed every 3 s at most
    last = int(progress[-1][1]) * 60 + int(progress[-1][2])
    assert len(progress) <= last // 3 + 2 and polls >= 2 * len(progress), (polls, progress)
    assert {phase for phase, *_ in progress} <= {"start", "build"} and any(line.startswith("compiling step") for *_, line in progress)
    # retries: 5 is 6 attempts, as the default callback counts them
    assert re.search(r"^WAITING \[localhost\]: Wait for a task that returns no progress: attempt 1, 5 retries left", out, re.M), out


# ---------------------------------------------------------------- a background (async) job: the benchmark's wait


def test_job_finished_reads_the_async_results_file(tmp_path: Path) -> None:
    results = tmp_path / "123.456"
    assert not job_finished(results)  # not written yet
    results.write_text('{"started": 1, "finished": 0, "ansible_job_id": "123.456"}')
    assert not job_finished(results)
    results.write_text('{"started": 1, "finished": 0')  # half-written
    assert not job_finished(results)
    results.write_text('{"rc": 0, "stdout": "done", "changed": true}')  # the module's own result replaced it
    assert job_finished(results)
    assert wait_job(results, 5) is True


def test_wait_job_returns_after_its_wait_when_the_job_runs_on(tmp_path: Path) -> None:
    results = tmp_path / "job"
    results.write_text('{"started": 1, "finished": 0}')
    began = time.monotonic()
    assert wait_job(results, 0.3, step=0.1) is False
    assert 0.3 <= time.monotonic() - began < 15  # returned after its wait; the job never ends


BENCH_PLAYBOOK = """
- name: Run a client in the background and wait for it with the benchmark role's own wait.yml
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    sglang_benchmark_profile: eagle3
    sglang_benchmark_slot: {concurrency: 1, slot: c1}
    sglang_benchmark_tool: bench_client
    sglang_benchmark_progress: "{{ work }}/run.progress"
    sglang_benchmark_timeout: 60
    sglang_benchmark_poll_seconds: 1
    sglang_benchmark_lock_renewal: {}  # the role's default: no deploy lock to renew here
  tasks:
    - name: Note the start
      ansible.builtin.set_fact:
        sglang_benchmark_started: "{{ now().timestamp() }}"

    - name: Start the stand-in client, detached
      ansible.builtin.shell: for i in $(seq 1 12); do echo "$i/12 requests done" >> {{ work }}/run.progress; sleep 1; done
      async: 60
      poll: 0
      changed_when: true
      register: sglang_benchmark_job

    - name: Wait with the role's task file
      ansible.builtin.include_tasks: {file: "{{ role_wait }}"}
"""


def test_the_benchmark_wait_prints_the_clients_progress_and_no_failed_retrying(tmp_path: Path) -> None:
    out = run_playbook(tmp_path, BENCH_PLAYBOOK, "0", "-e", f"role_wait={ROOT / 'roles/sglang_benchmark/tasks/wait.yml'}")
    shown = re.findall(
        r"^WAITING \[localhost\]: benchmark eagle3 concurrency 1 \(bench_client\): 0:[0-5]\d elapsed, 0:[0-5]\d left of 1:00 \| (.*)$",
        out,
        re.M,
    )
    assert len(shown) >= 3, out
    assert all(re.fullmatch(r"([1-9]|1[0-2])/12 requests done", line) for line in shown), shown
    assert "eagle3 concurrency 1, " in out and "12/12 requests done" in out  # the role's own line after the run


def test_callback_keeps_one_clock_per_loop_item(callback: Any) -> None:
    from ansible.playbook.task import Task

    task = Task()
    for item in ("flashinfer_jit_cache", "sgl_kernel"):
        poll = {**_build_poll(1, 1), "_ansible_item_label": item}
        poll["progress"] = {**poll["progress"], "what": f"build of {item}"}
        callback.v2_runner_retry(_result(poll, task=task))
    assert [line.split(" (")[0] for line in callback.lines] == [
        "WAITING [gpu-01]: build of flashinfer_jit_cache",
        "WAITING [gpu-01]: build of sgl_kernel",
    ]


def test_callback_throttles_the_polls_of_an_async_task(callback: Any) -> None:
    from ansible.playbook.task import Task

    task = Task()
    for _ in range(10):  # polled every 10 s by `async`/`poll`: 100 s
        callback.v2_runner_on_async_poll(_result({"ansible_job_id": "j1.2", "started": 1, "finished": 0}, "Run the canary", task))
        callback.now[0] += 10
    assert callback.lines == [
        "WAITING [gpu-01]: Run the canary: running in the background (job j1.2), 0:00 since its first poll",
        "WAITING [gpu-01]: Run the canary: running in the background (job j1.2), 0:30 since its first poll",
        "WAITING [gpu-01]: Run the canary: running in the background (job j1.2), 1:00 since its first poll",
        "WAITING [gpu-01]: Run the canary: running in the background (job j1.2), 1:30 since its first poll",
    ]
