"""Start SGLang's router with its API key read from a file, never from the command line, and register
its workers, each with its own key, once it answers.

Run by the router's unit as `<venv>/bin/python router_launcher.py <router flags>`. The key comes from
the file named by SGLANG_ROUTER_API_KEY_FILE (0640, root and the router's group); it is added to the
flags in this process, so neither /proc/<pid>/cmdline, `ps`, nor the journal's start line carries it.
Without it, the router starts without a key. (Not systemd's LoadCredential=: where the credential
directory cannot carry an ACL, in a container for one, the service user cannot read it.) Works with
sglang-router (module sglang_router) and smg (module smg), which share `parse_router_args` and
`launch_router`.

The router keeps the workers added at run time in memory only; its `--worker-urls` would send them
the router's own key. So the workers (the file named by SGLANG_ROUTER_WORKERS_FILE: a JSON list of
{"url", "api_key"}) are added through the router's `POST /workers` by a child of this process once
`GET /workers` answers, each one the router does not list yet: after a restart (or a crash and
Restart=on-failure) the router serves the same workers again without a deploy. A worker the rolling
upgrade took out is added back this way only when the router restarts meanwhile.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def read_key(environ: dict[str, str]) -> str | None:
    """The key from the file SGLANG_ROUTER_API_KEY_FILE names (stripped); None when it is not set."""
    path = named_file(environ, "SGLANG_ROUTER_API_KEY_FILE")
    if path is None:
        return None
    key = path.read_text(encoding="utf-8").strip()
    if not key:
        raise SystemExit(f"router_launcher: the API key file {path} is empty")
    return key


def named_file(environ: dict[str, str], variable: str) -> Path | None:
    return Path(environ[variable]) if environ.get(variable) else None


def register(base: str, key: str | None, workers: list[dict], deadline_s: float = 600.0) -> None:
    """Add each worker the router does not list (GET /workers, then POST /workers), once it answers."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}

    def call(method: str, path: str, body: object = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            listed = {str(w.get("url", "")).rstrip("/") for w in call("GET", "/workers")["workers"]}
            break
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() > deadline:
                print("router_launcher: the router never answered GET /workers; no worker registered", file=sys.stderr)
                return
            time.sleep(1)
    for worker in workers:
        if worker["url"].rstrip("/") in listed:
            continue
        try:
            call("POST", "/workers", {"url": worker["url"], **({"api_key": worker["api_key"]} if worker.get("api_key") else {})})
            print(f"router_launcher: registered {worker['url']}", file=sys.stderr)
        except (OSError, ValueError) as exc:
            print(f"router_launcher: registering {worker['url']} failed: {type(exc).__name__}: {exc}", file=sys.stderr)


def local_base(argv: list[str]) -> str:
    """The router's own address from its flags (--host, --port), as this process reaches it."""
    host, port = "127.0.0.1", "30000"
    for flag, value in zip(argv, argv[1:]):
        if flag == "--host":
            host = "127.0.0.1" if value in ("0.0.0.0", "::") else value
        elif flag == "--port":
            port = value
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def main(argv: list[str]) -> None:
    if "--api-key" in argv:
        raise SystemExit("router_launcher: --api-key on the command line would show in ps and the journal; use the key file")
    module = None
    for name in ("sglang_router.launch_router", "smg.launch_router"):
        try:
            module = importlib.import_module(name)
            break
        except ModuleNotFoundError:
            continue
    if module is None:
        raise SystemExit("router_launcher: neither sglang_router nor smg is installed in this Python")
    environ = dict(os.environ)
    key = read_key(environ)
    args = module.parse_router_args(argv + (["--api-key", key] if key else []))
    workers_file = named_file(environ, "SGLANG_ROUTER_WORKERS_FILE")
    if workers_file is not None:
        workers = json.loads(workers_file.read_text(encoding="utf-8"))
        # A child process, not a thread: the router's Rust server holds the interpreter while it runs.
        if os.fork() == 0:
            try:
                register(local_base(argv), key, workers)
            finally:
                os._exit(0)
    module.launch_router(args)


if __name__ == "__main__":
    main(sys.argv[1:])
