"""The stand-in SGLang server (TEST FIXTURE tests/fixtures/sglang-standin) speaks like the real release
it stands for: its phases, health latency, auth, endpoints, speculative accounting and log lines,
checked against the real sources (.cache/sglang/<version>, `make sglang-wheels`) and a real 0.5.13
server's capture (tests/data/real-server/0.5.13-h200).
"""

from __future__ import annotations

import ast
import http.client
import json
import os
import re
import socket
import string
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any, Optional

import pytest

from conftest import CACHE, DATA, ROOT, free_port, standin_server

STANDIN = ROOT / "tests/fixtures/sglang-standin"
sys.path.insert(0, str(STANDIN))

from sglang_standin import engine, http_api, launch, logs, versions  # noqa: E402

CAPTURE = DATA / "real-server" / "0.5.13-h200"
FAST = {
    "SGLANG_STANDIN_LOAD_SECONDS": "0.6",
    "SGLANG_STANDIN_WARMUP_SECONDS": "0.3",
    "SGLANG_STANDIN_HEALTH_SECONDS": "0.02",
    "SGLANG_STANDIN_TOKEN_MS": "1",
}
SPEC = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]
KEY, ADMIN = "sk-standin-test-0123", "sk-admin-test-4567"


# ------------------------------------------------------------------ a stand-in process


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Standin:
    """One stand-in server process on a free 127.0.0.1 port; its log (stderr) goes to a file."""

    def __init__(self, tmp_path: Path, argv: list[str], version: str, env: dict[str, str]) -> None:
        self.port = free_port()
        self.log_path = tmp_path / f"standin-{self.port}.log"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_STANDIN_") and k != "STATE_DIRECTORY"}
        full_env = {**clean, **FAST, "SGLANG_STANDIN_VERSION": version, "PYTHONPATH": str(STANDIN), **env}
        command = [
            sys.executable,
            "-m",
            "sglang_standin",
            "--model-path",
            "/models/target",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen([*command, *argv], env=full_env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_open(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not port_open(self.port):
            assert self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, "the port never opened\n" + self.log()
            time.sleep(0.02)

    def wait_healthy(self, timeout: float = 10.0) -> None:
        self.wait_open(timeout)
        deadline = time.monotonic() + timeout
        while self.call("GET", "/health")[0] != 200:
            assert time.monotonic() < deadline, "never healthy\n" + self.log()
            time.sleep(0.05)

    def call(self, method: str, path: str, body: Any = None, key: Optional[str] = None, timeout: float = 30) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, body: Any = None, key: Optional[str] = None) -> Any:
        status, data = self.call(method, path, body, key)
        assert status == 200, (path, status, data[:300])
        return json.loads(data)

    def stream(self, body: dict[str, Any], key: Optional[str] = None) -> list[dict[str, Any]]:
        status, data = self.call("POST", "/generate", {**body, "stream": True}, key)
        assert status == 200, data[:300]
        events = [line[6:] for line in data.decode().splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        return [json.loads(event) for event in events[:-1]]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture()
def start(tmp_path: Path):
    started: list[Standin] = []

    def _start(argv: Optional[list[str]] = None, version: str = "0.5.9", **env: str) -> Standin:
        server = Standin(tmp_path, list(argv or []), version, env)
        started.append(server)
        return server

    yield _start
    for server in started:
        server.stop()


def log_messages(text: str) -> list[str]:
    """The messages of SGLang-style log lines, without "[time( TPn)] "."""
    return [m.group(2) for m in re.finditer(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d( TP\d+)?\] (.*)$", text, re.M)]


# ------------------------------------------------------------------ versions and pure decisions


@pytest.mark.parametrize(
    ("version", "style"),
    [
        ("0.5.9", "0.5.9"),
        ("0.5.12", "0.5.9"),
        ("0.5.13", "0.5.13"),
        ("0.5.22.post1", "0.5.13"),
        ("0.5.23", "0.5.23"),
        ("0.6.0", "0.5.23"),
        ("x", "0.5.9"),
    ],
)
def test_the_version_picks_the_style(version: str, style: str) -> None:
    assert versions.style_of(version) == style


def test_the_version_comes_from_the_environment_else_the_installed_sglang_else_0_5_9(monkeypatch: pytest.MonkeyPatch) -> None:
    assert versions.resolve_version({"SGLANG_STANDIN_VERSION": "0.5.23"}) == "0.5.23"
    monkeypatch.setattr(versions, "installed_sglang", lambda: "0.5.13")
    assert versions.resolve_version({}) == "0.5.13"
    monkeypatch.setattr(versions, "installed_sglang", lambda: None)
    assert versions.resolve_version({}) == "0.5.9"


def test_health_answers_after_its_latency_and_503_after_20_s() -> None:
    assert http_api.health_decision(1.0) == (1.0, 200)
    assert http_api.health_decision(20.0) == (20.0, 200)
    assert http_api.health_decision(21.0) == (20.0, 503)
    assert http_api.HEALTH_CHECK_TIMEOUT == 20.0


@pytest.mark.parametrize(
    ("method", "path", "header", "keys", "level", "style", "expected"),
    [
        ("GET", "/v1/models", None, (KEY, None), "normal", "0.5.9", (False, 401)),
        ("GET", "/v1/models", f"Bearer {KEY}", (KEY, None), "normal", "0.5.9", (True, 200)),
        ("GET", "/v1/models", f"bearer {KEY}", (KEY, None), "normal", "0.5.9", (True, 200)),
        ("GET", "/v1/models", f"Basic {KEY}", (KEY, None), "normal", "0.5.9", (False, 401)),
        ("GET", "/v1/models", f"Bearer {KEY}x", (KEY, None), "normal", "0.5.9", (False, 401)),
        ("GET", "/no/such/route", None, (KEY, None), "normal", "0.5.9", (False, 401)),
        ("GET", "/health_generate", None, (KEY, ADMIN), "normal", "0.5.9", (True, 200)),
        ("GET", "/metrics", None, (KEY, ADMIN), "normal", "0.5.9", (True, 200)),
        ("GET", "/ready", None, (KEY, None), "normal", "0.5.9", (False, 401)),
        ("GET", "/ready", None, (KEY, None), "normal", "0.5.23", (True, 200)),
        ("GET", "/v1/models", None, (None, ADMIN), "normal", "0.5.9", (True, 200)),
        ("POST", "/set_internal_state", f"Bearer {KEY}", (KEY, ADMIN), "admin_optional", "0.5.9", (False, 401)),
        ("POST", "/set_internal_state", f"Bearer {ADMIN}", (KEY, ADMIN), "admin_optional", "0.5.9", (True, 200)),
        ("POST", "/set_internal_state", f"Bearer {KEY}", (KEY, None), "admin_optional", "0.5.9", (True, 200)),
        ("POST", "/set_internal_state", None, (None, None), "admin_optional", "0.5.9", (True, 200)),
        ("POST", "/x", f"Bearer {KEY}", (KEY, None), "admin_force", "0.5.9", (False, 403)),
        ("OPTIONS", "/v1/models", None, (KEY, None), "normal", "0.5.9", (True, 200)),
    ],
)
def test_auth_decides_as_sglang_decide_request_auth(
    method: str, path: str, header: Optional[str], keys: tuple, level: str, style: str, expected: tuple
) -> None:
    assert http_api.decide_request_auth(method, path, header, *keys, level, style) == expected


def test_control_files_are_read_when_present_and_parsable(tmp_path: Path) -> None:
    assert http_api.read_control(None, "health-seconds") is None
    assert http_api.read_control(str(tmp_path), "health-seconds") is None
    for text, value in (("2.5\n", 2.5), ("nan", None), ("fast", None), ("", None)):
        (tmp_path / "health-seconds").write_text(text)
        assert http_api.read_control(str(tmp_path), "health-seconds") == value
    assert http_api.control_directory({"STATE_DIRECTORY": "/var/lib/sglang:/var/lib/other"}) == "/var/lib/sglang"
    assert http_api.control_directory({"SGLANG_STANDIN_CONTROL_DIR": "/c", "STATE_DIRECTORY": "/s"}) == "/c"
    assert http_api.control_directory({}) is None


# ------------------------------------------------------------------ --config


def test_config_flags_come_first_and_the_command_line_wins(tmp_path: Path) -> None:
    config = tmp_path / "keys.yaml"
    config.write_text(
        "# keys\napi-key: \"sk-\\\"quoted\\\"-1\"\nadmin-api-key: 'it''s'\ntp-size: 4\nenable-metrics: true\nlog-requests: false\n"
    )
    merged = launch.merge_config(["--model-path", "/m", "--config", str(config), "--tp-size", "8"])
    assert merged == [
        "--api-key",
        'sk-"quoted"-1',
        "--admin-api-key",
        "it's",
        "--tp-size",
        "4",
        "--enable-metrics",
        "--model-path",
        "/m",
        "--tp-size",
        "8",
    ]
    flags = launch.parse_flags(merged)
    assert (
        flags["api_key"] == 'sk-"quoted"-1'
        and flags["admin_api_key"] == "it's"
        and flags["tp_size"] == 8
        and flags["enable_metrics"] is True
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "keys.json"], "ValueError: Config file must be YAML format, got: .json"),
        (["--config", "absent.yml"], "ValueError: Config file not found: absent.yml"),
        (["--config", "a.yaml", "--config", "b.yaml"], "ValueError: Multiple config files specified! Only one allowed."),
        (["--port", "1", "--config"], "ValueError: No config file specified after --config flag!"),
    ],
)
def test_config_errors_are_sglangs(argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keys.json").write_text("{}")
    with pytest.raises(launch.LaunchError) as caught:
        launch.merge_config(argv)
    assert caught.value.line() == message


def test_yaml_scalars_read_as_pyyaml_reads_them() -> None:
    cases = {
        '"a\\u00e9b"': "a\u00e9b",
        "'x''y'": "x'y",
        "yes": True,
        "Off": False,
        "~": None,
        "12": 12,
        "0.5": 0.5,
        "1e3": "1e3",
        "[1, 2]": [1, 2],
    }
    for text, value in cases.items():
        assert launch.yaml_scalar(text) == value, text
    assert launch.parse_yaml_mapping("") == {}
    with pytest.raises(launch.LaunchError, match="dictionary at root level"):
        launch.parse_yaml_mapping("- a\n")
    with pytest.raises(launch.LaunchError, match="stand-in: cannot read"):
        launch.parse_yaml_mapping("a:\n  b: 1\n")


# ------------------------------------------------------------------ phases and health


def test_the_port_stays_closed_while_loading_then_503_during_warm_up_then_200(start) -> None:
    server = start(SGLANG_STANDIN_LOAD_SECONDS="1.0", SGLANG_STANDIN_WARMUP_SECONDS="3.0")  # 3 requests inside it, even loaded
    time.sleep(0.5)
    assert server.proc.poll() is None and not port_open(server.port)
    server.wait_open()
    assert server.call("GET", "/health") == (503, b"")
    assert server.call("GET", "/health_generate")[0] == 503
    assert server.call("GET", "/model_info")[0] == 200  # the real warm-up reads it while /health says 503
    assert "fired up" not in server.log()
    server.wait_healthy()
    assert server.call("GET", "/health") == (200, b"")
    assert "The server is fired up and ready to roll!" in log_messages(server.log())


# The control directory: SGLANG_STANDIN_CONTROL_DIR, or under systemd the unit's StateDirectory (STATE_DIRECTORY).
@pytest.mark.parametrize("variable", ["SGLANG_STANDIN_CONTROL_DIR", "STATE_DIRECTORY"])
def test_health_latency_comes_from_the_control_file(start, tmp_path: Path, variable: str) -> None:
    control = tmp_path / "control"
    control.mkdir()
    server = start(**{variable: str(control)})
    server.wait_healthy()
    (control / "health-seconds").write_text("3")
    tic = time.monotonic()
    assert server.call("GET", "/health")[0] == 200
    assert time.monotonic() - tic > 2.95
    (control / "health-seconds").write_text("not a number")
    tic = time.monotonic()
    assert server.call("GET", "/health_generate")[0] == 200
    assert time.monotonic() - tic < 2.5  # no delay (a loaded machine still answers well inside the 3 s above)


def test_never_healthy_answers_503_forever_and_crash_exits_1(start) -> None:
    never = start(SGLANG_STANDIN_MODE="never-healthy")
    crash = start(SGLANG_STANDIN_MODE="crash")
    missing = start(["--model-path", "/models/x.missing"])
    never.wait_open()
    time.sleep(1.0)
    assert never.call("GET", "/health")[0] == 503
    assert "fired up" not in never.log()
    assert crash.proc.wait(timeout=60) == 1 and not port_open(crash.port)
    assert "RuntimeError: stand-in crash requested by SGLANG_STANDIN_MODE=crash" in crash.log()
    assert missing.proc.wait(timeout=60) == 1
    assert "OSError: /models/x.missing does not appear to have a file named config.json" in missing.log()


@pytest.mark.parametrize(("version", "during", "after"), [("0.5.9", 404, 404), ("0.5.13", 404, 404), ("0.5.23", 503, 200)])
def test_ready_exists_only_from_0_5_23(start, version: str, during: int, after: int) -> None:
    server = start(version=version, SGLANG_STANDIN_WARMUP_SECONDS="3.0")
    server.wait_open()
    assert server.call("GET", "/ready")[0] == during
    server.wait_healthy()
    assert server.call("GET", "/ready")[0] == after


# ------------------------------------------------------------------ auth and endpoints


def test_keys_from_config_protect_all_but_health_and_metrics(start, tmp_path: Path) -> None:
    config = tmp_path / "api-keys.yaml"
    config.write_text(f'api-key: "{KEY}"\nadmin-api-key: "{ADMIN}"\n')
    server = start(["--enable-metrics", "--config", str(config)])
    server.wait_healthy()
    assert server.call("GET", "/v1/models") == (401, b'{"error": "Unauthorized"}')
    assert server.json("GET", "/v1/models", key=KEY)["data"][0]["id"] == "/models/target"
    assert server.call("GET", "/server_info", key=ADMIN)[0] == 401  # normal routes take only the API key
    assert server.call("GET", "/metrics")[0] == 200
    assert server.call("GET", "/no/such/route")[0] == 401
    assert server.call("GET", "/no/such/route", key=KEY)[0] == 404
    state = {"server_args": {"speculative_accept_threshold_acc": 1.0}}
    assert server.call("POST", "/set_internal_state", state, key=KEY)[0] == 401
    assert server.json("POST", "/set_internal_state", state, key=ADMIN) == [True]
    # 0.5.9 logs the whole args again after an update, keys included (scheduler.py set_internal_state).
    updated = [m for m in log_messages(server.log()) if m.startswith("Global server args updated! get_global_server_args()=ServerArgs(")]
    assert len(updated) == 1 and f"api_key='{KEY}', admin_api_key='{ADMIN}'" in updated[0]


def test_metrics_exist_only_with_enable_metrics(start) -> None:
    plain, metrics = start(), start(["--enable-metrics", *SPEC])
    plain.wait_healthy()
    metrics.wait_healthy()
    assert plain.call("GET", "/metrics") == (404, b'{"detail": "Not Found"}')
    text = metrics.call("GET", "/metrics")[1].decode()
    for name in ("num_requests_total", "generation_tokens_total", "spec_accept_length"):
        assert re.search(rf"^sglang:{name}\{{[^}}]*\}} [0-9.]+$", text, re.M), name
    assert 'sglang:num_requests_total{model_name="/models/target"} 1.0' in text  # the warm-up request


def test_server_info_echoes_the_launch_and_the_key_as_each_release_does(start) -> None:
    old, new = start(["--api-key", KEY, *SPEC], "0.5.9"), start(["--api-key", KEY, *SPEC], "0.5.23")
    for server, version in ((old, "0.5.9"), (new, "0.5.23")):
        server.wait_healthy()
        info = server.json("GET", "/get_server_info", key=KEY)
        assert info["api_key"] == KEY and info["internal_states"][0]["api_key"] == KEY
        assert info["version"] == version and info["standin"] is True
        assert info["speculative_accept_threshold_acc"] == 1.0 and info["decode_log_interval"] == 40 and info["tp_size"] == 1
        assert info["speculative_algorithm"] == "EAGLE3" and info["max_running_requests"] == 48
        assert "Endpoint '/get_server_info' is deprecated" in server.log()
    assert f"--api-key {KEY}" in new.json("GET", "/server_info", key=KEY)["launch_command"]


def test_model_info_and_v1_models_are_shaped_like_the_capture(start) -> None:
    server = start(version="0.5.13")
    server.wait_healthy()
    real = json.loads((CAPTURE / "ep-eagle3-model_info.txt").read_text())
    assert server.json("GET", "/model_info") == real
    assert server.json("GET", "/get_model_info") == real
    ours, theirs = server.json("GET", "/v1/models"), json.loads((CAPTURE / "ep-eagle3-v1_models.txt").read_text())
    assert ours.keys() == theirs.keys() and ours["data"][0].keys() == theirs["data"][0].keys()


def test_server_info_has_the_captures_scheduler_fields(start) -> None:
    server = start(["--enable-metrics", *SPEC], "0.5.13")
    server.wait_healthy()
    ours, real = server.json("GET", "/server_info"), json.loads((CAPTURE / "ep-eagle3-server_info.txt").read_text())
    assert ours["standin"] is True and "standin" not in real
    for key in (
        "status",
        "max_total_num_tokens",
        "max_req_input_len",
        "internal_states",
        "version",
        "kv_events",
        "api_key",
        "admin_api_key",
    ):
        assert key in ours and key in real, key
    assert list(ours)[-3:] == ["version", "kv_events", "standin"] and list(real)[-2:] == ["version", "kv_events"]
    assert {k: ours[k] for k in ("status", "max_req_input_len", "decode_log_interval")} == {
        k: real[k] for k in ("status", "max_req_input_len", "decode_log_interval")
    }
    extra = {"last_gen_throughput", "memory_usage", "effective_max_running_requests_per_dp"}
    assert extra <= set(ours["internal_states"][0]) and extra <= set(real["internal_states"][0])
    assert ours["internal_states"][0]["memory_usage"].keys() == real["internal_states"][0]["memory_usage"].keys()


# ------------------------------------------------------------------ speculative accounting


def generate(server: Standin, tokens: int) -> dict[str, Any]:
    chunks = server.stream({"text": "one two three", "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}})
    assert chunks[0]["meta_info"]["completion_tokens"] == 1  # the prefill's token comes alone
    assert all(c["meta_info"]["finish_reason"] is None and "spec_verify_ct" not in c["meta_info"] for c in chunks[:-1])
    return chunks[-1]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_accept_length_is_folded_every_40_decode_steps_cumulative_and_reset(start, version: str) -> None:
    server = start(["--enable-metrics", *SPEC], version, SGLANG_STANDIN_ACCEPT_LENGTH="2")
    server.wait_healthy()  # the warm-up: 8 tokens = 1 + 4 decode steps (2, 2, 2, 1)

    def average() -> Optional[float]:
        return server.json("GET", "/server_info")["internal_states"][0].get("avg_spec_accept_length")

    for _ in range(3):  # 21 tokens = 1 + 10 steps of 2: 4 + 30 = 34 decode steps
        last = generate(server, 21)
        meta = last["meta_info"]
        assert meta["finish_reason"] == {"type": "length", "length": 21} and meta["completion_tokens"] == 21
        assert meta["spec_verify_ct"] == 10 and meta["spec_accept_length"] == 21 / 10 == 2.1
        assert len(last["output_ids"]) == 21
    assert average() is None
    generate(server, 21)  # steps 35-44: the fold at 40 takes the warm-up's 7 tokens / 4 steps and 36 steps of 2
    assert average() == pytest.approx(79 / 40)
    decode_lines = [m for m in log_messages(server.log()) if m.startswith("Decode batch")]
    rate = 79 / (40 * 4) if version == "0.5.9" else (79 - 40) / (40 * 3)  # 0.5.9: tokens/(steps x 4); 0.5.23: drafts/(steps x 3)
    head = f"Decode batch, #running-req: 1, #token: 16, token usage: 0.00, accept len: {79 / 40:.2f}, accept rate: {rate:.2f}, "
    assert len(decode_lines) == 1 and decode_lines[0].startswith(head), decode_lines
    assert re.search(r"cuda graph: True, gen throughput \(token/s\): [0-9.]+, #queue-req: 0$", decode_lines[0])
    metrics = server.call("GET", "/metrics")[1].decode()
    assert re.search(rf"^sglang:spec_accept_length\{{.*\}} {79 / 40}$", metrics, re.M)
    assert server.json("POST", "/set_internal_state", {"server_args": {"speculative_accept_threshold_acc": 1.0}}) == [True]
    assert average() is None
    assert f"avg_spec_accept_length={79 / 40}" in log_messages(server.log())
    for _ in range(4):  # steps 45-84: the fold at 80 counts only steps of 2 (41-80)
        generate(server, 21)
    assert average() == 2.0


def test_the_accept_length_control_file_applies_to_the_next_requests(start, tmp_path: Path) -> None:
    server = start(SPEC, SGLANG_STANDIN_CONTROL_DIR=str(tmp_path))
    server.wait_healthy()
    (tmp_path / "accept-length").write_text("3")
    meta = generate(server, 31)["meta_info"]
    assert meta["spec_verify_ct"] == 10 and meta["spec_accept_length"] == 3.1 and meta["spec_accept_histogram"] == [0, 0, 10]
    (tmp_path / "accept-length").write_text("1.5")
    meta = generate(server, 31)["meta_info"]
    assert meta["spec_verify_ct"] == 20 and meta["completion_tokens"] / meta["spec_verify_ct"] == meta["spec_accept_length"]


def test_without_speculation_there_are_no_spec_fields(start) -> None:
    server = start(["--enable-metrics"])
    server.wait_healthy()
    for _ in range(6):
        meta = generate(server, 10)["meta_info"]
        assert not [k for k in meta if k.startswith("spec_")]
    state = server.json("GET", "/server_info")["internal_states"][0]
    assert "avg_spec_accept_length" not in state
    assert [m for m in log_messages(server.log()) if m.startswith("Decode batch") and "accept len" in m] == []


def test_a_non_streamed_generate_returns_the_final_object(start) -> None:
    server = start(SPEC, "0.5.23", SGLANG_STANDIN_ACCEPT_LENGTH="2.5")
    server.wait_healthy()
    body = server.json("POST", "/generate", {"text": "a b", "sampling_params": {"max_new_tokens": 11}})
    meta = body["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 11} and meta["spec_verify_ct"] == 4
    assert {"spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_correct_drafts_histogram", "num_retractions"} <= set(meta)
    completion = server.json("POST", "/v1/completions", {"prompt": "a b", "max_tokens": 5})
    assert completion["usage"]["completion_tokens"] == 5 and completion["choices"][0]["finish_reason"] == "length"


def test_streamed_meta_info_has_the_captures_keys(start) -> None:
    server = start(["--enable-metrics", *SPEC], "0.5.13")
    server.wait_healthy()
    ours = server.stream({"text": "x", "sampling_params": {"max_new_tokens": 32}})
    real = [
        json.loads(line[6:]) for line in (CAPTURE / "generate-stream-eagle3.txt").read_text().splitlines() if line.startswith("data: {")
    ]
    assert list(ours[0]["meta_info"]) == list(real[0]["meta_info"])
    assert list(ours[1]["meta_info"]) == list(real[1]["meta_info"])
    assert list(ours[-1]["meta_info"]) == list(real[-1]["meta_info"])


@pytest.mark.parametrize(("version", "answer"), [("0.5.9", True), ("0.5.23", False)])
def test_an_update_sglang_refuses_is_logged_and_answered_as_that_release_does(start, version: str, answer: bool) -> None:
    server = start(SPEC, version)
    server.wait_healthy()
    assert server.json("PUT", "/set_internal_state", {"server_args": {"tp_size": 2}}) == [answer]
    assert "Updating tp_size is not supported." in log_messages(server.log())
    assert server.call("POST", "/set_internal_state", {"nothing": 1})[0] == 422


# ------------------------------------------------------------------ log lines


@pytest.mark.parametrize("version", ["0.5.9", "0.5.13", "0.5.23"])
def test_the_server_args_line_carries_the_key_as_the_real_one_does(start, tmp_path: Path, version: str) -> None:
    config = tmp_path / "k.yml"
    config.write_text(f'api-key: "{KEY}"\n')
    server = start(["--config", str(config)], version)
    server.wait_open()
    line = next(m for m in log_messages(server.log()) if m.startswith("server_args="))
    if version == "0.5.23":
        assert line.startswith("server_args={'model_path': '/models/target',") and f"'api_key': '{KEY}'" in line
    else:
        assert line.startswith("server_args=ServerArgs(model_path='/models/target',") and f"api_key='{KEY}'" in line


@pytest.mark.parametrize(
    ("version", "begin", "end"),
    [
        (
            "0.5.9",
            "Capture cuda graph begin. This can take up to several minutes. avail mem=",
            r"Capture cuda graph end\. Time elapsed: [0-9.]+ s\. mem usage=",
        ),
        (
            "0.5.13",
            "Capture cuda graph begin. This can take up to several minutes. avail mem=97.17 GB",
            r"Capture cuda graph end\. Time elapsed: 56\.05 s\.",
        ),
        (
            "0.5.23",
            "Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, avail mem=",
            r"Capture target verify CUDA graph end\. bs=\[1, 2, 3",
        ),
    ],
)
def test_each_version_logs_its_cuda_graph_lines_unless_disabled(start, version: str, begin: str, end: str) -> None:
    server, plain = start(SPEC, version), start([*SPEC, "--disable-cuda-graph"], version)
    server.wait_open()
    plain.wait_open()
    messages = log_messages(server.log())
    assert any(m.startswith(begin) for m in messages), messages
    assert any(re.match(end, m) for m in messages)
    assert not [m for m in log_messages(plain.log()) if "graph begin" in m or "graph end" in m]
    if version == "0.5.23":
        assert "\033[1;33m'--disable-cuda-graph' is deprecated and will be removed in a future release." in plain.log()


@pytest.mark.parametrize(("version", "printed"), [("0.5.9", True), ("0.5.13", True), ("0.5.23", False)])
def test_mixed_chunk_is_switched_off_for_eagle3_where_the_release_does(start, version: str, printed: bool) -> None:
    server = start([*SPEC, "--enable-mixed-chunk"], version)
    server.wait_open()
    lines = [m for m in log_messages(server.log()) if m.startswith("Mixed chunked prefill is disabled")]
    assert lines == (["Mixed chunked prefill is disabled because of using eagle speculative decoding."] if printed else [])


def test_flashinfer_fusion_on_sm120_is_silent_in_0_5_9_and_fatal_in_0_5_23(start) -> None:
    argv = ["--tp-size", "2", "--enable-flashinfer-allreduce-fusion"]
    old, new, hopper = start(argv, "0.5.9"), start(argv, "0.5.23"), start(argv, "0.5.9", SGLANG_STANDIN_GPU_CC="9.0")
    old.wait_open()
    hopper.wait_open()
    assert "FlashInfer" not in old.log()
    assert new.proc.wait(timeout=60) == 1 and not port_open(new.port)
    assert new.log().rstrip().endswith("ValueError: FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs.")
    assert "--enable-flashinfer-allreduce-fusion is deprecated. Please use --flashinfer-allreduce-fusion-backend=auto instead." in new.log()
    assert "[{} TP1] FlashInfer workspace initialized for rank 1, world_size 2" in re.sub(r"\[[0-9-]+ [0-9:]+", "[{}", hopper.log())


def test_symm_mem_unavailable_logs_sglangs_line_on_every_rank(start) -> None:
    server = start(["--tp-size", "2", "--enable-torch-symm-mem"], SGLANG_STANDIN_SYMM_MEM="unavailable")
    server.wait_open()
    line = "TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported."
    assert log_messages(server.log()).count(line) == 2


def capture_messages(profile: str) -> list[str]:
    return log_messages((CAPTURE / f"server-{profile}.log").read_text(encoding="utf-8"))


@pytest.mark.parametrize("profile", ["eagle3", "baseline"])
def test_0_5_13_replays_the_real_captures_start_up_lines(start, profile: str) -> None:
    argv = [a for a in (CAPTURE / f"argv-{profile}.txt").read_text().split() if a not in ("--host", "127.0.0.1", "--port", "30000")]
    server = start(argv, "0.5.13")
    server.wait_healthy()
    real = set(capture_messages("eagle3")) | set(capture_messages("baseline"))
    ours = log_messages(server.log())
    first = next(i for i, m in enumerate(ours) if m.startswith("Load weight end"))
    last = next(i for i, m in enumerate(ours) if m.startswith("INFO:     Started server process"))
    assert last - first >= 8 and [m for m in ours[first:last] if m not in real] == []
    warnings = ("Max running", "Overlap spec")
    assert [m for m in ours if m.startswith(warnings)] == [m for m in capture_messages(profile) if m.startswith(warnings)]
    assert [m for m in ours if m.startswith("Capture cuda graph bs")] == [
        m for m in capture_messages(profile) if m.startswith("Capture cuda graph bs")
    ]


# ------------------------------------------------------------------ the format strings are the real sources'

MARK = "\x00"


def skeleton_of_template(fragment: str) -> str:
    return "".join(literal + (MARK if name is not None else "") for literal, name, _, _ in string.Formatter().parse(fragment))


def skeleton_of_node(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.sub(r"%[-#0 +]*\d*(?:\.\d+)?[sdfr]", MARK, node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else MARK for v in node.values)
    return None


class SourceStrings:
    """The string literals and f-strings of a release's .py files (srt/), parsed only where a fragment's words all occur."""

    def __init__(self, tree: Path) -> None:
        self.texts = {p: p.read_text(encoding="utf-8", errors="replace") for p in sorted((tree / "sglang" / "srt").rglob("*.py"))}
        self.parsed: dict[Path, list[str]] = {}

    def skeletons(self, path: Path) -> list[str]:
        if path not in self.parsed:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SGLang's own invalid escape sequences
                try:
                    nodes = list(ast.walk(ast.parse(self.texts[path])))
                except SyntaxError:
                    nodes = []
            self.parsed[path] = [s for s in (skeleton_of_node(n) for n in nodes) if s]
        return self.parsed[path]

    def has(self, fragment: str) -> bool:
        """Whether some literal of the release contains the fragment, placeholders where the source has values."""
        wanted = skeleton_of_template(fragment)
        words = [w for w in re.split(rf"[\s{MARK}]+", wanted) if len(w) >= 3]
        files = [p for p, text in self.texts.items() if all(w in text for w in words)]
        return any(wanted in s for p in files for s in self.skeletons(p))


def real_tree(version: str) -> Path:
    tree = CACHE / "sglang" / version
    if not (tree / "sglang" / "srt").is_dir():
        pytest.fail(f"no unpacked SGLang {version} at {tree}: run `make sglang-wheels` first")
    return tree


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_every_log_format_is_in_that_releases_source(version: str) -> None:
    sources = SourceStrings(real_tree(version))
    fragments = [(name, fragment) for name, parts in logs.FORMATS[version].items() for fragment in parts]
    assert len(fragments) > 30
    assert [(name, fragment) for name, fragment in fragments if not sources.has(fragment)] == [], f"not in SGLang {version}'s sources"
    assert not sources.has("Capture cuda graph end. Time elapsed: {x:.2f} s.")  # 0.5.9 formats it with {graph_backend[...]}


def test_the_0_5_13_formats_are_the_captures_or_0_5_13s_source() -> None:
    real = (CAPTURE / "server-eagle3.log").read_text(encoding="utf-8") + (CAPTURE / "server-baseline.log").read_text(encoding="utf-8")
    own = {name: parts for name, parts in logs.FORMATS["0.5.13"].items() if parts != logs.FORMATS["0.5.9"].get(name)}
    not_captured = {}
    for name, parts in own.items():
        literal = max((lit for lit, *_ in string.Formatter().parse("".join(parts))), key=len)
        if literal not in real:
            not_captured[name] = parts
    assert set(not_captured) == {"non_overlap"}  # the capture ran with overlap on
    sources = SourceStrings(real_tree("0.5.13"))
    assert all(sources.has(fragment) for parts in not_captured.values() for fragment in parts)


def test_the_engine_folds_and_resets_like_the_scheduler() -> None:
    counters = engine.SpecCounters(accepted=30, forward_ct=10, correct=20)
    assert counters.average() is None
    assert counters.fold() == (3.0, 10, 20) and counters.average() == 3.0
    counters.accepted, counters.forward_ct = 10, 10
    assert counters.fold()[0] == 1.0 and counters.average() == 2.0
    counters.reset_totals()
    assert counters.average() is None


def test_the_wheel_carries_every_module(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(STANDIN / "build_wheel.py"), "--out", str(tmp_path)], check=True)
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"sglang_standin/{p.name}" for p in (STANDIN / "sglang_standin").glob("*.py")} <= names


# ------------------------------------------------------------------ /v1/loads and /get_load against the sources

LOAD_SECTIONS = {"memory", "speculative", "lora", "disaggregation", "queues"}


def _class_fields(path: Path, name: str) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)
    return [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def _returned_dict_keys(path: Path, function: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function)
    ret = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict)][-1]
    return {k.value for k in ret.value.keys if isinstance(k, ast.Constant)}


def _load_keys(version: str) -> set[str]:
    """The keys of one entry of /v1/loads' "loads" (include=all, no optional section), from the release's source."""
    srt = real_tree(version) / "sglang" / "srt"
    if version == "0.5.9":  # dataclasses.asdict without None values and the timestamp, plus num_total_reqs
        return set(_class_fields(srt / "managers/io_struct.py", "GetLoadsReqOutput")) - LOAD_SECTIONS - {"timestamp"} | {"num_total_reqs"}
    if version == "0.5.13":  # LoadSnapshot.to_dict's literal
        tree = ast.parse((srt / "managers/load_snapshot.py").read_text(encoding="utf-8"))
        fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "to_dict")
        literal = next(n.value for n in ast.walk(fn) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict))
        return {k.value for k in literal.keys if isinstance(k, ast.Constant)}
    return set(_class_fields(srt / "managers/load_snapshot.py", "LoadSnapshot")) - LOAD_SECTIONS  # _CORE_KEYS


@pytest.mark.parametrize("version", ["0.5.9", "0.5.13", "0.5.23"])
def test_the_loads_endpoints_answer_as_that_releases_source(version: str) -> None:
    flags = ["--model-path", "/models/tiny", "--api-key", "k"]
    with standin_server(flags, {**FAST, "SGLANG_STANDIN_VERSION": version}) as url:
        status, body = _get_json(url, "/v1/loads", "k")
        assert status == 200
        assert set(body) == _returned_dict_keys(real_tree(version) / "sglang/srt/entrypoints/v1_loads.py", "get_loads")
        assert set(body["loads"][0]) == _load_keys(version)
        assert body["version"] == version and body["loads"][0]["num_running_reqs"] == 0
        assert _get_json(url, "/v1/loads", None)[0] == 401  # not an open path
        status, legacy = _get_json(url, "/get_load", "k")
        http_server = (real_tree(version) / "sglang/srt/entrypoints/http_server.py").read_text(encoding="utf-8")
        assert (status == 200) == ('@app.get("/get_load")' in http_server)
        if status == 200:
            assert {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens", "ts_tic"} <= set(legacy[0])


def _get_json(url: str, path: str, key: Optional[str]) -> tuple[int, Any]:
    host, port = url.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {key}"} if key else {})
        response = conn.getresponse()
        text = response.read().decode()
        return response.status, json.loads(text) if text else None
    finally:
        conn.close()


# ------------------------------------------------------------------ /v1/chat/completions and the answer check


def test_a_forced_tool_call_is_structured_only_through_the_tool_call_parser(start) -> None:
    """As SGLang 0.5.13's serving_chat answers tool_choice "required": parsed into tool_calls (Kimi-K2's id form under
    kimi_k2) with the parser, the constrained JSON as plain content without one; the toolkit's check tells them apart."""
    from sglang_sm120.serve import answers

    kimi, other, plain = start(["--tool-call-parser", "kimi_k2", "--api-key", KEY]), start(["--tool-call-parser", "qwen25"]), start()
    unmatched = start(["--tool-call-parser", "kimi_k2"], SGLANG_STANDIN_TOOL_CALLS="text")
    for server in (kimi, other, plain, unmatched):
        server.wait_healthy()
    body = answers.tool_call_request("/models/target")
    message = kimi.json("POST", "/v1/chat/completions", body, key=KEY)["choices"][0]["message"]
    assert message["content"] == "" and message["tool_calls"] == [
        {"id": "functions.get_weather:0", "index": 0, "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}
    ]  # fmt: skip
    text = plain.json("POST", "/v1/chat/completions", body)["choices"][0]["message"]
    assert text["tool_calls"] is None and json.loads(text["content"]) == [
        {"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}
    ]

    url = f"http://127.0.0.1:{kimi.port}"
    passed = answers.check_tool_call(url, KEY, "kimi_k2")
    assert passed.ok and passed.reason == "" and passed.name == "tool-call"
    refused = answers.check_tool_call(url, None, "kimi_k2")
    assert not refused.ok and refused.reason.startswith("POST /v1/chat/completions answered HTTP 401")
    without = answers.check_tool_call(f"http://127.0.0.1:{plain.port}", None, "kimi_k2")
    assert not without.ok and without.reason.startswith("no structured tool_calls: the call came back as text in content ('[{")
    wrong = answers.check_tool_call(f"http://127.0.0.1:{other.port}", None, "kimi_k2")
    assert not wrong.ok and "is not Kimi-K2's own form (functions.get_weather:0)" in wrong.reason
    assert answers.check_tool_call(f"http://127.0.0.1:{other.port}", None, "qwen25").ok  # another parser's ids are not judged
    missed = answers.check_tool_call(f"http://127.0.0.1:{unmatched.port}", None, "kimi_k2")  # a parser that matches nothing
    assert not missed.ok and missed.reason.startswith("no structured tool_calls")


def test_the_answer_judge_names_what_is_missing() -> None:
    from sglang_sm120.serve.answers import judge_tool_call

    def answer(**message: Any) -> str:
        return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "tool_calls"}]})

    call = {"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert judge_tool_call(200, answer(content="", tool_calls=[call]), "kimi_k2") == ""
    assert (
        judge_tool_call(0, "ConnectionRefusedError: [Errno 111]", None)
        == "POST /v1/chat/completions got no answer: ConnectionRefusedError: [Errno 111]"
    )
    assert judge_tool_call(200, "<html>", None).startswith("the answer is not a chat completion: <html>")
    renamed = {**call, "function": {"name": "get_time", "arguments": "{}"}}
    assert (
        judge_tool_call(200, answer(tool_calls=[renamed]), None) == "the tool call names 'get_time', not the one tool offered (get_weather)"
    )
    broken = {**call, "function": {"name": "get_weather", "arguments": '{"city": "Par'}}
    assert judge_tool_call(200, answer(tool_calls=[broken]), None).startswith("the tool call's arguments are not a JSON object")
    assert judge_tool_call(200, answer(content="<|tool_calls_section_begin|>", tool_calls=None), None).startswith(
        "no structured tool_calls"
    )


def test_an_unreadable_keys_file_stops_the_answer_check_naming_the_line(tmp_path: Path) -> None:
    from sglang_sm120.serve.answers import AnswersError, service_keys

    keys = tmp_path / "api-keys.yaml"
    keys.write_text("api-key: not-quoted\n")
    with pytest.raises(AnswersError, match=rf"{keys} line 1: expected name: \"value\""):
        service_keys(str(keys))
    assert service_keys(str(tmp_path / "absent.yaml")) == {}
