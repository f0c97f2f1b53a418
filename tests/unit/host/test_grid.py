"""The benchmark grid (plugins/module_utils/sglang_sm120/serve/grid.py): its layout and estimate before anything is
measured, and the report's grid section after (ratios, the verdict per context, the profile for the workload)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_sm120.release.records import Releases
from sglang_sm120.serve.grid import (
    ASSUMED,
    GridError,
    grid_lines,
    grid_section,
    plan_grid,
    read_assumed,
    read_grid,
    read_workload,
)
from sglang_sm120.serve.report import report_release

PLAN = dict(
    output_len=128, min_requests=8, rounds=2, warmup_seconds=20, decode_tok_s=50, prefill_tok_s=8000, restart_s=600, max_minutes=600
)
DEFAULT_GRID = {"concurrency": [1, 8, 32, 128], "context_tokens": ["short", 8192, 32768]}


def test_the_default_grid_is_laid_out_per_profile_context_and_rising_concurrency() -> None:
    plan = plan_grid(DEFAULT_GRID, ["eagle3", "baseline"], **PLAN)
    cells = plan["cells"]
    assert len(cells) == 24
    assert [(c["profile"], c["context_tokens"], c["concurrency"]) for c in cells[:5]] == [
        ("eagle3", 0, 1),
        ("eagle3", 0, 8),
        ("eagle3", 0, 32),
        ("eagle3", 0, 128),
        ("eagle3", 8192, 1),
    ]
    # requests: max(min_requests, rounds x concurrency); the warm-up before each profile's first cell only
    assert [c["requests"] for c in cells[:4]] == [8, 16, 64, 256]
    assert [c["warmup_seconds"] for c in cells] == [20.0] + [0.0] * 11 + [20.0] + [0.0] * 11
    assert cells[5]["slot"] == "c8-x8192"
    # the estimate: every cell, both warm-ups and one restart (the first profile is already running)
    assert plan["estimate_s"] == pytest.approx(sum(c["estimate_s"] for c in cells) + 40 + 600, abs=1)
    assert plan["message"].startswith("24 cells (2 profiles x 3 contexts x 4 concurrencies, ")


def test_a_cell_costs_its_rounds_of_prefill_and_decode() -> None:
    plan = plan_grid({"concurrency": [4], "context_tokens": [8000]}, ["eagle3"], **{**PLAN, "warmup_seconds": 0})
    # 8 requests at concurrency 4: 2 rounds of (4 x 8000 prompt tokens at 8000/s + 128 tokens at 50/s)
    assert plan["cells"][0]["estimate_s"] == pytest.approx(2 * (4 + 128 / 50), abs=0.05)
    assert plan["estimate_s"] == pytest.approx(2 * (4 + 128 / 50), abs=0.1)


def test_a_grid_over_its_bound_is_refused_naming_the_bound() -> None:
    with pytest.raises(GridError, match=r"over sglang_benchmark_grid_max_minutes \(30\): 24 cells .*nothing was measured"):
        plan_grid(DEFAULT_GRID, ["eagle3", "baseline"], **{**PLAN, "max_minutes": 30})


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ({"concurrency": [1, 8]}, r"sglang_benchmark_grid.context_tokens: expected a non-empty list"),
        ({"concurrency": [0, 8], "context_tokens": [0]}, r"sglang_benchmark_grid.concurrency: expected integers >= 1, found 0"),
        ({"concurrency": [1, 1], "context_tokens": [0]}, r"sglang_benchmark_grid.concurrency: each value once"),
        ({"concurrency": [1], "context_tokens": ["long"]}, r"context_tokens: expected integers >= 0 or short, found 'long'"),
        ({"concurrency": [1], "context_tokens": [0], "profiles": []}, r"unknown key profiles"),
        ([1, 8], r"sglang_benchmark_grid: expected a mapping"),
    ],
)
def test_a_bad_grid_is_refused_naming_the_variable(grid: object, message: str) -> None:
    with pytest.raises(GridError, match=message):
        read_grid(grid)


def test_short_is_the_prompt_set_as_it_is_and_values_are_sorted() -> None:
    assert read_grid({"concurrency": [32, 1], "context_tokens": [8192, "short"]}) == ([1, 32], [0, 8192])


def test_bad_numbers_workloads_and_assumptions_are_refused_by_name() -> None:
    with pytest.raises(GridError, match=r"sglang_benchmark_grid_rounds: expected a number >= 1, found 0"):
        plan_grid(DEFAULT_GRID, ["eagle3"], **{**PLAN, "rounds": 0})
    with pytest.raises(GridError, match=r"sglang_benchmark_profiles: the grid needs its profiles, each once"):
        plan_grid(DEFAULT_GRID, ["eagle3", "eagle3"], **PLAN)
    with pytest.raises(GridError, match=r"sglang_benchmark_workload: expected \{concurrency: N, context_tokens: N\} or \{\}"):
        read_workload({"concurrency": 8})
    with pytest.raises(GridError, match=r"sglang_benchmark_workload.context_tokens: expected an integer >= 0, found -1"):
        read_workload({"concurrency": 8, "context_tokens": -1})
    assert read_workload({}) is None
    with pytest.raises(GridError, match=r"sglang_benchmark_grid_assumed: unknown key decode \(expected decode_tok_s, "):
        read_assumed({"decode": 10})
    assert read_assumed({"restart_s": 30}) == {**ASSUMED, "restart_s": 30}


def cell(profile: str, concurrency: int, context: int, tok_s: float | None, ok: bool = True) -> dict:
    return {
        "profile": profile,
        "concurrency": concurrency,
        "context_tokens": context,
        "prompt_tokens": context or 20,
        "output_tok_s": tok_s,
        "ttft_ms": 10.0,
        "itl_ms": 5.0,
        "accept_length": 2.5 if profile == "eagle3" else None,
        "ok": ok,
        "problem": "" if ok else "2 of 8 requests failed: boom",
    }


# (concurrency, context) -> (baseline, eagle3) output tok/s: the shape the operators published for this hardware
# (1.2-1.3x at low concurrency, a loss at 128 and at long context), as recorded figures.
SHAPE = {
    (1, 0): (50.0, 65.0),
    (32, 0): (900.0, 1100.0),
    (128, 0): (2165.0, 2044.0),
    (1, 32768): (40.0, 39.2),
    (32, 32768): (500.0, 420.0),
    (128, 32768): (800.0, 810.0),
}


def shaped_cells() -> list[dict]:
    return [cell(p, c, x, figs[i]) for (c, x), figs in SHAPE.items() for i, p in enumerate(("baseline", "eagle3"))]


def test_the_verdict_says_per_context_where_eagle3_pays_and_where_it_loses() -> None:
    grid = grid_section(shaped_cells(), "baseline", "eagle3", 0.05)
    ratios = {(r["concurrency"], r["context_tokens"]): (r["ratio"], r["class"]) for r in grid["ratios"]}
    assert ratios[(1, 0)] == (1.3, "pays")
    assert ratios[(128, 0)] == (pytest.approx(0.944, abs=0.001), "loses")
    assert ratios[(128, 32768)] == (pytest.approx(1.012, abs=0.001), "even")
    short, long_ = grid["regions"]
    assert (short["pays"], short["loses"], long_["pays"], long_["loses"], long_["even"]) == ([1, 32], [128], [], [32], [1, 128])
    assert short["message"] == "short prompts: eagle3 pays at concurrency 1 (1.30x), 32 (1.22x); loses at concurrency 128 (0.94x)"
    assert long_["message"] == "32768 tokens of context: eagle3 even at concurrency 1 (0.98x), 128 (1.01x); loses at concurrency 32 (0.84x)"
    assert grid["summary"] == "eagle3 pays (>= 1.05x) in 2 of 6 measured points, loses (<= 0.95x) in 2; from 0.84x to 1.30x"
    assert grid["workload"]["profile"] is None and "no workload declared" in grid["workload"]["message"]


def test_the_margin_moves_the_classes() -> None:
    wide = grid_section(shaped_cells(), "baseline", "eagle3", 0.15)
    assert [r["class"] for r in wide["ratios"]] == ["pays", "even", "pays", "loses", "even", "even"]
    assert wide["summary"].startswith("eagle3 pays (>= 1.15x) in 2 of 6 measured points, loses (<= 0.85x) in 1")
    with pytest.raises(GridError, match=r"sglang_benchmark_grid_margin: expected a number in \[0, 1\), found 1.5"):
        grid_section(shaped_cells(), "baseline", "eagle3", 1.5)


@pytest.mark.parametrize(
    ("workload", "point", "profile", "why"),
    [
        ({"concurrency": 1, "context_tokens": 0}, [1, 0], "eagle3", "eagle3 pays (1.30x baseline)"),
        ({"concurrency": 16, "context_tokens": 2000}, [32, 32768], "baseline", "eagle3 loses to baseline (0.84x)"),
        ({"concurrency": 500, "context_tokens": 0}, [128, 0], "baseline", "eagle3 loses to baseline (0.94x)"),
        ({"concurrency": 100, "context_tokens": 30000}, [128, 32768], "baseline", "is within 5% of baseline (1.01x), not worth its draft"),
    ],
)
def test_the_workload_is_read_at_the_measured_point_at_or_above_it(workload: dict, point: list, profile: str, why: str) -> None:
    choice = grid_section(shaped_cells(), "baseline", "eagle3", 0.05, workload)["workload"]
    assert (choice["point"], choice["profile"]) == (point, profile)
    assert choice["message"].startswith(f"serve {profile} for the declared workload (concurrency {workload['concurrency']}, ")
    assert choice["message"].endswith(why)


def test_a_failed_or_missing_cell_is_not_compared() -> None:
    cells = [cell("baseline", 1, 0, 50.0), cell("eagle3", 1, 0, 70.0, ok=False), cell("baseline", 8, 0, 300.0)]
    grid = grid_section(cells, "baseline", "eagle3", 0.05, {"concurrency": 1, "context_tokens": 0})
    assert [r["class"] for r in grid["ratios"]] == ["not measured", "not measured"]
    assert grid["regions"][0]["message"] == "short prompts: eagle3 not measured at concurrency 1, 8"
    assert grid["summary"].endswith("nothing compared (both profiles must be measured at the same points)")
    assert grid["workload"]["profile"] is None


def test_the_markdown_shows_the_ratio_table_the_verdicts_and_every_cell() -> None:
    lines = grid_lines(grid_section(shaped_cells(), "baseline", "eagle3", 0.05, {"concurrency": 32, "context_tokens": 0}))
    text = "\n".join(lines)
    assert "| context | c1 | c32 | c128 |" in text
    assert "| short | 1.30x pays | 1.22x pays | 0.94x loses |" in text
    assert "| 32768 | 0.98x even | 0.84x loses | 1.01x even |" in text
    assert "- **serve eagle3 for the declared workload (concurrency 32, 0 tokens of context)" in text
    assert "](grid.png)" in text
    assert sum(line.startswith("| eagle3 |") or line.startswith("| baseline |") for line in lines) == 12
    assert grid_lines({}) == []


def write_run(path: Path, profile: str, concurrency: int, context: int, tok_s: float, accept: float | None = None) -> str:
    tokens = 32
    requests = [
        {
            "ok": True,
            "ttft_s": 0.01,
            "itl_s": [0.001] * (tokens - 1),
            "latency_s": 0.05,
            "output_tokens": tokens,
            "error": "",
            "prompt_tokens": context or 15,
        }
        for _ in range(8)
    ]
    run = {
        "tool": "toolkit-client",
        "profile": profile,
        "concurrency": concurrency,
        "output_len": tokens,
        "duration_s": 8 * tokens / tok_s,
        "requests": requests,
        "accept_length": accept,
        "accept_source": "requests",
        "accept_note": "",
        "error": "",
        "context_tokens": context,
    }
    path.write_text(json.dumps(run))
    return str(path)


def test_the_report_carries_the_grid_and_takes_the_verdicts_figures_from_its_shortest_context(tmp_path: Path) -> None:
    releases = Releases(tmp_path / "opt")
    rid = releases.create("e" * 64, {})
    releases.set_state(rid, "ready")
    runs = []
    for (concurrency, context), figs in SHAPE.items():
        for profile, tok_s in zip(("baseline", "eagle3"), figs):
            path = write_run(
                tmp_path / f"{profile}-{concurrency}-{context}.json",
                profile,
                concurrency,
                context,
                tok_s,
                2.4 if profile == "eagle3" else None,
            )
            runs.append({"profile": profile, "slot": "grid", "path": path, "context_tokens": context})
    out = report_release(
        releases,
        rid,
        "gpu-1",
        runs,
        32,
        "eagle3",
        settings={"batch_concurrency": "32"},
        report_dir=str(tmp_path / "report"),
        workload={"concurrency": 128, "context_tokens": 0},
    )
    grid = out["grid"]
    assert len(grid["cells"]) == 12 and grid["cells"][0]["prompt_tokens"] == 15
    assert grid["workload"]["profile"] == "baseline"
    # concurrency 1 and the batch concurrency (32) of the shortest context feed the verdict and the gate
    assert out["figures"]["eagle3"]["c1"]["output_tok_s"] == pytest.approx(65.0)
    assert out["figures"]["baseline"]["batch"]["concurrency"] == 32
    assert out["verdict"]["status"] == "pass" and out["verdict"]["ratio"] == pytest.approx(1.3)
    report = json.loads((tmp_path / "report/report.json").read_text())
    assert report["benchmark"]["grid"]["summary"] == grid["summary"]
    assert "## Benchmark grid: eagle3 / baseline output tok/s" in (tmp_path / "report/report.md").read_text()
    entry = releases.load()["releases"][rid]["benchmark"]
    assert {(g["concurrency"], g["context_tokens"]) for g in entry["grid"]} == set(SHAPE)
    assert grid["summary"] in out["lines"] and grid["workload"]["message"] == out["lines"][-1]


def test_a_grid_run_without_its_context_is_refused(tmp_path: Path) -> None:
    releases = Releases(tmp_path / "opt")
    rid = releases.create("d" * 64, {})
    path = write_run(tmp_path / "run.json", "eagle3", 1, 0, 50.0)
    from sglang_sm120.serve.report import BenchError

    with pytest.raises(BenchError, match=r"a grid item needs context_tokens, an integer >= 0"):
        report_release(releases, rid, "gpu-1", [{"profile": "eagle3", "slot": "grid", "path": path}], 32, "eagle3")
    assert "benchmark" not in releases.load()["releases"][rid]
