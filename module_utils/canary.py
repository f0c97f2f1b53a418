"""Start canary: serve the new release's own SGLang on tiny models, send it a few requests, stop it.

Plain Python, standard library only, no Ansible imports; it runs on the GPU host (library/sglang_canary.py
wraps it). The canary runs the release's own server (its venv's python, ``-m <launch module>``, its
launch flags and environment) with the model paths replaced by the tiny models of module_utils/tiny_models.py,
on its own port and a small memory fraction (canary_argv), and judges it by what it does (run_canary):

  1. the port must be free (something answering there would be judged instead of the canary);
  2. the server starts as a child in its own process group, stdout and stderr to the log file only;
  3. GET /health is probed as the health gate probes it (service_health.probe) every 0.5 s until 200,
     the server exits, or the start timeout: the phase it stopped in is the probe's ("port closed",
     "503", "no answer", "HTTP <n>") or "exited" with the exit status;
  4. once healthy: one streamed request, then `concurrency` concurrent ones (bench_client.stream_one and
     bench_client.run, 32 tokens each, the API key when the server has one); all must complete, else
     the phase is "requests" ("exited" when the server died meanwhile);
  5. always (also on failure or an exception): SIGTERM to the group, up to 60 s, then SIGKILL; nothing
     of the group is left. The keys are then replaced by <redacted> in the log file.

The result never holds a key: every string in it is redacted with the key values given and with
bench_client.redact_line (an ``api_key='...'`` field, ``--api-key VALUE``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

try:  # inside Ansible (AnsiballZ ships them as ansible.module_utils.*)
    from ansible.module_utils import bench_client, service_health  # type: ignore[import-not-found]
except ImportError:  # plain Python: module_utils/ is on sys.path
    import service_health  # type: ignore[no-redef]

    import bench_client  # type: ignore[no-redef]

# The flags canary_argv replaces, with SGLang's aliases (ServerArgs.add_cli_args, 0.5.9 to 0.5.23).
MODEL_FLAGS = ("--model-path", "--model")
DRAFT_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model")
TOKENIZER_FLAGS = ("--tokenizer-path",)
PORT_FLAGS = ("--port",)
HOST_FLAGS = ("--host",)
MEM_FLAGS = ("--mem-fraction-static",)
CANARY_HOST = "127.0.0.1"

PHASES = {
    **service_health.PHASES,
    "exited": "the server exited before it was healthy (or while it served the canary's requests)",
    "requests": "the server was healthy but did not complete every canary request",
    "port in use": "something already answers on the canary's port: the canary was not started",
    "not started": "the server could not be started (its python or working directory is missing)",
    "served": "healthy, and every canary request completed",
}
DEFAULT_PROMPTS = (
    "The capital of France is",
    "Write a short poem about a graphics card.",
    "Explain speculative decoding in one sentence.",
    "List three prime numbers:",
)
OUTPUT_LEN = 32
POLL_INTERVAL = 0.5
PROBE_TIMEOUT = 30.0
STOP_GRACE = 60.0
LOG_TAIL = 25


class CanaryArgvError(ValueError):
    """The launch flags cannot be turned into the canary's."""


@dataclass
class CanaryResult:
    ok: bool
    phase: str
    seconds: float
    message: str
    url: str = ""
    healthy_at: Optional[float] = None
    port_open_at: Optional[float] = None
    first_503_at: Optional[float] = None
    phases: list[list[Any]] = field(default_factory=list)  # [phase, seconds when first seen], in order
    requests: dict[str, Any] = field(default_factory=dict)
    exit_status: Optional[int] = None
    pid: Optional[int] = None  # the server's (and its process group's) id; gone once run_canary returns
    stopped: str = ""
    log: str = ""
    log_tail: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------ the canary's flags


def _flag_of(arg: str, names: Sequence[str]) -> Optional[str]:
    """The name when arg is one of the flags (``--flag`` or ``--flag=value``), else None."""
    name = arg.split("=", 1)[0]
    return name if name in names and arg.startswith("--") else None


def _replace(argv: list[str], names: Sequence[str], value: str) -> bool:
    """Every occurrence of the flag gets value (as it was spelt: ``--f v`` or ``--f=v``); whether any was found."""
    found = False
    i = 0
    while i < len(argv):
        name = _flag_of(argv[i], names)
        if name is None:
            i += 1
            continue
        found = True
        if "=" in argv[i]:
            argv[i] = f"{name}={value}"
            i += 1
        elif i + 1 < len(argv):
            argv[i + 1] = value
            i += 2
        else:
            raise CanaryArgvError(f"{argv[i]} has no value in the launch flags")
    return found


def flag_value(argv: Sequence[str], names: Sequence[str]) -> Optional[str]:
    """The last value of the flag in argv (argparse keeps the last), either spelling; None when absent."""
    value = None
    for i, arg in enumerate(argv):
        name = _flag_of(arg, names)
        if name is not None:
            value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else None)
    return value


def canary_argv(plan_argv: Sequence[str], target: str, draft: Optional[str], port: int, mem_fraction: float) -> list[str]:
    """The release's launch flags with the model paths replaced by the tiny models' (``--model-path``,
    ``--speculative-draft-model-path``, ``--tokenizer-path`` when present: the tiny target holds the
    tokenizer's files), ``--port`` port, ``--host`` 127.0.0.1, ``--mem-fraction-static`` mem_fraction;
    every other flag kept exactly, in its place (TP size, backends, speculative settings, --config).
    A flag absent from the plan is appended. A plan with a draft needs a tiny draft; a draft without a
    draft flag in the plan is not added (the release does not speculate)."""
    if not 0.0 < mem_fraction < 1.0:
        raise CanaryArgvError(f"mem_fraction must be between 0 and 1, found {mem_fraction}")
    if not 0 < int(port) < 65536:
        raise CanaryArgvError(f"port must be 1-65535, found {port}")
    argv = [str(a) for a in plan_argv]
    replacements: list[tuple[Sequence[str], str, bool]] = [
        (MODEL_FLAGS, str(target), True),
        (TOKENIZER_FLAGS, str(target), False),
        (PORT_FLAGS, str(int(port)), True),
        (HOST_FLAGS, CANARY_HOST, True),
        (MEM_FLAGS, str(mem_fraction), True),
    ]
    if flag_value(argv, DRAFT_FLAGS) is not None:
        if not draft:
            raise CanaryArgvError("the launch flags have --speculative-draft-model-path but no tiny draft was given")
        replacements.append((DRAFT_FLAGS, str(draft), False))
    missing = [[names[0], value] for names, value, append in replacements if not _replace(argv, names, value) and append]
    for pair in missing:  # appended after every replacement, so that no appended value is taken for one
        argv += pair
    return argv


# ------------------------------------------------------------------ redaction


def _secret_forms(keys: Optional[Mapping[str, str]]) -> list[str]:
    forms: set[str] = set()
    for value in (keys or {}).values():
        if value:
            forms.update({value, repr(value)[1:-1], repr(value + '"')[1:-2], json.dumps(value)[1:-1]})
    return sorted((f for f in forms if f), key=len, reverse=True)


def _redact(value: Any, forms: Sequence[str]) -> Any:
    if isinstance(value, str):
        for form in forms:
            value = value.replace(form, "<redacted>")
        return bench_client.redact_line(value)
    if isinstance(value, Mapping):
        return {k: _redact(v, forms) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v, forms) for v in value]
    return value


# ------------------------------------------------------------------ the process


def _port_answers(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> str:
    """SIGTERM to the server's process group, up to `grace` seconds for all of it to end, then SIGKILL
    to what is left; the leader is reaped. How it ended, in words."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group's id
    exited_before = proc.poll() is not None
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return "exited by itself"
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, so that a zombie does not count as alive
        if proc.returncode is not None and not _group_alive(pgid):
            return "exited by itself" if exited_before else "SIGTERM"
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL does not end (uninterruptible sleep)
        return f"SIGKILL after {grace:g} s, the leader still not gone"
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return f"SIGKILL after {grace:g} s"


def _tail(path: str, count: int = LOG_TAIL) -> list[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 256 * 1024))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-count:]


def _requests(url: str, prompts: Sequence[str], api_key: Optional[str], concurrency: int, timeout: float) -> dict[str, Any]:
    """One streamed request, then `concurrency` at once; what each did, no text."""
    streamed = bench_client.stream_one(url, prompts[0], OUTPUT_LEN, api_key, timeout)
    batch = [prompts[i % len(prompts)] for i in range(max(1, concurrency))]
    record = bench_client.run(url, batch, OUTPUT_LEN, len(batch), "canary", api_key, None, timeout)
    together = record["requests"]
    accept, note = bench_client.requests_accept_length([streamed, *together])
    errors = [r["error"] for r in [streamed, *together] if not r["ok"] and r["error"]]
    return {
        "streamed_ok": bool(streamed["ok"]),
        "streamed": {
            k: streamed.get(k) for k in ("ok", "output_tokens", "ttft_s", "latency_s", "completion_tokens", "spec_verify_ct", "error")
        },
        "concurrent_ok": sum(1 for r in together if r["ok"]),
        "concurrent_total": len(together),
        "output_len": OUTPUT_LEN,
        "accept_length": accept,
        "accept_source": bench_client.ACCEPT_SOURCE_REQUESTS,
        "accept_note": note,
        "errors": errors[:5],
    }


def _message(result: CanaryResult, start_timeout: float, detail: str) -> str:
    last = result.log_tail[-1] if result.log_tail else "(the log is empty)"
    phase = result.phase
    r = result.requests
    if result.ok:
        return (
            f"canary served: healthy at {result.healthy_at} s, the streamed request and "
            f"{r.get('concurrent_ok')}/{r.get('concurrent_total')} concurrent requests completed"
        )
    if detail:
        return f"canary failed in phase {phase}: {detail}" + (f"; last log line: {last}" if result.log_tail else "")
    if phase == "exited":
        when = f"after it was healthy at {result.healthy_at} s" if result.healthy_at is not None else "before it was healthy"
        status = result.exit_status
        return f"canary failed in phase exited: the server exited with status {status} {when} ({result.seconds} s); last log line: {last}"
    if phase == "requests":
        why = "; ".join(r.get("errors") or []) or "no error reported"
        return (
            f"canary failed in phase requests: healthy at {result.healthy_at} s, but the streamed request "
            f"{'completed' if r.get('streamed_ok') else 'failed'} and {r.get('concurrent_ok')}/{r.get('concurrent_total')} "
            f"concurrent requests completed ({why}); last log line: {last}"
        )
    meaning = PHASES.get(phase, f"GET /health answered {phase}")
    return f"canary failed in phase {phase}: not healthy within {start_timeout:g} s ({meaning}); last log line: {last}"


def _watch_start(
    proc: subprocess.Popen[bytes], url: str, result: CanaryResult, t0: float, start_timeout: float, probe_timeout: float
) -> None:
    """Probe /health every POLL_INTERVAL until 200, the server exits, or start_timeout; into result."""
    while True:
        status, phase, _took = service_health.probe(url + "/health", probe_timeout)
        t = round(time.monotonic() - t0, 2)
        if not result.phases or result.phases[-1][0] != phase:
            result.phases.append([phase, t])
        if status is not None and result.port_open_at is None:
            result.port_open_at = t
        if status == 503 and result.first_503_at is None:
            result.first_503_at = t
        result.phase = phase
        if proc.poll() is not None:
            result.phase = "exited"
            return
        if status == 200:
            result.healthy_at = t
            return
        if t >= start_timeout:
            return
        time.sleep(min(POLL_INTERVAL, max(0.05, start_timeout - t)))


def run_canary(
    python: str,
    module: str,
    argv: Sequence[str],
    env: Optional[Mapping[str, str]],
    log_path: str,
    start_timeout: float,
    request_timeout: float,
    prompts: Optional[Sequence[str]] = None,
    keys: Optional[Mapping[str, str]] = None,
    concurrency: int = 4,
    cwd: Optional[str] = None,
    probe_timeout: float = PROBE_TIMEOUT,
    stop_grace: float = STOP_GRACE,
) -> CanaryResult:
    """Start ``python -m module argv`` (env added to this process's environment, PYTHONUNBUFFERED=1
    unless set), wait for /health on argv's --host/--port, send the requests, stop it; see the module
    docstring. keys: the service's keys by flag name (bench_client.read_keys); "api-key" is sent.
    Never raises for what the server does; the server is stopped whatever happens."""
    prompts = [str(p) for p in (prompts or ()) if str(p)] or list(DEFAULT_PROMPTS)
    forms = _secret_forms(keys)
    api_key = (keys or {}).get("api-key") or None
    host = flag_value(argv, HOST_FLAGS) or CANARY_HOST
    host = CANARY_HOST if host in ("0.0.0.0", "::", "") else host
    port = int(flag_value(argv, PORT_FLAGS) or 30000)
    url = f"http://{host}:{port}"
    command = [str(python), "-m", str(module), *[str(a) for a in argv]]
    result = CanaryResult(ok=False, phase="not started", seconds=0.0, message="", url=url, log=str(log_path), command=command)
    detail = ""
    t0 = time.monotonic()
    proc: Optional[subprocess.Popen[bytes]] = None
    try:
        if _port_answers(host, port):
            result.phase = "port in use"
            detail = f"something already answers on {host}:{port}; the canary needs a port of its own and was not started"
        else:
            child_env = {**os.environ, **{str(k): str(v) for k, v in (env or {}).items()}}
            child_env.setdefault("PYTHONUNBUFFERED", "1")
            os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
            with open(log_path, "wb") as log:
                try:
                    proc = subprocess.Popen(
                        command,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=child_env,
                        cwd=cwd,
                        start_new_session=True,  # its own process group: stop() ends all of it
                    )
                except OSError as exc:
                    detail = f"{command[0]}: {exc.strerror or exc}"
            if proc is not None:
                result.pid = proc.pid
                _watch_start(proc, url, result, t0, start_timeout, probe_timeout)
            if proc is not None and result.healthy_at is not None:
                result.requests = _requests(url, prompts, api_key, concurrency, request_timeout)
                served = result.requests["streamed_ok"] and result.requests["concurrent_ok"] == result.requests["concurrent_total"]
                if proc.poll() is not None:
                    result.phase = "exited"
                elif served:
                    result.ok, result.phase = True, "served"
                else:
                    result.phase = "requests"
    except Exception as exc:  # the server must still be stopped, and the caller told why
        result.ok = False
        detail = f"{type(exc).__name__}: {exc}"
    finally:
        result.seconds = round(time.monotonic() - t0, 2)
        if proc is not None:
            exited_first = proc.poll() is not None
            result.stopped = stop(proc, stop_grace)
            result.exit_status = proc.returncode
            if exited_first:
                result.stopped = "exited by itself"
            if forms:
                bench_client.redact_keys_in_file(str(log_path), forms)
            result.log_tail = _tail(str(log_path))
    result.message = _message(result, start_timeout, detail)
    return CanaryResult(**_redact(result.to_dict(), forms))
