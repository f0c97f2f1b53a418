"""Launch-flag validation on the real SGLang 0.5.9 server_args.py (read from the wheel, never imported)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from server_flags import FlagError, cross_check, exec_start, flag_table, read_server_args, systemd_quote, validate

from conftest import ROOT

CACHE = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache")) / "sglang"
WHEEL = CACHE / "sglang-0.5.9-py3-none-any.whl"


@pytest.fixture(scope="module")
def table() -> dict[str, Any]:
    return flag_table(read_server_args(WHEEL))


def eagle3_profile() -> dict[str, Any]:
    """The eagle3 profile of the inventory, with the stack's values filled in."""
    stack = yaml.safe_load((ROOT / "inventory/production/group_vars/all/stack.yml").read_text())
    service = yaml.safe_load((ROOT / "inventory/production/group_vars/all/service.yml").read_text())
    text = yaml.safe_dump(service["sglang_profiles"]["eagle3"], sort_keys=False)
    for key, value in stack.items():
        text = text.replace("{{ " + key + " }}", str(value))
    return {**yaml.safe_load(text), "host": "127.0.0.1", "port": 30000}


def test_table_from_wheel_and_tree_agree(table: dict[str, Any]) -> None:
    tree = flag_table(read_server_args(CACHE / "0.5.9" / "sglang"))
    assert tree.keys() == table.keys() and len(table) > 300
    assert table["tensor-parallel-size"].aliases == ["tp-size"] and table["tensor-parallel-size"].kind == "int"
    assert table["speculative-algorithm"].choices == ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
    assert "flashinfer" in table["attention-backend"].choices  # resolved from ATTENTION_BACKEND_CHOICES
    assert table["enable-torch-symm-mem"].kind == "switch"
    assert table["model-path"].required


def test_the_eagle3_profile_is_valid_and_renders_in_order(table: dict[str, Any]) -> None:
    result = validate(table, eagle3_profile())
    assert result.errors == []
    assert result.argv[:4] == ["--model-path", "/data/Kimi-K2.5-NVFP4", "--tp-size", "8"]
    assert "--enable-torch-symm-mem" in result.argv and "--speculative-num-draft-tokens" in result.argv
    assert result.argv[-4:] == ["--host", "127.0.0.1", "--port", "30000"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"tp": 8}, "--tp is an abbreviation, which is refused; use --tp-size"),
        ({"speculative-num-step": 2}, "use --speculative-num-steps"),
        ({"speculative-algoritm": "EAGLE3"}, "did you mean --speculative-algorithm?"),
        ({"no-such-flag": 1}, "--no-such-flag is not a flag of this SGLang"),
        ({"tp-size": "eight"}, "--tensor-parallel-size takes an integer, found 'eight'"),
        ({"attention-backend": "flashnfer"}, "did you mean 'flashinfer'?"),
        ({"speculative-algorithm": "EAGLE4"}, "--speculative-algorithm must be one of EAGLE, EAGLE3"),
        ({"trust-remote-code": "yes"}, "--trust-remote-code is a switch"),
        ({"port": [1, 2]}, "--port takes one value"),
    ],
)
def test_bad_flags_fail_with_a_suggestion(table: dict[str, Any], flags: dict[str, Any], message: str) -> None:
    result = validate(table, {"model-path": "/m", **flags})
    assert any(message in error for error in result.errors), result.errors


def test_false_and_null_leave_flags_out(table: dict[str, Any]) -> None:
    result = validate(table, {"model-path": "/m", "enable-torch-symm-mem": False, "context-length": None})
    assert result.argv == ["--model-path", "/m"] and result.errors == []


def test_missing_required_flag(table: dict[str, Any]) -> None:
    assert any("--model-path" in e for e in validate(table, {"tp-size": 8}).errors)


def test_cross_checks() -> None:
    profile = eagle3_profile()
    errors, warnings = cross_check(profile, ["kimi_k25_eagle3_delegation", "torch_symm_mem_sm120"], 12)
    assert errors == [] and "no-op on SM120" in warnings[0]
    errors, _ = cross_check(profile, ["kimi_k25_eagle3_delegation"], 12)
    assert "KeyError: 12" in errors[0]
    errors, _ = cross_check({**profile, "speculative-draft-model-path": None}, ["torch_symm_mem_sm120"], 12)
    assert "needs --speculative-draft-model-path" in errors[0]
    assert cross_check(profile, [], 10) == ([], [])


def test_exec_start_quotes_for_systemd() -> None:
    assert systemd_quote("/data/model") == "/data/model"
    assert systemd_quote('a b"c') == '"a b\\"c"'
    assert systemd_quote("50%$HOME") == "50%%$$HOME"
    text = exec_start(
        "/r/venv/bin/python",
        "sglang.launch_server",
        ["--model-path", "/m", "--trust-remote-code", "--json-model-override-args", '{"a": 1}'],
    )
    assert text.splitlines() == [
        "/r/venv/bin/python -m sglang.launch_server \\",
        "    --model-path /m \\",
        "    --trust-remote-code \\",
        '    --json-model-override-args "{\\"a\\": 1}"',
    ]


def test_not_an_sglang_package(tmp_path: Path) -> None:
    with pytest.raises(FlagError, match="not an SGLang package"):
        read_server_args(tmp_path)


def test_the_import_check_falls_back_without_torch(table: dict[str, Any]) -> None:
    """This Python cannot import SGLang (no sglang, no torch): the static table must be used."""
    from server_flags import IMPORT_CHECK

    out = subprocess.run([sys.executable, "-c", IMPORT_CHECK, "--tp-size", "8"], capture_output=True, text=True, check=True)
    assert '"mode": "static"' in out.stdout
