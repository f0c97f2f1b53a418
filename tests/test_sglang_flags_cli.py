"""bin/sglang-flags as an operator runs it, on the real SGLang 0.5.9 (its own parser imported in the
0.5.9 runtime environment) and the real 0.5.23 (whose parser needs transformers 5.x: the static
table read from its sources). Few subprocesses: each SGLang import takes a while."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CACHE, ROOT

CLI = ROOT / "bin" / "sglang-flags"
WHEEL_0523 = CACHE / "sglang" / "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
KIMI = "KimiK25ForConditionalGeneration"
EAGLE = [
    "--model-path", "/data/Kimi-K2.5-NVFP4", "--tp-size", "8", "--trust-remote-code",
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/data/eagle3",
    "--attention-backend", "flashinfer",
]  # fmt: skip
RECIPE = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
TOPK4 = ["--speculative-num-steps", "2", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16"]


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SGLANG_TOOLKIT_CACHE": str(CACHE)}
    return subprocess.run([sys.executable, str(CLI), *map(str, args)], capture_output=True, text=True, env=env, timeout=600, check=False)


@pytest.fixture(scope="module")
def wheel_0523() -> Path:
    if not WHEEL_0523.exists():
        pytest.fail(f"no SGLang 0.5.23 wheel at {WHEEL_0523}: run `make sglang-wheels` first")
    return WHEEL_0523


def test_0_5_9_recipe_passes_with_its_own_parser_and_fusion_warns(sglang_runtime_python: Path, sglang_tree: Path) -> None:
    """The default --python is the 0.5.9 runtime environment; allreduce fusion is a no-op there."""
    out = run("--sglang", sglang_tree, "--model-class", KIMI, "--json", "--", *EAGLE, *RECIPE, "--enable-flashinfer-allreduce-fusion")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["parser"] == "sglang" and report["parser_line"] == "parser: sglang (imported)" and report["version"] == "0.5.9"
    assert report["ok"] is True and report["errors"] == []
    assert [w["reference"] for w in report["warnings"]] == ["sglang #16283, #18758"]
    assert "no-op" in report["warnings"][0]["text"]


def test_0_5_9_abbreviation_and_topk_tree_refused(sglang_runtime_python: Path) -> None:
    wheel = CACHE / "sglang" / "sglang-0.5.9-py3-none-any.whl"
    out = run("--sglang", wheel, "--model-class", KIMI, "--python", sglang_runtime_python, "--", *EAGLE, *TOPK4, "--tp", "8")
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "parser: sglang (imported)" in lines
    assert any("SGLang's own parser refuses: --tp is an abbreviation" in line and "--tp-size" in line for line in lines)
    assert any(line.startswith("error: --speculative-eagle-topk 4") and "#19689" in line and "triton" in line for line in lines)


def test_0_5_23_recipe_passes_on_the_static_table(wheel_0523: Path) -> None:
    out = run("--sglang", wheel_0523, "--model-class", KIMI, "--", *EAGLE, *RECIPE)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "sglang 0.5.23" in out.stdout
    assert "parser: static table (cannot import SGLang's parser" in out.stdout


def test_0_5_23_fusion_refused_topk_tree_acknowledged(wheel_0523: Path) -> None:
    out = run(
        "--sglang", wheel_0523, "--model-class", KIMI, "--allow-topk-tree-on-mla", "--python", "/nonexistent/python", "--json",
        "--", *EAGLE, *TOPK4, "--enable-flashinfer-allreduce-fusion",
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["parser"] == "static" and "/nonexistent/python" in report["parser_reason"]
    assert [e["reference"] for e in report["errors"]] == ["sglang #18758, #32330"]
    assert "requires SM90 or SM10X" in report["errors"][0]["message"]
    assert any("acknowledged" in w["message"] for w in report["warnings"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model-class", KIMI, "--", "--tp-size", "8"], "--sglang"),
        (["--sglang", "/nonexistent", "--model-class", KIMI, "--", "--tp-size", "8"], "no such file"),
        (["--sglang", ".", "--model-class", KIMI, "--tp-size", "8"], "unrecognized arguments: --tp-size 8; the launch flags go after --"),
        (["--sglang", ".", "--model-class", KIMI], "give the launch flags after --"),
        (["--sglang", ".", "--model-class", KIMI, "--gpu-cc", "sm120", "--", "--tp-size", "8"], "--gpu-cc takes MAJOR.MINOR"),
    ],
)
def test_bad_usage_exits_2(args: list[str], message: str) -> None:
    out = run(*args)
    assert out.returncode == 2 and message in out.stderr, out.stderr
