"""roles/sglang_service/files/key_redactor.py: the unit's launcher when API keys are set. It must keep every key out
of what the server prints, lose none of the server's output, and behave as the server to systemd."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# A script of the role that installs it, run on the host by the release's Python: loaded from its file.
LAUNCHER = ROOT / "roles" / "sglang_service" / "files" / "key_redactor.py"
_spec = importlib.util.spec_from_file_location("key_redactor", LAUNCHER)
key_redactor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(key_redactor)
KEY = "sk-test-1234567890abcdef"
ADMIN = "adm'in\"key\\x"


def keys_file(tmp_path: Path, api: str = KEY, admin: str = ADMIN) -> Path:
    """The file as the role's template writes it: `name: <JSON string>` (a YAML double-quoted scalar)."""
    path = tmp_path / "api-keys.yaml"
    lines = ["# managed"] + [f"{name}: {json.dumps(value)}" for name, value in (("api-key", api), ("admin-api-key", admin)) if value]
    path.write_text("\n".join(lines) + "\n")
    return path


def launch(tmp_path: Path, code: str, keys: Path, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(LAUNCHER), str(keys), "--", sys.executable, "-u", "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,  # type: ignore[arg-type]
    )


def test_the_keys_are_read_as_sglang_reads_its_config(tmp_path: Path) -> None:
    assert sorted(key_redactor.read_key_values(str(keys_file(tmp_path)))) == sorted([KEY, ADMIN])
    other = tmp_path / "other.yaml"
    other.write_text("api_key: k1\nport: 30000\nadmin-api-key: ''\n")
    assert key_redactor.read_key_values(str(other)) == ["k1"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(key_redactor.KeysError, match=r"bad\.yaml: expected a mapping of flag name to value, found list"):
        key_redactor.read_key_values(str(bad))


def test_every_spelling_of_a_key_the_server_prints_is_redacted_on_stdout_and_stderr(tmp_path: Path) -> None:
    # What SGLang prints: the ServerArgs repr (0.5.9: api_key='...'), a JSON dump, the plain value.
    code = (
        "import json, sys\n"
        f"k, a = {KEY!r}, {ADMIN!r}\n"
        "print(f'server_args=ServerArgs(api_key={k!r}, admin_api_key={a!r}, port=30000)')\n"
        "print(json.dumps({'api_key': k, 'admin_api_key': a}), file=sys.stderr)\n"
        "print('plain', k, a)\n"
        "sys.exit(3)\n"
    )
    proc = launch(tmp_path, code, keys_file(tmp_path))
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 3
    text = out + err
    assert KEY not in text and "adm'in" not in text and 'in\\"key' not in text
    assert "server_args=ServerArgs(api_key='<redacted>', admin_api_key=" in out
    assert '{"api_key": "<redacted>", "admin_api_key": "<redacted>"}' in out  # stderr arrives on the launcher's stdout
    assert "plain <redacted> <redacted>" in out


def test_the_server_is_its_child_signals_are_forwarded_and_its_last_words_kept(tmp_path: Path) -> None:
    code = (
        "import os, signal, sys, time\n"
        "def bye(signum, frame):\n"
        f"    print('stopping on', signum, {KEY!r}); sys.stdout.flush(); os._exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', os.getppid()); sys.stdout.flush()\n"
        "time.sleep(60)\n"
    )
    proc = launch(tmp_path, code, keys_file(tmp_path))
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[0] == "ready" and int(first[1]) == proc.pid  # the launcher is the server's parent
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=90)
    assert proc.returncode == -signal.SIGTERM  # a clean stop reads as one to systemd
    assert rest.strip() == f"stopping on {int(signal.SIGTERM)} <redacted>"


def test_a_server_that_kills_itself_when_asked_to_stop_still_stops_cleanly(tmp_path: Path) -> None:
    """Real SGLang answers SIGTERM by draining, then SIGKILLing its own process tree (exit 137)."""
    code = (
        "import os, signal, sys, time\n"
        "def bye(signum, frame):\n"
        "    print('Gracefully exiting...'); sys.stdout.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready'); sys.stdout.flush()\n"
        "time.sleep(60)\n"
    )
    proc = launch(tmp_path, code, keys_file(tmp_path))
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=90)
    assert proc.returncode == -signal.SIGTERM and rest == "Gracefully exiting...\n"


def test_a_server_killed_by_a_signal_fails_the_unit_with_128_plus_the_signal(tmp_path: Path) -> None:
    code = "import os, signal; print('dying'); os.kill(os.getpid(), signal.SIGKILL)"
    proc = launch(tmp_path, code, keys_file(tmp_path))
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 128 + signal.SIGKILL and out == "dying\n"


def test_a_straggler_holding_the_pipe_does_not_keep_the_launcher_alive(tmp_path: Path) -> None:
    # The server starts a process that outlives it with the same stdout (as SGLang's children could).
    # The launcher must end (after at most DRAIN_SECONDS of draining) while the straggler still holds
    # the pipe; whether it did is read from the straggler being alive, not from a clock (CI is loaded).
    pid_file = tmp_path / "straggler.pid"
    straggler = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    code = (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {straggler!r}])\n"
        f"while not (os.path.exists({str(pid_file)!r}) and open({str(pid_file)!r}).read()):\n"
        "    time.sleep(0.05)\n"
        "print('server gone')\n"
    )
    proc = launch(tmp_path, code, keys_file(tmp_path))
    try:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out == "server gone\n"
        os.kill(int(pid_file.read_text()), 0)  # still alive: the launcher did not wait for it
    finally:
        if pid_file.exists() and pid_file.read_text():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_without_a_key_the_launcher_becomes_the_server(tmp_path: Path) -> None:
    empty = tmp_path / "api-keys.yaml"
    empty.write_text("# managed\n")
    proc = launch(tmp_path, "import os; print(os.getpid())", empty)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0 and int(out) == proc.pid  # exec: same process, nothing in between


def test_bad_usage_and_an_unreadable_keys_file_exit_2_naming_it(tmp_path: Path) -> None:
    usage = subprocess.run([sys.executable, str(LAUNCHER), "x"], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: key_redactor.py KEYS_FILE -- COMMAND" in usage.stderr
    missing = subprocess.run([sys.executable, str(LAUNCHER), str(tmp_path / "none.yaml"), "--", "true"], capture_output=True, text=True)
    assert missing.returncode == 2 and "none.yaml: No such file or directory" in missing.stderr
    assert os.environ.get("SGLANG_API_KEY") is None


def test_the_roles_keys_file_is_read_alike_by_sglang_the_launcher_and_the_benchmark_client(tmp_path: Path, sglang_tree: Path) -> None:
    """The role's template, rendered as Ansible renders it, then read by SGLang 0.5.9's own --config
    merger, by the launcher and by the benchmark client: all three see the same keys."""
    import argparse
    import importlib.util

    import jinja2

    from sglang_sm120.serve import bench_client

    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True)
    env.filters["to_json"] = json.dumps
    template = env.from_string((ROOT / "roles/sglang_service/templates/api-keys.yaml.j2").read_text())
    path = tmp_path / "api-keys.yaml"
    path.write_text(template.render(ansible_managed="managed", sglang_service_api_key=KEY, sglang_service_admin_api_key=ADMIN))

    spec = importlib.util.spec_from_file_location("cfg", sglang_tree / "sglang/srt/server_args_config_parser.py")
    assert spec and spec.loader
    cfg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cfg)
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-key")
    parser.add_argument("--admin-api-key")
    parser.add_argument("--port", type=int)
    parser.add_argument("--config")
    merged = parser.parse_args(cfg.ConfigArgumentMerger(parser).merge_config_with_args(["--port", "1", "--config", str(path)]))
    assert (merged.api_key, merged.admin_api_key, merged.port) == (KEY, ADMIN, 1)
    assert sorted(key_redactor.read_key_values(str(path))) == sorted([KEY, ADMIN])
    assert bench_client.read_keys(str(path)) == {"api-key": KEY, "admin-api-key": ADMIN}
