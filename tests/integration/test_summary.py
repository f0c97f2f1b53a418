"""playbooks/summary.yml in check mode: the downtime line says how long nothing would serve, from the
last start of the current release on this host when its manifest recorded it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


def summary_lines(extra: dict) -> list[str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    env.update(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_CACHE_PLUGIN="memory")
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", "--check", "-e", json.dumps(extra)]
    run = subprocess.run([*argv, str(ROOT / "playbooks/summary.yml")], capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    tasks = json.loads(run.stdout)["plays"][0]["tasks"]
    return next(t["hosts"]["localhost"]["msg"] for t in tasks if t["task"]["name"] == "Show the summary")


def downtime(lines: list[str]) -> str:
    return next(line for line in lines if line.startswith("downtime: "))


@pytest.fixture()
def serving(tmp_path: Path) -> dict:
    """A host whose current release 0001-aaaa started healthy in 612.8 s, and a new release to start."""
    manifest = {"service": {"health": {"elapsed": 612.8, "healthy": True, "status": "200"}}}
    release = tmp_path / "releases/0001-aaaa"
    release.mkdir(parents=True)
    (release / "manifest.json").write_text(json.dumps(manifest))
    active = {"current": "0001-aaaa", "id": "0002-bbbb", "state": "would-build"}
    return {"sglang_root": str(tmp_path), "sglang_release_active": active, "sglang_start_timeout": 1800}


def test_a_restart_lasts_as_long_as_the_last_start_of_the_current_release(serving: dict) -> None:
    assert downtime(summary_lines(serving)) == (
        "downtime: the server restarts on the new release; nothing serves from its stop until it is healthy "
        "(about 612 s, as long as the last start of release 0001-aaaa took here; at most sglang_start_timeout=1800 s)"
    )


def test_without_a_recorded_start_the_load_is_named_and_the_ceiling_given(serving: dict, tmp_path: Path) -> None:
    (tmp_path / "releases/0001-aaaa/manifest.json").unlink()
    assert downtime(summary_lines(serving)) == (
        "downtime: the server restarts on the new release; nothing serves from its stop until it is healthy "
        "(the model load; at most sglang_start_timeout=1800 s)"
    )


def test_no_restart_and_nothing_serving_say_so(serving: dict) -> None:
    unchanged = {**serving, "sglang_release_active": {"current": "0001-aaaa", "id": "0001-aaaa", "state": "present"}}
    assert downtime(summary_lines(unchanged)) == "downtime: none (no restart planned)"
    # A fresh host's release record has no current release: null (as sglang_release reports it) or "".
    for nothing in (None, ""):
        fresh = {**serving, "sglang_release_active": {"current": nothing, "id": "0001-aaaa", "state": "would-build"}}
        assert downtime(summary_lines(fresh)) == "downtime: none (nothing serves yet)"
