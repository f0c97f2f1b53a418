"""The monitoring role's recording rules and alerts, run by Debian's promtool (`promtool test rules`,
scripts/monitoring-debs.sh) on series built from a real SGLang 0.5.13 server's /metrics
(tests/data/real-server/0.5.13-h200-toolkit/ep-metrics-key.txt): its names, its labels, its values.

The capture is one warm-up request on an idle server, so the input repeats that load every minute
(counters and histogram buckets grow by their captured value per minute, gauges keep theirs), and the
expected values are computed here from the capture as Prometheus computes them. Where an alert needs
a value the capture does not have (a low accept length, a growing queue, a full KV cache), the
capture's own series (name and labels) carry the changed value. The GPU's Xid series are NVIDIA DCGM
exporter's field name with labels as it prints them: there is no GPU capture here.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from conftest import DATA, ROOT
from sglang_sm120_controller import monitoring_rules as mr

ROLE = ROOT / "roles/sglang_monitoring"
RECORDING = ROLE / "files/rules/sglang-recording.rules.yml"
ALERTS = ROLE / "templates/sglang-alerts.rules.yml.j2"
CAPTURE = DATA / "real-server/0.5.13-h200-toolkit/ep-metrics-key.txt"
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
TARGET = {"job": "sglang", "instance": "gpu-01:30000", "host": "gpu-01"}
GROUP = {"host": "gpu-01", "instance": "gpu-01:30000", "job": "sglang"}
KINDS = {
    "sglang:time_to_first_token_seconds_bucket": "counter",
    "sglang:inter_token_latency_seconds_bucket": "counter",
    "sglang:e2e_request_latency_seconds_bucket": "counter",
    "sglang:generation_tokens_total": "counter",
    "sglang:prompt_tokens_total": "counter",
    "sglang:num_requests_total": "counter",
    "sglang:num_running_reqs": "gauge",
    "sglang:num_queue_reqs": "gauge",
    "sglang:token_usage": "gauge",
    "sglang:spec_accept_length": "gauge",
}


@pytest.fixture(scope="module")
def capture() -> list[mr.Sample]:
    return mr.parse_exposition(CAPTURE.read_text())


def model_of(capture: list[mr.Sample]) -> str:
    return next(s.label_dict()["model_name"] for s in capture if s.name == "sglang:generation_tokens_total")


def scheduler_labels(capture: list[mr.Sample], name: str) -> dict[str, str]:
    return next(s.label_dict() for s in capture if s.name == name)


def alerts_file(tmp_path: Path, **overrides: Any) -> Path:
    path = tmp_path / "sglang-alerts.rules.yml"
    path.write_text(mr.render_role_template(ALERTS, {**DEFAULTS, **overrides}))
    return path


def alert_annotations(alerts: Path, name: str, labels: dict[str, str], value: float) -> dict[str, str]:
    rules = yaml.safe_load(alerts.read_text())["groups"][0]["rules"]
    rule = next(r for r in rules if r["alert"] == name)
    return {key: mr.expand_annotation(text, labels, value) for key, text in rule["annotations"].items()}


def run_promtool(promtool: Path, tmp_path: Path, alerts: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess:
    spec = {"rule_files": [str(RECORDING), str(alerts)], "evaluation_interval": "1m", "tests": tests}
    path = tmp_path / "rules-test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return subprocess.run([str(promtool), "test", "rules", str(path)], capture_output=True, text=True, check=False)


def expect(name: str, labels: Optional[dict[str, str]], value: Optional[float], at: str = "10m") -> dict[str, Any]:
    """A promql_expr_test of one recorded series, to 1e-6 (promtool compares floats exactly): the
    expression is rounded by Prometheus, the expectation the same way (Go's round: floor(v x n + 0.5) / n)."""
    samples = [] if labels is None else [{"labels": mr.series_selector("", labels), "value": math.floor(value * 1e6 + 0.5) / 1e6}]
    return {"expr": f"round({name}, 0.000001)", "eval_time": at, "exp_samples": samples}


def steady_series(capture: list[mr.Sample], minutes: int = 30) -> list[dict[str, str]]:
    up = {"series": mr.series_selector("up", TARGET), "values": f"1x{minutes}"}
    return [*mr.input_series(capture, TARGET, minutes, KINDS), up]


def test_the_rule_files_pass_promtool_check(promtool: Path, tmp_path: Path) -> None:
    for path in (RECORDING, alerts_file(tmp_path)):
        proc = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_recording_rules_on_the_real_capture(promtool: Path, tmp_path: Path, capture: list[mr.Sample]) -> None:
    """TTFT percentiles, tokens and requests per second, running and queued requests, KV-cache use and
    accept length, from the capture's series; no ITL value, as the capture has no ITL series."""
    labels = {**GROUP, "model_name": model_of(capture)}
    ttft = mr.capture_buckets(capture, "sglang:time_to_first_token_seconds")
    e2e = mr.capture_buckets(capture, "sglang:e2e_request_latency_seconds")
    assert ttft and e2e and mr.capture_buckets(capture, "sglang:inter_token_latency_seconds") == []
    expected = [
        expect("instance:sglang_ttft_seconds:p50_5m", labels, mr.histogram_quantile(0.5, ttft)),
        expect("instance:sglang_ttft_seconds:p95_5m", labels, mr.histogram_quantile(0.95, ttft)),
        expect("instance:sglang_ttft_seconds:p99_5m", labels, mr.histogram_quantile(0.99, ttft)),
        expect("instance:sglang_e2e_latency_seconds:p95_5m", labels, mr.histogram_quantile(0.95, e2e)),
        expect("instance:sglang_itl_seconds:p95_5m", None, None),
        expect("instance:sglang_generation_tokens:rate5m", labels, mr.capture_total(capture, "sglang:generation_tokens_total") / 60),
        expect("instance:sglang_prompt_tokens:rate5m", labels, mr.capture_total(capture, "sglang:prompt_tokens_total") / 60),
        expect("instance:sglang_requests:rate5m", labels, mr.capture_total(capture, "sglang:num_requests_total") / 60),
        expect("instance:sglang_running_requests:max", labels, mr.capture_total(capture, "sglang:num_running_reqs")),
        expect("instance:sglang_queued_requests:max", labels, mr.capture_total(capture, "sglang:num_queue_reqs")),
        expect("instance:sglang_kv_cache_usage:max", labels, mr.capture_total(capture, "sglang:token_usage")),
        expect("instance:sglang_spec_accept_length:max", labels, mr.capture_total(capture, "sglang:spec_accept_length")),
    ]
    # The capture's one request took 5.04 s to its first token: bucket (4, 6].
    assert 4 < mr.histogram_quantile(0.95, ttft) <= 6
    alerts = alerts_file(tmp_path)
    test = {"interval": "1m", "input_series": steady_series(capture), "promql_expr_test": expected}
    test["alert_rule_test"] = [
        {"eval_time": "20m", "alertname": name, "exp_alerts": []} for name in ("SGLangServerDown", "SGLangAcceptLengthLow")
    ]
    proc = run_promtool(promtool, tmp_path, alerts, [test])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_wrong_expectation_fails_promtool(promtool: Path, tmp_path: Path, capture: list[mr.Sample]) -> None:
    """The harness can fail: a tokens-per-second value off by one token per minute is reported."""
    labels = {**GROUP, "model_name": model_of(capture)}
    wrong = expect(
        "instance:sglang_generation_tokens:rate5m", labels, (mr.capture_total(capture, "sglang:generation_tokens_total") + 1) / 60
    )
    proc = run_promtool(
        promtool, tmp_path, alerts_file(tmp_path), [{"interval": "1m", "input_series": steady_series(capture), "promql_expr_test": [wrong]}]
    )
    assert proc.returncode != 0 and "instance:sglang_generation_tokens:rate5m" in proc.stdout + proc.stderr


def alert_test(alerts: Path, series: list[dict[str, str]], name: str, at: str, fired: list[tuple[dict[str, str], float]]) -> dict[str, Any]:
    exp = []
    for labels, value in fired:
        rule = next(r for r in yaml.safe_load(alerts.read_text())["groups"][0]["rules"] if r["alert"] == name)
        exp.append({"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": alert_annotations(alerts, name, labels, value)})
    return {"interval": "1m", "input_series": series, "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": exp}]}


def replace_gauge(series: list[dict[str, str]], name: str, values: str) -> list[dict[str, str]]:
    changed = [dict(s, values=values) if s["series"].startswith(name + "{") else s for s in series]
    assert changed != series, f"{name} is not among the input series"
    return changed


def test_server_down_fires_after_the_threshold(promtool: Path, tmp_path: Path, capture: list[mr.Sample]) -> None:
    alerts = alerts_file(tmp_path)
    series = [s for s in steady_series(capture) if not s["series"].startswith("up{")]
    series.append({"series": mr.series_selector("up", TARGET), "values": "1x4 0x20"})
    tests = [
        alert_test(alerts, series, "SGLangServerDown", "5m", []),  # down for 0 min
        alert_test(alerts, series, "SGLangServerDown", "8m", [(TARGET, 0)]),
    ]
    node = {"job": "node", "instance": "gpu-01:9100", "host": "gpu-01"}
    node_series = [{"series": mr.series_selector("up", node), "values": "1x4 0x20"}]
    tests.append(alert_test(alerts, node_series, "ExporterDown", "7m", []))  # 5 minutes not reached
    tests.append(alert_test(alerts, node_series, "ExporterDown", "12m", [(node, 0)]))
    proc = run_promtool(promtool, tmp_path, alerts, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("accept", "threshold", "fires"), [(1.2, 1.5, True), (2.5, 1.5, False), (2.5, 3.0, True)])
def test_accept_length_below_the_operators_threshold(
    promtool: Path, tmp_path: Path, capture: list[mr.Sample], accept: float, threshold: float, fires: bool
) -> None:
    alerts = alerts_file(tmp_path, sglang_monitoring_accept_length_min=threshold)
    series = replace_gauge(steady_series(capture), "sglang:spec_accept_length", f"{accept}x30")
    labels = {**GROUP, "model_name": model_of(capture)}
    tests = [alert_test(alerts, series, "SGLangAcceptLengthLow", "25m", [(labels, accept)] if fires else [])]
    if fires:  # not before its 15 minutes
        tests.append(alert_test(alerts, series, "SGLangAcceptLengthLow", "10m", []))
    proc = run_promtool(promtool, tmp_path, alerts, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"stayed below {threshold} while" in alerts.read_text()


def test_a_growing_queue_fires_and_a_steady_one_does_not(promtool: Path, tmp_path: Path, capture: list[mr.Sample]) -> None:
    alerts = alerts_file(tmp_path)
    labels = {**GROUP, "model_name": model_of(capture)}
    growing = replace_gauge(steady_series(capture), "sglang:num_queue_reqs", "0+1x30")
    steady = replace_gauge(steady_series(capture), "sglang:num_queue_reqs", "5x30")
    tests = [
        alert_test(alerts, growing, "SGLangQueueGrowing", "25m", [(labels, 25)]),
        alert_test(alerts, growing, "SGLangQueueGrowing", "8m", []),
        alert_test(alerts, steady, "SGLangQueueGrowing", "25m", []),
    ]
    proc = run_promtool(promtool, tmp_path, alerts, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_full_kv_cache_fires(promtool: Path, tmp_path: Path, capture: list[mr.Sample]) -> None:
    alerts = alerts_file(tmp_path)
    labels = {**GROUP, "model_name": model_of(capture)}
    full = replace_gauge(steady_series(capture), "sglang:token_usage", "0.97x30")
    tests = [
        alert_test(alerts, full, "SGLangKVCacheFull", "15m", [(labels, 0.97)]),
        alert_test(alerts, steady_series(capture), "SGLangKVCacheFull", "15m", []),
    ]
    proc = run_promtool(promtool, tmp_path, alerts, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_gpu_xid_error_fires_while_new(promtool: Path, tmp_path: Path) -> None:
    alerts = alerts_file(tmp_path)
    gpu = {"job": "dcgm", "instance": "gpu-01:9400", "host": "gpu-01", "gpu": "3", "UUID": "GPU-0000", "Hostname": "gpu-01"}
    series = [{"series": mr.series_selector("DCGM_FI_DEV_XID_ERRORS", gpu), "values": "0x5 79x30"}]
    tests = [
        alert_test(alerts, series, "GPUXidError", "4m", []),
        alert_test(alerts, series, "GPUXidError", "8m", [(gpu, 79)]),
        alert_test(alerts, series, "GPUXidError", "30m", []),  # 15 minutes after, no new Xid
    ]
    proc = run_promtool(promtool, tmp_path, alerts, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_undefined_threshold_is_named(tmp_path: Path) -> None:
    variables = {k: v for k, v in DEFAULTS.items() if k != "sglang_monitoring_accept_length_min"}
    with pytest.raises(mr.MonitoringRulesError, match="sglang_monitoring_accept_length_min"):
        mr.render_role_template(ALERTS, variables)


def test_histogram_quantile_interpolates_as_prometheus() -> None:
    buckets = [(0.1, 0.0), (1.0, 2.0), (2.0, 4.0), (float("inf"), 4.0)]
    assert mr.histogram_quantile(0.5, buckets) == pytest.approx(1.0)
    assert mr.histogram_quantile(0.75, buckets) == pytest.approx(1.5)
    assert mr.histogram_quantile(0.25, buckets) == pytest.approx(0.1 + 0.9 * 0.5)
