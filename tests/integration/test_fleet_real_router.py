"""The REAL router (stack_router_package at stack_router_version, from `make router-wheels`) in front of
three stand-in workers, started by the role's own launcher, upgraded one worker at a time with the
fleet code (plugins/module_utils/sglang_sm120/fleet/) under a steady load of streamed requests sent through
the router: no request fails or is cut short, none reaches a worker after its removal (the worker's
own "Prefill batch" lines say when each request arrived), and the router lists at least two healthy
workers at every moment."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from conftest import CACHE, ROOT, free_port, standin_env
from sglang_sm120.fleet import drain, router
from sglang_sm120.serve import bench_client

STACK = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/stack.yml").read_text(encoding="utf-8"))
LAUNCHER = ROOT / "roles/sglang_router/files/router_launcher.py"
STANDIN = ROOT / "tests/fixtures/sglang-standin"
PREFILL = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] Prefill batch, #new-seq: (\d+)")


@pytest.fixture(scope="module")
def router_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    version = STACK["stack_router_version"]
    wheels = CACHE / "wheelhouse" / f"router-{version}"
    if not wheels.is_dir():
        pytest.fail(f"no router wheels at {wheels}: run `make router-wheels` first")
    venv = tmp_path_factory.mktemp("router") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    specs = [f"{STACK['stack_router_package']}=={version}", *STACK["stack_router_requirements"]]
    subprocess.run(
        [
            str(venv / "bin/python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links",
            str(wheels),
            *specs,
        ],
        check=True,
    )
    return str(venv / "bin/python")


@dataclass
class Worker:
    port: int
    key: str
    log: Path
    release: str = "0.5.9"
    proc: Optional[subprocess.Popen] = None
    logs: list[Path] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, release: str) -> None:
        self.release = release
        log = self.log.with_name(f"{self.log.stem}-{release}.log")
        self.logs.append(log)
        timing = standin_env(release, load=0.5, warmup=0.2, health=1.0, token_ms=25)  # 1.0: the default
        env = {**os.environ, "PYTHONPATH": str(STANDIN), **timing}
        flags = {"--host": "127.0.0.1", "--port": str(self.port), "--model-path": "/models/tiny", "--api-key": self.key}
        argv = [sys.executable, "-m", "sglang_standin", *(item for pair in flags.items() for item in pair)]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while bench_client._get(self.url, "/health", None) is None:
            assert time.monotonic() < deadline, f"stand-in {self.url} never healthy"
            time.sleep(0.1)

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)

    def arrivals(self) -> list[float]:
        """Epoch seconds (whole, as SGLang logs them) of every request the worker's scheduler took in."""
        out = []
        for path in self.logs:
            for line in path.read_text(encoding="utf-8").splitlines():
                match = PREFILL.match(line)
                if match:
                    out += [datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").timestamp()] * int(match.group(2))
        return out


@pytest.fixture
def fleet(router_python: str, tmp_path: Path) -> Iterator[tuple[str, str, list[Worker], Path]]:
    workers = [Worker(free_port(), f"worker-key-{i}", tmp_path / f"worker{i}") for i in range(3)]
    for worker in workers:
        worker.start("0.5.9")
    router_key = "router-key-" + os.urandom(8).hex()
    key_file = tmp_path / "router-api-key"
    key_file.write_text(router_key + "\n", encoding="utf-8")
    workers_file = tmp_path / "workers.json"  # what the role writes: each worker with its own key
    workers_file.write_text(json.dumps([{"url": w.url, "api_key": w.key} for w in workers]), encoding="utf-8")
    port, metrics = free_port(), free_port()
    # the flags the router role renders, as flag-value pairs
    flags = {
        "--host": "127.0.0.1", "--port": str(port), "--policy": "cache_aware", "--prometheus-host": "127.0.0.1",
        "--prometheus-port": str(metrics), "--health-check-timeout-secs": "30", "--health-check-interval-secs": "2",
    }  # fmt: skip
    argv = [router_python, str(LAUNCHER), *(item for pair in flags.items() for item in pair)]
    log = tmp_path / "router.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "SGLANG_ROUTER_API_KEY_FILE": str(key_file),
                "SGLANG_ROUTER_WORKERS_FILE": str(workers_file),
                "NO_COLOR": "1",
            },
        )
    url = f"http://127.0.0.1:{port}"
    try:
        client = router.RouterClient(url, router_key)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.workers()
                break
            except router.RouterError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text(encoding="utf-8")[-3000:]
                time.sleep(0.3)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
        assert router_key not in cmdline and "--api-key" not in cmdline
        for worker in workers:  # registered by the launcher, with their own keys
            client.wait_healthy(worker.url, timeout=60)
        yield url, router_key, workers, log
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        for worker in workers:
            if worker.proc and worker.proc.poll() is None:
                worker.proc.kill()
        assert router_key not in log.read_text(encoding="utf-8", errors="replace")


class Load:
    """Streamed /generate requests through the router, back to back on a few threads, until stopped."""

    def __init__(self, url: str, key: str, threads: int, tokens: int) -> None:
        self.url, self.key, self.tokens = url, key, tokens
        self.results: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.loop, args=(i,)) for i in range(threads)]

    def loop(self, index: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            self.results.append(bench_client.stream_one(self.url, f"client {index} request {n}", self.tokens, self.key, 60))

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=90)


def test_a_rolling_upgrade_behind_the_real_router_loses_no_request(fleet) -> None:
    url, key, workers, _ = fleet
    client = router.RouterClient(url, key)
    healthy_counts: list[int] = []
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            healthy_counts.append(client.healthy_count())
            time.sleep(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    removed_at: dict[int, float] = {}
    drains: list[drain.DrainResult] = []
    with Load(url, key, threads=4, tokens=120) as load:  # 120 tokens at 25 ms: about 3 s a request
        time.sleep(4)
        for worker in workers:
            assert client.remove(worker.url) is not None
            client.wait_gone(worker.url, timeout=30)
            removed_at[worker.port] = time.time()
            result = drain.wait_drained(lambda w=worker: drain.read_load(w.url, w.key), timeout=60, interval=0.2)
            assert result.drained, result.to_dict()
            drains.append(result)
            worker.stop()
            worker.start("0.5.23")  # the new release
            client.add(worker.url, worker.key)
            client.wait_healthy(worker.url, timeout=60)
            time.sleep(2)
    watching.set()
    watcher.join()

    assert len(load.results) >= 20
    failed = [r for r in load.results if not r["ok"] or r["output_tokens"] != 120]
    assert failed == [], failed[:3]
    assert any(r.history[0][1] > 0 for r in drains)  # at least one drain had requests to wait for
    for worker in workers:
        old_log = worker.logs[0]
        late = [t for t in Worker(worker.port, worker.key, old_log, logs=[old_log]).arrivals() if t > int(removed_at[worker.port])]
        assert late == [], f"{worker.url} took requests after its removal at {removed_at[worker.port]:.1f}"
        assert worker.arrivals()  # it served before and after
    assert min(healthy_counts) >= 2 and max(healthy_counts) == 3


# ------------------------------------------------------------------ the role's leave and join, through real Ansible


def leave_join(url: str, key: str, worker: Worker, drain_timeout: int, *extra: str, **fleet: Any) -> subprocess.CompletedProcess:
    variables = {
        "fleet": {
            "router_url": url,
            "router_key": key,
            "worker_url": worker.url,
            "worker_key": worker.key,
            "drain_timeout": drain_timeout,
            **fleet,
        }
    }
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        "localhost,",
        "-c",
        "local",
        str(ROOT / "tests/playbooks/router_leave_join.yml"),
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-e",
        json.dumps(variables),
        *extra,
    ]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_role_drains_a_worker_out_of_the_router_and_puts_it_back(fleet) -> None:
    url, key, workers, _ = fleet
    client = router.RouterClient(url, key)
    worker = workers[0]
    running = threading.Thread(target=lambda: bench_client.stream_one(worker.url, "a long one", 480, worker.key, 90))
    running.start()  # about 12 s, straight to the worker: longer than ansible-playbook takes to reach the drain on a busy CI machine
    time.sleep(0.5)
    run = leave_join(url, key, worker, 60)
    running.join()
    assert run.returncode == 0, run.stdout[-3000:]
    assert key not in run.stdout and worker.key not in run.stdout
    assert client.find(worker.url) is not None and client.healthy_count() == 3
    assert re.search(r"Wait until the server reports no running or waiting request.*\n(ok|changed): \[localhost\]", run.stdout)
    drained = re.search(  # the summary's line, its wrapping undone
        rf"router: {re.escape(url)} lists this worker healthy \(3 healthy in all\); drained in ([0-9.]+) s before the restart",
        " ".join(run.stdout.split()),
    )
    assert drained and 1.0 < float(drained[1]) < 40, run.stdout[-3000:]  # the streamed request ran about 12 s from 0.5 s before


def test_a_drain_past_its_timeout_puts_the_worker_back_and_names_it(fleet) -> None:
    url, key, workers, _ = fleet
    client = router.RouterClient(url, key)
    worker = workers[1]
    running = threading.Thread(target=lambda: bench_client.stream_one(worker.url, "a long one", 400, worker.key, 60))
    running.start()  # about 10 s
    time.sleep(0.5)
    run = leave_join(url, key, worker, 2)
    assert run.returncode != 0
    assert re.search(rf"{re.escape(worker.url)}\) did not drain: .*1 requests in flight \(1 running, 0 waiting", run.stdout), run.stdout[
        -3000:
    ]
    assert "sglang_router_drain_timeout" in run.stdout
    assert client.find(worker.url) is not None  # back in the router, not upgraded
    running.join()


def test_a_worker_does_not_leave_a_router_with_fewer_than_two_healthy_workers(fleet) -> None:
    url, key, workers, _ = fleet
    client = router.RouterClient(url, key)
    for other in workers[1:]:
        client.remove(other.url)
        client.wait_gone(other.url, timeout=30)
    refused = leave_join(url, key, workers[0], 60, "-e", "join=false")
    assert refused.returncode != 0
    assert "lists 1 healthy worker(s)" in refused.stdout and "sglang_router_allow_downtime" in refused.stdout, refused.stdout[-3000:]
    assert client.find(workers[0].url) is not None
    allowed = leave_join(url, key, workers[0], 60, allow_downtime=True)
    assert allowed.returncode == 0, allowed.stdout[-3000:]
    assert client.healthy_count() == 1
    assert "lists this worker healthy (1 healthy in all); drained in" in " ".join(allowed.stdout.split())
