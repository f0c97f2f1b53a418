"""README.md's production quick start, as molecule/quickstart runs it: the blocks it finds, how it
checks a `# prints` line, and the operator's step 2 on the example site (the run itself is the
quickstart molecule scenario)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("readme_quickstart", ROOT / "molecule/quickstart/readme_quickstart.py")
quickstart = importlib.util.module_from_spec(spec)
spec.loader.exec_module(quickstart)


def test_the_readme_marks_the_operators_blocks_in_order():
    steps = quickstart.blocks((ROOT / "README.md").read_text())
    joined = "\n".join(steps)
    # copy before vault before deploy before curl before compare
    order = [
        "cp -r inventory/example-site inventory/site",
        "ansible-vault encrypt",
        "make deploy INVENTORY=inventory/site",
        "Authorization: Bearer",
        "playbooks/benchmark.yml",
    ]
    positions = [joined.index(text) for text in order]
    assert positions == sorted(positions)
    assert "--check --diff" in joined


def test_what_the_blocks_name_exists_in_the_repository():
    joined = "\n".join(quickstart.blocks((ROOT / "README.md").read_text()))
    assert (ROOT / "inventory/example-site/hosts.yml").is_file()
    assert (ROOT / "inventory/example-site/host_vars/gpu-01/main.yml").is_file()
    for playbook in {"playbooks/benchmark.yml"} | {w for w in joined.split() if w.startswith("PLAYBOOK=")}:
        assert (ROOT / playbook.removeprefix("PLAYBOOK=")).is_file()
    targets = subprocess.run(["make", "-qp"], cwd=ROOT, capture_output=True, text=True).stdout
    for target in ("venv", "deploy"):
        assert f"\n{target}:" in targets


def test_a_prints_line_fails_when_the_output_differs(tmp_path):
    block = "echo 200   # prints 401\n"
    result = subprocess.run(["bash", "-c", quickstart.script(block, 30051, tmp_path / "state")], capture_output=True, text=True)
    assert result.returncode == 1
    assert "expected the output to contain 401" in result.stderr
    good = subprocess.run(
        ["bash", "-c", quickstart.script("echo 401   # prints 401\n", 30051, tmp_path / "state")], capture_output=True, text=True
    )
    assert good.returncode == 0, good.stderr


def test_the_host_address_and_exports_carry_as_in_one_terminal(tmp_path):
    state = tmp_path / "state"
    first = subprocess.run(["bash", "-c", quickstart.script("export QS_PASS=~/x\n", 1, state)], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    second = subprocess.run(
        ["bash", "-c", quickstart.script('echo "$QS_PASS http://192.0.2.10:30000/v1"\n', 30051, state)], capture_output=True, text=True
    )
    assert second.returncode == 0, second.stderr
    assert "x http://127.0.0.1:30051/v1" in second.stdout


def test_step_two_on_the_example_site(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "inventory", tree / "inventory", symlinks=True)
    shutil.copytree(tree / "inventory/example-site", tree / "inventory/site", symlinks=True)
    quickstart.operator_edits(tree, 2251, tmp_path / "ssh")
    hosts = yaml.safe_load((tree / "inventory/site/hosts.yml").read_text())
    assert hosts["all"]["children"]["gpu_hosts"]["hosts"]["gpu-01"]["ansible_host"] == "127.0.0.1"
    test_host = yaml.safe_load((tree / "inventory/site/host_vars/gpu-01/test-host.yml").read_text())
    assert test_host["ansible_port"] == 2251
    assert test_host["preflight_require_gpu"] is False
    assert "sglang_launch_model_configs" not in test_host
    assert test_host["sglang_extra_env"]["SGLANG_STANDIN_LOAD_SECONDS"] == str(quickstart.STANDIN_LOAD_SECONDS)
    assert test_host["sglang_start_timeout"] == quickstart.START_TIMEOUT_SECONDS
    with pytest.raises(quickstart.QuickstartError, match=r"192\.0\.2\.10"):
        quickstart.operator_edits(tree, 2251, tmp_path / "ssh")


# What an operator sees, as the callback and the roles print it (lines of a real quickstart run, shortened).
SEEN = """\
    msg: 'start gate: 28 known start failures checked (SGLang 0.5.9, capability 12.0):
    - 'source builds: 0.0-0.0 h (estimates, sglang_build_estimate_hours; not measured)'
    - 'plan: 3 artifact(s) to fetch or build'
    - 'downtime: none (nothing serves yet)'
WAITING [gpu-01]: start canary of release 0001-3f2a9c1d (policy auto): 0:05 elapsed, 14:54 left of 15:00 | loading
WAITING [gpu-01]: start of sglang.service (/health port closed, unit active): 0:05 elapsed, 0:24 left of 0:30 | Uvicorn running
WAITING [gpu-01]: benchmark eagle3 concurrency 1 (bench_serving): 0:05 elapsed, 59:54 left of 1:00:00
"""


def test_the_operators_view_holds_every_promised_line_and_no_retrying_noise():
    assert quickstart.operator_view(SEEN) == []
    without_canary = "\n".join(line for line in SEEN.splitlines() if "start canary" not in line)
    assert [m.split(" (/")[0] for m in quickstart.operator_view(without_canary)] == ["the start canary's progress"]
    missing = quickstart.operator_view(SEEN + "FAILED - RETRYING: [gpu-01]: Wait for the server's health (120 retries left).\n")
    assert len(missing) == 1 and "FAILED - RETRYING" in missing[0]
    assert len(quickstart.operator_view("")) == len(quickstart.PROMISED)
