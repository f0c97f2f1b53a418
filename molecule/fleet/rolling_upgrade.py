#!/usr/bin/env python3
"""Run a rolling upgrade (the command after `--`, playbooks/deploy.yml) while clients stream requests
through SGLang's router, and write what happened as JSON for molecule/fleet/verify.yml to judge.

- clients: --clients threads, each sending one streamed /generate after another through the router
  (the toolkit's bench_client.stream_one), each request sized to last about --request-seconds at the
  rate the first request measured; they stop taking new requests once the command has ended;
- the router's view: GET /workers every 0.5 s (healthy workers, and when each worker left the
  router and came back);
- the order of the steps: when the new release's start canary finished on each worker (its log's
  modification time, /opt/sglang/current/logs/canary.log after the run), to be before the worker left
  the router (deploy.yml proves a release before the drain, so a refused release costs none);
- the workers' view: each worker's journal (docker exec <container> journalctl -u sglang), its
  scheduler's "Prefill batch" lines with the journal's own timestamps, read after the run: a line
  after a worker left the router and before its server was stopped is a request that reached a
  removed worker.

  rolling_upgrade.py --router URL --router-key KEY --out FILE [--clients 3] [--request-seconds 30] -- COMMAND...
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sglang_sm120.fleet.router import RouterClient, RouterError
from sglang_sm120.serve.bench_client import stream_one

PREFILL = "Prefill batch"
STOPPING = re.compile(r"Stopping sglang\.service|Stopped sglang\.service")


class Clients:
    def __init__(self, url: str, key: str, count: int, tokens: int) -> None:
        self.url, self.key, self.tokens = url, key, tokens
        self.stop = threading.Event()
        self.results: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.client, args=(i,), daemon=True) for i in range(count)]

    def client(self, index: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            start = time.time()
            result = stream_one(self.url, f"fleet client {index} request {n}", self.tokens, self.key, 300)
            record = {"client": index, "n": n, "start": start, "end": time.time(), "ok": result["ok"]}
            record.update(output_tokens=result["output_tokens"], error=result["error"], latency_s=result["latency_s"])
            with self.lock:
                self.results.append(record)

    def __enter__(self) -> Clients:
        for thread in self.threads:
            thread.start()
            time.sleep(1.0)  # staggered, so that some request is always in flight
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=400)


class RouterWatch(threading.Thread):
    """The router's workers every 0.5 s: (time, {url: healthy}) or (time, error)."""

    def __init__(self, client: RouterClient) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.samples: list[dict[str, Any]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.time()
            try:
                listed = {w.url: bool(w.healthy and w.status in (None, "ready")) for w in self.client.workers()}
                self.samples.append({"t": now, "workers": listed})
            except RouterError as exc:
                self.samples.append({"t": now, "error": str(exc)})
            self.stop.wait(0.5)


def windows(samples: list[dict[str, Any]], urls: list[str]) -> dict[str, list[list[float]]]:
    """Per worker, each [left, back] span of the run in which the router did not list it (back: None if never)."""
    out: dict[str, list[list[float]]] = {url: [] for url in urls}
    for sample in samples:
        if "workers" not in sample:
            continue
        for url in urls:
            spans = out[url]
            listed = url in sample["workers"]
            if not listed and (not spans or spans[-1][1] is not None):
                spans.append([sample["t"], None])
            elif listed and spans and spans[-1][1] is None:
                spans[-1][1] = sample["t"]
    return out


def journal(container: str) -> list[tuple[float, str]]:
    text = subprocess.run(
        ["docker", "exec", container, "journalctl", "--no-pager", "-o", "short-unix", "-u", "sglang.service"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    lines = []
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        try:
            lines.append((float(stamp), rest))
        except ValueError:
            continue
    return lines


def canary_finished(container: str) -> float | None:
    """When the current release's start canary log was last written (None: no canary log)."""
    out = subprocess.run(
        ["docker", "exec", container, "stat", "-L", "-c", "%Y", "/opt/sglang/current/logs/canary.log"],
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def late_arrivals(lines: list[tuple[float, str]], spans: list[list[float]]) -> list[str]:
    """Prefill lines of the old server after the worker left the router (1 s of poll slack) and before it was stopped."""
    late = []
    for left, _back in spans:
        stopped = next((t for t, text in lines if t > left and STOPPING.search(text)), None)
        end = stopped if stopped is not None else float("inf")
        late += [f"{t:.1f} {text}" for t, text in lines if left + 1.0 < t < end and PREFILL in text]
    return late


def main(argv: list[str]) -> int:
    if "--" not in argv:
        raise SystemExit("usage: rolling_upgrade.py OPTIONS -- COMMAND...")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--router", required=True)
    parser.add_argument("--router-key", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--request-seconds", type=float, default=30)
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]

    router = RouterClient(args.router, args.router_key)
    urls = sorted(w.url for w in router.workers())
    # The rate of this server, from one short request through the router.
    probe = stream_one(args.router, "fleet rate probe", 64, args.router_key, 120)
    if not probe["ok"]:
        raise SystemExit(f"rolling_upgrade: the router did not serve a probe request: {probe['error']}")
    tokens = max(64, min(3000, int(64 / probe["latency_s"] * args.request_seconds)))
    watch = RouterWatch(router)
    watch.start()
    with Clients(args.router, args.router_key, args.clients, tokens) as clients:
        time.sleep(3)
        started = time.time()
        run = subprocess.run(command, capture_output=True, text=True)
        ended = time.time()
    watch.stop.set()
    watch.join(timeout=10)

    spans = windows(watch.samples, urls)
    journals = {url: journal(urlsplit(url).hostname or "") for url in urls}
    late = {url: late_arrivals(journals[url], spans[url]) for url in urls}
    # Each worker's journal carries the scheduler's lines at all (else "no late arrival" proves nothing).
    prefills = {url: sum(PREFILL in text for _t, text in journals[url]) for url in urls}
    healthy = [sum(s["workers"].values()) for s in watch.samples if "workers" in s]
    canaries = {url: canary_finished(urlsplit(url).hostname or "") for url in urls}
    report = {
        "workers": urls,
        "tokens": tokens,
        "command_rc": run.returncode,
        "command_output_tail": (run.stdout + run.stderr)[-6000:],
        "command_seconds": round(ended - started, 1),
        "requests": clients.results,
        "failed": [r for r in clients.results if not r["ok"]],
        "truncated": [r for r in clients.results if r["ok"] and r["output_tokens"] != tokens],
        "router_errors": [s for s in watch.samples if "error" in s],
        "healthy_min": min(healthy) if healthy else None,
        "healthy_max": max(healthy) if healthy else None,
        "samples": len(watch.samples),
        "out_of_router": spans,
        "late_arrivals": late,
        "prefill_lines": prefills,
        # per worker: [canary log last written, left the router] (epoch seconds; the stat is whole seconds)
        "canary_then_left": {url: [canaries[url], spans[url][0][0] if spans[url] else None] for url in urls},
        # the log's time is whole seconds, rounded down: at or before the leave means it finished before
        "canary_before_leave": {url: canaries[url] is not None and bool(spans[url]) and canaries[url] <= spans[url][0][0] for url in urls},
    }
    args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    summary = {k: report[k] for k in ("command_rc", "command_seconds", "tokens", "healthy_min", "healthy_max", "samples")}
    summary.update(requests=len(clients.results), failed=len(report["failed"]), truncated=len(report["truncated"]))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
