"""Benchmark figures, the baseline-vs-speculative verdict and gate, and the per-release report.

Plain Python, standard library only (the chart is drawn on the controller by
``sglang_sm120_controller.chart`` with matplotlib); plugins/modules/sglang_report.py wraps it on the host and pytest drives it
on recorded timings.

A *run* is one benchmark of one profile at one concurrency, whichever client measured it::

    {"tool": "toolkit-client" | "bench_serving", "profile": "eagle3", "concurrency": 1,
     "output_len": 64, "duration_s": 12.3,
     "accept_length": 2.4 | None,  # None: accept_note says why (no speculation, run too short)
     "accept_source": "...", "accept_note": "",  # the method that measured it; why there is no number
     "requests": [{"ok": true, "ttft_s": 0.05, "itl_s": [0.011, ...], "latency_s": 0.9,
                   "output_tokens": 64, "error": "",
                   "completion_tokens": 64, "spec_verify_ct": 26 | None}, ...],  # toolkit client only
     "error": ""}            # set when the run as a whole failed (client crashed, server gone)

``summarize`` turns a run into figures with the same definitions as SGLang's bench_serving
(TTFT = first streamed chunk with text; ITL = gap between chunks divided by the tokens the chunk
added; output tok/s = output tokens / wall time of the run). The accept length is measured per
run, never from the server's lifetime counters: by the toolkit client from its own requests
(completion_tokens / spec_verify_ct, bench_client.requests_accept_length), by bench_serving from the
server's counters, which the role zeroes before each bench_serving run (bench_client
--reset-accept-counters).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from ..build.closure_lock import normalize_name, wheel_name_version
from ..errors import ToolkitError
from . import evidence as server_evidence
from .answer_checks import Generation, compare_greedy
from .grid import grid_lines, grid_section, report_cell
from .reference import Reference, read_references, reference_lines

GATES = ("warn", "fail", "off")
TOOLS = ("toolkit-client", "bench_serving")


class BenchError(ToolkitError):
    """Benchmark input that cannot be used; the message names what was expected and what was found."""


# ------------------------------------------------------------------ statistics


def percentile(values: Sequence[float], pct: float) -> Optional[float]:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _stats_ms(values_s: Sequence[float]) -> dict[str, Optional[float]]:
    if not values_s:
        return {"mean": None, "median": None, "p99": None}
    ms = [v * 1000.0 for v in values_s]
    return {"mean": round(sum(ms) / len(ms), 3), "median": round(percentile(ms, 50) or 0.0, 3), "p99": round(percentile(ms, 99) or 0.0, 3)}


# ------------------------------------------------------------------ runs


def validate_run(run: Mapping[str, Any], source: str = "run") -> None:
    """Refuse a run record that is not shaped as above (a truncated or foreign file)."""
    if not isinstance(run, Mapping):
        raise BenchError(f"{source}: expected a JSON object, found {type(run).__name__}")
    missing = [k for k in ("tool", "profile", "concurrency", "requests") if k not in run]
    if missing:
        raise BenchError(f"{source}: missing {', '.join(missing)} (found keys: {', '.join(sorted(run)) or 'none'})")
    if run["tool"] not in TOOLS:
        raise BenchError(f"{source}: tool must be one of {', '.join(TOOLS)}, found {run['tool']!r}")
    if not isinstance(run["requests"], list):
        raise BenchError(f"{source}: requests must be a list, found {type(run['requests']).__name__}")


def summarize(run: Mapping[str, Any]) -> dict[str, Any]:
    """Figures of one run. ``ok`` is true only when every request completed; an empty or failed run
    keeps ``ok`` false and says why in ``problem`` (its throughput figures are then None)."""
    validate_run(run)
    requests = run["requests"]
    done = [r for r in requests if r.get("ok")]
    errors = sorted({str(r.get("error") or "failed").strip().splitlines()[-1][:200] for r in requests if not r.get("ok")})
    duration = float(run.get("duration_s") or 0.0)
    out_tokens = sum(int(r.get("output_tokens") or 0) for r in done)
    problem = ""
    if run.get("error"):
        problem = f"the run failed: {str(run['error'])[:300]}"
    elif not requests:
        problem = "no requests were run (empty prompt set or num_prompts 0)"
    elif not done:
        problem = f"all {len(requests)} requests failed: {'; '.join(errors[:3])}"
    elif len(done) < len(requests):
        problem = f"{len(requests) - len(done)} of {len(requests)} requests failed: {'; '.join(errors[:3])}"
    elif duration <= 0:
        problem = f"duration_s must be positive, found {run.get('duration_s')!r}"
    measured = bool(done) and duration > 0
    prompt_lengths = [int(r["prompt_tokens"]) for r in done if isinstance(r.get("prompt_tokens"), int)]
    accept = run.get("accept_length")
    accept = round(float(accept), 3) if isinstance(accept, (int, float)) and not isinstance(accept, bool) and accept > 0 else None
    return {
        "ok": not problem,
        "problem": problem,
        "tool": run["tool"],
        "profile": run["profile"],
        "concurrency": int(run["concurrency"]),
        "output_len": run.get("output_len"),
        "requests": len(requests),
        "completed": len(done),
        "failed": len(requests) - len(done),
        "duration_s": round(duration, 3),
        "output_tokens": out_tokens,
        "output_tok_s": round(out_tokens / duration, 2) if measured else None,
        "request_per_s": round(len(done) / duration, 3) if measured else None,
        "ttft_ms": _stats_ms([float(r["ttft_s"]) for r in done if r.get("ttft_s") is not None]),
        "itl_ms": _stats_ms([float(x) for r in done for x in (r.get("itl_s") or [])]),
        "latency_ms": _stats_ms([float(r["latency_s"]) for r in done if r.get("latency_s") is not None]),
        "accept_length": accept,
        # the prompts' mean length as the server counted it (toolkit client; None where the responses do not say)
        "prompt_tokens": round(sum(prompt_lengths) / len(prompt_lengths)) if prompt_lengths else None,
        # How it was measured (also when it could not be), and why there is no number.
        "accept_source": str(run.get("accept_source") or "") or None,
        "accept_note": "" if accept is not None else str(run.get("accept_note") or "") or "no accept length recorded",
        "errors": errors[:5],
    }


# bench_serving's accept length is the server's internal_states[0].avg_spec_accept_length, read at
# the end of its run: cumulative since the counters were last zeroed, which the role does right
# before each bench_serving run. bench_serving's own warm-up request runs after that and is counted.
ACCEPT_SOURCE_BENCH_SERVING = "server counters, reset before the run (bench_serving's warm-up request included)"


def from_bench_serving(record: Mapping[str, Any], profile: str, output_len: int) -> dict[str, Any]:
    """A run from one line of SGLang bench_serving's --output-file (written with --output-details).
    The accept length is the server's figure bench_serving read at the end (ACCEPT_SOURCE_BENCH_SERVING);
    without one, ``accept_note`` says why, using the server_info bench_serving recorded with it."""
    needed = ("duration", "ttfts", "itls", "output_lens", "errors")
    missing = [k for k in needed if k not in record]
    if missing:
        raise BenchError(f"bench_serving output: missing {', '.join(missing)}; it must be written with --output-details")
    requests = []
    for ttft, itl, out_len, error in zip(record["ttfts"], record["itls"], record["output_lens"], record["errors"]):
        ok = not error
        requests.append(
            {
                "ok": ok,
                "ttft_s": ttft if ok else None,
                "itl_s": list(itl or []) if ok else [],
                "output_tokens": int(out_len or 0) if ok else 0,
                "error": error or "",
            }
        )
    accept = record.get("accept_length")
    accept = float(accept) if isinstance(accept, (int, float)) and not isinstance(accept, bool) and accept > 0 else None
    info = record.get("server_info") if isinstance(record.get("server_info"), Mapping) else {}
    if isinstance(info.get("decode"), list) and info["decode"] and isinstance(info["decode"][0], Mapping):
        info = info["decode"][0]  # disaggregated: its decode side, as bench_serving reads it
    note = ""
    if accept is None and "speculative_algorithm" in info and not info["speculative_algorithm"]:
        note = "no speculation: the server runs without speculative decoding (server_info speculative_algorithm is null)"
    elif accept is None:
        note = "run too short to measure: the server folds its counters every 40 decode steps" + (
            "" if "speculative_algorithm" in info else " (or it runs without speculation: bench_serving recorded no server_info)"
        )
    return {
        "tool": "bench_serving",
        "profile": profile,
        "concurrency": int(record.get("max_concurrency") or 1),
        "output_len": output_len,
        "duration_s": float(record["duration"]),
        "requests": requests,
        "accept_length": accept,
        "accept_source": ACCEPT_SOURCE_BENCH_SERVING,
        "accept_note": note,
        "error": "",
    }


def load_run(path: str | os.PathLike[str], profile: str, output_len: int) -> dict[str, Any]:
    """Read a run file written by the toolkit client (JSON) or bench_serving (JSONL, last line)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise BenchError(f"benchmark result {p}: {exc.strerror or exc}") from exc
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise BenchError(f"benchmark result {p} is empty")
    try:
        data = json.loads(text) if not p.name.endswith(".jsonl") else json.loads(lines[-1])
    except ValueError as exc:
        raise BenchError(f"benchmark result {p} is not JSON: {exc}") from exc
    if p.name.endswith(".jsonl"):
        return from_bench_serving(data, profile, output_len)
    validate_run(data, str(p))
    return data


# ------------------------------------------------------------------ verdict and gate


def verdict(
    figures: Mapping[str, Mapping[str, Mapping[str, Any]]],
    baseline: str,
    candidate: str,
    gate: str = "warn",
    threshold: float = 1.0,
) -> dict[str, Any]:
    """Compare candidate (the speculative profile) with baseline on output tok/s at concurrency 1.

    ``figures`` is {profile: {"c1": summary, "batch": summary}}. The gate trips when the candidate
    is slower than baseline x threshold: status ``warn`` or ``fail`` (by ``gate``), else ``pass``;
    ``off`` never trips; ``not-compared`` when either profile was not measured cleanly."""
    if gate not in GATES:
        raise BenchError(f"sglang_benchmark_gate must be one of {', '.join(GATES)}, found {gate!r}")
    if not isinstance(threshold, (int, float)) or threshold <= 0:
        raise BenchError(f"sglang_benchmark_gate_threshold must be a number > 0, found {threshold!r}")
    out: dict[str, Any] = {
        "baseline": baseline,
        "candidate": candidate,
        "metric": "output tok/s at concurrency 1",
        "gate": gate,
        "threshold": threshold,
    }
    base, cand = figures.get(baseline, {}).get("c1"), figures.get(candidate, {}).get("c1")
    absent = [name for name, fig in ((baseline, base), (candidate, cand)) if not fig or not fig.get("ok")]
    if absent:
        unmeasured = [name for name in absent if name not in figures]
        failed = [name for name in absent if name in figures]
        reasons = ([f"{', '.join(unmeasured)} not measured"] if unmeasured else []) + (
            [f"no clean concurrency-1 figures for {', '.join(failed)}"] if failed else []
        )
        hint = f" (measure both with sglang_benchmark_profiles: [{baseline}, {candidate}])" if unmeasured else ""
        out.update(status="not-compared", faster=None, ratio=None, message=f"{'; '.join(reasons)}: nothing compared{hint}")
        return out
    if base is None or cand is None:  # ruled out above: an unmeasured profile is "not-compared"
        raise ValueError(f"compare: {baseline} or {candidate} was not measured")
    ratio = float(cand["output_tok_s"]) / float(base["output_tok_s"])
    faster = candidate if ratio >= 1 else baseline
    pct = abs(ratio - 1) * 100
    batch_note = ""
    bb, cb = figures.get(baseline, {}).get("batch"), figures.get(candidate, {}).get("batch")
    if bb and cb and bb.get("ok") and cb.get("ok"):
        out["batch_ratio"] = round(float(cb["output_tok_s"]) / float(bb["output_tok_s"]), 4)
        batch_note = f"; at concurrency {cb['concurrency']} {candidate}/{baseline} = {out['batch_ratio']:.2f}x"
    message = (
        f"{faster} is faster: {candidate} {cand['output_tok_s']:.1f} tok/s vs {baseline} {base['output_tok_s']:.1f} tok/s "
        f"at concurrency 1 ({ratio:.2f}x, {pct:.1f}% {'faster' if ratio >= 1 else 'slower'}){batch_note}"
    )
    tripped = ratio < threshold
    status = "off" if gate == "off" else (gate if tripped else "pass")
    if tripped and gate != "off":
        message += f"; gate {gate}: {candidate} is below {baseline} x {threshold:g}"
    out.update(status=status, faster=faster, ratio=round(ratio, 4), percent=round((ratio - 1) * 100, 2), message=message)
    return out


# ------------------------------------------------------------------ report


def history_from_record(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Benchmark points over the releases of a host, oldest first, from releases.json entries."""
    points = []
    for release_id in record.get("order", []):
        bench = record.get("releases", {}).get(release_id, {}).get("benchmark") or {}
        for profile, fig in sorted((bench.get("profiles") or {}).items()):
            points.append(
                {
                    "release": release_id,
                    "profile": profile,
                    "c1": fig.get("c1"),
                    "batch": fig.get("batch"),
                    "accept_length": fig.get("accept_length"),
                    "at": bench.get("at"),
                }
            )
    return points


def record_entry(figures: Mapping[str, Mapping[str, Mapping[str, Any]]], verdict_: Mapping[str, Any]) -> dict[str, Any]:
    """What releases.json keeps per release (survives pruning, feeds the chart)."""
    return {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "profiles": {
            p: {
                "c1": (f.get("c1") or {}).get("output_tok_s"),
                "batch": (f.get("batch") or {}).get("output_tok_s"),
                "accept_length": (f.get("c1") or {}).get("accept_length"),
            }
            for p, f in figures.items()
        },
        "verdict": verdict_.get("status"),
    }


def build_report(
    host: str,
    manifest: Mapping[str, Any],
    figures: Mapping[str, Mapping[str, Mapping[str, Any]]],
    verdict_: Mapping[str, Any],
    configured_profile: str,
    history: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any],
    evidence: Optional[Mapping[str, Mapping[str, Any]]] = None,
    router: Optional[Mapping[str, Any]] = None,
    reference: Sequence[Reference] = (),
    grid: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """report.json: what runs (versions and hashes, patches, audit, flags, health, optimisations
    with what was seen of them) and how fast, for one release on one host. ``evidence`` is
    {profile: read_evidence(...)}: what the server showed while that profile was measured.
    ``router``: behind a router, the worker's leave and drain in this deploy (router_summary). ``reference``:
    others' published figures for this hardware (reference.read_references), shown beside the host's own. ``grid``:
    the benchmark grid's section (grid.grid_section), or None when no grid was measured."""
    service = manifest.get("service") or {}
    findings = service.get("runtime_findings") or []
    patches = manifest.get("patches") if isinstance(manifest.get("patches"), Mapping) else {}
    sglang = manifest.get("sglang") or {}
    cuda = manifest.get("cuda") or {}
    seen = (evidence or {}).get(configured_profile) or {}
    return {
        "schema": 1,
        "host": host,
        "release": manifest.get("id"),
        "state": manifest.get("state"),
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "release_key": manifest.get("key"),
        "versions": {
            "sglang": sglang.get("version"),
            "cuda": cuda.get("cuda_version"),
            "nvcc": cuda.get("nvcc_build"),
            "arch": cuda.get("arch"),
            "artifacts": artifact_versions(manifest.get("artifacts") or {}),
        },
        "artifacts": {
            name: {
                "package": art.get("package"),
                "key": art.get("key"),
                "made": artifact_made(art),
                "wheels": [
                    {"wheel": w.get("wheel"), "sha256": w.get("sha256"), "witness": w.get("witness")} for w in art.get("wheels") or []
                ],
            }
            for name, art in sorted((manifest.get("artifacts") or {}).items())
            if isinstance(art, Mapping)
        },
        "patches": {"state": patches.get("state", "off" if not patches else None), "patches": dict(patches.get("patches") or {})},
        "audit": dict(patches.get("audit") or {}),
        "service": {
            "configured_profile": configured_profile,
            "profile": service.get("profile"),
            "argv": service.get("argv") or [],
            "flag_check": service.get("flag_check"),
            "flag_warnings": service.get("flag_warnings") or [],
            "start_gate": dict(service.get("start_gate") or {}),
            "env_keys": service.get("env_keys") or [],
            "security": service.get("security"),
            "health": service.get("health") or {},
        },
        "optimisations": effective_optimisations(
            service.get("argv") or [],
            findings,
            service.get("flag_warnings") or [],
            seen.get("server_info"),
            seen.get("log") or [],
            sglang.get("version"),
        ),
        "optimisations_seen": {
            "profile": configured_profile,
            "server_info": seen.get("server_info") is not None,
            "log_lines": len(seen.get("log") or []),
            "error": seen.get("error") or ("" if seen else f"no evidence recorded for profile {configured_profile}"),
        },
        "benchmark": {
            "settings": dict(settings),
            "profiles": {p: dict(f) for p, f in figures.items()},
            "verdict": dict(verdict_),
            "grid": dict(grid) if grid else None,
        },
        "canary": canary_summary(manifest.get("canary")),
        "fabric": fabric_summary(manifest.get("fabric")),
        "router": router_summary(router),
        "history": [dict(h) for h in history],
        "reference": [r.to_dict() for r in reference],
    }


def artifact_versions(artifacts: Mapping[str, Any]) -> dict[str, str]:
    """artifact name -> the version of its own wheel (torch 2.9.1+cu130, flashinfer-python 0.6.3, ...), from the
    wheel file names the release's manifest records; an artifact whose package has no wheel there is left out."""
    out: dict[str, str] = {}
    for name, art in sorted(artifacts.items()):
        if not isinstance(art, Mapping):
            continue
        package = normalize_name(str(art.get("package") or name))
        for wheel in art.get("wheels") or []:
            try:
                found, version = wheel_name_version(str(wheel.get("wheel") or ""))
            except ToolkitError:
                continue
            if found == package:
                out[name] = version
                break
    return out


def artifact_made(record: Mapping[str, Any]) -> str:
    """How the build pipeline made an artifact, from its record: the prebuilt wheel it took and why (the package
    index's own, or a vetted wheelhouse wheel), a source build (and the prebuilt wheel it refused), or a download."""
    origin = record.get("origin")
    seconds = record.get("build_seconds")
    took = f" in {seconds} s" if isinstance(seconds, (int, float)) else ""
    if origin == "prebuilt":
        return f"prebuilt: {record.get('prebuilt_origin') or 'a prebuilt wheel'}, verified on the host{took}"
    if origin == "built":
        refused = f"; its prebuilt wheel was refused: {record['prebuilt_rejected']}" if record.get("prebuilt_rejected") else ""
        return f"built from source on the host{took}{refused}"
    if origin == "downloaded":
        return f"downloaded from the package index{took}"
    return "not recorded"


def router_summary(router: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """The worker's place in its router for the report: {} without a router, else its router's
    address, the worker's, whether it left in this deploy, the healthy workers the router listed before,
    and the drain (seconds, requests in flight when it left, the endpoint read)."""
    if not router or not router.get("url"):
        return {}
    drain = router.get("drain") or {}
    history = drain.get("history") or []
    return {
        "url": str(router["url"]),
        "worker_url": str(router.get("worker_url") or ""),
        "left": bool(router.get("left")),
        "healthy_before": router.get("healthy_before"),
        "drained_s": drain.get("elapsed_s"),
        "in_flight_at_leave": history[0][1] if history and len(history[0]) > 1 else None,
        "load_source": (drain.get("last") or {}).get("source"),
    }


def router_lines(router: Mapping[str, Any]) -> list[str]:
    """The report's "Router" section (none without a router)."""
    if not router:
        return []
    lines = ["", "## Router", ""]
    if not router.get("left"):
        lines.append(f"- worker {_md(router['worker_url'])} behind {_md(router['url'])}: not taken out in this deploy")
        return lines
    lines.append(
        f"- worker {_md(router['worker_url'])} left {_md(router['url'])} before the restart "
        f"({_fmt(router.get('healthy_before'), 0)} healthy workers listed then), drained in {_fmt(router.get('drained_s'))} s "
        f"({_fmt(router.get('in_flight_at_leave'), 0)} requests in flight when it left, read from {_md(router.get('load_source') or '-')})"
    )
    lines.append("- the benchmark ran with the worker out of the router; it joins again after the benchmark, once healthy")
    return lines


CANARY_ACCEPT_NOTE = "meaningless on random weights (the tiny draft guesses at chance); never gated on"


def canary_summary(record: Any) -> dict[str, Any]:
    """The start canary as the release's manifest recorded it (role sglang_canary's outcome), for the
    report: whether it ran, where, how it ended and how long it took, the backends and optimisations
    it showed (server_evidence's judge), the tiny models' differences; the accept length kept but
    marked meaningless. A release with no record says so."""
    if not isinstance(record, Mapping):
        return {
            "ran": False,
            "mode": "not recorded",
            "reason": "no start canary recorded for this release (made before the canary existed)",
        }
    evidence = record.get("evidence") if isinstance(record.get("evidence"), Mapping) else {}
    backends = evidence.get("backends") if isinstance(evidence.get("backends"), Mapping) else {}
    models = record.get("models") if isinstance(record.get("models"), Mapping) else {}
    return {
        "ran": bool(record.get("ran")),
        "ok": record.get("ok"),
        "mode": record.get("mode") or "-",
        "reason": record.get("reason") or "",
        "phase": record.get("phase") or "",
        "message": record.get("message") or "",
        "seconds": record.get("seconds"),
        "healthy_at": record.get("healthy_at"),
        "mem_fraction": (record.get("placement") or {}).get("mem_fraction") if isinstance(record.get("placement"), Mapping) else None,
        "backends_source": backends.get("source") or "",
        "backends": dict(backends.get("values") or {}),
        "optimisations": [dict(o) for o in evidence.get("optimisations") or [] if isinstance(o, Mapping)],
        "accept_length": record.get("accept_length"),
        "accept_note": CANARY_ACCEPT_NOTE,
        "models": {"target": models.get("target") or "", "draft": models.get("draft") or "", "key": models.get("key") or ""},
        "differences": [str(d) for d in models.get("differences") or []],
        "log": record.get("log") or "",
        "graphs": record.get("graphs") or "",
    }


def fabric_summary(record: Any) -> dict[str, Any]:
    """The fabric check as the release's manifest recorded it (role sglang_fabric's outcome): status, ranks and
    backend, the figures, what they fall short of, the NCCL environment, the candidates measured and the one kept,
    and the host facts beside them (so two reports say why their figures differ). A release with none says so."""
    if not isinstance(record, Mapping):
        return {"status": "not recorded", "message": "no fabric check recorded for this release (made before the check existed)"}
    keep = ("status", "message", "world_size", "planned_gpus", "backend", "seconds", "large_busbw_gbs", "small_latency_us", "reused")
    summary: dict[str, Any] = {k: record.get(k) for k in keep}
    summary["env"] = dict(record.get("env") or {})
    summary["shortfalls"] = [str(s) for s in record.get("shortfalls") or []]
    summary["explained_by"] = [str(s) for s in record.get("explained_by") or []]
    summary["thresholds"] = dict(record.get("thresholds") or {})
    summary["candidates"] = [dict(c) for c in record.get("candidates") or [] if isinstance(c, Mapping)]
    summary["chosen"] = dict(record.get("chosen") or {})
    summary["host"] = dict(record.get("host") or {})
    return summary


def _fact_text(value: Any) -> str:
    """A host fact as a report shows it: per-GPU mappings as `gpu=value` pairs, lists joined."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "none"
    return str(value)


def fabric_lines(fabric: Mapping[str, Any]) -> list[str]:
    """The report's "Fabric" section: the all-reduce figures before the load, and the host facts beside them."""
    lines = ["", "## Fabric (all-reduce before the load)", ""]
    status = fabric.get("status") or "-"
    lines.append(f"- **{_md(status)}**: {_md(fabric.get('message') or '-')}{' (recorded before, reused)' if fabric.get('reused') else ''}")
    if fabric.get("world_size"):
        stand_in = "" if fabric.get("world_size") == fabric.get("planned_gpus") else f" (the plan uses {fabric.get('planned_gpus')})"
        lines.append(
            f"- {fabric['world_size']} ranks{stand_in}, backend {_md(fabric.get('backend') or '-')}: bus bandwidth "
            f"{_fmt(fabric.get('large_busbw_gbs'))} GB/s, small all-reduce {_fmt(fabric.get('small_latency_us'))} us, "
            f"in {_fmt(fabric.get('seconds'))} s"
        )
    env = fabric.get("env") or {}
    lines.append(f"- NCCL environment: {', '.join(f'{k}={_md(v)}' for k, v in env.items()) or 'NCCL defaults'}")
    limits = fabric.get("thresholds") or {}
    if limits:
        lines.append(
            f"- thresholds for {limits.get('gpus')} GPUs: at least {limits.get('min_busbw_gbs')} GB/s, at most "
            f"{limits.get('max_small_latency_us')} us ({_md(limits.get('source') or '-')})"
        )
    lines += [f"- short: {_md(s)}" for s in fabric.get("shortfalls") or []]
    lines += [f"- explained by: {_md(s)}" for s in fabric.get("explained_by") or []]
    for cand in fabric.get("candidates") or []:
        env_text = ", ".join(f"{k}={v}" for k, v in (cand.get("env") or {}).items())
        lines.append(
            f"- candidate {_md(cand.get('name'))} ({_md(env_text)}): {_md(cand.get('status'))}, "
            f"{_fmt(cand.get('large_busbw_gbs'))} GB/s, {_fmt(cand.get('small_latency_us'))} us"
        )
    if fabric.get("chosen"):
        lines.append(f"- kept in the release's fabric.env: **{_md(fabric['chosen'].get('name'))}**")
    host = fabric.get("host") or {}
    if host:
        lines.append("- host facts beside the figures:")
        lines += [f"  - {k}: {_md(_fact_text(v))}" for k, v in host.items()]
    return lines


def canary_lines(canary: Mapping[str, Any]) -> list[str]:
    """The report's "Start canary" section."""
    lines = ["", "## Start canary", ""]
    if not canary.get("ran"):
        lines.append(f"- **skipped** ({_md(canary.get('mode') or '-')}): {_md(canary.get('reason') or '-')}")
        return lines
    outcome = "served" if canary.get("ok") else f"FAILED in phase {_md(canary.get('phase') or '-')}"
    lines.append(
        f"- **{outcome}** {canary.get('mode')} the serving server, in {_fmt(canary.get('seconds'))} s "
        f"(healthy after {_fmt(canary.get('healthy_at'))} s), --mem-fraction-static {_fmt(canary.get('mem_fraction'), 2)}; "
        f"tiny {_md(canary['models'].get('target') or '-')} target, {_md(canary['models'].get('draft') or 'no')} draft"
    )
    if canary.get("message"):
        lines.append(f"- {_md(canary['message'])}")
    values = canary.get("backends") or {}
    shown = ", ".join(f"{k} {_md(v)}" for k, v in values.items() if v not in (None, "")) or "none shown"
    lines.append(f"- backends (from {_md(canary.get('backends_source') or '-')}): {shown}")
    for opt in canary.get("optimisations") or []:
        why = "; ".join(str(e) for e in opt.get("evidence") or []) or opt.get("note") or ""
        lines.append(f"- {_md(opt.get('name'))}: **{_md(opt.get('verdict'))}**{': ' + _md(why) if why else ''}")
    if canary.get("graphs"):
        lines.append(f"- {_md(canary['graphs'])}")
    accept = canary.get("accept_length")
    lines.append(f"- accept length {_fmt(accept, 2) if accept is not None else '-'}: {_md(canary['accept_note'])}")
    if canary.get("differences"):
        lines.append("- what the tiny models do not exercise of the real ones:")
        lines += [f"  - {_md(d)}" for d in canary["differences"]]
    return lines


# The optimisations, their evidence (SGLang's lines and /server_info fields per version) and the
# verdicts live in server_evidence; the report keeps its keys (``state`` = ``verdict``).
STATES = server_evidence.VERDICTS


def effective_optimisations(
    argv: Sequence[str],
    findings: Sequence[Mapping[str, Any]] = (),
    flag_warnings: Sequence[str] = (),
    server_info: Optional[Mapping[str, Any]] = None,
    log_lines: Sequence[str] = (),
    sglang_version: Optional[str] = None,
) -> list[dict[str, Any]]:
    """Each optimisation the flags ask for (and CUDA graphs, on by default), judged by
    server_evidence.judge from what the server showed of that SGLang version: ``state`` (= ``verdict``)
    is ``yes`` only on positive evidence (a server log line, a /server_info field), ``no`` on negative
    evidence (a line or field that shows it off, the flag check calling the flag a no-op here, a
    start-up finding of sglang_service), else ``unknown`` with a note saying what was missing;
    negative evidence wins. ``findings`` are the start-up journal's (sglang_health): their journal
    lines are judged with the rest, a finding naming an optimisation counts as negative evidence."""
    named = [f for f in findings if isinstance(f, Mapping) and f.get("name") in server_evidence.OPTIMISATIONS]
    lines = [str(f["line"]) for f in findings if isinstance(f, Mapping) and f.get("line") and f not in named] + [str(x) for x in log_lines]
    out = []
    for result in server_evidence.judge(argv, lines, server_info, sglang_version, flag_warnings):
        at_start = [f"journal at start: {f.get('meaning')}" for f in named if f.get("name") == result["name"]]
        if at_start and result["verdict"] != "no":
            result = {**result, "verdict": "no", "evidence": at_start + result["evidence"], "note": ""}
        out.append({**result, "state": result["verdict"]})
    return out


def read_evidence(path: str | os.PathLike[str]) -> dict[str, Any]:
    """An evidence snapshot written by bench_client --evidence: {"server_info": ..., "log": [...]}."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BenchError(f"evidence {p}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise BenchError(f"evidence {p} is not JSON: {exc}") from exc
    if not isinstance(data, Mapping) or not isinstance(data.get("log", []), list):
        raise BenchError(f"evidence {p}: expected {{server_info, log: [...]}}, found {str(data)[:100]}")
    return {"server_info": data.get("server_info"), "log": [str(x) for x in data.get("log") or []], "error": data.get("error") or ""}


def accept_text(figure: Mapping[str, Any]) -> str:
    """A run's accept length with the method that measured it, or why there is none."""
    value, source = figure.get("accept_length"), figure.get("accept_source")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.2f} ({source})" if source else f"{value:.2f}"
    return f"none: {figure.get('accept_note') or 'no accept length recorded'}"


def figure_lines(figures: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """One line per run, for the play's output."""
    lines = []
    for profile, runs in figures.items():
        for key in ("c1", "batch"):
            f = runs.get(key)
            if not f:
                continue
            if not f["ok"]:
                lines.append(f"{profile} concurrency {f['concurrency']}: {f['problem']}")
                continue
            accept = f", accept length {accept_text(f)}"
            lines.append(
                f"{profile} concurrency {f['concurrency']}: {f['output_tok_s']:.1f} tok/s, {f['request_per_s']:.2f} req/s, "
                f"TTFT {_fmt(f['ttft_ms']['mean'])} ms (p99 {_fmt(f['ttft_ms']['p99'])}), ITL {_fmt(f['itl_ms']['mean'], 2)} ms{accept}"
            )
    return lines


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _md(text: Any) -> str:
    """A value in report.md, plain text that renders as written: `<` and `>` (a log line's markup, never HTML) and
    `|` (a table cell) backslash-escaped as CommonMark allows; no HTML entities, which plain-text readers show raw."""
    return re.sub(r"([<>|])", r"\\\1", str(text))


def render_markdown(report: Mapping[str, Any], chart_name: str = "chart.png") -> str:
    bench = report["benchmark"]
    verdict_ = bench["verdict"]
    lines = [
        f"# SGLang release {report['release']} on {report['host']}",
        "",
        f"Generated {report['generated']}; release state **{report['state']}**; "
        f"configured profile **{report['service']['configured_profile']}**.",
        "",
        "## Verdict",
        "",
        f"**{verdict_.get('status', '-')}**: {_md(verdict_.get('message', ''))}",
        "",
        "## Benchmark",
        "",
        f"Prompt set {_md(bench['settings'].get('prompts', '-'))}, {bench['settings'].get('num_prompts', '-')} prompts, "
        f"{bench['settings'].get('output_len', '-')} output tokens each, streamed; client: {_md(bench['settings'].get('client', '-'))}.",
        "",
        "| profile | concurrency | output tok/s | requests/s | TTFT mean / p99 ms | ITL mean / p99 ms | accept length | completed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for profile, runs in bench["profiles"].items():
        for key in ("c1", "batch"):
            f = runs.get(key)
            if not f:
                continue
            lines.append(
                f"| {_md(profile)} | {f['concurrency']} | {_fmt(f['output_tok_s'])} | {_fmt(f['request_per_s'], 3)} | "
                f"{_fmt(f['ttft_ms']['mean'])} / {_fmt(f['ttft_ms']['p99'])} | "
                f"{_fmt(f['itl_ms']['mean'], 2)} / {_fmt(f['itl_ms']['p99'], 2)} | "
                f"{_md(accept_text(f))} | {f['completed']}/{f['requests']}{'' if f['ok'] else ' (' + _md(f['problem']) + ')'} |"
            )
    lines += [
        "",
        "Accept length: measured per run, never from the server's lifetime counters; each figure names its method "
        "(the toolkit client's requests, or the server's counters zeroed right before a bench_serving run).",
        "",
        f"![tok/s per release and profile, TTFT, ITL, accept length (drawn on the controller)]({chart_name})",
    ]
    lines += grid_lines(bench.get("grid") or {})
    lines += reference_lines(report.get("reference") or [])
    lines += ["", "## What runs", ""]
    versions = report.get("versions") or {}
    lines.append(
        f"- SGLang {_md(versions.get('sglang') or '-')}, CUDA {_md(versions.get('cuda') or '-')} "
        f"(nvcc {_md(versions.get('nvcc') or '-')}), "
        f"arch {_md(versions.get('arch') or '-')}; release key `{_md(str(report.get('release_key') or '-')[:16])}`"
    )
    if versions.get("artifacts"):
        lines.append("- versions: " + ", ".join(f"{_md(name)} {_md(v)}" for name, v in versions["artifacts"].items()))
    for name, art in (report.get("artifacts") or {}).items():
        wheels = ", ".join(f"{_md(w['wheel'])} (sha256 {_md(str(w['sha256'])[:12])})" for w in art["wheels"]) or "no wheels"
        lines.append(f"- {_md(name)} (key `{_md(str(art['key'])[:12])}`): {wheels}; {_md(art.get('made') or 'not recorded')}")
    patches = report.get("patches") or {}
    lines += ["", f"## Patches ({_md(patches.get('state') or '-')}) and audit", ""]
    for pid, status in sorted((patches.get("patches") or {}).items()):
        lines.append(f"- {_md(pid)}: {_md(status)}")
    audit = report.get("audit") or {}
    if audit:
        missing = audit.get("missing_required") or []
        lines.append(
            f"- audit of {_md(audit.get('model_class', '-'))} for {_md(audit.get('algorithm', '-'))}: "
            f"{'ok' if audit.get('ok') else 'MISSING ' + _md(', '.join(missing))}"
        )
    else:
        lines.append("- audit: not recorded")
    svc = report["service"]
    lines += [
        "",
        "## Service",
        "",
        f"- profile {svc['profile']}, flags checked by {_md(svc['flag_check'])}",
        f"- argv: `{_md(' '.join(svc['argv']))}`",
    ]
    lines.append(f"- health: /health {svc['health'].get('status', '-')} after {_fmt(svc['health'].get('elapsed'))} s")
    if svc.get("security"):
        lines.append(f"- hardening: {_md(svc['security'])}")
    gate = svc.get("start_gate") or {}
    lines.append(f"- start gate: {_md(gate.get('summary') or 'not recorded')}")
    for verdict in gate.get("verdicts") or []:
        if verdict.get("verdict") == "unknown":  # refused never reaches a report; warnings are flag warnings below
            lines.append(f"- start gate {_md(verdict.get('text', ''))}")
    # the rest of the gate's list, by verdict (the console shows only the counts)
    for kind in ("ok", "n/a"):
        ids = [str(v.get("id", "?")) for v in gate.get("verdicts") or [] if v.get("verdict") == kind]
        if ids:
            lines.append(f"- start gate {kind} ({len(ids)}): {_md(', '.join(ids))}")
    for warning in svc["flag_warnings"]:
        lines.append(f"- flag warning: {_md(warning)}")
    seen = report.get("optimisations_seen") or {}
    lines += [
        "",
        "## Optimisations: what the server showed",
        "",
        f"Profile {_md(seen.get('profile', '-'))}; yes only on positive evidence, no on negative evidence, else unknown "
        f"(/server_info {'recorded' if seen.get('server_info') else 'not recorded'}, "
        f"{seen.get('log_lines', 0)} relevant server log lines{'; ' + _md(seen['error']) if seen.get('error') else ''}).",
        "",
    ]
    for opt in report["optimisations"] or []:
        why = "; ".join(opt["evidence"]) or opt["note"]
        asked = f"{opt['flag']}{' ' + _md(opt['value']) if opt['value'] else ''}" if opt["flag"] else "on by default"
        lines.append(f"- {opt['name']} ({asked}): **{opt['state']}**: {_md(why)}")
    if not report["optimisations"]:
        lines.append("- none requested by the flags")
    lines += fabric_lines(report.get("fabric") or fabric_summary(None))
    lines += canary_lines(report.get("canary") or canary_summary(None))
    lines += router_lines(report.get("router") or {})
    return "\n".join(lines) + "\n"


def write_report_dir(
    directory: str | os.PathLike[str], report: Mapping[str, Any], markdown: str, chart: Optional[bytes] = None
) -> list[str]:
    """Write report.json, report.md (and chart.png when given) together: into a temporary sibling,
    then swapped in, so a reader never sees a half-written report."""
    target = Path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        (tmp / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (tmp / "report.md").write_text(markdown, encoding="utf-8")
        if chart is not None:
            (tmp / "chart.png").write_bytes(chart)
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        os.chmod(tmp, 0o755)
        old = target.with_name(f".{target.name}.old")
        if old.exists():
            shutil.rmtree(old)
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [str(target / n) for n in ("report.json", "report.md", *(("chart.png",) if chart is not None else ()))]


# ------------------------------------------------------------------ the module's work


def grid_from_cells(
    cells: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
    figures: dict[str, dict[str, dict[str, Any]]],
    baseline: str,
    candidate: str,
    margin: float,
    workload: Any,
    batch_concurrency: Any,
) -> Optional[dict[str, Any]]:
    """The grid section of the grid's cells (None without any), and, for a profile measured only in the grid, its
    concurrency-1 and batch figures (which the verdict, the gate and the history read) taken from the grid's
    shortest context: concurrency 1, and the batch concurrency of the settings (else the grid's largest)."""
    if not cells:
        return None
    for profile in {cell["profile"] for cell, _ in cells}:
        own = [(cell, summary) for cell, summary in cells if cell["profile"] == profile]
        shortest = min(cell["context_tokens"] for cell, _ in own)
        row = {cell["concurrency"]: summary for cell, summary in own if cell["context_tokens"] == shortest}
        slots = figures.setdefault(profile, {})
        if 1 in row:
            slots.setdefault("c1", row[1])
        batch = int(batch_concurrency) if str(batch_concurrency or "").isdigit() and int(batch_concurrency) in row else max(row)
        if batch != 1:
            slots.setdefault("batch", row[batch])
    return grid_section([cell for cell, _ in cells], baseline, candidate, margin, workload)


def with_agreement(judged: dict[str, Any], greedy: Mapping[str, Any], threshold: float) -> dict[str, Any]:
    """The verdict with the greedy agreement of the candidate and the baseline (the target alone) when both recorded
    their greedy outputs (module sglang_answers' greedy check, {profile: check}): greedy speculative decoding is exact up
    to numerics, so outputs that leave the target's show a broken draft or verify path however fast it is. Below the
    threshold the verdict trips like the speed gate (warn or fail; off never trips)."""
    base, cand = greedy.get(judged["baseline"]), greedy.get(judged["candidate"])
    if not base or not cand:
        return {**judged, "agreement": None}
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 <= threshold <= 1:
        raise BenchError(f"sglang_benchmark_agreement_min must be a share from 0 to 1, found {threshold!r}")
    prompts = list((cand.get("details") or {}).get("prompts") or [])
    if prompts != list((base.get("details") or {}).get("prompts") or []):
        raise BenchError("greedy: the two profiles' greedy outputs are not of the same prompts; record both with the same release")
    outputs = {name: [Generation.from_dict(g) for g in (check.get("details") or {}).get("outputs") or []] for name, check in greedy.items()}
    labels = (judged["candidate"], f"{judged['baseline']} (the target alone)")
    agreement = compare_greedy(prompts, outputs[judged["candidate"]], outputs[judged["baseline"]], threshold, labels).to_dict()
    message = (
        f"greedy outputs: {judged['candidate']} agrees with {judged['baseline']} on {agreement['agreed']} of {agreement['prompts']} "
        f"prompts ({agreement['basis']}; at least {threshold:.0%} wanted)"
    )
    first = agreement["first_divergence"]
    if first:
        where = f"token {first['token_offset']}" if first["token_offset"] is not None else f"character {first['char_offset']}"
        message += f", first apart in prompt {first['index']} at {where}: {first['first']!r} vs {first['second']!r}"
    out = {**judged, "agreement": {**agreement, "message": message}}
    out["message"] = f"{judged['message']}; {message}"
    if not agreement["passed"] and judged["gate"] != "off":
        out["status"] = judged["gate"]
        out["message"] += f"; gate {judged['gate']}: {judged['candidate']}'s outputs leave the target's"
    return out


def report_release(
    releases: Any,
    release: str,
    host: str,
    runs: Sequence[Mapping[str, Any]],
    output_len: int,
    configured_profile: str,
    *,
    baseline: str = "baseline",
    candidate: str = "eagle3",
    gate: str = "warn",
    threshold: float = 1.0,
    evidence: Optional[Mapping[str, str]] = None,
    settings: Optional[Mapping[str, Any]] = None,
    router: Optional[Mapping[str, Any]] = None,
    report_dir: Optional[str] = None,
    reference: Any = None,
    grid_margin: float = 0.05,
    workload: Any = None,
    greedy: Optional[Mapping[str, Any]] = None,
    agreement_min: float = 0.5,
    check_mode: bool = False,
) -> dict[str, Any]:
    """What plugins/modules/sglang_report.py does on the host for ``release`` of ``releases`` (a
    release.records.Releases): summarize each run ({profile, slot: c1 or batch, path}), judge them,
    keep the figures and the verdict in the release record and its manifest, and write report.json
    and report.md (to ``report_dir``, default the release's report/), none of it in check mode.
    ``reference``: the reference-figures document (read_references checks it before anything is judged).
    Returns figures, lines, verdict, optimisations, files and report_dir. Raises BenchError (a value
    that is not a number, or not JSON, among them), ReferenceFiguresError or the record's ReleaseError."""
    references = read_references(reference, "reference")
    try:
        figures: dict[str, dict[str, dict[str, Any]]] = {}
        cells: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for item in runs:
            if item.get("slot") not in ("c1", "batch", "grid") or not item.get("profile") or not item.get("path"):
                raise BenchError(f"runs: each item needs profile, slot (c1, batch or grid) and path, found {item}")
            run = load_run(item["path"], item["profile"], output_len)
            if item["slot"] != "grid":
                figures.setdefault(item["profile"], {})[item["slot"]] = summarize(run)
                continue
            context = item.get("context_tokens")
            if not isinstance(context, int) or isinstance(context, bool) or context < 0:
                raise BenchError(f"runs: a grid item needs context_tokens, an integer >= 0, found {item}")
            summary = summarize(run)
            cells.append((report_cell(item["profile"], context, summary), summary))
        grid = grid_from_cells(cells, figures, baseline, candidate, grid_margin, workload, (settings or {}).get("batch_concurrency"))
        seen = {str(profile): read_evidence(path) for profile, path in (evidence or {}).items()}
        judged = with_agreement(verdict(figures, baseline, candidate, gate, threshold), greedy or {}, agreement_min)
        record = releases.load()
        releases.get(record, release)
        manifest = json.loads((releases.path(release) / "manifest.json").read_text(encoding="utf-8"))
        entry = record_entry(figures, judged)
        if grid:
            entry["grid"] = [{k: r[k] for k in ("concurrency", "context_tokens", "ratio")} for r in grid["ratios"]]
        record["releases"][release]["benchmark"] = entry
        report = build_report(
            host, manifest, figures, judged, configured_profile, history_from_record(record), settings or {}, seen, router, references, grid
        )
        markdown = render_markdown(report)
        directory = report_dir or str(releases.path(release) / "report")
        files = [str(Path(directory) / n) for n in ("report.json", "report.md")]
        if not check_mode:
            releases.annotate(release, "benchmark", entry)
            releases.update_manifest(
                release, {"benchmark": {"figures": figures, "verdict": judged, "settings": settings or {}, "grid": grid}}
            )
            files = write_report_dir(directory, report, markdown)
    except ValueError as exc:
        raise BenchError(str(exc)) from exc
    return dict(
        figures=figures,
        lines=figure_lines(figures)
        + ([grid["summary"], *(r["message"] for r in grid["regions"]), grid["workload"]["message"]] if grid else []),
        verdict=judged,
        grid=grid,
        optimisations=report["optimisations"],
        files=files,
        report_dir=directory,
    )
