"""Which metric names exist, and which names a PromQL expression reads.

The monitoring role's recording rules and alerts and the Grafana dashboard must name only metrics a
server really serves: SGLang's example dashboard has switched between ``sglang:`` and ``sglang_``
over time, and a wrong name is a panel that shows "No Data" forever. The truth is read from

- a real server's ``/metrics`` text (``tests/data/real-server/0.5.13-h200-toolkit/ep-metrics-*.txt``):
  the series names it printed;
- the SGLang sources of the supported releases (``.cache/sglang/<version>/sglang``): every
  ``Counter``/``Gauge``/``Histogram``/``Summary`` whose name is a ``"sglang:..."`` literal, expanded
  to the series names prometheus_client prints for its kind (a histogram's ``_bucket``, ``_sum``
  and ``_count``, a counter's ``_total``), and any other ``"sglang:..."`` literal as it is;
- the exporters' names this toolkit reads (``EXPORTER_METRICS``), and Prometheus' own ``up``.

Plain Python with no Ansible imports; tests/unit/controller/test_monitoring_names.py drives it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_sm120.errors import ToolkitError

# The exporters' metrics the rules and the dashboard may read. DCGM: the fields of NVIDIA's
# dcgm-exporter default counters (etc/default-counters.csv); node: node_exporter 1.5 (Debian 12's
# prometheus-node-exporter), checked against the real exporter by molecule/monitoring/verify.yml.
EXPORTER_METRICS = frozenset(
    {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_XID_ERRORS",
        "node_cpu_seconds_total",
        "node_memory_MemAvailable_bytes",
        "node_memory_MemTotal_bytes",
        "node_filesystem_avail_bytes",
        "node_filesystem_size_bytes",
        "node_load1",
    }
)
# Prometheus' own series for every target.
PROMETHEUS_METRICS = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})

_METRIC_KINDS = {"Counter": ("_total",), "Gauge": ("",), "Histogram": ("_bucket", "_sum", "_count"), "Summary": ("", "_sum", "_count")}
_SERIES_NAME = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{|\s)")
# PromQL words that are not metric names where an identifier may stand.
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2", "by", "without", "on", "ignoring"})
# Aggregation operators may be followed by a by/without clause before their parenthesis.
_AGGREGATIONS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile"})
_LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


class MetricNamesError(ToolkitError):
    """A source of names that cannot be read (no capture, no SGLang tree, a bad expression)."""


@dataclass(frozen=True)
class UnknownName:
    """A metric name an expression reads that no known source has."""

    where: str
    name: str
    expr: str

    def text(self) -> str:
        return f"{self.where}: {self.name!r} is not a metric a server serves (expression: {self.expr})"


# ------------------------------------------------------------------ the names that exist


def capture_series_names(text: str) -> set[str]:
    """The series names of a Prometheus text exposition (comments skipped)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        match = _SERIES_NAME.match(line)
        if match:
            names.add(match.group(1))
    return names


def _call_kind(node: ast.Call) -> str:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name if name in _METRIC_KINDS else ""


def _name_argument(node: ast.Call) -> str:
    for keyword in node.keywords:
        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value
    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return ""


def source_series_names(python_source: str) -> set[str]:
    """The series names one SGLang module declares: typed metrics expanded, other literals as they are."""
    try:
        tree = ast.parse(python_source)
    except SyntaxError:
        return set()
    typed: set[str] = set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_kind(node):
            name = _name_argument(node)
            if name.startswith("sglang:"):
                typed.add(name)
                base = name[: -len("_total")] if _call_kind(node) == "Counter" and name.endswith("_total") else name
                names.update(base + suffix for suffix in _METRIC_KINDS[_call_kind(node)])
    for node in ast.walk(tree):
        literal = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
        if re.fullmatch(r"sglang:[a-zA-Z_][a-zA-Z0-9_]*", literal) and literal not in typed:
            names.add(literal)
    return names


def sglang_tree_names(sglang_dir: Path) -> set[str]:
    """Every series name an SGLang tree (the ``sglang`` package directory) declares under srt/."""
    srt = sglang_dir / "srt"
    if not srt.is_dir():
        raise MetricNamesError(f"{sglang_dir}: no srt/ directory, not an SGLang source tree (make sglang-wheels unpacks them)")
    names: set[str] = set()
    for path in sorted(srt.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "sglang:" in text:
            names |= source_series_names(text)
    return names


def known_names(sglang_dirs: Iterable[Path], captures: Iterable[str]) -> set[str]:
    """Every name a rule or panel may read: the releases' sources, the captures, the exporters, ``up``."""
    names = set(EXPORTER_METRICS | PROMETHEUS_METRICS)
    for directory in sglang_dirs:
        names |= sglang_tree_names(directory)
    for text in captures:
        names |= capture_series_names(text)
    return names


# ------------------------------------------------------------------ the names an expression reads


def _strip_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def _strip_brackets(expr: str, opening: str, closing: str) -> str:
    out, depth = [], 0
    for char in expr:
        if char == opening:
            depth += 1
        elif char == closing and depth:
            depth -= 1
        elif not depth:
            out.append(char)
    if depth:
        raise MetricNamesError(f"unbalanced {opening!r} in {expr!r}")
    return "".join(out)


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are neither functions, keywords,
    label names (in matchers or in by/without/on/ignoring/group_* lists) nor durations."""
    text = _strip_brackets(_strip_brackets(_strip_strings(expr), "{", "}"), "[", "]")
    names: set[str] = set()
    position = 0
    while True:
        match = _IDENTIFIER.search(text, position)
        if not match:
            return names
        word, position = match.group(0), match.end()
        before = text[match.start() - 1] if match.start() else ""
        if before.isdigit() or before == ".":  # 5m, 1e3, 0.95
            continue
        rest = text[position:].lstrip()
        if word in _LABEL_LIST_KEYWORDS:
            if rest.startswith("("):
                position = text.index(")", position) + 1
            continue
        if word in _KEYWORDS or word in _AGGREGATIONS or rest.startswith("("):
            continue
        names.add(word)


# ------------------------------------------------------------------ rules and dashboards


def rule_expressions(rules: Mapping[str, Any], where: str) -> tuple[list[tuple[str, str]], set[str]]:
    """((where, expr) of every rule, the names the file records) of a Prometheus rule file."""
    expressions: list[tuple[str, str]] = []
    recorded: set[str] = set()
    for group in rules.get("groups") or []:
        for rule in group.get("rules") or []:
            label = rule.get("record") or rule.get("alert") or "?"
            expressions.append((f"{where}: group {group.get('name')}, rule {label}", str(rule.get("expr", ""))))
            if rule.get("record"):
                recorded.add(rule["record"])
    return expressions, recorded


def dashboard_expressions(dashboard: Mapping[str, Any], where: str) -> list[tuple[str, str]]:
    """(where, expr) of every panel target (rows' nested panels too) and templating query."""
    found: list[tuple[str, str]] = []

    def panels(items: Iterable[Mapping[str, Any]]) -> None:
        for panel in items:
            for target in panel.get("targets") or []:
                if target.get("expr"):
                    found.append((f"{where}: panel {panel.get('title')!r}, target {target.get('refId')}", str(target["expr"])))
            panels(panel.get("panels") or [])

    panels(dashboard.get("panels") or [])
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        query = variable.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if variable.get("type") == "query" and query:
            match = re.fullmatch(r"\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*", str(query))
            found.append((f"{where}: variable {variable.get('name')}", match.group(1) if match else str(query)))
    return found


def unknown_names(expressions: Iterable[tuple[str, str]], known: set[str], recorded: set[str]) -> list[UnknownName]:
    """Every (expression, name) whose name is neither known nor a recorded rule's."""
    problems = []
    for where, expr in expressions:
        for name in sorted(promql_metric_names(expr)):
            if name not in known and name not in recorded:
                problems.append(UnknownName(where, name, expr))
    return problems
