#!/usr/bin/env python3
"""A REAL SGLang server's outputs checked by the toolkit's own output checks, on a GPU machine (issue 47, item 6).

Not part of `make test`: how tests/data/real-server/<version>-<gpu>-answers/ is made (its README section says when).
Set up as scripts/real_drain_proof.py (the tiny Kimi-shaped target in bf16 and its EAGLE-3 draft, random weights,
made by scripts/real_canary_proof.py's `tiny`; the launcher roles/sglang_service/files/key_redactor.py; the API key
through --config; CUDA graphs for batch sizes 1 and 4). From the repository root:

    PYTHONPATH=plugins/module_utils:plugins/plugin_utils:<unpacked bundle> python3 scripts/real_answers_proof.py --out DIR

Two servers, one after the other, on the same port:
  1. `eagle3`: the target with its EAGLE-3 draft (the production profile's speculative flags);
  2. `baseline`: the SAME target without speculation (the baseline profile).
Against each, once healthy:
  a. serve/answer_checks.py `run_answer_checks` (40 computed-answer questions at temperature 0 one at a time, then a
     burst of 64 at once, logprobs on, every answer judged, degenerate outputs named); every output is kept
     (the runner's `generate` is wrapped to record what it returned), so the judge can be re-run on the capture;
  b. serve/answers.py `check_questions`, the check the deploy runs after every start, with its defaults;
  c. `collect_greedy` over GREEDY_PROMPTS and a few more prompts (64 new tokens each, token ids).
Then `compare_greedy(eagle3, baseline)`: greedy speculative decoding is exact up to numerics.
Random weights answer no question right: the capture shows the machinery on a real server (requests answered under a
real burst of 64, findings named, the greedy agreement of speculative and plain decoding), not accuracy.
Writes DIR/answers/ (summary.json, questions-<server>.json, greedy-<server>.json, check-questions-<server>.json,
server-<server>.log trimmed, health-<server>.tsv, nvidia-smi.txt); never the key.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from sglang_sm120.serve import answer_checks, answers
from sglang_sm120.serve.answer_checks import GREEDY_PROMPTS, Generation, collect_greedy, compare_greedy, run_answer_checks

ROOT = Path(__file__).resolve().parent.parent
# the drain proof's set-up (it loads real_server_proof and real_canary_proof, the servers' own set-up)
_spec = importlib.util.spec_from_file_location("real_drain_proof", ROOT / "scripts/real_drain_proof.py")
assert _spec and _spec.loader
drain_proof = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(drain_proof)
proof, canary_proof = drain_proof.proof, drain_proof.canary_proof

QUESTIONS = 40
BURST = 64
SEED = 0
# GREEDY_PROMPTS and a few more: short factual and list prompts besides the open-ended ones
MORE_PROMPTS = (
    "Count from one to twenty in words.",
    "Name the planets of the solar system in order from the sun.",
    "Translate 'good morning, how are you?' into French, German and Spanish.",
    "Write a Python function that returns the n-th Fibonacci number.",
)
PROMPTS = (*GREEDY_PROMPTS, *MORE_PROMPTS)
SPECULATIVE = ("--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
               "--speculative-eagle-topk", "--speculative-num-draft-tokens")  # fmt: skip
LOG_KEEP = 60_000  # characters of a server log kept: its head and its tail
REQUEST_LINE = re.compile(r'"(POST|GET) /(generate|health|v1/\S*|get_load)\S* HTTP/1\.1" \d+')


def baseline_argv(argv: list[str]) -> list[str]:
    """The same flags without the speculative ones (each flag with its value)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in SPECULATIVE:
            skip = True
            continue
        out.append(arg)
    return out


class Recorder:
    """Wraps answer_checks.generate (which run_answer_checks looks up when it asks) to keep every output it returns."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Generation]] = []
        self.lock = threading.Lock()
        self.real: Callable[..., Generation] = answer_checks.generate

    def __enter__(self) -> Recorder:
        def recording(url: str, prompt: str, *args: Any, **kwargs: Any) -> Generation:
            out = self.real(url, prompt, *args, **kwargs)
            with self.lock:
                self.calls.append((prompt, out))
            return out

        answer_checks.generate = recording  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        answer_checks.generate = self.real  # type: ignore[assignment]


Calls = list[tuple[str, Generation]]


def ordered(result: answer_checks.AnswerCheckResult, questions: list[answer_checks.Question], calls: Calls) -> dict[str, Any]:
    """The recorded outputs in each phase's order: the sequential ones as asked; the burst's (recorded as they came back)
    matched to burst slot i (question i % n) by prompt and by the text the phase kept for that slot."""
    n = len(questions)
    sequential = [g for _, g in calls[:n]]
    assert [p for p, _ in calls[:n]] == [q.prompt for q in questions], "the sequential outputs are not in question order"
    pool = list(calls[n:])
    burst = []
    if result.burst is not None:
        for i, text in enumerate(result.burst.outputs):
            prompt = questions[i % n].prompt
            at = next(j for j, (p, g) in enumerate(pool) if p == prompt and g.text == text)
            burst.append({"slot": i, "question": i % n, **pool.pop(at)[1].to_dict()})
    return {"sequential": [{"question": i, **g.to_dict()} for i, g in enumerate(sequential)], "burst": burst}


def trim_log(text: str) -> str:
    """The log without the per-request access lines (counted), then its head and tail when still long."""
    lines = text.splitlines()
    kept = [line for line in lines if not REQUEST_LINE.search(line)]
    dropped = len(lines) - len(kept)
    body = "\n".join(kept)
    if len(body) > LOG_KEEP:
        half = LOG_KEEP // 2
        body = f"{body[:half]}\n[... {len(body) - LOG_KEEP} characters left out ...]\n{body[-half:]}"
    return f"[{dropped} request access lines left out]\n{body}\n"


def serve(name: str, argv: list[str], keys_file: Path, out: Path, work: Path, budget: float, summary: dict[str, Any]) -> Optional[Any]:
    """Starts the server under the service's launcher; its Popen once healthy, else None (stopped)."""
    server = [sys.executable, "-m", "sglang.launch_server", *argv]
    command = [sys.executable, str(ROOT / "roles/sglang_service/files/key_redactor.py"), str(keys_file), "--", *server]
    env = {**os.environ, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    log = (work / f"server-{name}.log").open("wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(work))
    start = proof.watch_start(proc, t0, budget, out / f"health-{name}.tsv")
    summary["servers"][name] = {"argv": [a if a != str(keys_file) else "<keys file>" for a in argv], "start": start}
    print(f"{name}: start: {start}", flush=True)
    if start["healthy"] is None:
        finish(name, proc, work, out, summary)
        return None
    return proc


def finish(name: str, proc: Any, work: Path, out: Path, summary: dict[str, Any]) -> None:
    summary["servers"][name]["exit_after_sigterm"] = proof.stop(proc)
    text = (work / f"server-{name}.log").read_text(errors="replace")
    summary["servers"][name]["key_in_full_log"] = text.count(proof.KEY)
    (out / f"server-{name}.log").write_text(trim_log(text.replace(proof.KEY, "<key>")))


def phase_figures(data: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    if data is None:
        return None
    names: dict[str, int] = {}
    for f in data["findings"]:
        names[f["name"]] = names.get(f["name"], 0) + 1
    return {
        "asked": data["asked"], "right": data["right"], "wrong": len(data["wrong"]), "errors": len(data["errors"]),
        "findings": len(data["findings"]), "findings_by_name": names, "seconds": data["seconds"],
        "concurrency": data["concurrency"],
        "malformed": sum(1 for w in data["wrong"] if w["verdict"] == "malformed"),
    }  # fmt: skip


def checks(name: str, out: Path, keys: dict[str, str], summary: dict[str, Any]) -> list[Generation]:
    """The output checks against the server up now; its greedy outputs for PROMPTS."""
    record: dict[str, Any] = {}
    questions = answer_checks.generate_questions(QUESTIONS, SEED)
    for logprobs in (True, False):  # without logprobs only if every request with them failed
        with Recorder() as recorder:
            result = run_answer_checks(proof.URL, keys, questions=questions, seed=SEED, concurrency=BURST, logprobs=logprobs, timeout_s=240)
        if logprobs and result.sequential.errors and len(result.sequential.errors) == result.sequential.asked:
            record["with_logprobs_all_failed"] = result.to_dict()
            continue
        break
    data = result.to_dict()
    try:
        outputs: dict[str, Any] = ordered(result, questions, recorder.calls)
    except (AssertionError, StopIteration) as exc:  # kept as they came back, saying why they could not be ordered
        outputs = {"unordered": [{"prompt": p, **g.to_dict()} for p, g in recorder.calls], "why": repr(exc)}
    record.update(logprobs=logprobs, questions=[q.to_dict() for q in questions], result=data, outputs=outputs)
    (out / f"questions-{name}.json").write_text(json.dumps(record, separators=(",", ":")))
    figures = {
        "logprobs": logprobs, "ok": data["ok"], "reasons": data["reasons"], "burst_changed": data["burst_changed"],
        "elapsed_s": data["elapsed_s"], "sequential": phase_figures(data["sequential"]), "burst": phase_figures(data["burst"]),
        "first_burst_error": (data["burst"] or {}).get("errors", [None])[0] if (data["burst"] or {}).get("errors") else None,
    }  # fmt: skip
    summary["servers"][name]["questions"] = figures
    print(f"{name}: questions: {json.dumps(figures)[:1500]}", flush=True)

    # the module's defaults (count 40, burst 64, share right 0.8, seed 0, 300 s); made with answers.QuestionsOptions() of
    # the same values, before check_questions took run_answer_checks' keyword arguments instead
    asking = {"count": 40, "concurrency": 64, "min_share_right": 0.8, "seed": 0, "timeout_s": 300.0}
    check = answers.check_questions(proof.URL, keys, asking, timeout=60)
    (out / f"check-questions-{name}.json").write_text(json.dumps(check.to_dict(), indent=1))
    kept = {"ok": check.ok, "answer": check.answer, "seconds": check.seconds, "reason": check.reason[:600]}
    summary["servers"][name]["check_questions"] = kept
    print(f"{name}: check_questions: {summary['servers'][name]['check_questions']}", flush=True)

    started = time.monotonic()
    greedy = collect_greedy(proof.URL, PROMPTS, keys, timeout_s=240)
    kept_greedy = {"prompts": list(PROMPTS), "outputs": [g.to_dict() for g in greedy]}
    (out / f"greedy-{name}.json").write_text(json.dumps(kept_greedy, separators=(",", ":")))
    summary["servers"][name]["greedy"] = {
        "prompts": len(PROMPTS), "errors": sum(1 for g in greedy if g.error), "seconds": round(time.monotonic() - started, 2),
        "tokens": [None if g.token_ids is None else len(g.token_ids) for g in greedy],
    }  # fmt: skip
    return greedy


def gpu(out: Path) -> str:
    try:
        full = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60).stdout
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        line = subprocess.run(query, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown: {exc}"
    (out / "nvidia-smi.txt").write_text(f"{line}\n\n{full}")
    return line


def proof_setup(kind: str, description: str, start_budget: float) -> tuple[argparse.Namespace, Path, Path, dict[str, Any]]:
    """A two-server proof's command line (--out, --start-budget, --servers) and folders: DIR/<kind>/ for what is kept,
    /tmp/proof/<kind>/ for the work; the summary an earlier call left in DIR (the servers one per call), else a new one,
    with the GPU and the SGLang release of this call."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True)
    parser.add_argument("--start-budget", type=float, default=start_budget)
    parser.add_argument("--servers", default="eagle3,baseline", help="which servers this run starts (a later run adds to DIR)")
    args = parser.parse_args()
    out = Path(args.out) / kind
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/proof") / kind
    work.mkdir(parents=True, exist_ok=True)
    before = out / "summary.json"
    summary: dict[str, Any] = json.loads(before.read_text()) if before.exists() else {"servers": {}}
    summary["python"] = sys.version.split()[0]
    summary["gpu"] = gpu(out)
    summary["sglang_version"] = proof._sglang_version()
    return args, out, work, summary


def tiny_pair_flags(work: Path, summary: dict[str, Any]) -> tuple[list[str], Path, dict[str, str]]:
    """The eagle3 server's flags for the tiny Kimi-shaped pair (made once in `work`), CUDA graphs for batch sizes 1 and
    4, and the API-keys file (an earlier call's, so its key) with the keys as the deploy's checks read them."""
    models = canary_proof.tiny(work / "models", "kimi-k2.5-nvfp4", "kimi-k2.5-eagle3", unquantized=True)
    summary["tiny_models_key"] = models.get("key")
    keys_file = work / "api-keys.yaml"
    if keys_file.exists():
        proof.KEY = answers.service_keys(str(keys_file))["api-key"]
    else:
        keys_file.write_text(f"api-key: {json.dumps(proof.KEY)}\n")
        keys_file.chmod(0o640)
    argv = proof.flags(Path(models["target"]), Path(models["draft"]), keys_file)
    at = argv.index("--cuda-graph-max-bs")
    argv[at : at + 2] = ["--cuda-graph-bs", "1", "4"]
    return argv, keys_file, answers.service_keys(str(keys_file))


def main() -> int:
    args, out, work, summary = proof_setup("answers", __doc__.split("\n")[0], 300.0)
    summary.update(questions=QUESTIONS, burst=BURST, seed=SEED)

    def save() -> None:
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))

    argv, keys_file, keys = tiny_pair_flags(work, summary)

    greedy: dict[str, list[Generation]] = {}
    for name in ("eagle3", "baseline"):  # an earlier run's greedy outputs
        kept = out / f"greedy-{name}.json"
        if kept.exists() and name not in args.servers.split(","):
            greedy[name] = [Generation.from_dict(g) for g in json.loads(kept.read_text())["outputs"]]
    for name, flags in (("eagle3", argv), ("baseline", baseline_argv(argv))):
        if name not in args.servers.split(","):
            continue
        proc = serve(name, flags, keys_file, out, work, args.start_budget, summary)
        save()
        if proc is None:
            continue
        try:
            greedy[name] = checks(name, out, keys, summary)
        except Exception as exc:  # recorded; the server is stopped either way
            summary["servers"][name]["failed"] = f"{type(exc).__name__}: {exc}"[:2000]
            print(f"{name}: failed: {exc}", flush=True)
        finally:
            finish(name, proc, work, out, summary)
            save()

    if set(greedy) == {"eagle3", "baseline"}:
        agreement = compare_greedy(PROMPTS, greedy["eagle3"], greedy["baseline"], 1.0, labels=("eagle3", "baseline"))
        (out / "agreement.json").write_text(json.dumps(agreement.to_dict(), indent=1))
        summary["agreement"] = {
            "rate": agreement.rate, "basis": agreement.basis, "prompts": agreement.prompts, "agreed": agreement.agreed,
            "disagreeing": agreement.disagreeing, "errors": agreement.errors,
            "first_divergence": None if agreement.first_divergence is None else agreement.to_dict()["first_divergence"],
        }  # fmt: skip
        print(f"agreement: {json.dumps(summary['agreement'])[:1500]}", flush=True)
    summary["key_anywhere_kept"] = sum(p.read_text(errors="replace").count(proof.KEY) for p in out.iterdir() if p.is_file())
    save()
    print(json.dumps({k: v for k, v in summary.items() if k != "servers"}, indent=1, default=str))
    return 0 if set(greedy) == {"eagle3", "baseline"} else 1


if __name__ == "__main__":
    sys.exit(main())
