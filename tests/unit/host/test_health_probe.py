"""plugins/module_utils/sglang_sm120/serve/health.py: the health gate as a real SGLang start looks from outside: the port
closed while the model loads, 503 during SGLang's own warm-up, a /health that takes its time."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_sm120.serve import health as service_health


class Slow(BaseHTTPRequestHandler):
    status = 200
    delay = 0.0

    def do_GET(self) -> None:
        time.sleep(type(self).delay)
        self.send_response(type(self).status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[Slow]]]:
    handler = type("Handler", (Slow,), {})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/health", handler
    httpd.shutdown()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_each_phase_of_a_start_is_told_apart(server: tuple[str, type[Slow]]) -> None:
    url, handler = server
    assert service_health.probe(f"http://127.0.0.1:{closed_port()}/health", 2)[:2] == (None, "port closed")
    handler.status = 503
    assert service_health.probe(url, 2)[:2] == (503, "503")
    handler.status, handler.delay = 200, 4.0
    status, phase, took = service_health.probe(url, 0.5)
    assert (status, phase) == (None, "no answer") and took < 3.5  # the probe's timeout, not the answer's delay
    assert service_health.probe(url, 10)[:2] == (200, "healthy")


def test_a_slow_healthy_server_is_healthy_on_the_first_probe(server: tuple[str, type[Slow]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy real server's /health takes seconds (it generates a token): a probe timeout above
    SGLang's own 20 s sees it healthy, where a 5 s one saw it down and a converge restarted it."""
    url, handler = server
    handler.delay = 1.2
    monkeypatch.setattr(service_health, "unit_state", lambda unit: {"ActiveState": "active", "SubState": "running", "NRestarts": "0"})
    monkeypatch.setattr(service_health, "journal", lambda *a, **k: ["The server is fired up and ready to roll!"])
    result = service_health.poll("sglang.service", url, time.time(), wait_seconds=0.1, probe_timeout=30)
    assert result.healthy and result.phase == "healthy" and result.probe_seconds >= 1.2
    short = service_health.poll("sglang.service", url, time.time(), wait_seconds=0.1, probe_timeout=0.5)
    assert not short.healthy and short.phase == "no answer"


def test_a_timed_out_start_says_the_port_stayed_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_health, "unit_state", lambda unit: {"ActiveState": "active", "SubState": "running", "NRestarts": "0"})
    monkeypatch.setattr(service_health, "journal", lambda *a, **k: ["Load weight begin."])
    result = service_health.poll("sglang.service", f"http://127.0.0.1:{closed_port()}/health", time.time(), wait_seconds=0.3, interval=0.1)
    assert (result.healthy, result.crashed, result.phase, result.last_line) == (False, False, "port closed", "Load weight begin.")
    assert result.phase in service_health.PHASES


def test_the_role_explains_every_phase_the_probe_reports() -> None:
    import yaml

    from conftest import ROOT

    phases = yaml.safe_load((ROOT / "roles/sglang_service/vars/main.yml").read_text())["sglang_service_health_phases"]
    assert set(phases) == set(service_health.PHASES)


def test_the_journal_tail_is_the_last_lines_since_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --since, journalctl's -n counts from the since point (systemd 252: `-n 30 --since X` gives
    the first 30 lines after X), so a start that printed more hid its crash line. The tail is read
    newest first and turned around."""
    import subprocess

    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        exited = "sglang.service: Main process exited, code=exited, status=1/FAILURE"
        newest_first = f"{exited}\nRuntimeError: crash\n\n[TP7] Load weight begin.\n"
        return subprocess.CompletedProcess(cmd, 0, newest_first, "")

    monkeypatch.setattr(service_health.subprocess, "run", fake_run)
    tail = service_health.journal("sglang.service", 1000.0, 3)
    assert tail == ["[TP7] Load weight begin.", "RuntimeError: crash", "sglang.service: Main process exited, code=exited, status=1/FAILURE"]
    assert seen[0][:8] == ["journalctl", "--no-pager", "-o", "cat", "--reverse", "-n", "3", "-u"]
    assert seen[0][-2:] == ["--since", "@1000"]
