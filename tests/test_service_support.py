"""The deploy lock, the journal checks and the stand-in server fixture."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from deploy_lock import LockError, acquire, release
from service_health import findings, http_status

from conftest import ROOT


def test_a_second_run_is_refused_naming_the_holder(tmp_path: Path) -> None:
    lock = str(tmp_path / "deploy.lock")
    assert acquire(lock, {"run_id": "one", "user": "alice"}, 240)["acquired"]
    with pytest.raises(LockError, match=r"another deploy holds .*run_id=one, user=alice"):
        acquire(lock, {"run_id": "two", "user": "bob"}, 240)
    assert acquire(lock, {"run_id": "one"}, 240)["held"]  # the holder itself may re-enter
    assert release(lock, "two") is False and Path(lock).exists()
    assert release(lock, "one") is True and not Path(lock).exists()


def test_a_dead_runs_lock_is_taken_over(tmp_path: Path) -> None:
    lock = tmp_path / "deploy.lock"
    lock.write_text(json.dumps({"run_id": "old", "since": time.time() - 3600}))
    result = acquire(str(lock), {"run_id": "new"}, 30)
    assert result["acquired"] and result["holder"]["took_over"]["run_id"] == "old"


def test_journal_checks_find_disabled_optimisations() -> None:
    checks = [
        {"pattern": "TorchSymmMemCommunicator: .*(not supported|not available)", "meaning": "symm-mem off"},
        {"pattern": "allreduce fusion.*disabled", "meaning": "fusion off"},
    ]
    lines = ["loading", "TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported.", "ready"]
    assert findings(lines, checks) == [{"meaning": "symm-mem off", "line": lines[1]}]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("mode", ["healthy", "never-healthy", "crash"])
def test_the_standin_server_obeys_its_mode(mode: str) -> None:
    port = free_port()
    env = {
        **os.environ,
        "SGLANG_STANDIN_MODE": mode,
        "SGLANG_STANDIN_LOAD_SECONDS": "0.5",
        "PYTHONPATH": str(ROOT / "tests/fixtures/sglang-standin"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang_standin", "--model-path", "/m", "--port", str(port)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        if mode == "crash":
            assert proc.wait(timeout=10) == 1
            return
        deadline = time.monotonic() + 10
        while http_status(f"http://127.0.0.1:{port}/health") is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert http_status(f"http://127.0.0.1:{port}/health") == 503
        time.sleep(0.8)
        assert http_status(f"http://127.0.0.1:{port}/health") == (200 if mode == "healthy" else 503)
        if mode == "healthy":
            body = json.dumps({"prompt": "hello", "max_tokens": 4}).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=5) as response:
                first = json.loads(response.read())
            with urllib.request.urlopen(request, timeout=5) as response:
                assert json.loads(response.read()) == first  # deterministic
            assert first["usage"]["completion_tokens"] == 4
    finally:
        proc.kill()
        proc.wait()
