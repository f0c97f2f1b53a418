#!/usr/bin/env python3
"""A REAL SGLang server's drain and tool calls, driven by the toolkit's own code, on a GPU machine (issues 50 and 47).

Not part of `make test`: how tests/data/real-server/<version>-<gpu>-drain/ is made (its README section says when).
Set up as scripts/real_server_proof.py (a tiny Kimi-shaped target, bf16 as scripts/real_canary_proof.py --unquantized
makes it, and its EAGLE-3 draft; the same launcher and API key through --config; CUDA graphs for batch sizes 1 and 4),
with the production profile's --tool-call-parser kimi_k2 (not its --reasoning-parser: see main)
and a small chat template (the tiny models' tokenizer has none). From the repository root:

    PYTHONPATH=plugins/module_utils:plugins/plugin_utils:<unpacked bundle> python3 scripts/real_drain_proof.py --out DIR

Once healthy:
  1. the answer check the deploy runs after a start (serve/answers.py check_tool_call) against the real server;
  2. the drain the router role runs before a restart (fleet/drain.py): streamed requests of different lengths start,
     then wait_drained polls read_load (GET /v1/loads, else /get_load) every 0.2 s until two reads say nothing is in
     flight; each request's end and each poll's count are kept, and whether the drain ended after the last request;
  3. GET /v1/loads and /get_load themselves, with their status, while requests run (the 500 of issue 50, or not).
Writes DIR/drain/ (server.log, health.tsv, tool-call.json, drain.json, loads-*.txt, summary.json); never the key.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sglang_sm120.fleet import drain
from sglang_sm120.serve import answers, bench_client

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("real_server_proof", ROOT / "scripts/real_server_proof.py")
assert _spec and _spec.loader
proof = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(proof)
_spec = importlib.util.spec_from_file_location("real_canary_proof", ROOT / "scripts/real_canary_proof.py")
assert _spec and _spec.loader
canary_proof = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(canary_proof)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LENGTHS = (96, 192, 288, 384, 480, 576)  # output tokens of the streamed requests: they end one after another


def streams(t0: float) -> tuple[list[threading.Thread], list[dict[str, Any]]]:
    ends: list[dict[str, Any]] = []

    def one(n: int) -> None:
        started = proof.now(t0)
        result = bench_client.stream_one(proof.URL, f"Tell a long story number {n}.", n, proof.KEY, 300)
        ended = proof.now(t0)
        ends.append({"output_len": n, "started": started, "ended": ended, "ok": result.get("ok"), "tokens": result.get("output_tokens")})

    threads = [threading.Thread(target=one, args=(n,)) for n in LENGTHS]
    return threads, ends


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--start-budget", type=float, default=400.0)
    args = parser.parse_args()
    out = Path(args.out) / "drain"
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/proof/drain")
    work.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"python": sys.version.split()[0]}

    # The Kimi-shaped pair with the target in bf16 (its NVFP4 path has no kernels on this Hopper GPU; the canary proof's
    # --unquantized), CUDA graphs for batch sizes 1 and 4 only (a cold machine compiles every Triton kernel per size).
    models = canary_proof.tiny(work / "models", "kimi-k2.5-nvfp4", "kimi-k2.5-eagle3", unquantized=True)
    target, draft = Path(models["target"]), Path(models["draft"])
    keys = work / "api-keys.yaml"
    keys.write_text(f"api-key: {json.dumps(proof.KEY)}\n")
    keys.chmod(0o640)
    template = work / "chat.jinja"
    template.write_text(CHAT_TEMPLATE)
    argv = proof.flags(target, draft, keys)
    at = argv.index("--cuda-graph-max-bs")
    argv[at : at + 2] = ["--cuda-graph-bs", "1", "4"]
    # Not --reasoning-parser kimi_k2: from it SGLang's scheduler constrains reasoning with the think-end token, which must be
    # one token of the model's tokenizer, and the tiny models' tokenizer has no </think> (the first run here stopped on it).
    argv[-2:-2] = ["--tool-call-parser", "kimi_k2", "--chat-template", str(template)]
    summary["argv"] = [a if a != str(keys) else "<keys file>" for a in argv]
    server = [sys.executable, "-m", "sglang.launch_server", *argv]
    command = [sys.executable, str(ROOT / "roles/sglang_service/files/key_redactor.py"), str(keys), "--", *server]
    env = {**os.environ, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    log = (out / "server.log").open("wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(work))
    start = proof.watch_start(proc, t0, args.start_budget, out / "health.tsv")
    summary["start"] = start
    print(f"start: {start}", flush=True)

    if start["healthy"] is not None:
        check = answers.check_tool_call(proof.URL, proof.KEY, "kimi_k2", timeout=120)
        (out / "tool-call.json").write_text(json.dumps(check.to_dict(), indent=1))
        summary["tool_call"] = {"ok": check.ok, "reason": check.reason, "seconds": check.seconds}
        print(f"tool call: {summary['tool_call']}", flush=True)

        threads, ends = streams(t0)
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        raw = {}
        for path in ("/v1/loads", "/get_load"):
            status, took, body = proof.get(path, proof.KEY)
            raw[path] = {"status": status, "seconds": took}
            (out / f"loads-{path.strip('/').replace('/', '_')}.txt").write_text(f"{status}\n{body[:4000]}")
        summary["endpoints_during_load"] = raw
        drain_started = proof.now(t0)
        polls: list[dict[str, Any]] = []

        def read() -> drain.Load:
            load = drain.read_load(proof.URL, proof.KEY)
            polls.append({"t": proof.now(t0), "running": load.running, "waiting": load.waiting, "path": load.source, "note": load.note})
            return load

        result = drain.wait_drained(read, timeout=240, interval=0.2)
        drained_at = proof.now(t0)
        for thread in threads:
            thread.join(timeout=300)
        last_end = max((e["ended"] for e in ends), default=None)
        record = {
            "drain_started": drain_started,
            "drained_at": drained_at,
            "result": result.to_dict(),
            "requests": sorted(ends, key=lambda e: e["ended"]),
            "last_request_ended": last_end,
            "drained_after_last_request": last_end is not None and drained_at >= last_end,
            "polls": polls,
        }
        (out / "drain.json").write_text(json.dumps(record, indent=1))
        summary["drain"] = {k: record[k] for k in ("drain_started", "drained_at", "last_request_ended", "drained_after_last_request")}
        paths = sorted({p["path"] for p in polls})
        summary["drain"].update(drained=result.drained, polls=result.polls, paths=paths, history=result.history)
        print(f"drain: {summary['drain']}", flush=True)

    summary["exit_after_sigterm"] = proof.stop(proc)
    log.close()
    text = (out / "server.log").read_text(errors="replace")
    kept = sum(p.read_text(errors="replace").count(proof.KEY) for p in out.iterdir() if p.is_file())
    summary["key_anywhere_kept"] = text.count(proof.KEY) + kept
    summary["sglang_version"] = proof._sglang_version()
    try:
        from importlib.metadata import version

        summary["fastapi"], summary["starlette"] = version("fastapi"), version("starlette")
    except Exception as exc:  # recorded, not fatal
        summary["fastapi"] = f"unknown: {exc}"
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps(summary, indent=1, default=str))
    return 0 if start["healthy"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
