"""Role sglang_monitoring: the scrape configuration it generates from an inventory (every server on
its port, the router where a group `router` exists, the exporters each server recorded, the
Prometheus host's own servers on 127.0.0.1), accepted by Debian's promtool; and bad input refused
before any change, naming the variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT
from sglang_sm120_controller import monitoring_rules as mr

ROLE = ROOT / "roles/sglang_monitoring"
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())


def scrape_config(groups: dict[str, list[str]], hostvars: dict[str, dict[str, Any]], me: str, **overrides: Any) -> dict[str, Any]:
    text = mr.render_role_template(
        ROLE / "templates/prometheus.yml.j2", {**DEFAULTS, **overrides, "groups": groups, "hostvars": hostvars, "inventory_hostname": me}
    )
    return yaml.safe_load(text)


def jobs(config: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    return {
        job["job_name"]: [
            (target, static.get("labels", {}).get("host", "")) for static in job["static_configs"] for target in static["targets"]
        ]
        for job in config["scrape_configs"]
    }


def test_the_production_shape_every_server_router_and_exporter() -> None:
    groups = {"gpu_hosts": ["gpu-01", "gpu-02"], "router": ["router-01"], "monitoring": ["mon-01"]}
    hostvars = {
        "gpu-01": {
            "ansible_host": "10.0.0.1",
            "sglang_service_port": 30001,
            "sglang_monitoring_host_exporters": {"node": 9100, "dcgm": 9400},
        },
        "gpu-02": {"ansible_host": "10.0.0.2", "sglang_monitoring_host_exporters": {"node": 9101, "dcgm": None}},
        "router-01": {"sglang_monitoring_address": "router.internal"},
        "mon-01": {},
    }
    found = jobs(scrape_config(groups, hostvars, "mon-01"))
    assert found["sglang"] == [("10.0.0.1:30001", "gpu-01"), ("10.0.0.2:30000", "gpu-02")]
    assert found["sglang-router"] == [("router.internal:29000", "router-01")]
    assert found["node"] == [("10.0.0.1:9100", "gpu-01"), ("10.0.0.2:9101", "gpu-02")]
    assert found["dcgm"] == [("10.0.0.1:9400", "gpu-01")]  # gpu-02 recorded no DCGM exporter
    assert found["prometheus"] == [("localhost:9090", "")]


def test_the_lab_shape_prometheus_on_the_server_itself_no_router_no_gpu() -> None:
    groups = {"lab": ["sglang-lab"], "monitoring": ["sglang-lab"]}
    hostvars = {
        "sglang-lab": {"ansible_host": "127.0.0.1", "ansible_port": 2200, "sglang_monitoring_host_exporters": {"node": 9100, "dcgm": None}}
    }
    config = scrape_config(groups, hostvars, "sglang-lab", sglang_monitoring_scrape_interval="5s")
    found = jobs(config)
    assert found == {
        "prometheus": [("localhost:9090", "")],
        "sglang": [("127.0.0.1:30000", "sglang-lab")],
        "node": [("127.0.0.1:9100", "sglang-lab")],
    }
    assert config["global"]["scrape_interval"] == "5s" and config["rule_files"] == ["/etc/prometheus/rules.d/*.rules.yml"]


def test_promtool_accepts_the_generated_configuration(tmp_path: Path, promtool: Path) -> None:
    groups = {"gpu_hosts": ["gpu-01"], "router": ["router-01"]}
    hostvars = {"gpu-01": {"sglang_monitoring_host_exporters": {"node": 9100, "dcgm": 9400}}, "router-01": {}}
    rules = tmp_path / "rules.d"
    rules.mkdir()
    (rules / "sglang-recording.rules.yml").write_text((ROLE / "files/rules/sglang-recording.rules.yml").read_text())
    text = mr.render_role_template(
        ROLE / "templates/prometheus.yml.j2",
        {**DEFAULTS, "groups": groups, "hostvars": hostvars, "inventory_hostname": "mon-01", "sglang_monitoring_rules_dir": str(rules)},
    )
    (tmp_path / "prometheus.yml").write_text(text)
    proc = subprocess.run([str(promtool), "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "sglang-recording.rules.yml" in proc.stdout + proc.stderr


# ------------------------------------------------------------------ bad input


def converge_check(tmp_path: Path, extra: dict[str, Any]) -> subprocess.CompletedProcess:
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(yaml.safe_dump({"all": {"children": {"monitoring": {"hosts": {"mon-test": local}}}}}))
    env = dict(
        os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", ANSIBLE_CACHE_PLUGIN="memory"
    )
    playbook = ROOT / "playbooks/monitoring.yml"
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), "--check", str(playbook), "-e", json.dumps(extra)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            {"sglang_monitoring_retention_time": "30 days"},
            'sglang_monitoring_retention_time: expected a Prometheus duration such as 30s, 15m or 30d, found "30 days"',
        ),
        ({"sglang_monitoring_accept_length_for": 15}, "sglang_monitoring_accept_length_for: expected a Prometheus duration"),
        ({"sglang_monitoring_listen_address": "9090"}, "sglang_monitoring_listen_address: expected ADDRESS:PORT"),
        ({"sglang_monitoring_accept_length_min": "high"}, "sglang_monitoring_accept_length_min"),
        ({"sglang_monitoring_server_port": "thirty"}, "sglang_monitoring_server_port"),
        ({"sglang_monitoring_debs_dir": "/nonexistent/debs"}, "sglang_monitoring_debs_dir: expected a controller folder of .deb files"),
    ],
)
def test_bad_input_fails_before_any_change(tmp_path: Path, extra: dict[str, Any], expected: str) -> None:
    proc = converge_check(tmp_path, extra)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert expected in proc.stdout, proc.stdout[-3000:]
    assert "changed=0" in proc.stdout
    assert "Ensure Prometheus is installed" not in proc.stdout


def test_a_server_only_on_loopback_is_refused_for_a_remote_prometheus(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "monitoring": {"hosts": {"mon-test": local}},
                        "gpu_hosts": {"hosts": {"gpu-09": {"sglang_service_host": "127.0.0.1"}}},
                    }
                }
            }
        )
    )
    env = dict(
        os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", ANSIBLE_CACHE_PLUGIN="memory"
    )
    cmd = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(inventory),
        "--check",
        "-l",
        "monitoring",
        str(ROOT / "playbooks/monitoring.yml"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    assert proc.returncode != 0
    assert "sglang_service_host: gpu-09 serves on 127.0.0.1, which Prometheus on mon-test cannot reach" in proc.stdout, proc.stdout[-3000:]
