"""What Prometheus recorded over a benchmark's minutes, beside the benchmark's own figures: a chart
drawn on the controller with matplotlib (as chart.py draws the report's), from Prometheus' query API
(``/api/v1/query_range``), for one host.

Four panels: output tokens per second (with the report's measured output tok/s as lines), time to
first token p50/p95, running and queued requests, EAGLE-3 accept length. The window is the minutes
before the report was generated (``--minutes``), or ``--start``/``--end`` (Unix seconds).

    python -m sglang_sm120_controller.prometheus_chart --prometheus http://mon-01:9090 --report reports/<host>/<release>/report.json \\
        --out reports/<host>/<release>/prometheus.png [--host gpu-01] [--minutes 15]
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from sglang_sm120.errors import ToolkitError

from .chart import figure, png, read_report, run_chart

# (panel title, unit, [(legend, PromQL with {host} for the host's label matcher)])
PANELS = (
    ("output tokens per second", "tok/s", [("output", 'sum by (host) (rate(sglang:generation_tokens_total{{host="{host}"}}[1m]))')]),
    (
        "time to first token",
        "s",
        [
            ("p50", 'histogram_quantile(0.5, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket{{host="{host}"}}[1m])))'),
            ("p95", 'histogram_quantile(0.95, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket{{host="{host}"}}[1m])))'),
        ],
    ),
    (
        "requests",
        "requests",
        [("running", 'max(sglang:num_running_reqs{{host="{host}"}})'), ("queued", 'max(sglang:num_queue_reqs{{host="{host}"}})')],
    ),
    ("EAGLE-3 accept length", "tokens per step", [("accept length", 'max(sglang:spec_accept_length{{host="{host}"}})')]),
)


class PrometheusChartError(ToolkitError):
    """Prometheus could not be asked, or answered something else than a range query's matrix."""


@dataclass(frozen=True)
class Line:
    """One series of one panel: its legend and its (Unix seconds, value) points."""

    legend: str
    points: tuple[tuple[float, float], ...]


def query_range(base_url: str, expr: str, start: float, end: float, step: float, timeout: float = 30.0) -> list[list[tuple[float, float]]]:
    """The points of every series a range query answers (NaN values dropped)."""
    query = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    url = f"{base_url.rstrip('/')}/api/v1/query_range?{query}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            body = json.loads(answer.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise PrometheusChartError(f"{base_url}: cannot run the range query {expr!r}: {error}") from error
    data = body.get("data") or {}
    if body.get("status") != "success" or data.get("resultType") != "matrix":
        raise PrometheusChartError(f"{base_url}: the range query {expr!r} answered {str(body)[:300]}")
    series = []
    for result in data.get("result") or []:
        points = [(float(t), float(v)) for t, v in result.get("values") or [] if v not in ("NaN", "+Inf", "-Inf")]
        series.append(points)
    return series


def recorded(base_url: str, host: str, start: float, end: float, step: Optional[float] = None) -> dict[str, list[Line]]:
    """Every panel's lines for `host` over [start, end] (a step giving about 200 points at most)."""
    if end <= start:
        raise PrometheusChartError(f"the window ends ({end}) before it starts ({start})")
    step = step or max(1.0, round((end - start) / 200))
    panels: dict[str, list[Line]] = {}
    for title, _, queries in PANELS:
        lines = []
        for legend, template in queries:
            for points in query_range(base_url, template.format(host=host), start, end, step):
                lines.append(Line(legend, tuple(points)))
        panels[title] = lines
    return panels


def benchmark_figures(report: Mapping[str, Any]) -> dict[str, float]:
    """The report's measured output tok/s per profile and run (``eagle3 c1``), for the first panel."""
    figures = {}
    for profile, slots in ((report.get("benchmark") or {}).get("profiles") or {}).items():
        for slot, fig in (slots or {}).items():
            if isinstance(fig, Mapping) and fig.get("ok") and isinstance(fig.get("output_tok_s"), (int, float)):
                figures[f"{profile} {slot}"] = float(fig["output_tok_s"])
    return figures


def report_window(report: Mapping[str, Any], minutes: float) -> tuple[float, float]:
    """(start, end): the `minutes` before the report was generated (its "generated" UTC time)."""
    generated = report.get("generated")
    if not isinstance(generated, str):
        raise PrometheusChartError("the report has no 'generated' time: give --start and --end")
    end = datetime.fromisoformat(generated.replace("Z", "+00:00")).timestamp()
    return end - minutes * 60, end


def draw(panels: Mapping[str, Sequence[Line]], figures: Mapping[str, float], title: str) -> tuple[bytes, dict[str, int]]:
    """PNG bytes of the chart, and how many points each panel drew."""
    fig, axes = figure(title.lower())
    counts: dict[str, int] = {}
    for ax, (name, unit, _) in zip(axes, PANELS):
        lines = panels.get(name) or []
        counts[name] = sum(len(line.points) for line in lines)
        start = min((p[0] for line in lines for p in line.points), default=0.0)
        for index, line in enumerate(lines):
            if line.points:
                ax.plot([(t - start) / 60 for t, _ in line.points], [v for _, v in line.points], label=line.legend, color=f"C{index}")
        if name == PANELS[0][0]:
            for index, (label, value) in enumerate(sorted(figures.items())):
                ax.axhline(value, linestyle="--", linewidth=1, color=f"C{index + 2}", label=f"benchmark {label}: {value:.0f}")
        if counts[name] or (name == PANELS[0][0] and figures):
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "nothing recorded", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.set_title(f"{name} (prometheus)", fontsize=10)
        ax.set_xlabel("minutes into the window")
        ax.set_ylabel(unit)
    return png(fig), counts


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Chart what Prometheus recorded over a benchmark's minutes")
    parser.add_argument("--prometheus", required=True, help="Prometheus' URL, e.g. http://mon-01:9090")
    parser.add_argument("--report", required=True, help="the benchmark's report.json (its figures, its host, its time)")
    parser.add_argument("--out", required=True, help="PNG to write")
    parser.add_argument("--host", help="the host label of the server (default: the report's host)")
    parser.add_argument("--minutes", type=float, default=15.0, help="minutes before the report's time (default 15)")
    parser.add_argument("--start", type=float, help="window start, Unix seconds (with --end)")
    parser.add_argument("--end", type=float, help="window end, Unix seconds (with --start)")
    args = parser.parse_args(argv)

    def make() -> tuple[bytes, dict[str, Any]]:
        report = read_report(args.report)
        host = args.host or str(report.get("host") or "")
        if not host:
            raise PrometheusChartError("the report names no host: give --host")
        start, end = (args.start, args.end) if args.start is not None and args.end is not None else report_window(report, args.minutes)
        panels = recorded(args.prometheus, host, start, end)
        data, counts = draw(panels, benchmark_figures(report), f"what prometheus recorded on {host}, release {report.get('release', '-')}")
        return data, {"points": counts, "window": [start, end]}

    return run_chart("prometheus_chart", args.report, args.out, make, (PrometheusChartError,))


if __name__ == "__main__":
    sys.exit(main())
