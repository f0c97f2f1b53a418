"""Launch-flag validation on the real SGLang 0.5.9 and 0.5.23 sources (read from the wheels, never
imported here), and the hardware rules of flag_rules."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT
from sglang_sm120.launch.flag_check import ACK_TOPK_TREE_ON_MLA, check_launch, hardware_rules, run_import_check
from sglang_sm120.launch.flags import (
    FlagError,
    exec_start,
    flag_table,
    read_server_args,
    release_flag_table,
    sglang_version,
    systemd_quote,
    validate,
)
from sglang_sm120_controller.compat import render_profile

CACHE = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache")) / "sglang"
WHEEL = CACHE / "sglang-0.5.9-py3-none-any.whl"
WHEEL_0523 = CACHE / "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
KIMI = "KimiK25ForConditionalGeneration"


@pytest.fixture(scope="module")
def table() -> dict[str, Any]:
    return flag_table(read_server_args(WHEEL))


def eagle3_profile(name: str = "eagle3") -> dict[str, Any]:
    """A profile of the inventory (eagle3 by default), with the stack's values filled in."""
    stack = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/stack.yml").read_text())
    service = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/service.yml").read_text())
    return {**render_profile(service["sglang_profiles"][name], stack), "host": "127.0.0.1", "port": 30000}


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
    # Upstream's Kimi-K2.5 recipe (#19689), without the two flags that do nothing on SM120 / PCIe.
    text = " ".join(result.argv)
    assert "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in text
    assert "--enable-torch-symm-mem" not in text and "--enable-flashinfer-allreduce-fusion" not in text
    assert result.argv[-4:] == ["--host", "127.0.0.1", "--port", "30000"]


def test_profiles_of_the_inventory() -> None:
    service = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/service.yml").read_text())
    baseline = service["sglang_profiles"]["baseline"]
    assert "enable-torch-symm-mem" not in baseline and "enable-flashinfer-allreduce-fusion" not in baseline
    seed = service["sglang_profiles"]["eagle3_topk4_seed"]
    assert (seed["speculative-num-steps"], seed["speculative-eagle-topk"], seed["speculative-num-draft-tokens"]) == (2, 4, 16)
    assert seed[ACK_TOPK_TREE_ON_MLA] is True


def test_table_of_0523_is_read_from_its_dataclass_fields() -> None:
    """0.5.23 declares most flags as annotated dataclass fields (srt/arg_groups/fields), not add_argument."""
    table = release_flag_table(WHEEL_0523)
    assert sglang_version(WHEEL_0523) == "0.5.23" and sglang_version(CACHE / "0.5.23") == "0.5.23"
    assert len(table) > 400 and table.keys() == release_flag_table(CACHE / "0.5.23").keys()
    assert table["tp-size"].aliases == ["tensor-parallel-size"] and table["tp-size"].kind == "int"
    assert "flashinfer" in (table["attention-backend"].choices or [])
    assert table["speculative-eagle-topk"].kind == "int" and table["model-path"].required
    assert table["enable-flashinfer-allreduce-fusion"].kind == "switch"  # a manual add_argument of add_cli_args
    assert any("--tp is an abbreviation" in e and "--tp-size" in e for e in validate(table, {"model-path": "/m", "tp": 8}).errors)


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


EAGLE = {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/d", "attention_backend": "flashinfer"}


def texts(findings: list[Any], level: str) -> list[str]:
    return [f.text() for f in findings if f.level == level]


def test_topk_tree_on_mla_is_refused_unless_acknowledged() -> None:
    values = {**EAGLE, "speculative_eagle_topk": 4}
    errors = texts(hardware_rules(values, version="0.5.9", model_class=KIMI, gpu_major=12), "error")
    assert len(errors) == 1 and "#19689" in errors[0] and "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in errors[0]
    acked = hardware_rules(values, version="0.5.9", model_class=KIMI, gpu_major=12, allow_topk_tree_on_mla=True)
    assert texts(acked, "error") == [] and "acknowledged" in texts(acked, "warning")[0]
    assert hardware_rules(values, version="0.5.9", model_class="LlamaForCausalLM", gpu_major=12) == []
    assert hardware_rules({**values, "attention_backend": "triton"}, version="0.5.9", model_class=KIMI, gpu_major=12) == []
    assert hardware_rules({**values, "speculative_eagle_topk": "1"}, version="0.5.23", model_class=KIMI, gpu_major=12) == []


def test_allreduce_fusion_per_version() -> None:
    values = {"enable_flashinfer_allreduce_fusion": True}
    assert "no-op" in texts(hardware_rules(values, version="0.5.9", model_class=KIMI, gpu_major=12), "warning")[0]
    assert "ValueError" in texts(hardware_rules(values, version="0.5.23", model_class=KIMI, gpu_major=12), "error")[0]
    # Decided by the release's own source where it has the raise, whatever the version says.
    source = (CACHE / "0.5.23" / "sglang" / "srt/layers/flashinfer_comm_fusion.py").read_text()
    assert texts(hardware_rules(values, version="0.5.20", model_class=KIMI, gpu_major=12, fusion_source=source), "error")
    assert hardware_rules(values, version="0.5.23", model_class=KIMI, gpu_major=10) == []


def test_torch_symm_mem_per_version() -> None:
    values = {"enable_torch_symm_mem": True}
    assert "KeyError: 12" in texts(hardware_rules(values, version="0.5.13", model_class=KIMI, gpu_major=12), "error")[0]
    patched = hardware_rules(values, version="0.5.9", model_class=KIMI, gpu_major=12, planned_patches=["torch_symm_mem_sm120"])
    assert texts(patched, "error") == [] and "never takes effect on PCIe" in texts(patched, "warning")[0]
    assert texts(hardware_rules(values, version="0.5.14", model_class=KIMI, gpu_major=12), "error") == []


def test_eagle_needs_a_draft_model() -> None:
    errors = texts(hardware_rules({"speculative_algorithm": "EAGLE"}, version="0.5.9", model_class=KIMI, gpu_major=12), "error")
    assert "--speculative-draft-model-path" in errors[0]


def test_profiles_through_the_checker_static() -> None:
    report = check_launch(WHEEL, profile=eagle3_profile(), model_class=KIMI)
    assert report.ok and report.parser == "static" and report.warnings == []
    seed = eagle3_profile("eagle3_topk4_seed")
    report = check_launch(WHEEL, profile=seed, model_class=KIMI, planned_patches=["torch_symm_mem_sm120"])
    assert report.ok and not any(a.startswith("--_") for a in report.argv), report.errors
    assert "--speculative-eagle-topk" in report.argv and len(report.warnings) == 3  # topk acknowledged, two no-ops
    refused = check_launch(WHEEL, profile={k: v for k, v in seed.items() if k != ACK_TOPK_TREE_ON_MLA}, model_class=KIMI)
    assert {"#19689" in e.text() or "KeyError: 12" in e.text() for e in refused.errors} == {True} and len(refused.errors) == 2
    assert not check_launch(WHEEL, profile={**eagle3_profile(), "_no_such_key": 1}, model_class=KIMI).ok
    refused = check_launch(WHEEL_0523, profile=seed, model_class=KIMI, planned_patches=["torch_symm_mem_sm120"])
    assert [e.reference for e in refused.errors] == ["sglang #18758, #32330"]


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


def test_the_import_check_falls_back_without_torch() -> None:
    """This Python cannot import SGLang's dependencies: the static table must be used, with the reason."""
    verdict = run_import_check(sys.executable, CACHE / "0.5.9", ["--tp-size", "8"])
    assert verdict["mode"] == "static" and "cannot import SGLang's parser" in verdict["reason"]
    report = check_launch(CACHE / "0.5.9", argv=["--model-path", "/m", "--tp", "8"], model_class=KIMI, python=sys.executable)
    assert report.parser_line.startswith("parser: static table (cannot import")
    assert [e.message for e in report.errors] == ["--tp is an abbreviation, which is refused; use --tp-size"]


def test_a_wheel_that_is_not_sglang_is_refused_before_it_is_unpacked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """check_launch reads sglang/srt/server_args.py from the archive first: a wheel without it is
    refused before the import check would unpack it into the cache."""
    wheel = tmp_path / "notsglang-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("notsglang/__init__.py", "")
    monkeypatch.setenv("SGLANG_FLAGS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FlagError, match="not an SGLang package or wheel"):
        check_launch(wheel, argv=["--model-path", "/m"], model_class=KIMI, python=sys.executable)
    assert not (tmp_path / "cache").exists()
