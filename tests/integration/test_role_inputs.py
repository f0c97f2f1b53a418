"""Bad input to the cuda_toolkit role fails before any change, naming the variable; the preflight role's
facts entry point (site.yml's second read) reads again only when the first read found no toolchain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

PLAYBOOK = ROOT / "tests/playbooks/cuda_toolkit_inputs.yml"


def converge_check(extra: dict) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    env["ANSIBLE_CACHE_PLUGIN"] = "memory"
    env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "--check", str(PLAYBOOK), "-e", json.dumps(extra)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"cuda_toolkit_install_method": "yum"}, "cuda_toolkit_install_method"),
        ({"cuda_toolkit_version": "13.0"}, "expected cuda_toolkit_version like 13.0.1"),
        ({"cuda_toolkit_apt_version": "latest"}, "cuda_toolkit_apt_version like 13.0.1-1"),
        (
            {
                "cuda_toolkit_install_method": "wheels",
                "cuda_toolkit_wheel_source": "wheelhouse",
                "cuda_toolkit_wheelhouse": "/nonexistent/wheels",
            },
            "cuda_toolkit_wheelhouse: expected a controller directory of .whl files",
        ),
        (
            {"cuda_toolkit_install_method": "wheels", "cuda_toolkit_wheel_source": "wheelhouse", "cuda_toolkit_wheelhouse": ""},
            "found nothing set",
        ),
        ({"cuda_toolkit_install_method": "local_repo", "cuda_toolkit_local_repo_deb": "/nonexistent/cuda-repo.deb"}, "(no such file)"),
        ({"cuda_toolkit_wheel_source": "ftp"}, "cuda_toolkit_wheel_source"),
    ],
)
def test_bad_input_fails_before_any_change(extra, expected):
    proc = converge_check(extra)
    assert proc.returncode != 0, proc.stdout
    assert expected in proc.stdout, proc.stdout[-3000:]
    assert "changed=0" in proc.stdout
    assert "cuda_toolkit : Ensure the host compiler" not in proc.stdout


FOUND = {"nvcc_path": "/opt/cuda-test/bin/nvcc", "nvcc_version": "13.0", "gcc_version": "12.2.0", "python_headers": True}


@pytest.mark.parametrize(
    ("first_read", "refresh", "reads_again"),
    [
        (FOUND, "auto", False),
        ({**FOUND, "nvcc_path": "/usr/bin/nvcc"}, "auto", True),
        ({**FOUND, "nvcc_path": None, "nvcc_version": None}, "auto", True),
        ({**FOUND, "gcc_version": None}, "auto", True),
        ({**FOUND, "python_headers": False}, "auto", True),  # the toolkit role installs python3-dev
        ({**FOUND, "python_headers": None}, "auto", True),
        (None, "auto", True),
        (FOUND, "always", True),
    ],
)
def test_preflight_facts_entry_point_reads_again_only_without_the_toolchain(tmp_path, first_read, refresh, reads_again):
    """What main found earlier in the run (preflight_result) decides; the CUDA toolkit role changes only nvcc, gcc and
    Python's headers."""
    play_vars = {"preflight_require_gpu": False, "preflight_cuda_home": "/opt/cuda-test/", "preflight_facts_refresh": refresh}
    if first_read is not None:
        play_vars["preflight_result"] = first_read
    playbook = tmp_path / "facts.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "all",
                    "gather_facts": False,
                    "vars": play_vars,
                    "roles": [{"role": "sm120.sglang.toolkit_defaults"}],
                    "tasks": [{"ansible.builtin.import_role": {"name": "sm120.sglang.preflight", "tasks_from": "facts"}}],
                }
            ]
        )
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    env["ANSIBLE_CACHE_PLUGIN"] = "memory"
    env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", "--check", str(playbook)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    # the argument check, then the read (ok) or its skip
    assert ("ok=2 " if reads_again else "ok=1 ") in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert ("skipped=0" if reads_again else "skipped=1") in proc.stdout, proc.stdout[-3000:]


def test_preflight_reports_every_problem_of_the_host_in_one_failure(tmp_path):
    """The distribution, the Python and a disk all wrong: one failure names all three and their variables."""
    play_vars = {
        "preflight_require_gpu": False,
        "preflight_supported_distributions": {"Plan9": ["4"]},
        "preflight_min_python": "3.99",
        "preflight_max_python": "",
        "preflight_min_memory_gib": 0,
        "preflight_disks": [{"label": "releases", "path": str(tmp_path), "min_gib": 1e9}],
        "preflight_host_facts_file": "",
    }
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "all",
                    "gather_facts": True,
                    "vars": play_vars,
                    "roles": [{"role": "sm120.sglang.toolkit_defaults"}],
                    "tasks": [{"ansible.builtin.import_role": {"name": "sm120.sglang.preflight"}}],
                }
            ]
        )
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    env["ANSIBLE_CACHE_PLUGIN"] = "memory"
    env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", "--check", str(playbook)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert "preflight found 3 problem(s)" in out, proc.stdout[-3000:]
    assert "(preflight_supported_distributions)" in out and "or newer (preflight_min_python)" in out
    assert "(preflight_disks)" in out
    assert "failed=1" in out and out.count("fatal:") == 1
