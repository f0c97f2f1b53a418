#!/usr/bin/env python3
"""A small benchmark grid against a REAL SGLang server, measured by the toolkit's own client, on a GPU machine
(issue 47, items 4 and 6).

Not part of `make test`: how tests/data/real-server/<version>-<gpu>-grid/ is made (its README section says when).
Set up as scripts/real_answers_proof.py (the tiny Kimi-shaped target in bf16 and its EAGLE-3 draft, random weights,
made by scripts/real_canary_proof.py's `tiny`; the launcher roles/sglang_service/files/key_redactor.py; the API key
through --config; CUDA graphs for batch sizes 1 and 4). From the repository root:

    PYTHONPATH=plugins/module_utils:plugins/plugin_utils:<unpacked bundle> python3 scripts/real_grid_proof.py --out DIR

Two servers, one after the other, on the same port: `eagle3` (the target with its EAGLE-3 draft) and `baseline` (the
same target alone). Against each, once healthy, the grid's cells as the sglang_benchmark role runs them: the plan
of serve/grid.py's plan_grid (concurrency 1 and 4 x the prompt set as it is and 1024-token prompts), each cell one
`bench_client.py --requests N --context-tokens X` run (the first of each server after a timed decode warm-up), and
the greedy outputs the benchmark records (serve/answers.py record_greedy). Then the report's grid section
(grid_section over report.summarize of each run) and the greedy agreement (report.with_agreement).
Random weights: the draft guesses at chance, so what the ratios say is the cost of speculation that never pays on
this pair, not where EAGLE-3 pays on Kimi-K2.5; what the capture shows is the machinery on a real server (prompts of
the asked length as the real tokenizer counts them, no shared prefix, per-cell figures and accept lengths, TTFT with
context). Writes DIR/grid/ (summary.json, plan.json, run-<server>-<slot>.json, greedy-<server>.json, grid.json,
agreement.json, server-<server>.log trimmed, health-<server>.tsv, nvidia-smi.txt); never the key.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from sglang_sm120.serve import answers, bench_client
from sglang_sm120.serve.grid import grid_section, plan_grid, report_cell
from sglang_sm120.serve.report import summarize, with_agreement

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # the answers proof's set-up: its servers, tiny models and key
import real_answers_proof as answers_proof  # noqa: E402

proof = answers_proof.proof

GRID = {"concurrency": [1, 4], "context_tokens": ["short", 1024]}
OUTPUT_LEN = 64
WARMUP_S = 10.0
PROMPTS = ROOT / "roles/sglang_benchmark/files/prompts.json"


def measure(name: str, cells: list[dict[str, Any]], keys_file: Path, keys: dict[str, str], out: Path) -> dict[str, Any]:
    """The server's cells (bench_client's own command line, as run.yml builds it) and its greedy outputs."""
    done: dict[str, Any] = {"cells": [], "greedy": None}
    for cell in cells:
        path = out / f"run-{name}-{cell['slot']}.json"
        argv = ["--url", proof.URL, "--keys-file", str(keys_file), "--prompts", str(PROMPTS), "--num-prompts", "16"]
        argv += ["--output-len", str(OUTPUT_LEN), "--concurrency", str(cell["concurrency"]), "--profile", name, "--out", str(path)]
        argv += ["--requests", str(cell["requests"]), "--context-tokens", str(cell["context_tokens"])]
        # as the capture of 2026-12-07 ran it (before a cell's first long prompt was sent unmeasured; run.yml now does)
        argv += ["--warmup-seconds", str(cell["warmup_seconds"])] if cell["warmup_seconds"] > 0 else ["--warmup", "0"]
        started = time.monotonic()
        code = bench_client.main(argv)
        record = json.loads(path.read_text()) if path.exists() else None
        summary = summarize(record) if record else None
        done["cells"].append({**cell, "exit": code, "seconds": round(time.monotonic() - started, 2), "summary": summary})
        figures = f"{summary['output_tok_s']} tok/s, prompt {summary['prompt_tokens']} tokens" if summary else "no run file"
        print(f"{name} {cell['slot']}: exit {code}, {figures}", flush=True)
    check = answers.record_greedy(proof.URL, keys, 120.0)
    done["greedy"] = check.to_dict()
    (out / f"greedy-{name}.json").write_text(json.dumps(done["greedy"], separators=(",", ":")))
    return done


def main() -> int:
    args, out, work, summary = answers_proof.proof_setup("grid", __doc__.split("\n")[0], 400.0)
    summary.update(grid=GRID, output_len=OUTPUT_LEN)

    def save() -> None:
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))

    plan = plan_grid(
        GRID, ["eagle3", "baseline"], output_len=OUTPUT_LEN, min_requests=8, rounds=2, warmup_seconds=WARMUP_S,
        decode_tok_s=100, prefill_tok_s=20000, restart_s=200, max_minutes=30,
    )  # fmt: skip
    (out / "plan.json").write_text(json.dumps(plan, indent=1))
    argv, keys_file, keys = answers_proof.tiny_pair_flags(work, summary)
    results: dict[str, Any] = {}
    for name, flags in (("eagle3", argv), ("baseline", answers_proof.baseline_argv(argv))):
        if name not in args.servers.split(","):
            continue
        proc = answers_proof.serve(name, flags, keys_file, out, work, args.start_budget, summary)
        save()
        if proc is None:
            continue
        try:
            results[name] = measure(name, [c for c in plan["cells"] if c["profile"] == name], keys_file, keys, out)
            summary["servers"][name]["cells"] = [{k: v for k, v in c.items() if k != "summary"} for c in results[name]["cells"]]
        except Exception as exc:  # recorded; the server is stopped either way
            summary["servers"][name]["failed"] = f"{type(exc).__name__}: {exc}"[:2000]
            print(f"{name}: failed: {exc}", flush=True)
        finally:
            answers_proof.finish(name, proc, work, out, summary)
            save()
    # the grid and the agreement from every run file and greedy record in DIR (this call's and an earlier one's)
    cells, greedy = [], {}
    for cell in plan["cells"]:
        path = out / f"run-{cell['profile']}-{cell['slot']}.json"
        if path.exists():
            cells.append(report_cell(cell["profile"], cell["context_tokens"], summarize(json.loads(path.read_text()))))
    for name in ("eagle3", "baseline"):
        if (out / f"greedy-{name}.json").exists():
            greedy[name] = json.loads((out / f"greedy-{name}.json").read_text())
    if cells:
        grid = grid_section(cells, "baseline", "eagle3", 0.05, {"concurrency": 4, "context_tokens": 1024})
        (out / "grid.json").write_text(json.dumps(grid, indent=1))
        summary["grid_summary"] = grid["summary"]
        summary["regions"] = [r["message"] for r in grid["regions"]]
    if set(greedy) == {"eagle3", "baseline"}:
        speed = {"baseline": "baseline", "candidate": "eagle3", "gate": "warn", "status": "pass", "message": "-"}
        judged = with_agreement(speed, greedy, 0.5)
        (out / "agreement.json").write_text(json.dumps(judged["agreement"], indent=1))
        summary["agreement"] = judged["agreement"]["message"]
    summary["key_anywhere_kept"] = sum(p.read_text(errors="replace").count(proof.KEY) for p in out.iterdir() if p.is_file())
    save()
    print(json.dumps({k: v for k, v in summary.items() if k != "servers"}, indent=1, default=str))
    return 0 if all(name in results for name in args.servers.split(",")) else 1


if __name__ == "__main__":
    sys.exit(main())
