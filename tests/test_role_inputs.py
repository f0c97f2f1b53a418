"""Bad input to the cuda_toolkit role fails before any change, naming the variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
