"""The monitoring role's rules, as promtool tests them: a real server's /metrics turned into input
series, the alerts template rendered with the role's thresholds, and the values the recording rules
must give, computed here the way Prometheus computes them.

Plain Python (PyYAML and Jinja2, both in the controller venv); tests/unit/controller/test_monitoring_rules.py writes
the promtool test files with it and runs ``promtool test rules`` (scripts/monitoring-debs.sh).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_sm120.errors import ToolkitError

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class MonitoringRulesError(ToolkitError):
    """Input the rule tooling cannot use (an unreadable exposition line, a missing variable)."""


@dataclass(frozen=True)
class Sample:
    """One line of a Prometheus text exposition."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)


def parse_exposition(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition, in order (comments and blank lines skipped)."""
    samples = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.match(line.strip())
        if not match:
            raise MonitoringRulesError(f"line {number}: not a Prometheus sample: {line!r}")
        labels = tuple(sorted(_LABEL.findall(match.group(2) or "")))
        samples.append(Sample(match.group(1), labels, float(match.group(3))))
    return samples


def series_selector(name: str, labels: Mapping[str, str]) -> str:
    """``name{a="x",b="y"}`` with the labels sorted, as promtool's input_series and exp_samples take it."""
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def input_series(samples: Iterable[Sample], target: Mapping[str, str], minutes: int, kinds: Mapping[str, str]) -> list[dict[str, str]]:
    """promtool input series from captured samples, as Prometheus would have scraped them from
    `target` (job, instance, host labels) for `minutes` minutes: a counter or histogram series grows
    by its captured value every minute (the captured load, repeated), a gauge keeps its value.
    `kinds` maps each wanted metric name to "counter" or "gauge"; other samples are left out."""
    out = []
    for sample in samples:
        kind = kinds.get(sample.name)
        if kind is None:
            continue
        labels = {**sample.label_dict(), **target}
        value = _number(sample.value)
        values = f"0+{value}x{minutes}" if kind == "counter" else f"{value}x{minutes}"
        out.append({"series": series_selector(sample.name, labels), "values": values})
    return out


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def histogram_quantile(quantile: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile on cumulative (upper bound, count) buckets, +Inf last: linear
    interpolation inside the bucket the rank falls in (from 0 for the first bucket); NaN when empty."""
    ordered = sorted(buckets)
    if not ordered or not math.isinf(ordered[-1][0]) or ordered[-1][1] == 0:
        return math.nan
    rank = quantile * ordered[-1][1]
    index = next(i for i, (_, count) in enumerate(ordered) if count >= rank)
    if index == len(ordered) - 1:
        return ordered[-2][0]
    lower, below = (0.0, 0.0) if index == 0 else ordered[index - 1]
    upper, count = ordered[index]
    if count == below:
        return upper
    return lower + (upper - lower) * (rank - below) / (count - below)


def capture_buckets(samples: Iterable[Sample], histogram: str) -> list[tuple[float, float]]:
    """(le, cumulative count) of one histogram in a capture (all its series summed per bound)."""
    totals: dict[float, float] = {}
    for sample in samples:
        if sample.name == histogram + "_bucket":
            bound = float(sample.label_dict()["le"])
            totals[bound] = totals.get(bound, 0.0) + sample.value
    return sorted(totals.items())


def capture_total(samples: Iterable[Sample], name: str) -> float:
    """The sum of one metric's captured values (every label set)."""
    return sum(sample.value for sample in samples if sample.name == name)


def render_role_template(path: Path, variables: Mapping[str, Any]) -> str:
    """A role template rendered with plain Jinja2 and the given variables (ansible_managed filled in);
    an undefined variable is an error naming it."""
    import jinja2

    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    try:
        return environment.from_string(path.read_text()).render({"ansible_managed": "managed by role sglang_monitoring", **variables})
    except jinja2.UndefinedError as error:
        raise MonitoringRulesError(f"{path.name}: {error.message}") from error


def expand_annotation(text: str, labels: Mapping[str, str], value: float) -> str:
    """An alert annotation as Prometheus expands it, for the template forms the role's alerts use:
    {{ $labels.X }}, {{ $value }}, {{ $value | printf "%.Nf" }} and {{ $value | humanizePercentage }}."""

    def one(match: re.Match) -> str:
        expression = match.group(1).strip()
        if expression.startswith("$labels."):
            return labels.get(expression[len("$labels.") :], "")
        if expression == "$value":
            return _go_float(value)
        printf = re.fullmatch(r'\$value\s*\|\s*printf\s+"%\.(\d+)f"', expression)
        if printf:
            return f"{value:.{int(printf.group(1))}f}"
        if re.fullmatch(r"\$value\s*\|\s*humanizePercentage", expression):
            return f"{value * 100:.4g}%"
        raise MonitoringRulesError(f"annotation template {expression!r} is not one this expander knows")

    return re.sub(r"\{\{(.*?)\}\}", one, text)


def _go_float(value: float) -> str:
    """A float as Go's strconv.FormatFloat(v, 'g', -1, 64) prints it (Prometheus' {{ $value }})."""
    return str(int(value)) if value == int(value) and abs(value) < 1e21 else repr(value)
