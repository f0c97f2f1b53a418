"""The benchmark grid (issue 47, item 4): concurrency x context x profile, where EAGLE-3 pays and where it loses.

Two halves, standard library only (both run on the host through plugins/modules/sglang_bench_grid.py and
plugins/modules/sglang_report.py):

- before anything is measured, ``plan_grid`` checks the grid the operator declared (sglang_benchmark_grid),
  lays out its cells in the order they run (per profile, per context, concurrency rising) with the requests
  each sends, and estimates the time, refusing a grid whose estimate is over the bound;
- after, ``grid_section`` turns the cells' run summaries (report.summarize) into the report's ``grid``:
  the cells as the report JSON carries them, the candidate/baseline ratio per (concurrency, context), a
  verdict per context (where the candidate pays, where it is even, where it loses, by how much) and the
  profile to serve for the operator's declared workload (sglang_benchmark_workload).

A context of 0 tokens is the prompt set as it is ("short"); any other is the prompt length in tokens the
client builds (bench_client.long_prompts), each request's measured length recorded beside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional

from ..errors import ToolkitError

SHORT = 0  # context_tokens of the prompt set as it is
PAYS, EVEN, LOSES, UNMEASURED = "pays", "even", "loses", "not measured"


class GridError(ToolkitError):
    """A grid, workload or estimate input that cannot be used; the message names the variable."""


@dataclass(frozen=True)
class Cell:
    """One run of the grid: a profile at a concurrency and a context, with the requests it sends."""

    profile: str
    concurrency: int
    context_tokens: int
    requests: int
    warmup_seconds: float
    estimate_s: float

    @property
    def slot(self) -> str:
        return f"c{self.concurrency}-x{self.context_tokens}"


def _positive_ints(value: Any, name: str, minimum: int, short: bool = False) -> list[int]:
    items = value if isinstance(value, list) else None
    if not items:
        raise GridError(f"{name}: expected a non-empty list of integers >= {minimum}, found {value!r}")
    out = []
    for item in items:
        number = SHORT if short and item == "short" else item
        if not isinstance(number, int) or isinstance(number, bool) or number < minimum:
            raise GridError(f"{name}: expected integers >= {minimum}{' or short' if short else ''}, found {item!r} in {value!r}")
        out.append(number)
    if len(set(out)) != len(out):
        raise GridError(f"{name}: each value once, found {value!r}")
    return sorted(out)


def read_grid(grid: Any, name: str = "sglang_benchmark_grid") -> tuple[list[int], list[int]]:
    """(concurrencies, contexts), each sorted, from {concurrency: [...], context_tokens: [...]}."""
    if not isinstance(grid, Mapping):
        raise GridError(f"{name}: expected a mapping with concurrency and context_tokens, found {grid!r}")
    unknown = sorted(set(grid) - {"concurrency", "context_tokens"})
    if unknown:
        raise GridError(f"{name}: unknown key {', '.join(map(str, unknown))} (expected concurrency and context_tokens)")
    concurrencies = _positive_ints(grid.get("concurrency"), f"{name}.concurrency", 1)
    return concurrencies, _positive_ints(grid.get("context_tokens"), f"{name}.context_tokens", 0, short=True)


def read_workload(workload: Any, name: str = "sglang_benchmark_workload") -> Optional[tuple[int, int]]:
    """(concurrency, context tokens) the operator expects, or None when not declared ({})."""
    if workload in (None, {}):
        return None
    if not isinstance(workload, Mapping) or set(workload) != {"concurrency", "context_tokens"}:
        raise GridError(f"{name}: expected {{concurrency: N, context_tokens: N}} or {{}}, found {workload!r}")
    concurrency, context = workload["concurrency"], workload["context_tokens"]
    for key, value, minimum in (("concurrency", concurrency, 1), ("context_tokens", context, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise GridError(f"{name}.{key}: expected an integer >= {minimum}, found {value!r}")
    return concurrency, context


# What the estimate assumes unless told (sglang_benchmark_grid_assumed): per-request decode tok/s (Kimi-K2.5-NVFP4 at
# concurrency 1 on 8x RTX PRO 6000, the operators' published ~50), whole-server prompt tok/s, seconds a restart takes.
ASSUMED = {"decode_tok_s": 50.0, "prefill_tok_s": 8000.0, "restart_s": 600.0}


def read_assumed(value: Any, name: str = "sglang_benchmark_grid_assumed") -> dict[str, float]:
    """ASSUMED with the operator's values over it; GridError for an unknown key."""
    if not isinstance(value, Mapping):
        raise GridError(f"{name}: expected a mapping of {', '.join(ASSUMED)}, found {value!r}")
    unknown = sorted(set(map(str, value)) - set(ASSUMED))
    if unknown:
        raise GridError(f"{name}: unknown key {', '.join(unknown)} (expected {', '.join(ASSUMED)})")
    return {**ASSUMED, **value}


def cell_seconds(concurrency: int, context: int, requests: int, output_len: int, decode_tok_s: float, prefill_tok_s: float) -> float:
    """A rough time for one cell: its rounds of `concurrency` requests, each round the prefill of every prompt
    in it (at prefill_tok_s for the whole server) and output_len tokens per request (at decode_tok_s each)."""
    rounds = math.ceil(requests / concurrency)
    prompt = context or 100
    return rounds * (concurrency * prompt / prefill_tok_s + output_len / decode_tok_s)


def plan_grid(
    grid: Any,
    profiles: Sequence[str],
    *,
    output_len: int,
    min_requests: int,
    rounds: int,
    warmup_seconds: float,
    decode_tok_s: float,
    prefill_tok_s: float,
    restart_s: float,
    max_minutes: float,
) -> dict[str, Any]:
    """The cells in the order they run and the estimate; GridError when the grid or a number is unusable, or the
    estimate is over max_minutes (nothing is measured then). Each cell sends max(min_requests, rounds x
    concurrency) requests; the first cell of each profile is preceded by a decode warm-up of warmup_seconds;
    every profile but the first costs a restart (restart_s)."""
    concurrencies, contexts = read_grid(grid)
    if not profiles or len(set(profiles)) != len(profiles):
        raise GridError(f"sglang_benchmark_profiles: the grid needs its profiles, each once, found {list(profiles)!r}")
    numbers = {
        "sglang_benchmark_output_len": (output_len, 1),
        "sglang_benchmark_grid_min_requests": (min_requests, 1),
        "sglang_benchmark_grid_rounds": (rounds, 1),
        "sglang_benchmark_warmup_seconds": (warmup_seconds, 0),
        "sglang_benchmark_grid_assumed.decode_tok_s": (decode_tok_s, 1e-9),
        "sglang_benchmark_grid_assumed.prefill_tok_s": (prefill_tok_s, 1e-9),
        "sglang_benchmark_grid_assumed.restart_s": (restart_s, 0),
        "sglang_benchmark_grid_max_minutes": (max_minutes, 1e-9),
    }
    for name, (value, minimum) in numbers.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < minimum:
            raise GridError(f"{name}: expected a number >= {minimum:g}, found {value!r}")
    cells = []
    for profile in profiles:
        first = True
        for context in contexts:
            for concurrency in concurrencies:
                requests = max(min_requests, rounds * concurrency)
                seconds = cell_seconds(concurrency, context, requests, output_len, decode_tok_s, prefill_tok_s)
                cells.append(Cell(profile, concurrency, context, requests, warmup_seconds if first else 0.0, round(seconds, 1)))
                first = False
    total = sum(c.estimate_s + c.warmup_seconds for c in cells) + restart_s * (len(profiles) - 1)
    message = (
        f"{len(cells)} cells ({len(profiles)} profiles x {len(contexts)} contexts x {len(concurrencies)} concurrencies, "
        f"{sum(c.requests for c in cells)} requests of {output_len} output tokens): about {total / 60:.0f} min "
        f"(assumed {decode_tok_s:g} tok/s per request, {prefill_tok_s:g} prompt tok/s, {restart_s:g} s a restart; "
        f"sglang_benchmark_grid_assumed)"
    )
    if total > max_minutes * 60:
        raise GridError(
            f"the benchmark grid would take about {total / 60:.0f} min, over sglang_benchmark_grid_max_minutes ({max_minutes:g}): "
            f"{message}; make the grid smaller or raise the bound; nothing was measured"
        )
    return {"cells": [{**asdict(c), "slot": c.slot} for c in cells], "estimate_s": round(total, 1), "message": message}


# ------------------------------------------------------------------ after: the report's grid section


def report_cell(profile: str, context_tokens: int, summary: Mapping[str, Any]) -> dict[str, Any]:
    """One cell as report.json carries it (issue 47's shape), from report.summarize of its run."""
    return {
        "profile": profile,
        "concurrency": int(summary["concurrency"]),
        "context_tokens": context_tokens,
        "prompt_tokens": summary.get("prompt_tokens"),
        "output_tok_s": summary.get("output_tok_s"),
        "ttft_ms": (summary.get("ttft_ms") or {}).get("median"),
        "itl_ms": (summary.get("itl_ms") or {}).get("median"),
        "accept_length": summary.get("accept_length"),
        "ok": bool(summary.get("ok")),
        "problem": summary.get("problem") or "",
    }


def classify(ratio: Optional[float], margin: float) -> str:
    if ratio is None:
        return UNMEASURED
    return PAYS if ratio >= 1 + margin else LOSES if ratio <= 1 - margin else EVEN


def _context_name(context: int) -> str:
    return "short prompts" if context == SHORT else f"{context} tokens of context"


def _join(points: Sequence[tuple[int, float]]) -> str:
    return ", ".join(f"{c} ({r:.2f}x)" for c, r in points)


def grid_section(cells: Sequence[Mapping[str, Any]], baseline: str, candidate: str, margin: float, workload: Any = None) -> dict[str, Any]:
    """The report's grid: the cells, the ratio per point, a verdict per context and the profile for the workload.
    A ratio is candidate/baseline output tok/s where both cells measured cleanly; "pays" at or above 1 + margin,
    "loses" at or below 1 - margin, "even" between."""
    if not isinstance(margin, (int, float)) or isinstance(margin, bool) or not 0 <= margin < 1:
        raise GridError(f"sglang_benchmark_grid_margin: expected a number in [0, 1), found {margin!r}")
    declared = read_workload(workload)
    by_key = {(c["profile"], c["concurrency"], c["context_tokens"]): c for c in cells}
    points = sorted({(c["concurrency"], c["context_tokens"]) for c in cells})
    ratios = []
    for concurrency, context in points:
        base, cand = by_key.get((baseline, concurrency, context)), by_key.get((candidate, concurrency, context))
        ratio = None
        if base and cand and base["ok"] and cand["ok"] and base["output_tok_s"] and cand["output_tok_s"]:
            ratio = round(float(cand["output_tok_s"]) / float(base["output_tok_s"]), 3)
        ratios.append({"concurrency": concurrency, "context_tokens": context, "ratio": ratio, "class": classify(ratio, margin)})
    regions = []
    for context in sorted({p[1] for p in points}):
        row = [r for r in ratios if r["context_tokens"] == context]
        groups = {k: [(r["concurrency"], r["ratio"]) for r in row if r["class"] == k] for k in (PAYS, EVEN, LOSES)}
        missing = [r["concurrency"] for r in row if r["class"] == UNMEASURED]
        parts = [f"{word} at concurrency {_join(groups[k])}" for k, word in ((PAYS, "pays"), (EVEN, "even"), (LOSES, "loses")) if groups[k]]
        parts += [f"not measured at concurrency {', '.join(map(str, missing))}"] if missing else []
        regions.append(
            {
                "context_tokens": context,
                **{k: [c for c, _ in groups[k]] for k in (PAYS, EVEN, LOSES)},
                "unmeasured": missing,
                "message": f"{_context_name(context)}: {candidate} {'; '.join(parts)}",
            }
        )
    measured = [r for r in ratios if r["ratio"] is not None]
    summary = (
        f"{candidate} pays (>= {1 + margin:.2f}x) in {sum(r['class'] == PAYS for r in measured)} of {len(measured)} measured points, "
        f"loses (<= {1 - margin:.2f}x) in {sum(r['class'] == LOSES for r in measured)}"
        + (
            f"; from {min(r['ratio'] for r in measured):.2f}x to {max(r['ratio'] for r in measured):.2f}x"
            if measured
            else "; nothing compared (both profiles must be measured at the same points)"
        )
    )
    return {
        "baseline": baseline,
        "candidate": candidate,
        "margin": margin,
        "cells": [dict(c) for c in cells],
        "ratios": ratios,
        "regions": regions,
        "summary": summary,
        "workload": workload_choice(ratios, declared, baseline, candidate, margin),
    }


def _nearest_at_or_above(values: Sequence[int], wanted: int) -> int:
    above = [v for v in values if v >= wanted]
    return min(above) if above else max(values)


def workload_choice(
    ratios: Sequence[Mapping[str, Any]], declared: Optional[tuple[int, int]], baseline: str, candidate: str, margin: float
) -> dict[str, Any]:
    """The profile to serve for the declared workload: read at the measured point nearest at or above it (the
    smallest measured concurrency and context not below it, else the largest): the candidate where it pays
    there, else the baseline (speculation costs memory and a draft model for nothing when even)."""
    if declared is None:
        return {"declared": None, "profile": None, "message": "no workload declared (sglang_benchmark_workload): no profile chosen"}
    concurrency, context = declared
    measured = [r for r in ratios if r["ratio"] is not None]
    if not measured:
        return {"declared": list(declared), "profile": None, "message": "nothing compared: no profile chosen for the declared workload"}
    at_c = _nearest_at_or_above(sorted({r["concurrency"] for r in measured}), concurrency)
    at_x = _nearest_at_or_above(sorted({r["context_tokens"] for r in measured if r["concurrency"] == at_c}), context)
    point = next(r for r in measured if r["concurrency"] == at_c and r["context_tokens"] == at_x)
    profile = candidate if point["class"] == PAYS else baseline
    ratio = point["ratio"]
    why = {
        PAYS: f"{candidate} pays ({ratio:.2f}x {baseline})",
        EVEN: f"{candidate} is within {margin:.0%} of {baseline} ({ratio:.2f}x), not worth its draft",
        LOSES: f"{candidate} loses to {baseline} ({ratio:.2f}x)",
    }[point["class"]]
    return {
        "declared": [concurrency, context],
        "point": [at_c, at_x],
        "ratio": ratio,
        "profile": profile,
        "message": (
            f"serve {profile} for the declared workload (concurrency {concurrency}, {context} tokens of context): at the "
            f"measured point concurrency {at_c}, {_context_name(at_x)}, {why}"
        ),
    }


def grid_lines(grid: Mapping[str, Any]) -> list[str]:
    """The report's Markdown section: the ratio table (contexts down, concurrencies across), the verdicts, the cells."""
    if not grid or not grid.get("cells"):
        return []
    candidate, baseline = grid["candidate"], grid["baseline"]
    concurrencies = sorted({r["concurrency"] for r in grid["ratios"]})
    lines = ["", f"## Benchmark grid: {candidate} / {baseline} output tok/s", "", grid["summary"], ""]
    lines.append("| context | " + " | ".join(f"c{c}" for c in concurrencies) + " |")
    lines.append("|---|" + "---|" * len(concurrencies))
    for region in grid["regions"]:
        row = {r["concurrency"]: r for r in grid["ratios"] if r["context_tokens"] == region["context_tokens"]}
        label = "short" if region["context_tokens"] == SHORT else str(region["context_tokens"])
        lines.append(f"| {label} | " + " | ".join(_ratio_text(row.get(c)) for c in concurrencies) + " |")
    lines += ["", *[f"- {r['message']}" for r in grid["regions"]], f"- **{grid['workload']['message']}**", ""]
    lines += [f"![{candidate} / {baseline} output tok/s over the grid (drawn on the controller)](grid.png)", ""]
    lines.append("| profile | concurrency | context | prompt tokens | output tok/s | TTFT ms | ITL ms | accept length |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for c in grid["cells"]:
        values = [c["prompt_tokens"], c["output_tok_s"], c["ttft_ms"], c["itl_ms"], c["accept_length"]]
        text = [("-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)) for v in values]
        problem = f" ({c['problem']})" if c.get("problem") else ""
        lines.append(f"| {c['profile']}{problem} | {c['concurrency']} | {c['context_tokens'] or 'short'} | " + " | ".join(text) + " |")
    return lines


def _ratio_text(point: Optional[Mapping[str, Any]]) -> str:
    if not point or point["ratio"] is None:
        return "-"
    return f"{point['ratio']:.2f}x {point['class']}"
