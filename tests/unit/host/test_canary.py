"""plugins/module_utils/sglang_sm120/serve/canary.py against the real stand-in server (a subprocess on a free port), and its flags."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest
import yaml

from conftest import ROOT, free_port, standin_env
from sglang_sm120.launch import start_failures
from sglang_sm120.serve import canary

STANDIN = ROOT / "tests/fixtures/sglang-standin"
FAST = {**standin_env("0.5.9", load=0.8, warmup=0.8, health=0.02, token_ms=1), "PYTHONPATH": str(STANDIN)}
PLAN = [
    "--model-path", "/models/Kimi-K2.5-NVFP4", "--tp-size", "8", "--host", "0.0.0.0", "--port", "30000",
    "--mem-fraction-static", "0.85", "--attention-backend", "triton", "--speculative-algorithm", "EAGLE3",
    "--speculative-draft-model-path", "/models/eagle3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4", "--enable-metrics",
]  # fmt: skip
KEY = "sk-canary-test-" + "5" * 16


def gone(pid: int) -> bool:
    """Neither the server nor anything of its process group is left."""
    for kill in (os.kill, os.killpg):
        try:
            kill(pid, 0)
            return False
        except ProcessLookupError:
            pass
    return True


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SGLANG_STANDIN_") or name == "STATE_DIRECTORY":
            monkeypatch.delenv(name)


def run(
    tmp_path: Path,
    target: str = "",
    extra: Optional[list[str]] = None,
    start_timeout: float = 60,  # generous: only a failing start waits it out
    keys: Optional[dict[str, str]] = None,
    **env: str,
) -> canary.CanaryResult:
    argv = canary.canary_argv([*PLAN, *(extra or [])], target or str(tmp_path / "target"), str(tmp_path / "draft"), free_port(), 0.05)
    return canary.run_canary(
        sys.executable,
        "sglang_standin",
        argv,
        {**FAST, **env},
        str(tmp_path / "canary.log"),
        start_timeout,
        30,
        ["Hello"],
        keys=keys,
        sglang_version="0.5.9",
    )


# ------------------------------------------------------------------ the start, as the gate sees it


def test_a_healthy_canary_goes_port_closed_then_503_then_healthy_and_answers(tmp_path: Path) -> None:
    result = run(tmp_path, SGLANG_STANDIN_WARMUP_SECONDS="2.5")  # a 503 phase long enough to be seen on a loaded machine
    assert result.ok, result.message
    assert result.phase == "served" and result.message.startswith("canary served")
    assert [phase for phase, _ in result.phases] == ["port closed", "503", "healthy"]
    assert result.port_open_at is not None and result.first_503_at is not None and result.healthy_at is not None
    assert 0.5 < result.port_open_at <= result.first_503_at < result.healthy_at  # in order; no upper bound: a loaded CI is slow
    r = result.requests
    assert r["streamed_ok"] and r["streamed"]["output_tokens"] == 32
    assert (r["concurrent_ok"], r["concurrent_total"]) == (4, 4)
    assert r["accept_source"].startswith("requests") and r["accept_length"] and r["accept_length"] > 1  # the stand-in speculates
    assert result.stopped == "SIGTERM" and result.exit_status is not None
    assert result.pid and gone(result.pid)
    log = (tmp_path / "canary.log").read_text()
    assert "fired up and ready to roll" in log and len(result.log_tail) <= 25
    # The server got the canary's flags: its own port, the tiny target, the small memory fraction.
    assert f"port={result.url.rsplit(':', 1)[1]}" in log and "mem_fraction_static=0.05" in log and str(tmp_path / "target") in log
    # What it showed, judged as the report judges the serving server: the backends it resolved and CUDA graphs.
    assert result.server_info is not None
    backends = result.evidence["backends"]
    assert backends["source"] == "/server_info" and backends["values"]["attention_backend"] == "triton"
    assert backends["values"]["speculative_algorithm"] == "EAGLE3" and backends["values"]["tp_size"] == 8
    verdicts = {o["name"]: o["verdict"] for o in result.evidence["optimisations"]}
    assert verdicts["speculative decoding"] == "yes" and "cuda graphs" in verdicts


def test_a_crash_is_phase_exited_with_its_status_and_last_log_line(tmp_path: Path) -> None:
    result = run(tmp_path, SGLANG_STANDIN_MODE="crash")
    assert not result.ok and result.phase == "exited" and result.exit_status == 1
    assert result.healthy_at is None and result.requests == {}
    assert "phase exited" in result.message and "status 1" in result.message
    assert "RuntimeError: stand-in crash requested by SGLANG_STANDIN_MODE=crash" in result.message
    assert result.log_tail[-1].endswith("RuntimeError: stand-in crash requested by SGLANG_STANDIN_MODE=crash")
    assert result.stopped == "exited by itself" and gone(result.pid)


def test_never_healthy_is_phase_503_at_the_start_timeout(tmp_path: Path) -> None:
    result = run(tmp_path, start_timeout=4, SGLANG_STANDIN_MODE="never-healthy", SGLANG_STANDIN_WARMUP_SECONDS="0")
    assert not result.ok and result.phase == "503"
    assert (
        4 <= result.seconds < 60 and result.healthy_at is None
    )  # ended at the timeout, not at the runner's and result.first_503_at is not None
    assert "phase 503" in result.message and "within 4 s" in result.message and "last log line:" in result.message
    assert result.stopped == "SIGTERM" and gone(result.pid)


def test_a_missing_target_exits_before_the_port_opens(tmp_path: Path) -> None:
    result = run(tmp_path, target=str(tmp_path / "target.missing"))
    assert not result.ok and result.phase == "exited" and result.exit_status == 1
    assert result.port_open_at is None
    assert "does not appear to have a file named config.json" in result.message
    assert gone(result.pid)


def test_the_requests_carry_the_api_key_and_nothing_returned_or_kept_holds_it(tmp_path: Path) -> None:
    config = tmp_path / "api-keys.yaml"
    config.write_text(f'api-key: "{KEY}"\n')
    result = run(tmp_path, extra=["--config", str(config)], keys={"api-key": KEY})
    assert result.ok, result.message
    assert KEY not in json.dumps(result.to_dict())
    log = (tmp_path / "canary.log").read_text()
    assert KEY not in log and "api_key='<redacted>'" in log  # the stand-in logs server_args as SGLang does
    assert gone(result.pid)


def test_without_the_key_the_requests_fail_in_phase_requests(tmp_path: Path) -> None:
    config = tmp_path / "api-keys.yaml"
    config.write_text(f'api-key: "{KEY}"\n')
    result = run(tmp_path, extra=["--config", str(config)])
    assert not result.ok and result.phase == "requests" and result.healthy_at is not None
    assert result.requests["concurrent_ok"] == 0 and "HTTP 401" in result.requests["errors"][0]
    assert "phase requests" in result.message and "HTTP 401" in result.message
    assert gone(result.pid)


def test_a_port_in_use_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        argv = canary.canary_argv(PLAN, str(tmp_path / "t"), str(tmp_path / "d"), port, 0.05)
        result = canary.run_canary(sys.executable, "sglang_standin", argv, FAST, str(tmp_path / "c.log"), 5, 5, None)
    assert not result.ok and result.phase == "port in use" and result.pid is None
    assert f"127.0.0.1:{port}" in result.message and not (tmp_path / "c.log").exists()


def test_stop_kills_a_group_that_ignores_sigterm_and_leaves_no_child(tmp_path: Path) -> None:
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    started = time.monotonic()
    assert canary.stop(proc, grace=1.0) == "SIGKILL after 1 s"
    assert time.monotonic() - started < 60  # not the 300 s the group would sleep
    assert proc.returncode == -signal.SIGKILL and gone(proc.pid)
    proc.stdout.close()


# ------------------------------------------------------------------ the canary's flags


def test_canary_argv_replaces_the_target() -> None:
    argv = canary.canary_argv(PLAN, "/tiny/target", "/tiny/draft", 30100, 0.1)
    assert canary.flag_value(argv, canary.MODEL_FLAGS) == "/tiny/target"
    assert argv[argv.index("--model-path") + 1] == "/tiny/target" and "/models/Kimi-K2.5-NVFP4" not in argv


def test_canary_argv_replaces_the_draft_and_needs_one_when_the_plan_has_one() -> None:
    argv = canary.canary_argv(PLAN, "/tiny/target", "/tiny/draft", 30100, 0.1)
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "/tiny/draft" and "/models/eagle3" not in argv
    with pytest.raises(canary.CanaryArgvError, match="no tiny draft"):
        canary.canary_argv(PLAN, "/tiny/target", None, 30100, 0.1)
    baseline = [a for a in PLAN if not a.startswith("--speculative") and a not in ("EAGLE3", "/models/eagle3", "3", "1", "4")]
    assert "--speculative-draft-model-path" not in canary.canary_argv(baseline, "/t", "/tiny/draft", 30100, 0.1)


def test_canary_argv_replaces_the_tokenizer_only_when_present() -> None:
    assert "--tokenizer-path" not in canary.canary_argv(PLAN, "/tiny/target", "/tiny/draft", 30100, 0.1)
    argv = canary.canary_argv([*PLAN, "--tokenizer-path", "/models/tok"], "/tiny/target", "/tiny/draft", 30100, 0.1)
    assert argv[argv.index("--tokenizer-path") + 1] == "/tiny/target"


def test_canary_argv_replaces_port_host_and_memory_fraction() -> None:
    argv = canary.canary_argv(PLAN, "/tiny/target", "/tiny/draft", 30100, 0.1)
    assert argv[argv.index("--port") + 1] == "30100"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.1"
    with pytest.raises(canary.CanaryArgvError):
        canary.canary_argv(PLAN, "/t", "/d", 30100, 1.5)


def test_canary_argv_keeps_everything_else_in_place() -> None:
    argv = canary.canary_argv(PLAN, "/tiny/target", "/tiny/draft", 30100, 0.1)
    assert len(argv) == len(PLAN)
    changed = {i for i, (a, b) in enumerate(zip(PLAN, argv)) if a != b}
    assert [PLAN[i - 1] for i in sorted(changed)] == [
        "--model-path", "--host", "--port", "--mem-fraction-static", "--speculative-draft-model-path",
    ]  # fmt: skip


def test_canary_argv_appends_what_the_plan_lacks() -> None:
    argv = canary.canary_argv(["--tp-size", "2"], "/tiny/target", None, 30100, 0.1)
    assert argv == [
        "--tp-size",
        "2",
        "--model-path",
        "/tiny/target",
        "--port",
        "30100",
        "--host",
        "127.0.0.1",
        "--mem-fraction-static",
        "0.1",
    ]


def test_canary_argv_handles_the_equals_spelling_and_aliases() -> None:
    plan = [
        "--model=/m",
        "--speculative-draft-model=/d",
        "--port=30000",
        "--host=::",
        "--mem-fraction-static=0.9",
        "--tokenizer-path=/tok",
        "--tp-size=8",
    ]
    argv = canary.canary_argv(plan, "/tiny/target", "/tiny/draft", 30100, 0.1)
    assert argv == [
        "--model=/tiny/target", "--speculative-draft-model=/tiny/draft", "--port=30100", "--host=127.0.0.1",
        "--mem-fraction-static=0.1", "--tokenizer-path=/tiny/target", "--tp-size=8",
    ]  # fmt: skip


def test_canary_argv_replaces_every_occurrence_and_refuses_a_flag_without_value() -> None:
    argv = canary.canary_argv(["--port", "1", "--port", "2"], "/t", None, 30100, 0.1)
    assert argv.count("30100") == 2 and canary.flag_value(argv, canary.PORT_FLAGS) == "30100"
    with pytest.raises(canary.CanaryArgvError, match="--port has no value"):
        canary.canary_argv(["--port"], "/t", None, 30100, 0.1)


# ------------------------------------------------------------------ the Ansible module, through real Ansible


def ansible_canary(tmp_path: Path, flags: tuple[str, ...] = (), **args: object) -> dict:
    from test_modules import run_module

    base = {
        "python": sys.executable,
        "module": "sglang_standin",
        "argv": PLAN,
        "env": FAST,
        "log": str(tmp_path / "canary.log"),
        "start_timeout": 20,
        "request_timeout": 30,
        "port": free_port(),
        "mem_fraction": 0.05,
        "target_model": str(tmp_path / "target"),
        "draft_model": str(tmp_path / "draft"),
        "gpu_query": False,
    }
    return run_module("sglang_canary", {**base, **args}, flags=flags)


def test_the_module_serves_with_the_keys_file_and_returns_no_key(tmp_path: Path) -> None:
    config = tmp_path / "api-keys.yaml"
    config.write_text(f'api-key: "{KEY}"\n')
    result = ansible_canary(tmp_path, argv=[*PLAN, "--config", str(config)], keys_file=str(config))
    assert not result.get("failed"), result.get("msg")
    assert result["ok"] and result["phase"] == "served" and result["changed"] is False
    assert result["requests"]["concurrent_ok"] == 4 and gone(result["pid"])
    assert KEY not in json.dumps(result) and KEY not in (tmp_path / "canary.log").read_text()


def test_the_module_fails_naming_the_phase_and_check_mode_starts_nothing(tmp_path: Path) -> None:
    failed = ansible_canary(tmp_path, env={**FAST, "SGLANG_STANDIN_MODE": "crash"})
    assert failed["failed"] and failed["phase"] == "exited" and failed["exit_status"] == 1
    assert failed["msg"].startswith("canary failed in phase exited") and "RuntimeError" in failed["msg"]
    (tmp_path / "canary.log").unlink()
    checked = ansible_canary(tmp_path, flags=("--check",))
    assert not checked.get("failed") and checked["changed"] is False and checked["phase"] == "check mode"
    assert checked["command"][:3] == [sys.executable, "-m", "sglang_standin"] and "--mem-fraction-static" in checked["argv"]
    assert not (tmp_path / "canary.log").exists()


# ------------------------------------------------------------------ the unit's environment, and where it runs


def test_the_environment_files_are_read_as_systemd_reads_them(tmp_path: Path) -> None:
    env = tmp_path / "sglang.env"
    env.write_text(
        "# comment\n; another\n\nCUDA_HOME=/usr/local/cuda-13.0\nPATH=/r/venv/bin:/usr/bin\n"
        'QUOTED="a \\"b\\" c\\\\d"\nSINGLE=\'x y\'\nEMPTY=\n'
    )
    assert canary.read_env_file(str(env)) == {
        "CUDA_HOME": "/usr/local/cuda-13.0", "PATH": "/r/venv/bin:/usr/bin", "QUOTED": 'a "b" c\\d', "SINGLE": "x y", "EMPTY": "",
    }  # fmt: skip
    assert canary.read_env_file("-" + str(tmp_path / "absent.env")) == {}
    with pytest.raises(canary.EnvFileError, match=r"absent\.env: the environment file of the release is missing"):
        canary.read_env_file(str(tmp_path / "absent.env"))
    env.write_text("export FOO=1\n")
    with pytest.raises(canary.EnvFileError, match="line 1: expected KEY=VALUE"):
        canary.read_env_file(str(env))


GPUS = "0, 97887, 85000, 12887\n1, 97887, 85000, 12887\n2, 97887, 500, 97387\n3, 97887, 500, 97387\n"


def test_gpu_memory_and_the_gpus_the_flags_use() -> None:
    gpus = canary.parse_gpu_memory(GPUS)
    assert [g.index for g in gpus] == [0, 1, 2, 3] and gpus[0].free_mib == 12887
    with pytest.raises(canary.CanaryArgvError, match="nvidia-smi line 1"):
        canary.parse_gpu_memory("0, 97887 MiB, 1, 2")
    assert canary.canary_gpus(["--tp-size", "2"], {}) == [0, 1]
    assert canary.canary_gpus(["--tp-size", "2", "--base-gpu-id", "2"], {}) == [2, 3]
    assert canary.canary_gpus(["--tp-size", "2"], {"CUDA_VISIBLE_DEVICES": "3,1"}) == [3, 1]
    with pytest.raises(canary.CanaryArgvError, match="makes 1 visible"):
        canary.canary_gpus(["--tp-size", "2"], {"CUDA_VISIBLE_DEVICES": "3"})


def test_placement_beside_only_where_every_gpu_keeps_the_free_memory_asked_for() -> None:
    gpus = canary.parse_gpu_memory(GPUS)
    free = canary.place("auto", gpus, [2, 3], 0.1, 16384)
    assert free.mode == "beside" and free.mem_fraction == 0.1  # SGLang applies it to what is free at start
    assert [g["free_mib"] for g in free.gpus] == [97387, 97387] and "at least 16384 MiB free" in free.reason
    busy = canary.place("auto", gpus, [1, 2], 0.1, 16384)
    assert busy.mode == "switch-window" and busy.mem_fraction == 0.1
    assert busy.reason.startswith("GPU 1 has 12887 MiB free of 97887, below sglang_canary_min_free_mib 16384")
    assert "GPU 2" not in busy.reason
    with pytest.raises(canary.CanaryArgvError, match="sglang_canary_policy beside: GPU 0 has 12887 MiB free"):
        canary.place("beside", gpus, [0, 1], 0.1, 16384)
    assert canary.place("beside", gpus, [0, 1], 0.1, 8192).mode == "beside"
    assert canary.place("switch-window", gpus, [2], 0.1, 16384).mode == "switch-window"
    assert canary.place("off", gpus, [2], 0.1, 16384).mode == "off"
    assert canary.place("auto", None, [0], 0.1, 16384).mode == "beside"
    with pytest.raises(canary.CanaryArgvError, match="expected one of auto, beside, switch-window, off"):
        canary.place("sometimes", gpus, [0], 0.1, 16384)
    with pytest.raises(canary.CanaryArgvError, match="nvidia-smi lists"):
        canary.place("auto", gpus, [7], 0.1, 16384)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.13", "0.5.23"])
def test_sglang_sizes_a_server_from_the_memory_free_when_it_starts(version: str) -> None:
    """What place() relies on, read in the real source: the slack SGLang keeps is (1 - fraction) of the
    memory free before the load, not of the whole GPU, so the fraction needs no raising beside a server."""
    from conftest import CACHE

    root = CACHE / "sglang" / version / "sglang/srt"
    if not root.is_dir():
        pytest.fail(f"no unpacked SGLang {version} at {root}: run `make sglang-wheels` first")
    text = "\n".join(p.read_text(encoding="utf-8") for p in [*root.glob("model_executor/*.py"), *root.glob("mem_cache/*.py")])
    before_load = {
        "0.5.9": r"rest_memory = available_gpu_memory - total_gpu_memory \* \(\s*1 - self\.mem_fraction_static",
        "0.5.13": r"rest_memory = post_model_load_memory - pre_model_load_memory \* \(\s*1 - self\.mem_fraction_static",
        "0.5.23": r"slack_gb = pre_model_load_memory \* \(1 - get_schedule\(\)\.mem_fraction_static\)",
    }[version]
    assert re.search(before_load, text), f"SGLang {version}: the memory formula moved"
    if version == "0.5.9":  # its total_gpu_memory is the free memory the distributed init measured
        assert "min_per_gpu_memory = self.init_torch_distributed()" in text
        assert re.search(r"min_per_gpu_memory = get_available_gpu_memory\(", text)


def test_the_kv_cache_hint_applies_only_where_the_flags_leave_it_to_auto() -> None:
    hinted = canary.canary_argv(PLAN, "/t", "/d", 30100, 0.1, kv_cache_dtype="fp8_e4m3")
    assert canary.flag_value(hinted, canary.KV_DTYPE_FLAGS) == "fp8_e4m3"
    auto = canary.canary_argv([*PLAN, "--kv-cache-dtype", "auto"], "/t", "/d", 30100, 0.1, kv_cache_dtype="fp8_e4m3")
    assert auto.count("--kv-cache-dtype") == 1 and canary.flag_value(auto, canary.KV_DTYPE_FLAGS) == "fp8_e4m3"
    kept = canary.canary_argv([*PLAN, "--kv-cache-dtype", "bf16"], "/t", "/d", 30100, 0.1, kv_cache_dtype="fp8_e4m3")
    assert canary.flag_value(kept, canary.KV_DTYPE_FLAGS) == "bf16"


def test_backends_from_the_logged_server_args_when_server_info_is_missing() -> None:
    line = "[2026-12-01 10:00:00] server_args=ServerArgs(model_path='/m', attention_backend='flashinfer', kv_cache_dtype='auto', tp_size=8)"
    found = canary.backends(None, ["noise", line])
    assert found == {
        "source": "server log (server_args)",
        "values": {"attention_backend": "flashinfer", "kv_cache_dtype": "auto", "tp_size": 8},
    }
    assert canary.backends(None, ["noise"])["values"] == {}


def test_the_module_runs_the_server_with_the_unit_environment_files_and_says_where_it_ran(tmp_path: Path) -> None:
    env = tmp_path / "sglang.env"
    env.write_text("".join(f'{k}="{v}"\n' for k, v in FAST.items()) + "SGLANG_STANDIN_MODE=crash\n")
    failed = ansible_canary(tmp_path, env={}, env_files=[str(env), "-" + str(tmp_path / "secrets.env")])
    assert failed["failed"] and failed["ran"] and failed["phase"] == "exited"  # the crash came from the env file
    assert failed["placement"]["mode"] == "beside" and "no GPU required" in failed["placement"]["reason"]
    served = ansible_canary(tmp_path, env={"SGLANG_STANDIN_MODE": "healthy"}, env_files=[str(env)])  # env wins over the files
    assert not served.get("failed"), served.get("msg")
    assert served["ran"] and served["ok"] and served["evidence"]["backends"]["values"]["attention_backend"] == "triton"
    window = ansible_canary(tmp_path, policy="switch-window")
    assert not window.get("failed") and window["ran"] is False and window["ok"] is None
    assert window["placement"]["mode"] == "switch-window" and window["message"].startswith("not run yet")
    freed = ansible_canary(tmp_path, policy="switch-window", gpus_freed=True)
    assert not freed.get("failed"), freed.get("msg")
    assert freed["ran"] and freed["ok"] and freed["placement"]["mode"] == "switch-window"
    off = ansible_canary(tmp_path, policy="off")
    assert off["ran"] is False and off["placement"]["mode"] == "off"
    missing = ansible_canary(tmp_path, env_files=[str(tmp_path / "gone.env")])
    assert missing["failed"] and "gone.env: the environment file of the release is missing" in missing["msg"]
    no_smi = ansible_canary(tmp_path, gpu_query=True, module="sglang_standin")
    if not shutil.which("nvidia-smi"):
        assert no_smi["failed"] and "nvidia-smi is not on PATH" in no_smi["msg"]


# --- known causes: a failed canary names the start-failure catalogue entry its log matches ---------------


def _capture_tail(path: str) -> list[str]:
    return canary._tail(str(ROOT / "tests/data/real-server" / path))


def known_cause(lines: list[str], phase: str, version: Optional[str] = "0.5.13") -> Optional[dict]:
    """The catalogue entry the canary names for these lines: the catalogue's log signatures for the version, as the
    launch plan hands them to the canary (start_failures.log_signatures), matched as the canary does."""
    data = yaml.safe_load((ROOT / "roles/sglang_launch/files/start-failures.yml").read_text())
    signatures = start_failures.log_signatures(start_failures.parse_catalogue(data), version)
    return start_failures.match_log(lines, phase, signatures)


def test_the_real_fa3_failure_is_named_with_its_fix() -> None:
    real = json.loads((ROOT / "tests/data/real-server/0.5.13-h200-canary/fails/result.json").read_text())
    cause = known_cause(real["log_tail"], "exited")
    assert cause is not None and cause["name"] == "fa3-on-sm120", cause
    assert cause["line"] == "ImportError: Can not import FA3 in sgl_kernel. Please check your installation."
    assert "triton or flashinfer" in cause["fix"]


def test_the_real_nvfp4_start_that_ran_out_of_time_in_capture_is_named() -> None:
    tail = _capture_tail("0.5.13-h200-nvfp4-canary/serves-canary.log")
    cause = known_cause(tail, "port closed")
    assert cause is not None and cause["name"] == "still-capturing-cuda-graphs"
    assert "Capture cuda graph bs [1, 2, 3, 4, 5, 6, 7, 8]" in cause["line"]
    # the registry's skipped imports in the same tail are not causes; capture is not one once the server exited
    assert known_cause(tail, "exited") is None


@pytest.mark.parametrize(
    ("line", "name"),
    [
        (
            "RuntimeError: Capture cuda graph failed: mat1 and mat2 shapes cannot be multiplied (8x768 and 1536x256)",
            "draft-does-not-fit-target",
        ),
        ("torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device", "no-kernel-image"),
        (
            "NotImplementedError: Unsupported moe_runner_backend for NVFP4 MoE: MoeRunnerBackend.FLASHINFER_TRTLLM.",
            "nvfp4-moe-runner-auto-is-trtllm-on-sm120",
        ),
        ("ValueError: ModelOptFp8Config only supports static FP8 quantization in SGLang.", "modelopt-nvfp4-read-as-fp8"),
        ("ValueError: Cannot find the config file for modelopt_fp4", "draft-inherits-target-quantization"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out-of-memory-after-load"),
        (
            "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 102400, Hardware limit: 101376.",
            "triton-mla-decode-fp8-kv-smem-on-sm120",
        ),
        ("RuntimeError: FP8 (e4m3) is not yet supported for FMHAv2 on SM120", "trtllm-mha-fp8-kv-on-sm120"),
    ],
)
def test_each_known_cause_is_named_from_its_line(line: str, name: str) -> None:
    tail = ["[2026-12-03 08:18:34] Init torch distributed begin.", line, "[2026-12-03 08:18:35] kill_process_tree called"]
    cause = known_cause(tail, "exited", version=None)  # the version unknown: every entry's signature counts
    assert cause is not None and cause["name"] == name and cause["line"] == line


def test_a_signature_counts_only_for_the_releases_its_entry_covers() -> None:
    """nvfp4-moe-runner-auto-is-trtllm-on-sm120 covers 0.5.16 on: its line names it there, not on 0.5.13."""
    tail = ["NotImplementedError: Unsupported moe_runner_backend for NVFP4 MoE: MoeRunnerBackend.FLASHINFER_TRTLLM."]
    assert known_cause(tail, "exited", version="0.5.16")["name"] == "nvfp4-moe-runner-auto-is-trtllm-on-sm120"  # type: ignore[index]
    assert known_cause(tail, "exited", version="0.5.13") is None


def test_a_failed_canary_message_carries_the_cause_and_fix() -> None:
    result = canary.CanaryResult(ok=False, phase="exited", seconds=72.0, message="", exit_status=-9)
    result.log_tail = [
        "[t] Capture cuda graph bs [1, 2]",
        "RuntimeError: Capture cuda graph failed: mat1 and mat2 shapes cannot be multiplied",
    ]
    result.known_cause = known_cause(result.log_tail, result.phase)
    text = canary._message(result, 240, "")
    assert text.startswith("canary failed in phase exited: the server exited with status -9")
    assert "; start-failure catalogue entry [draft-does-not-fit-target]: " in text and "fix: point --speculative-draft-model-path" in text
    assert known_cause(["[t] The server is fired up and ready to roll!"], "exited") is None


# ------------------------------------------------------------------ CUDA graphs, trimmed

KIMI_PLAN = ["--model-path", "/m", "--tp-size", "8", "--cuda-graph-max-bs", "64", "--speculative-algorithm", "EAGLE3"]
KIMI_PLAN += ["--config", "/k.yaml"]


def test_trimmed_graphs_before_0_5_20_use_the_legacy_flags_and_trim_the_piecewise_prefill() -> None:
    argv, note = canary.trim_cuda_graphs(KIMI_PLAN, [4, 1], "0.5.13")
    assert argv[argv.index("--cuda-graph-bs") + 1 : argv.index("--cuda-graph-bs") + 3] == ["1", "4"]
    assert argv[argv.index("--cuda-graph-max-bs") + 1] == "4"
    tokens = argv.index("--piecewise-cuda-graph-tokens")
    assert argv[tokens + 1 : tokens + 3] == ["64", "256"]
    assert argv[argv.index("--piecewise-cuda-graph-max-tokens") + 1] == "256"
    assert argv[argv.index("--config") + 1] == "/k.yaml" and argv[argv.index("--tp-size") + 1] == "8"
    assert "batch sizes 1 4 only" in note and "larger batch size" in note


def test_trimmed_graphs_replace_a_list_the_plan_already_has() -> None:
    plan = ["--model-path", "/m", "--cuda-graph-bs", "1", "2", "8", "16", "--tp-size", "8", "--piecewise-cuda-graph-tokens=512"]
    argv, _ = canary.trim_cuda_graphs(plan, [1, 4], "0.5.15.post1")
    assert argv.count("--cuda-graph-bs") == 1 and "16" not in argv and "512" not in " ".join(argv)
    assert argv[argv.index("--tp-size") + 1] == "8" and argv[:2] == ["--model-path", "/m"]


def test_trimmed_graphs_from_0_5_20_use_the_decode_phase_flags() -> None:
    argv, note = canary.trim_cuda_graphs([*KIMI_PLAN[:4], "--cuda-graph-max-bs-decode", "128"], [1, 4], "0.5.23")
    assert argv[argv.index("--cuda-graph-bs-decode") + 1 :][:2] == ["1", "4"]
    assert argv[argv.index("--cuda-graph-max-bs-decode") + 1] == "4"
    assert "--cuda-graph-bs" not in argv and "--piecewise-cuda-graph-tokens" not in argv
    assert "prefill graphs as planned" in note


@pytest.mark.parametrize(
    ("plan", "sizes", "version", "said"),
    [
        (KIMI_PLAN, [], "0.5.13", "as the launch plan captures them"),
        ([*KIMI_PLAN, "--disable-cuda-graph"], [1, 4], "0.5.13", "--disable-cuda-graph"),
        (KIMI_PLAN, [1, 4], "", "version (unknown)"),
    ],
)
def test_graphs_are_left_as_planned_and_said_why(plan: list[str], sizes: list[int], version: str, said: str) -> None:
    argv, note = canary.trim_cuda_graphs(plan, sizes, version)
    assert argv == plan and said in note


def test_graph_batch_sizes_must_be_positive() -> None:
    with pytest.raises(canary.CanaryArgvError, match="sglang_canary_graph_batch_sizes must be positive"):
        canary.trim_cuda_graphs(KIMI_PLAN, [0, 4], "0.5.13")


def _parser_flags(version: str) -> set[str]:
    """The flags SGLang `version`'s own parser defines, read from its source: the literal "--..." names of
    server_args.py, and from 0.5.20 the dataclass fields that arg_utils turns into flags."""
    from conftest import CACHE

    root = CACHE / "sglang" / version / "sglang" / "srt"
    if not root.is_dir():
        pytest.fail(f"no unpacked SGLang {version} under {CACHE / 'sglang'}: run `make sglang-wheels` first")
    flags = set(re.findall(r'"(--[a-z0-9-]+)"', (root / "server_args.py").read_text()))
    fields = root / "arg_groups" / "fields"
    if fields.is_dir():
        assert "_field_to_cli_name" in (root / "arg_groups" / "arg_utils.py").read_text()
        for f in fields.glob("*.py"):
            flags |= {"--" + name.replace("_", "-") for name in re.findall(r"^    ([a-z0-9_]+): A\[", f.read_text(), re.M)}
    return flags


RELEASES = [
    line.split()[0]
    for line in (ROOT / "tests/data/sglang-wheels.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


@pytest.mark.parametrize("version", RELEASES)
def test_trimmed_graph_flags_are_flags_of_that_release(version: str) -> None:
    """Every flag the canary adds is one the release's parser knows (an unknown one fails the start)."""
    argv, _ = canary.trim_cuda_graphs(["--model-path", "/m"], [1, 4], version)
    added = {a for a in argv if a.startswith("--")} - {"--model-path"}
    known = _parser_flags(version)
    assert added and added <= known, f"SGLang {version} does not know {sorted(added - known)}"


def test_the_catalogues_run_phases_are_the_canarys_phases() -> None:
    """start_failures.RUN_PHASES (what a signature's phases may name) is a copy the schema needs without importing the
    canary: it must stay the canary's own list of the phases a run can fail in (the health gate's and the canary's;
    "served" is the one a canary that passed ends in, where no signature is matched)."""
    assert set(start_failures.RUN_PHASES) == set(canary.PHASES) - {"served"}


def test_the_real_out_of_memory_start_is_named_by_its_entry() -> None:
    """The H200 capture whose canary ran out of memory after the load (--mem-fraction-static 0.99)."""
    lines = (ROOT / "tests/data/real-server/0.5.13-h200-toolkit/canary-mem099/server.log").read_text().splitlines()
    cause = known_cause(lines, "exited")
    assert cause is not None and cause["name"] == "out-of-memory-after-load", cause
    assert cause["line"].startswith("torch.OutOfMemoryError: CUDA out of memory.")


def test_canary_argv_keeps_the_tool_call_parser_and_leaves_the_reasoning_parser_out() -> None:
    """The tiny models' tokenizer has no "</think>": SGLang 0.5.12-0.5.16 stop at start with --reasoning-parser kimi_k2 on it
    (a real 0.5.13 server did: "think_end_token '</think>' must encode to exactly one token for constrained reasoning")."""
    plan = [*PLAN, "--reasoning-parser", "kimi_k2", "--tool-call-parser", "kimi_k2"]
    argv = canary.canary_argv(plan, "/tiny/target", "/tiny/draft", 30100, 0.1)
    assert "--reasoning-parser" not in argv and "--reasoning-parser=kimi_k2" not in argv
    assert argv[argv.index("--tool-call-parser") + 1] == "kimi_k2"
    assert argv[: len(PLAN)] == canary.canary_argv(PLAN, "/tiny/target", "/tiny/draft", 30100, 0.1)
    assert "--reasoning-parser" not in canary.canary_argv([*PLAN, "--reasoning-parser=kimi_k2"], "/t", "/d", 30100, 0.1)
