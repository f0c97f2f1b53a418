"""The benchmark's minutes as Prometheus recorded them (plugins/plugin_utils/sglang_sm120_controller/prometheus_chart.py):
Debian's real prometheus binary (`make promtool` unpacks it) on 127.0.0.1 scrapes the stand-in server
(TEST FIXTURE) started with --enable-metrics while requests are served; the chart is drawn from its
query API beside a report's measured figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import CACHE, ROOT, free_port, needed, standin_env, standin_server
from sglang_sm120_controller import prometheus_chart as pc

PROMETHEUS = CACHE / "promtool/bin/prometheus"
FAST = standin_env("0.5.13", load=0.3, warmup=0.2, health=0.01, token_ms=2)
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
SPEC += ["--speculative-num-draft-tokens", "4", "--model-path", "/models/target"]


def generate(url: str, tokens: int) -> None:
    body = json.dumps({"text": "a b c", "stream": True, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}).encode()
    request = urllib.request.Request(f"{url}/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert b"[DONE]" in answer.read()


@pytest.fixture()
def scraped(tmp_path: Path) -> Iterator[tuple[str, float, float]]:
    """(Prometheus URL, start, end): the stand-in served requests for a few seconds while scraped every second."""
    needed(PROMETHEUS, "prometheus", "`make promtool` (scripts/monitoring-debs.sh)")
    with standin_server(["--enable-metrics", *SPEC], FAST) as server:
        port = free_port()
        target = server.removeprefix("http://")
        config = tmp_path / "prometheus.yml"
        job = {"job_name": "sglang", "static_configs": [{"targets": [target], "labels": {"host": "lab-test"}}]}
        config.write_text(json.dumps({"global": {"scrape_interval": "1s"}, "scrape_configs": [job]}))  # JSON is YAML
        argv = [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}"]
        argv.append(f"--web.listen-address=127.0.0.1:{port}")
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            start = time.time()
            for _ in range(100):
                try:
                    with urllib.request.urlopen(f"{url}/-/ready", timeout=1):
                        break
                except OSError:
                    time.sleep(0.2)
            deadline = time.time() + 8
            while time.time() < deadline:
                generate(server, 64)
            time.sleep(2)  # one more scrape after the last request
            yield url, start, time.time()
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def test_the_chart_shows_what_prometheus_recorded_beside_the_reports_figures(scraped: tuple[str, float, float], tmp_path: Path) -> None:
    url, start, end = scraped
    panels = pc.recorded(url, "lab-test", start, end, step=1)
    output = [v for line in panels["output tokens per second"] for _, v in line.points]
    assert output and max(output) > 0  # the counter moved while the requests were served
    assert [line.legend for line in panels["time to first token"]] == ["p50", "p95"]
    assert [line.legend for line in panels["requests"]] == ["running", "queued"]
    report = {
        "host": "lab-test",
        "release": "0001-test",
        "generated": datetime.fromtimestamp(end, timezone.utc).isoformat().replace("+00:00", "Z"),
        "benchmark": {"profiles": {"eagle3": {"c1": {"ok": True, "output_tok_s": 321.0}, "batch": {"ok": False}}}},
    }
    assert pc.benchmark_figures(report) == {"eagle3 c1": 321.0}
    report_file, out = tmp_path / "report.json", tmp_path / "prometheus.png"
    report_file.write_text(json.dumps(report))
    assert pc.main(["--prometheus", url, "--report", str(report_file), "--out", str(out), "--minutes", "1"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The benchmark role draws the same beside its report when sglang_benchmark_prometheus_url is set.
    out.unlink()
    said = role_chart(url, tmp_path, start, end)
    assert said.startswith(f"prometheus: {tmp_path}/prometheus.png (")
    assert json.loads(said.split(" (", 1)[1].removesuffix(")"))["points"]["output tokens per second"] > 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def role_chart(url: str, report_dir: Path, start: float, end: float) -> str:
    """tests/playbooks/prometheus_chart.yml (the benchmark role's prometheus_chart entry point, on the
    controller): the line the role says; the play must succeed."""
    extra = {
        "sglang_benchmark_prometheus_url": url,
        "sglang_benchmark_prometheus_host": "lab-test",
        "sglang_benchmark_report_dir": str(report_dir),
        "sglang_benchmark_window": [start, end],
    }
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    env.update(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", json.dumps(extra)]
    run = subprocess.run(
        [*argv, str(ROOT / "tests/playbooks/prometheus_chart.yml")], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    tasks = json.loads(run.stdout)["plays"][0]["tasks"]
    return next(
        t["hosts"]["localhost"]["msg"]
        for t in tasks
        if t["task"]["name"].endswith("Say where the chart of what Prometheus recorded is, or why there is none")
    )


def test_the_role_says_an_unreadable_prometheus_names_the_variable_and_goes_on(tmp_path: Path) -> None:
    report = {"host": "lab-test", "release": "0001-test", "generated": "2026-12-03T07:27:37Z", "benchmark": {"profiles": {}}}
    (tmp_path / "report.json").write_text(json.dumps(report))
    url = f"http://127.0.0.1:{free_port()}"
    said = role_chart(url, tmp_path, 1796282000.0, 1796282857.0)
    assert said.startswith(f"WARNING: no chart of what Prometheus recorded: sglang_benchmark_prometheus_url {url}: prometheus_chart: ")
    assert "cannot run the range query" in said
    assert said.endswith("; the figures and verdict of the benchmark stand")
    assert not (tmp_path / "prometheus.png").exists()


def test_an_unreachable_prometheus_is_an_error_naming_it() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(pc.PrometheusChartError, match=f"{url}: cannot run the range query"):
        pc.query_range(url, "up", 0, 10, 1, timeout=2)


def test_a_report_without_a_time_needs_a_window() -> None:
    with pytest.raises(pc.PrometheusChartError, match="give --start and --end"):
        pc.report_window({"host": "x"}, 15)
    assert pc.report_window({"generated": "2026-12-03T07:27:37Z"}, 10) == (1796282857.0 - 600, 1796282857.0)
