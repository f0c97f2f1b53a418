"""Run the SGLang server with its API keys kept out of its output (and so out of the journal).

SGLang reads its API keys only from its own flags; the sglang_service role hands them over in a
0640 YAML file with ``--config`` (never the command line or the unit). But SGLang then logs them:
0.5.9 logs ``server_args=ServerArgs(... api_key='...' ...)`` at every start, 0.5.23 the resolved
dict with the same field. This launcher, the unit's ExecStart when keys are configured, runs the
server as its child with stdout and stderr on a pipe, and copies every line to its own stdout (the
journal) with each key replaced by ``<redacted>``::

    python key_redactor.py /etc/sglang/api-keys.yaml -- /venv/bin/python -m sglang.launch_server ... --config /etc/sglang/api-keys.yaml

It reads the keys file as SGLang does (PyYAML, which SGLang itself needs; a mapping of flag name to
value) and redacts the values of ``api-key`` and ``admin-api-key`` as written, as Python's repr and
as JSON print them. It stays the unit's main process so that nothing the server prints is lost: it
forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT to the server, reads the pipe to its end (a crash's
traceback included; at most DRAIN_SECONDS after the server itself exited, so a straggler holding the
pipe cannot keep the unit active), and exits with the server's status (128 + N when signal N ended
it). Stopped with SIGTERM or SIGINT, it ends by that signal once the server is gone, whatever the
server's status: a real SGLang 0.5.13 drains, then SIGKILLs itself (seen on an H200: exit 137), which
systemd would record as a failed stop. With no
key in the file it simply becomes the server (exec), as the unit without keys would run it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Optional

KEY_FIELDS = ("api-key", "admin-api-key")
REDACTED = b"<redacted>"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# After the server has exited, how long what it left in the pipe may take to come through; a process
# it started that outlives it and keeps the pipe open must not keep the unit "active".
DRAIN_SECONDS = 10.0


class KeysError(Exception):
    """The keys file cannot be read as the mapping SGLang's --config reads."""


def read_key_values(path: str) -> list[str]:
    """The non-empty values of the key fields in the YAML file (either spelling, - or _)."""
    import yaml  # SGLang's own dependency: the release venv that runs this has it

    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise KeysError(f"{path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise KeysError(f"{path} is not YAML: {exc}") from exc
    if data is None:
        return []
    if not isinstance(data, dict):
        raise KeysError(f"{path}: expected a mapping of flag name to value, found {type(data).__name__}")
    values = []
    for name, value in data.items():
        if str(name).replace("_", "-") in KEY_FIELDS and value not in (None, ""):
            values.append(str(value))
    return values


def spellings(secret: str) -> list[bytes]:
    """The ways a key shows up in output: as written, inside Python's repr and inside JSON; longest first."""
    forms = {
        secret,
        repr(secret)[1:-1],
        repr(secret + '"')[1:-2],  # the single-quoted repr (\\' escapes) Python uses when both quotes occur
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
    }
    return sorted({f.encode("utf-8") for f in forms if f}, key=len, reverse=True)


def redact(line: bytes, secrets: Sequence[bytes]) -> bytes:
    for secret in secrets:
        line = line.replace(secret, REDACTED)
    return line


def copy_redacted(source_fd: int, target_fd: int, secrets: Sequence[bytes]) -> None:
    """Copy lines from source to target until end of file, each with the secrets replaced."""
    with os.fdopen(source_fd, "rb", buffering=65536) as source:
        for line in source:
            data = redact(line, secrets)
            while data:
                try:
                    written = os.write(target_fd, data)
                except InterruptedError:
                    continue
                except OSError:
                    return  # the journal stream is gone: nothing more can be shown
                data = data[written:]


def exit_status(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def run(keys_file: str, command: Sequence[str]) -> int:
    values = read_key_values(keys_file)
    if not values:
        os.execv(command[0], list(command))
    secrets = [s for v in values for s in spellings(v)]
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        try:
            os.execv(command[0], list(command))
        except OSError as exc:
            os.write(2, f"key_redactor: cannot run {command[0]}: {exc.strerror or exc}\n".encode())
        os._exit(127)
    os.close(write_end)

    stop_signal: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if signum in STOP_SIGNALS and not stop_signal:
            stop_signal.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    # The copy ends when the server and everything it started have closed the pipe. The copier is
    # started with the forwarded signals blocked (a thread keeps the mask it starts with): the kernel
    # may hand a process's signal to any thread that does not block it, and one taken by the copier
    # would not wake the main thread from waitpid, so the server would never be told to stop.
    copier = threading.Thread(target=copy_redacted, args=(read_end, 1, secrets), daemon=True)
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        copier.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    try:
        _, status = os.waitpid(child, 0)
        code = exit_status(status)
    except ChildProcessError:
        code = 1
    copier.join(DRAIN_SECONDS)
    if stop_signal:
        # Asked to stop: end as the stop signal's own death, as the server would without the launcher.
        # (SGLang answers SIGTERM by draining and then SIGKILLing its own process tree, itself
        # included: exit 137 would read to systemd as a failure of a clean stop.)
        signal.signal(stop_signal[0], signal.SIG_DFL)
        os.kill(os.getpid(), stop_signal[0])
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        print("usage: key_redactor.py KEYS_FILE -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    try:
        return run(args[0], args[2:])
    except KeysError as exc:
        print(f"key_redactor: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
