"""The controller's commands print no warning of the toolkit's own dependencies (issue 49, "quiet by default"):
cryptography 51 deprecated DSA, which ansible-core's SSH agent imports, so every ansible command printed a
CryptographyDeprecationWarning until requirements.txt pinned it below."""

from __future__ import annotations

import subprocess

import pytest

from conftest import BIN, ROOT


@pytest.mark.parametrize("command", [["ansible-playbook", "--version"], ["ansible-doc", "sm120.sglang.sglang_fabric_check"]])
def test_ansible_commands_print_no_warning(command: list[str]) -> None:
    done = subprocess.run([str(BIN / command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    noisy = [line for line in done.stderr.splitlines() if "warning" in line.lower() or "deprecat" in line.lower()]
    assert noisy == [], noisy
