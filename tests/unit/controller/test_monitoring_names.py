"""Every metric name the monitoring role's rules and alerts and its Grafana dashboard read is one a
real server serves: in the real SGLang 0.5.13 capture, in the SGLang sources of a supported release
(.cache/sglang/<version>/sglang, 0.5.9 to 0.5.23, `make sglang-wheels`), an exporter's name the
toolkit lists, or a recording rule of the role. A panel that names a metric that does not exist
(SGLang's own example dashboard has switched between `sglang:` and `sglang_`) fails here.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from conftest import CACHE, DATA, ROOT
from sglang_sm120_controller import metric_names as mn
from sglang_sm120_controller import monitoring_rules as mr

ROLE = ROOT / "roles/sglang_monitoring"
RECORDING = ROLE / "files/rules/sglang-recording.rules.yml"
ALERTS = ROLE / "templates/sglang-alerts.rules.yml.j2"
DASHBOARD = ROLE / "files/grafana/sglang-sm120.json"
CAPTURES = sorted((DATA / "real-server/0.5.13-h200-toolkit").glob("ep-metrics-*.txt"))
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
# Shared by 0.5.9 and 0.5.23 (the issue's list), and what 0.5.23 adds.
SHARED = [
    "prompt_tokens_total",
    "generation_tokens_total",
    "gen_throughput",
    "time_to_first_token_seconds_bucket",
    "inter_token_latency_seconds_bucket",
    "e2e_request_latency_seconds_bucket",
    "queue_time_seconds_bucket",
    "num_running_reqs",
    "num_queue_reqs",
    "token_usage",
    "cache_hit_rate",
    "spec_accept_length",
    "spec_accept_rate",
]
ADDED_BY_0_5_23 = ["http_requests_active", "spec_num_steps", "spec_verify_calls_total", "kv_used_tokens"]


def releases() -> list[Path]:
    trees = sorted(p / "sglang" for p in CACHE.joinpath("sglang").glob("0.5.*") if (p / "sglang" / "srt").is_dir())
    if len(trees) < 2:
        pytest.fail(f"no SGLang source trees under {CACHE / 'sglang'}: run `make sglang-wheels` first")
    return trees


@pytest.fixture(scope="module")
def tree_names() -> dict[str, set[str]]:
    return {tree.parent.name: mn.sglang_tree_names(tree) for tree in releases()}


@pytest.fixture(scope="module")
def known(tree_names: dict[str, set[str]]) -> set[str]:
    names = set(mn.EXPORTER_METRICS | mn.PROMETHEUS_METRICS)
    for found in tree_names.values():
        names |= found
    for capture in CAPTURES:
        names |= mn.capture_series_names(capture.read_text())
    return names


def role_expressions(dashboard: dict) -> tuple[list[tuple[str, str]], set[str]]:
    recording, recorded = mn.rule_expressions(yaml.safe_load(RECORDING.read_text()), RECORDING.name)
    alerts, _ = mn.rule_expressions(yaml.safe_load(mr.render_role_template(ALERTS, DEFAULTS)), ALERTS.name)
    return [*recording, *alerts, *mn.dashboard_expressions(dashboard, DASHBOARD.name)], recorded


def test_every_name_in_the_rules_alerts_and_dashboard_exists(known: set[str]) -> None:
    expressions, recorded = role_expressions(json.loads(DASHBOARD.read_text()))
    assert len(expressions) > 30
    assert [problem.text() for problem in mn.unknown_names(expressions, known, recorded)] == []


def test_every_recording_rule_is_read_by_the_dashboard_or_an_alert() -> None:
    expressions, recorded = role_expressions(json.loads(DASHBOARD.read_text()))
    read = set().union(*(mn.promql_metric_names(expr) for where, expr in expressions if "rule instance:" not in where))
    assert sorted(recorded - read) == []


@pytest.mark.parametrize(
    ("bogus", "where"),
    [
        ("sglang_time_to_first_token_seconds_bucket", "panel 'Time to first token'"),  # the example dashboard's other spelling
        ("sglang:time_to_first_token_seconds_total", "panel 'Time to first token'"),  # a histogram has no _total
        ("sglang:spec_accept_lenght", "panel 'Time to first token'"),
    ],
)
def test_a_panel_naming_a_metric_that_does_not_exist_fails(known: set[str], bogus: str, where: str) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    broken = copy.deepcopy(dashboard)
    panel = next(p for p in broken["panels"] if p.get("title") == "Time to first token")
    panel["targets"][0]["expr"] = f"histogram_quantile(0.9, sum by (le) (rate({bogus}[5m])))"
    expressions, recorded = role_expressions(broken)
    problems = mn.unknown_names(expressions, known, recorded)
    assert [p.name for p in problems] == [bogus]
    assert where in problems[0].text() and "is not a metric a server serves" in problems[0].text()


def test_a_rule_naming_a_metric_that_does_not_exist_fails(known: set[str]) -> None:
    rules = yaml.safe_load(RECORDING.read_text())
    rules["groups"][0]["rules"][0]["expr"] = "max(sglang:num_running_requests)"
    expressions, recorded = mn.rule_expressions(rules, RECORDING.name)
    problems = mn.unknown_names(expressions, known, recorded)
    assert [(p.name, p.where) for p in problems] == [
        ("sglang:num_running_requests", "sglang-recording.rules.yml: group sglang-recording, rule instance:sglang_ttft_seconds:p50_5m")
    ]


def test_the_issues_names_are_in_0_5_9_and_0_5_23(tree_names: dict[str, set[str]]) -> None:
    for name in SHARED:
        assert f"sglang:{name}" in tree_names["0.5.9"] and f"sglang:{name}" in tree_names["0.5.23"], name
    for name in ADDED_BY_0_5_23:
        assert f"sglang:{name}" in tree_names["0.5.23"], name
    assert "sglang:kv_used_tokens" not in tree_names["0.5.9"]


def test_the_source_reader_finds_every_name_of_the_real_capture(tree_names: dict[str, set[str]]) -> None:
    """What the 0.5.13 server printed is what its sources declare (the reader is neither blind nor loose)."""
    captured = set().union(*(mn.capture_series_names(c.read_text()) for c in CAPTURES))
    assert len(captured) > 50
    assert sorted(captured - tree_names["0.5.13"]) == []
    assert "sglang:time_to_first_token_seconds" not in tree_names["0.5.13"]  # a histogram's bare name is no series


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            "histogram_quantile(0.95, sum by (instance, le) (rate(sglang:time_to_first_token_seconds_bucket[5m])))",
            {"sglang:time_to_first_token_seconds_bucket"},
        ),
        ('up{job=~"node|dcgm"} == 0', {"up"}),
        ("sum(rate(a_total[$__rate_interval])) without (tp_rank) / ignoring(x) group_left(y) b offset 5m", {"a_total", "b"}),
        ('1 - avg by (host) (rate(node_cpu_seconds_total{mode="idle",host=~"$host"}[5m]))', {"node_cpu_seconds_total"}),
        ('count_values("v", x) and on(gpu) topk(3, y) > bool 1e3', {"x", "y"}),
    ],
)
def test_promql_names_are_read_without_functions_labels_or_keywords(expr: str, names: set[str]) -> None:
    assert mn.promql_metric_names(expr) == names


def test_an_unbalanced_expression_is_an_error() -> None:
    with pytest.raises(mn.MetricNamesError, match="unbalanced"):
        mn.promql_metric_names("rate(x{job='a'[5m])")


@pytest.mark.parametrize(("version", "tree"), [("0.5.9", "0.5.9"), ("0.5.13", "0.5.13"), ("0.5.23", "0.5.23")])
def test_the_standin_serves_only_its_releases_names(tree_names: dict[str, set[str]], version: str, tree: str) -> None:
    """The lab's stand-in (TEST FIXTURE) prints only names its release's sources declare."""
    sys.path.insert(0, str(ROOT / "tests/fixtures/sglang-standin"))
    from sglang_standin import engine, responses

    standin = engine.Engine({"enable_metrics": True, "speculative_algorithm": "EAGLE3"}, version, "", 0.001, 0.001)
    served = mn.capture_series_names(responses.metrics_text(version, "/models/target", standin))
    assert {"sglang:time_to_first_token_seconds_bucket", "sglang:token_usage", "sglang:num_queue_reqs"} <= served
    assert sorted(served - tree_names[tree]) == []
    assert all(re.fullmatch(r"sglang:[a-z0-9_]+", name) for name in served)
