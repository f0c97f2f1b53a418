"""The report's chart, drawn on the controller with matplotlib (Agg backend): the host needs none.

Four panels from one report.json (bench_report.build_report): output tok/s per release and profile
(concurrency 1 and batch), TTFT and ITL percentiles of this release's runs, and the speculative
accept length per release and profile. matplotlib is imported inside draw(), so importing this
module costs nothing and needs no matplotlib.

    python bench_chart.py --report reports/<host>/<release>/report.json --out .../chart.png [--grid-out .../grid.png]

With --grid-out and a benchmark grid in the report (grid.grid_section), also the grid's chart: the candidate/baseline
ratio over the grid, contexts down and concurrencies across, green where speculation pays, red where it loses.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

PERCENTILES = (("mean", "mean"), ("median", "median"), ("p99", "p99"))


def _releases(history: Sequence[Mapping[str, Any]], last: int) -> tuple[list[str], list[str]]:
    releases: list[str] = []
    profiles: list[str] = []
    for point in history:
        if point.get("release") not in releases:
            releases.append(point.get("release"))
        if point.get("profile") not in profiles:
            profiles.append(point.get("profile"))
    return releases[-last:], profiles


def series(report: Mapping[str, Any], last: int = 8) -> dict[str, Any]:
    """What the chart shows, as plain data (also what the tests check the picture against)."""
    history = report.get("history") or []
    releases, profiles = _releases(history, last)
    by_key = {(p.get("release"), p.get("profile")): p for p in history}
    runs = []
    for profile, slots in ((report.get("benchmark") or {}).get("profiles") or {}).items():
        for slot in ("c1", "batch"):
            fig = slots.get(slot)
            if fig and fig.get("ok"):
                runs.append((f"{profile} c{fig.get('concurrency')}", fig.get("ttft_ms") or {}, fig.get("itl_ms") or {}))
    return {
        "releases": releases,
        "profiles": profiles,
        "tok_s": {slot: {(r, p): (by_key.get((r, p)) or {}).get(slot) for r in releases for p in profiles} for slot in ("c1", "batch")},
        "accept": {(r, p): (by_key.get((r, p)) or {}).get("accept_length") for r in releases for p in profiles},
        "runs": runs,
    }


def _grouped(ax: Any, groups: Sequence[str], names: Sequence[str], values: Mapping[tuple[str, str], Optional[float]], fmt: str) -> int:
    """Grouped bars, one group per x label and one colour per name; returns the bars drawn."""
    width = 0.8 / max(1, len(names))
    drawn = 0
    for j, name in enumerate(names):
        xs, hs = [], []
        for i, group in enumerate(groups):
            v = values.get((group, name))
            if isinstance(v, (int, float)):
                xs.append(i - 0.4 + width * (j + 0.5))
                hs.append(float(v))
        bars = ax.bar(xs, hs, width * 0.9, label=name, color=f"C{j}")
        ax.bar_label(bars, fmt=fmt, fontsize=7, padding=2)
        drawn += len(xs)
    ax.set_xticks(range(len(groups)), [g.lower() for g in groups], rotation=20, ha="right", fontsize=8)
    if drawn:
        ax.legend(fontsize=8)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)
    else:
        ax.text(0.5, 0.5, "no figures recorded", ha="center", va="center", transform=ax.transAxes, color="grey")
    return drawn


def figure(title: str) -> tuple[Any, Any]:
    """A 2 x 2 figure of matplotlib's Agg backend (the controller needs no screen) with its title, and its axes in reading order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), dpi=100)
    fig.suptitle(title, fontsize=12)
    return fig, [ax for row in axes for ax in row]


def png(fig: Any) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def write_png(path: str, data: bytes) -> None:
    """Write the PNG whole or not at all (a reader never sees half a chart)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def read_report(path: str) -> dict[str, Any]:
    """A report.json (OSError or ValueError when it cannot be read)."""
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    if not isinstance(report, dict):
        raise ValueError("not a JSON object")
    return report


def run_chart(
    tool: str, report: str, out: str, make: Callable[[], tuple[bytes, dict[str, Any]]], errors: tuple[type[Exception], ...] = ()
) -> int:
    """A chart command's one way out: 0 and a JSON summary when the chart is written; 2 when its inputs (the
    report, `errors`) fail, 3 without matplotlib, each with one line on stderr saying why."""
    try:
        data, summary = make()
    except (OSError, ValueError, *errors) as exc:
        print(f"{tool}: {report}: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"{tool}: matplotlib does not import on the controller ({exc}): install requirements.txt", file=sys.stderr)
        return 3
    write_png(out, data)
    print(json.dumps({"chart": out, "bytes": len(data), **summary}))
    return 0


def draw(report: Mapping[str, Any], last: int = 8) -> tuple[bytes, dict[str, int]]:
    """PNG bytes of the chart, and how many bars each panel has."""
    data = series(report, last)
    releases = [str(r) for r in data["releases"]]
    profiles = [str(p) for p in data["profiles"]]
    host, release = str(report.get("host", "-")), str(report.get("release", "-"))
    fig, axes = figure(f"sglang benchmark on {host} (release {release})".lower())
    counts: dict[str, int] = {}
    # 1: output tok/s per release and profile; concurrency 1 solid, batch hatched.
    ax = axes[0]
    names = [f"{p} c1" for p in profiles] + [f"{p} batch" for p in profiles]
    values = {(r, f"{p} {slot}"): v for slot in ("c1", "batch") for (r, p), v in data["tok_s"][slot].items()}
    counts["tok_s"] = _grouped(
        ax, releases, [n for n in names if any(values.get((r, n)) is not None for r in releases)] or names[:1], values, "%.0f"
    )
    ax.set_title("output tok/s per release and profile", fontsize=10)
    ax.set_ylabel("tok/s")
    # 2 and 3: TTFT and ITL percentiles of this release's runs.
    groups = [name for name, _, _ in data["runs"]]
    for ax, key, pos in ((axes[1], "ttft", 1), (axes[2], "itl", 2)):
        vals = {(run[0], label): run[pos].get(k) for run in data["runs"] for k, label in PERCENTILES}
        counts[key] = _grouped(ax, groups, [label for _, label in PERCENTILES], vals, "%.1f")
        ax.set_title(f"{key} (ms) per run of this release", fontsize=10)
        ax.set_ylabel("ms")
    # 4: accept length per release and profile (1.0 = no speculation gain).
    ax = axes[3]
    counts["accept"] = _grouped(ax, releases, profiles, data["accept"], "%.2f")
    ax.set_title("speculative accept length per release and profile", fontsize=10)
    ax.set_ylabel("tokens per step")
    return png(fig), counts


def grid_matrix(grid: Mapping[str, Any]) -> tuple[list[int], list[int], list[list[Optional[float]]]]:
    """(contexts, concurrencies, ratios[context][concurrency]) of a report's grid section; None where not measured."""
    points = grid.get("ratios") or []
    contexts = sorted({int(p["context_tokens"]) for p in points})
    concurrencies = sorted({int(p["concurrency"]) for p in points})
    by_key = {(int(p["context_tokens"]), int(p["concurrency"])): p.get("ratio") for p in points}
    return contexts, concurrencies, [[by_key.get((x, c)) for c in concurrencies] for x in contexts]


def draw_grid(report: Mapping[str, Any]) -> tuple[bytes, dict[str, int]]:
    """PNG bytes of the grid's ratio map, and how many points it shows measured; ValueError without a grid."""
    grid = (report.get("benchmark") or {}).get("grid") or {}
    if not grid.get("ratios"):
        raise ValueError("the report has no benchmark grid (sglang_benchmark_grid_run was false)")
    contexts, concurrencies, matrix = grid_matrix(grid)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spread = max([abs(v - 1) for row in matrix for v in row if v is not None] + [0.25])
    fig, ax = plt.subplots(figsize=(1.6 * len(concurrencies) + 3, 1.1 * len(contexts) + 2), dpi=100)
    masked = [[float("nan") if v is None else v for v in row] for row in matrix]
    image = ax.imshow(masked, cmap="RdYlGn", vmin=1 - spread, vmax=1 + spread, aspect="auto")
    ax.set_xticks(range(len(concurrencies)), [str(c) for c in concurrencies])
    ax.set_yticks(range(len(contexts)), ["short" if x == 0 else str(x) for x in contexts])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("context (prompt tokens)")
    for i, row in enumerate(matrix):
        for j, value in enumerate(row):
            ax.text(j, i, "-" if value is None else f"{value:.2f}x", ha="center", va="center", fontsize=10)
    fig.colorbar(image, ax=ax, label=f"{grid.get('candidate')} / {grid.get('baseline')} output tok/s")
    ax.set_title(
        f"where {grid.get('candidate')} pays: {report.get('host', '-')}, release {report.get('release', '-')}".lower(), fontsize=10
    )
    return png(fig), {"measured": sum(v is not None for row in matrix for v in row)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Draw a release report's chart.png on the controller")
    parser.add_argument("--report", required=True, help="report.json")
    parser.add_argument("--out", required=True, help="chart.png to write")
    parser.add_argument("--last", type=int, default=8, help="releases shown")
    parser.add_argument("--grid-out", help="grid.png to write when the report has a benchmark grid")
    args = parser.parse_args(argv)

    def make() -> tuple[bytes, dict[str, Any]]:
        data, counts = draw(read_report(args.report), args.last)
        return data, {"bars": counts}

    status = run_chart("bench_chart", args.report, args.out, make)
    if status or not args.grid_out or not (read_report(args.report).get("benchmark") or {}).get("grid"):
        return status

    def make_grid() -> tuple[bytes, dict[str, Any]]:
        data, counts = draw_grid(read_report(args.report))
        return data, {"grid_points": counts["measured"]}

    return run_chart("bench_chart", args.report, args.grid_out, make_grid)


if __name__ == "__main__":
    sys.exit(main())
