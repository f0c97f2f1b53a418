#!/usr/bin/env python3
"""Record what SGLang's REAL router answers, for the router client's tests (tests/data/router/).

Not part of `make test`: this is how tests/data/router/<distribution>-<version>/ is made. It needs the
router's wheel installed in a venv of its own (with the wheel's requirements) and the stand-in
server (TEST FIXTURE tests/fixtures/sglang-standin) as the workers:

    python3 scripts/record_router_answers.py --router-python /tmp/v-smg/bin/python \\
        --module smg.launch_router --out tests/data/router/smg-1.13.0

What it does, on 127.0.0.1 only: starts two stand-in workers (SGLang 0.5.23's answers, each with its
own API key), starts the router with an API key of its own and no worker, and then records each call
the toolkit's client makes and the older calls it must not rely on: the worker list without the key,
a worker added with its key (twice: the same URL again), the list once both are healthy, one worker
read by id, the legacy /add_worker, /remove_worker and /list_workers, a streamed completion through
the router, a worker removed, the list right after and 6 s later, an unknown id removed, the
router's /health and its metrics' names. Each answer is one JSON file (status, content type,
location, body); the keys are replaced by "<router-key>" and "<worker-key>" and none is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
STANDIN = ROOT / "tests/fixtures/sglang-standin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(base: str, method: str, path: str, key: Optional[str], body: Any = None, timeout: float = 30.0) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, headers, raw = response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        status, headers, raw = exc.code, exc.headers, exc.read()
    text = raw.decode("utf-8", "replace")
    try:
        parsed: Any = json.loads(text) if text else None
    except ValueError:
        parsed = text
    return {
        "method": method,
        "path": path,
        "request": body,
        "status": status,
        "content_type": headers.get("Content-Type"),
        "location": headers.get("Location"),
        "body": parsed,
    }


def wait_until(predicate, timeout: float, step: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--router-python", required=True, help="the Python of the venv the router wheel is installed in")
    parser.add_argument("--module", required=True, help="smg.launch_router or sglang_router.launch_router")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--standin-version", default="0.5.23")
    args = parser.parse_args()

    router_key, worker_keys = secrets.token_hex(16), [secrets.token_hex(16), secrets.token_hex(16)]
    redactions = {router_key: "<router-key>", **{key: "<worker-key>" for key in worker_keys}}
    procs: list[subprocess.Popen] = []
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        workers = []
        for index, key in enumerate(worker_keys):
            port = free_port()
            env = {
                **os.environ,
                "PYTHONPATH": str(STANDIN),
                "SGLANG_STANDIN_VERSION": args.standin_version,
                "SGLANG_STANDIN_LOAD_SECONDS": "0",
                "SGLANG_STANDIN_TOKEN_MS": "20",
            }
            argv = [
                sys.executable,
                "-m",
                "sglang_standin",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--model-path",
                "/models/tiny",
                "--api-key",
                key,
                "--enable-metrics",
            ]
            with open(logs / f"worker-{index}.log", "wb") as log:  # the child keeps its own descriptor
                procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
            workers.append(f"http://127.0.0.1:{port}")
        for url in workers:
            if not wait_until(lambda url=url: _status(url, "/health", None) == 200, 30):
                raise SystemExit(f"stand-in {url} never healthy")

        port, metrics_port = free_port(), free_port()
        argv = [
            args.router_python,
            "-m",
            args.module,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--policy",
            "cache_aware",
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            str(metrics_port),
            "--health-check-timeout-secs",
            "30",
            "--health-check-interval-secs",
            "5",
            "--log-level",
            "info",
            "--api-key",
            router_key,
        ]
        with open(logs / "router.log", "wb") as log:
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"}))
        base = f"http://127.0.0.1:{port}"
        if not wait_until(lambda: _up(base, router_key), 60):
            raise SystemExit("the router never answered; see " + str(logs / "router.log"))

        answers: dict[str, dict[str, Any]] = {}
        answers["workers-without-key"] = call(base, "GET", "/workers", None)
        answers["add-worker"] = call(base, "POST", "/workers", router_key, {"url": workers[0], "api_key": worker_keys[0]})
        answers["add-second-worker"] = call(base, "POST", "/workers", router_key, {"url": workers[1], "api_key": worker_keys[1]})
        wait_until(lambda: _healthy_count(call(base, "GET", "/workers", router_key)) == 2, 60)
        answers["workers-two-healthy"] = call(base, "GET", "/workers", router_key)
        answers["add-worker-again"] = call(base, "POST", "/workers", router_key, {"url": workers[0], "api_key": worker_keys[0]})
        time.sleep(2)
        answers["workers-after-add-again"] = call(base, "GET", "/workers", router_key)
        first_id = _id_of(answers["workers-two-healthy"], workers[0])
        answers["worker-by-id"] = call(base, "GET", f"/workers/{first_id}", router_key)
        answers["legacy-add_worker"] = call(base, "POST", f"/add_worker?url={workers[0]}", router_key)
        answers["legacy-remove_worker"] = call(base, "POST", f"/remove_worker?url={workers[0]}", router_key)
        answers["legacy-list_workers"] = call(base, "GET", "/list_workers", router_key)
        answers["completion-through-router"] = call(
            base, "POST", "/v1/completions", router_key, {"model": "/models/tiny", "prompt": "one two three", "max_tokens": 8}
        )
        answers["remove-worker"] = call(base, "DELETE", f"/workers/{first_id}", router_key)
        answers["workers-right-after-remove"] = call(base, "GET", "/workers", router_key)
        time.sleep(6)
        answers["workers-6s-after-remove"] = call(base, "GET", "/workers", router_key)
        answers["remove-unknown-worker"] = call(base, "DELETE", "/workers/00000000-0000-0000-0000-000000000000", router_key)
        answers["router-health"] = call(base, "GET", "/health", None)
        metrics = call(f"http://127.0.0.1:{metrics_port}", "GET", "/metrics", None)
        names = sorted({m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", str(metrics["body"]), re.M)})
        answers["router-metric-names"] = {"status": metrics["status"], "body": names}

        for name, answer in answers.items():
            text = json.dumps(answer, indent=1, sort_keys=True)
            for secret, placeholder in redactions.items():
                text = text.replace(secret, placeholder)
            (args.out / f"{name}.json").write_text(text + "\n", encoding="utf-8")
        for path in logs.iterdir():
            content = path.read_bytes()
            for secret, placeholder in redactions.items():
                content = content.replace(secret.encode(), placeholder.encode())
            path.write_bytes(content)
        print(f"{len(answers)} answers in {args.out}")
        return 0
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _status(base: str, path: str, key: Optional[str]) -> Optional[int]:
    try:
        return call(base, "GET", path, key, timeout=5)["status"]
    except OSError:  # not listening yet
        return None


def _up(base: str, key: str) -> bool:
    return _status(base, "/workers", key) == 200


def _healthy_count(answer: dict[str, Any]) -> int:
    body = answer.get("body") or {}
    return sum(1 for worker in body.get("workers", []) if worker.get("is_healthy"))


def _id_of(answer: dict[str, Any], url: str) -> str:
    for worker in (answer.get("body") or {}).get("workers", []):
        if worker.get("url") == url:
            return str(worker["id"])
    raise SystemExit(f"{url} is not in the router's list: {answer}")


if __name__ == "__main__":
    raise SystemExit(main())
