#!/usr/bin/env python3
"""Drive a REAL SGLang server with the toolkit's own code, on a GPU machine, and keep what it did.

Not part of `make test` (CI has no GPU): this is how tests/data/real-server/<version>-<gpu>/ captures
are made (their README says when and where). It runs on a machine with a GPU, torch and an SGLang
release importable (e.g. an unpacked bundle on PYTHONPATH); such a machine has no controller venv, so
the toolkit's packages come from PYTHONPATH=plugins/module_utils:plugins/plugin_utils too (sglang-evidence, which it runs,
inherits it). From the repository root:

    PYTHONPATH=plugins/module_utils:plugins/plugin_utils:<unpacked bundle> python3 scripts/real_server_proof.py --out DIR \\
        [--shape kimi|llama] [--start-budget 300]

and does, with the project's code only:
  1. tiny models of the target's architecture (plugins/module_utils/sglang_sm120/serve/tiny_models.py) from the configs in
     tests/data/models/ (kimi: Kimi-K2.5's DeepSeek-V3 text model with MLA and MoE, and its EAGLE-3
     draft; llama: a Llama-3.1-8B-shaped pair);
  2. an API-keys file as the sglang_service role writes it, and the server started as the unit starts
     it with a key: roles/sglang_service/files/key_redactor.py running `python -m sglang.launch_server ... --config`;
  3. the start watched with the health gate's probe (plugins/module_utils/sglang_sm120/serve/health.py): every probe's
     time, status and phase, until healthy, exited or out of budget;
  4. once healthy: each endpoint with and without the key, the toolkit client's run (per-request
     accept length), the counters reset and SGLang's own bench_serving (server accept length), the
     evidence snapshot (bench_client.evidence) and the judge's verdicts (sglang-evidence);
  5. SIGTERM to the launcher, its exit status, and a scan of everything kept for the key.
Writes DIR/<shape>/ (server.log, health.tsv, endpoints.tsv, ep-*.json, client-c1.json, bench.jsonl,
evidence.json, verdicts.json, summary.json) and never prints the key.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

from sglang_sm120.serve import (
    bench_client,
    tiny_models,
)
from sglang_sm120.serve import health as service_health
from sglang_sm120.serve import report as bench_report

ROOT = Path(__file__).resolve().parent.parent

KEY = "proof-" + os.urandom(12).hex()  # a throwaway key: the scan below looks for it everywhere
SHAPES = {
    "kimi": ("tests/data/models/kimi-k2.5-nvfp4", "tests/data/models/kimi-k2.5-eagle3"),
    "llama": ("tests/data/models/llama-3.1-8b-instruct", "tests/data/models/llama-3.1-8b-eagle3"),
}
PORT = 30000
URL = f"http://127.0.0.1:{PORT}"


def now(t0: float) -> float:
    return round(time.monotonic() - t0, 2)


def get(path: str, key: Optional[str], timeout: float = 60.0) -> tuple[int, float, str]:
    request = urllib.request.Request(URL + path, headers={"Authorization": f"Bearer {key}"} if key else {})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), round(time.monotonic() - started, 3), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), round(time.monotonic() - started, 3), exc.read().decode("utf-8", "replace")
    except OSError as exc:
        return 0, round(time.monotonic() - started, 3), str(exc)


def flags(target: Path, draft: Path, keys: Path) -> list[str]:
    return [
        "--model-path", str(target), "--tp-size", "1", "--host", "127.0.0.1", "--port", str(PORT),
        "--mem-fraction-static", "0.3", "--enable-metrics", "--cuda-graph-max-bs", "8",
        "--attention-backend", "triton", "--log-level", "info",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft),
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--config", str(keys),
    ]  # fmt: skip


def watch_start(proc: subprocess.Popen[bytes], t0: float, budget: float, tsv: Path) -> dict[str, Any]:
    """Probe /health as the gate does until 200, the launcher exits, or the budget is spent."""
    first: dict[str, Optional[float]] = {"port_open": None, "first_503": None, "healthy": None}
    phase = "port closed"
    with tsv.open("w") as out:
        out.write("seconds\tstatus\tphase\tprobe_seconds\n")
        while now(t0) < budget:
            status, phase, took = service_health.probe(URL + "/health", 30.0)
            t = now(t0)
            out.write(f"{t}\t{status or '000'}\t{phase}\t{took}\n")
            out.flush()
            if status is not None and first["port_open"] is None:
                first["port_open"] = t
            if status == 503 and first["first_503"] is None:
                first["first_503"] = t
            if status == 200:
                first["healthy"] = t
                break
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    return {"phase": phase, "exit": proc.poll(), **first}


def stop(proc: subprocess.Popen[bytes]) -> Any:
    """SIGTERM to the launcher, as systemd stops the unit: its exit status, or that it was killed after 90 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        return "killed after 90 s"


def endpoints(out: Path) -> list[dict[str, Any]]:
    rows = []
    checks = [
        ("/health", None), ("/health_generate", None), ("/metrics", None), ("/v1/models", None), ("/server_info", None),
        ("/v1/models", KEY), ("/server_info", KEY), ("/get_server_info", KEY), ("/model_info", KEY), ("/get_model_info", KEY),
        ("/ready", KEY), ("/metrics", KEY),
    ]  # fmt: skip
    for path, key in checks:
        status, took, body = get(path, key)
        name = path.strip("/").replace("/", "_") + ("-key" if key else "-nokey")
        rows.append({"path": path, "with_key": bool(key), "status": status, "seconds": took, "key_echoed": body.count(KEY)})
        if path in ("/server_info", "/get_server_info") and status == 200:
            body = json.dumps(bench_client.redact(json.loads(body)), indent=1)
        (out / f"ep-{name}.txt").write_text(body)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="kimi")
    parser.add_argument("--start-budget", type=float, default=300.0, help="seconds the start may take")
    parser.add_argument("--name", help="the run's folder under --out (default: the shape)")
    parser.add_argument("--extra", default="", help="more launch flags, appended (a later flag wins), e.g. a setting that fails at start")
    args = parser.parse_args()
    name = args.name or args.shape
    out = Path(args.out) / name
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"shape": args.shape, "name": name, "python": sys.version.split()[0]}
    work = Path("/tmp/proof") / name
    work.mkdir(parents=True, exist_ok=True)

    target_cfg, draft_cfg = SHAPES[args.shape]
    t = time.monotonic()
    models = tiny_models.ensure(work / "models", ROOT / target_cfg, ROOT / draft_cfg, ROOT / "roles/sglang_canary/files/tokenizer")
    summary["models"] = {
        "seconds": round(time.monotonic() - t, 2),
        "key": models["key"],
        "differences": models["differences"],
        "launch_hints": models["launch_hints"],
    }
    target, draft = Path(models["target"]), Path(models["draft"])
    keys = work / "api-keys.yaml"
    keys.write_text(f"# as the sglang_service role writes it\napi-key: {json.dumps(KEY)}\n")
    keys.chmod(0o640)

    argv = flags(target, draft, keys)
    argv[-2:-2] = args.extra.split()  # before --config, which must stay last for the judge below
    server = [sys.executable, "-m", "sglang.launch_server", *argv]
    command = [sys.executable, str(ROOT / "roles/sglang_service/files/key_redactor.py"), str(keys), "--", *server]
    env = {**os.environ, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    summary["argv"] = [a if a != str(keys) else "<keys file>" for a in argv]
    log = (out / "server.log").open("wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(work))
    start = watch_start(proc, t0, args.start_budget, out / "health.tsv")
    summary["start"] = start
    print(f"start: {start}", flush=True)
    if start["healthy"] is None:
        log.flush()
        summary["log_tail"] = (out / "server.log").read_text(errors="replace").splitlines()[-25:]

    if start["healthy"] is not None:
        summary["endpoints"] = endpoints(out)
        prompts = str(ROOT / "roles/sglang_benchmark/files/prompts.json")
        t = time.monotonic()
        rc = bench_client.main(
            ["--url", URL, "--keys-file", str(keys), "--prompts", prompts, "--num-prompts", "8", "--output-len", "64",
             "--concurrency", "1", "--profile", "eagle3", "--out", str(out / "client-c1.json")]
        )  # fmt: skip
        fig = bench_report.summarize(json.loads((out / "client-c1.json").read_text())) if rc == 0 else {}
        summary["toolkit_client"] = {"rc": rc, "seconds": round(time.monotonic() - t, 1), **{k: fig.get(k) for k in
                                     ("ok", "output_tok_s", "accept_length", "accept_source", "accept_note", "completed")}}  # fmt: skip
        reset = subprocess.run(
            [sys.executable, str(ROOT / "plugins/module_utils/sglang_sm120/serve/bench_client.py"), "--reset-accept-counters", "--url", URL,
             "--keys-file", str(keys), "--prompts", prompts],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        summary["reset"] = {"rc": reset.returncode, "stdout": reset.stdout[-500:], "stderr": reset.stderr[-500:]}
        t = time.monotonic()
        bench = subprocess.run(
            [sys.executable, str(ROOT / "plugins/module_utils/sglang_sm120/serve/bench_client.py"), "--keys-file", str(keys),
             "--redact-after", str(out / "bench.jsonl"), "--exec", "--",
             sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", "127.0.0.1", "--port", str(PORT),
             "--dataset-name", "sharegpt", "--dataset-path", prompts, "--num-prompts", "16", "--sharegpt-output-len", "64",
             "--max-concurrency", "4", "--seed", "1", "--warmup-requests", "1", "--disable-tqdm", "--output-details",
             "--output-file", str(out / "bench.jsonl"), "--tokenizer", str(target)],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        (out / "bench.txt").write_text(bench.stdout[-20000:] + "\n--- stderr\n" + bench.stderr[-20000:])
        run = bench_report.load_run(out / "bench.jsonl", "eagle3", 64) if bench.returncode == 0 else None
        fig = bench_report.summarize(run) if run else {}
        summary["bench_serving"] = {"rc": bench.returncode, "seconds": round(time.monotonic() - t, 1), **{k: fig.get(k) for k in
                                    ("ok", "output_tok_s", "accept_length", "accept_source", "accept_note", "completed")}}  # fmt: skip
        evidence = bench_client.evidence(URL, None, KEY)
        (out / "evidence.json").write_text(json.dumps(evidence, indent=1))
        (out / "server-info.json").write_text(json.dumps(evidence.get("server_info"), indent=1))

    summary["exit_after_sigterm"] = stop(proc)
    log.close()
    summary["total_seconds"] = now(t0)

    if start["healthy"] is not None:
        judged = subprocess.run(
            [sys.executable, "-m", "sglang_sm120_controller.cli.sglang_evidence", "--journal", str(out / "server.log"), "--server-info",
             str(out / "server-info.json"), "--sglang-version", _sglang_version(), "--json", "--", *argv[:-2]],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        (out / "verdicts.json").write_text(judged.stdout or judged.stderr)
        summary["verdicts_rc"] = judged.returncode
    text = (out / "server.log").read_text(errors="replace")
    summary["log"] = {"lines": text.count("\n"), "key_in_log": text.count(KEY), "redacted_in_log": text.count("<redacted>")}
    summary["key_anywhere_kept"] = sum(p.read_text(errors="replace").count(KEY) for p in out.iterdir() if p.is_file())
    summary["sglang_version"] = _sglang_version()
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps(summary, indent=1, default=str))
    return 0 if start["healthy"] is not None else 1


def _sglang_version() -> str:
    from importlib.metadata import version

    return version("sglang")


if __name__ == "__main__":
    sys.exit(main())
