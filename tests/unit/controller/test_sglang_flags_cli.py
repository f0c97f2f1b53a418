"""sglang-flags and its gate (plugins/plugin_utils/sglang_sm120_controller/flag_gate.py) as an operator runs them, on the real
SGLang 0.5.9 and 0.5.23 (each one's own ServerArgs built in that release's runtime environment, device
faked as 8 RTX PRO 6000, compute capability 12.0), and the partial verdict on the static table read
from 0.5.23's sources where no runtime is there.

SGLang's import takes most of a check's ~10 s, so the runtime runs three times in all: one batch of
flag sets through flag_gate.check_flag_sets, two command lines. Those tests are skipped, with the
reason, only where the 0.5.9 runtime or its unpacked tree is absent (as tests/unit/host/test_server_args_check.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from test_host_facts import EIGHT_GPUS, HF, FakeHost
from test_server_args_check import REMOTE_CODE_STANDIN, eagle3_recipe

from conftest import BIN, CACHE, DATA, needed
from sglang_sm120.host.nvidia_smi import parse_query_output
from sglang_sm120.launch.flag_check import check_launch
from sglang_sm120.launch.start_failures import (
    Context,
    HostFacts,
    evaluate_entry,
    read_host_facts,
    read_model_dir,
)
from sglang_sm120_controller.flag_gate import FlagSet, GateReport, check_flag_sets, device_for, find_runtime, flashinfer_pin
from sglang_sm120_controller.paths import CATALOGUE
from sglang_sm120_controller.toolkit_data import load_catalogue

CLI = BIN / "sglang-flags"
WHEEL_0523 = CACHE / "sglang" / "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
WHEEL_059 = CACHE / "sglang" / "sglang-0.5.9-py3-none-any.whl"
RUNTIME = CACHE / "sglang-runtime" / "0.5.9"
PYTHON = RUNTIME / "venv" / "bin" / "python"
TREE = CACHE / "sglang" / "0.5.9"
MODELS = DATA / "models"
DRAFT = MODELS / "kimi-k2.5-eagle3"
HOST8 = DATA / "start-failures" / "host-8x-rtx-pro-6000.json"
# the role's fixed environment: the draft's 131072 positions are below Kimi's 262144 (draft-context-longer-than-draft)
ALLOW_LONGER = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
KIMI = "KimiK25ForConditionalGeneration"
EAGLE = [
    "--model-path", "/data/Kimi-K2.5-NVFP4", "--tp-size", "8", "--trust-remote-code",
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/data/eagle3",
    "--attention-backend", "flashinfer",
]  # fmt: skip
RECIPE = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
SPEC_3_1_16 = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "16"]
SPEC_2_4_8 = ["--speculative-num-steps", "2", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]
TOPK4 = ["--speculative-num-steps", "2", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16"]
BF16 = ["--kv-cache-dtype", "bfloat16"]  # explicit, so the checkpoint's FP8 KV hint (catalogue row 6) stays out of the way
# explicit on 0.5.9, so the checkpoint's config.json quant_method modelopt is not read as ModelOpt FP8 (catalogue)
QUANT = ["--quantization", "modelopt_fp4"]
# explicit on 0.5.23, so the NVFP4 checkpoint's auto MoE runner (flashinfer_trtllm after the load) stays out of the way
CUTLASS_MOE = ["--moe-runner-backend", "flashinfer_cutlass"]
UNQUANT_DRAFT = ["--speculative-draft-model-quantization", "unquant"]
ENTRIES = [e.id for e in load_catalogue() if not e.run_time_only]  # the gate's verdicts (run-time-only entries are the canary's)

needs_runtime = pytest.mark.skipif(
    not (RUNTIME / ".stamp").exists() or not (TREE / "sglang" / "srt" / "server_args.py").is_file(),
    reason=f"needs the SGLang 0.5.9 runtime at {RUNTIME} (`make sglang-runtime`) and the unpacked tree at {TREE} (`make sglang-wheels`)",
)


def draft_tokens_rewrite(version: str, logged_at: str) -> str:
    """The warning for --speculative-num-draft-tokens 16 with topk 1: SGLang ``version`` uses num_steps + 1 (3 + 1)
    instead and logs it at ``logged_at``."""
    return (
        f"--speculative-num-draft-tokens 16: SGLang {version} uses 4 instead (speculative_num_draft_tokens, silently); SGLang logs: "
        f"WARNING {logged_at}: speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
        "speculative_eagle_topk == 1"
    )


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "SGLANG_TOOLKIT_CACHE": str(CACHE), **(env or {})}
    return subprocess.run([sys.executable, str(CLI), *map(str, args)], capture_output=True, text=True, env=full, timeout=600, check=False)


@pytest.fixture(scope="module")
def wheel_0523() -> Path:
    return needed(WHEEL_0523, "SGLang 0.5.23 wheel", "`make sglang-wheels`")


@pytest.fixture(scope="module")
def kimi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Kimi-K2.5-NVFP4 shaped: config.json and hf_quant_config.json (tests/data/models/README.md), the
    index holding only metadata.total_size (tests/data/start-failures/README.md), and the TEST FIXTURE
    stand-in for the model's own configuration_kimi_k25.py that --trust-remote-code loads
    (tests/unit/host/test_server_args_check.py)."""
    directory = tmp_path_factory.mktemp("kimi-k2.5-nvfp4")
    for name in ("config.json", "hf_quant_config.json"):
        shutil.copy(MODELS / "kimi-k2.5-nvfp4" / name, directory / name)
    shutil.copy(DATA / "start-failures" / "kimi-k2.5-nvfp4" / "model.safetensors.index.json", directory)
    (directory / "configuration_kimi_k25.py").write_text(REMOTE_CODE_STANDIN)
    return directory


@pytest.fixture(scope="module")
def deepseek_v3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DeepSeek-V3 shaped: the text_config of the Kimi fixture (a DeepseekV3ForCausalLM, see
    tests/data/models/README.md) on its own, model_type deepseek_v3 so transformers' own
    DeepseekV3Config reads it (no remote code)."""
    config = json.loads((MODELS / "kimi-k2.5-nvfp4" / "config.json").read_text())["text_config"]
    config.pop("auto_map", None)
    config["model_type"] = "deepseek_v3"
    directory = tmp_path_factory.mktemp("deepseek-v3")
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture(scope="module")
def host8() -> HostFacts:
    return read_host_facts(HOST8)


@pytest.fixture(scope="module")
def gate(kimi: Path, deepseek_v3: Path, host8: HostFacts) -> dict[str, GateReport]:
    """Every flag set through the gate in one runtime process, --gpu-cc 12.0 on the host facts' GPUs."""
    base = ["--model-path", "/data/Kimi-K2.5-NVFP4", "--tp-size", "8", *BF16, *QUANT]
    # the bf16 draft unquantized, as the toolkit's profiles give it (else it inherits --quantization: a catalogue entry)
    eagle3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/data/eagle3", *UNQUANT_DRAFT]
    recipe = eagle3_recipe(Path("/data/Kimi-K2.5-NVFP4"), Path("/data/eagle3/output_100k_sglang/4"))
    sets = {
        "no-num-steps": [*base, *eagle3, "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
        "trtllm-mha": [*base, "--attention-backend", "trtllm_mha"],
        "bad-choice": [*base, "--attention-backend", "no_such_backend"],
        "draft-tokens-16": [*base, *eagle3, *SPEC_3_1_16, "--attention-backend", "flashinfer"],
        # NEXTN is SGLang's alias of EAGLE: it resolves it, and the rules read EAGLE.
        "nextn": [*base, "--speculative-algorithm", "NEXTN", *SPEC_2_4_8, "--attention-backend", "flashinfer", *UNQUANT_DRAFT],
        "recipe": recipe,
        "recipe-bf16": [*recipe, *BF16],
        # the toolkit's eagle3 profile for 0.5.9 (role toolkit_defaults: stack_quantization, the draft unquantized)
        "recipe-toolkit": [*recipe, *BF16, *QUANT, "--speculative-draft-model-quantization", "unquant"],
    }
    # the role's fixed environment (sglang_launch_base_env): the draft's 131072 positions are below Kimi's 262144
    # (catalogue entry draft-context-longer-than-draft)
    allow = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    flag_sets = [FlagSet(argv, env=allow, model=kimi, draft_model=DRAFT, label=label) for label, argv in sets.items()]
    # DeepSeek MTP without a draft path: SGLang fills it in with the model's own.
    mtp = ["--model-path", "/data/DeepSeek-V3", "--tp-size", "8", "--speculative-algorithm", "EAGLE", *RECIPE]
    flag_sets.append(FlagSet(mtp, model=deepseek_v3, label="mtp"))
    reports = check_flag_sets(TREE, flag_sets, model_class=KIMI, gpu_cc="12.0", host=host8)
    return {r.label or "": r for r in reports}


def entry(report: GateReport, entry_id: str) -> Any:
    return next(v for v in report.verdicts if v.id == entry_id)


@needs_runtime
def test_sglangs_own_check_ran_in_the_releases_runtime(gate: dict[str, GateReport]) -> None:
    report = gate["recipe-toolkit"]
    assert report.complete and report.python == str(PYTHON)
    assert report.python_reason == "the runtime environment `make sglang-runtime` builds for SGLang 0.5.9; no --python given"
    assert report.device == {
        "capability": "12.0",
        "memory_mib": 97887,
        "count": 8,
        "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "flashinfer_version": "0.6.3",
    }
    assert report.device_from[0] == "compute capability 12.0 (--gpu-cc)"
    assert "FlashInfer 0.6.3, the version SGLang 0.5.9 pins (its METADATA)" in report.device_from
    sa = report.server_args
    assert sa is not None and sa["sglang_version"] == "0.5.9" and sa["import_seconds"] > 0
    assert all(r.server_args and r.server_args["seconds"] >= 0 for r in gate.values())
    assert report.verdict_line.startswith("verdict: complete")


@needs_runtime
def test_eagle3_without_num_steps_is_refused_with_sglangs_assertion(gate: dict[str, GateReport]) -> None:
    report = gate["no-num-steps"]
    assert report.complete and not report.ok
    assert report.server_args is not None and report.server_args["stage"] == "post_init"
    assert report.flags.errors[0].message == (
        "SGLang 0.5.9 refuses the flags (post_init): AssertionError: (no message); raised at "
        "sglang/srt/server_args.py:2425 in _handle_speculative_decoding: `and self.speculative_num_draft_tokens is None`"
    )
    assert "sglang/srt/server_args.py:2425" in report.flags.errors[0].fix
    # SGLang refused, so nothing was resolved: the catalogue reads the flags as typed, and says so.
    assert report.start_failures is not None and report.start_failures["flag_values"] == "typed"
    assert entry(report, "trtllm-mla-on-sm120").evidence[0] == "flags as typed (SGLang's ServerArgs did not resolve them)"


@needs_runtime
def test_trtllm_mha_is_refused_with_sglangs_message(gate: dict[str, GateReport]) -> None:
    report = gate["trtllm-mha"]
    assert not report.ok
    assert report.flags.errors[0].message == (
        "SGLang 0.5.9 refuses the flags (post_init): ValueError: TRTLLM MHA backend is only supported on Blackwell GPUs "
        "(SM100). Please use a different backend.; raised at sglang/srt/server_args.py:1900 in "
        "_handle_attention_backend_compatibility: `raise ValueError(`"
    )


@needs_runtime
def test_a_value_sglangs_parser_refuses_is_its_argparse_message(gate: dict[str, GateReport]) -> None:
    message = gate["bad-choice"].flags.errors[0].message
    assert message.startswith("SGLang 0.5.9's parser refuses the flags: argument --attention-backend: invalid choice: 'no_such_backend'")
    assert message.endswith("; in SGLang at sglang/srt/server_args.py:5591 in prepare_server_args: `raw_args = parser.parse_args(argv)`")


@needs_runtime
def test_draft_tokens_16_with_topk_1_is_a_rewrite_warning(gate: dict[str, GateReport]) -> None:
    """0.5.9 _handle_speculative_decoding: with topk 1, draft tokens become num_steps + 1 (3 + 1)."""
    report = gate["draft-tokens-16"]
    assert report.ok and report.flags.errors == [], [e.text() for e in report.flags.errors]
    assert [w.message for w in report.flags.warnings] == [draft_tokens_rewrite("0.5.9", "server_args.py:2447")]
    assert report.server_args is not None
    assert [(c["flag"], c["given"], c["resolved"]) for c in report.server_args["rewritten"]] == [("--speculative-num-draft-tokens", 16, 4)]
    lines = report.lines()
    assert any(line.startswith("warning: --speculative-num-draft-tokens 16: SGLang 0.5.9 uses 4 instead") for line in lines)


@needs_runtime
def test_the_rules_read_the_values_sglang_resolved(gate: dict[str, GateReport]) -> None:
    """--speculative-algorithm NEXTN: SGLang runs EAGLE (a reported rewrite); the catalogue and the
    hardware rules read EAGLE, topk 4 and flashinfer as SGLang resolved them."""
    report = gate["nextn"]
    assert report.flags.warnings[0].message.startswith('--speculative-algorithm "NEXTN": SGLang 0.5.9 uses "EAGLE" instead')
    assert report.start_failures is not None and report.start_failures["flag_values"] == "resolved"
    tree = entry(report, "topk-tree-flashinfer-mla")
    assert tree.verdict == "refused", tree.text()
    assert tree.evidence[1] == "flags as SGLang 0.5.9's ServerArgs resolved them"
    assert "--speculative-algorithm EAGLE (typed NEXTN: the value SGLang resolved)" in tree.evidence
    assert "--speculative-eagle-topk 4 (> 1)" in tree.evidence
    # flag_rules' own rules too: on the typed NEXTN they saw no EAGLE algorithm and passed the flags.
    errors = [e.message for e in report.flags.errors]
    assert any(e.startswith("--speculative-eagle-topk 4 with --attention-backend flashinfer on an MLA target") for e in errors)
    assert "--speculative-algorithm EAGLE needs a draft model" in errors
    typed = check_launch(TREE, argv=gate["nextn"].flags.argv, model_class=KIMI, python=None)
    assert typed.ok, [e.text() for e in typed.errors]


@needs_runtime
def test_deepseek_mtp_without_a_draft_path_is_accepted(gate: dict[str, GateReport], deepseek_v3: Path) -> None:
    """SGLang fills the draft path in for DeepSeek MTP; the typed flags' rule refused this valid setup."""
    report = gate["mtp"]
    assert report.ok and report.flags.errors == [], [e.text() for e in report.flags.errors]
    assert report.server_args is not None and report.server_args["resolved"]["speculative_draft_model_path"] == str(deepseek_v3)
    assert '--speculative-draft-model-path "/data/DeepSeek-V3"' in report.chosen
    typed = check_launch(TREE, argv=report.flags.argv, model_class="DeepseekV3ForCausalLM", python=None)
    assert [e.message for e in typed.errors] == ["--speculative-algorithm EAGLE needs a draft model"]


@needs_runtime
def test_upstream_kimi_eagle3_recipe_on_the_kimi_fixtures(gate: dict[str, GateReport]) -> None:
    """SGLang 0.5.9 accepts upstream's recipe and rewrites nothing. The catalogue refuses it twice:
    SGLang resolves --kv-cache-dtype to auto, and 0.5.9's ModelRunner.configure_kv_cache_dtype (run
    after the load, not in ServerArgs) then takes FP8 from the checkpoint's kv_cache_scheme (domain
    notes row 6); and without --quantization SGLang reads config.json's quant_method modelopt as
    ModelOpt FP8 and stops at the model load. With the toolkit's profile (--kv-cache-dtype,
    --quantization modelopt_fp4, the draft unquantized) it is accepted; the one warning is --enable-metrics'
    /v1/loads 500 on FastAPI 0.137 and later."""
    report = gate["recipe"]
    assert report.server_args is not None and report.server_args["verdict"] == "ok" and report.server_args["rewritten"] == []
    assert report.flags.ok and not report.ok
    assert [v.id for v in report.refused_entries] == ["modelopt-nvfp4-read-as-fp8", "fp8-kv-from-checkpoint"]
    assert "--quantization not set" in entry(report, "modelopt-nvfp4-read-as-fp8").evidence
    assert "--kv-cache-dtype auto (not given: the value SGLang resolved)" in entry(report, "fp8-kv-from-checkpoint").evidence
    # The memory entry reads SGLang's own fraction (0.752 for this multimodal model with a draft),
    # not the approximation from its params (0.874).
    memory = entry(report, "weights-exceed-static-memory")
    assert memory.verdict == "ok"
    assert "static memory = --mem-fraction-static 0.7524 (not given: the value SGLang resolved) x 97887 MiB" in memory.text()
    assert "= 71.9 GiB; 3.1 GiB left for the KV cache" in memory.text()
    assert [v.id for v in gate["recipe-bf16"].refused_entries] == ["modelopt-nvfp4-read-as-fp8"]
    explicit = gate["recipe-toolkit"]
    assert explicit.ok and explicit.flags.errors == []
    # --enable-metrics on 0.5.9: the metrics middleware answers /v1/loads with 500 on FastAPI 0.137+ (warned, not refused)
    # and FlashInfer 0.6.3's SM120 FP4 GEMM without its PDL barriers (0.5.9's pin; wrong tiles under load)
    warned = sorted(v.id for v in explicit.verdicts if v.verdict in ("refused", "warning"))
    assert warned == ["flashinfer-fp4-gemm-pdl-race-on-sm120", "v1-loads-500-metrics-middleware-fastapi-0137"]
    assert not any(c.startswith("--attention-backend") for c in explicit.chosen)  # given, so not SGLang's choice
    assert explicit.server_args is not None and explicit.server_args["resolved"]["quantization"] == "modelopt_fp4"


@needs_runtime
def test_cli_complete_json_lists_every_entry_and_sglangs_verdict(kimi: Path) -> None:
    """No --python: the runtime of the release is found; allreduce fusion is a no-op on 0.5.9 (both
    the hardware rule and the catalogue say so), and 0.5.9's FlashInfer FP4 GEMM race is warned about."""
    out = run(
        "--sglang", TREE, "--model-class", KIMI, "--gpu-cc", "12.0", "--json", "--model", kimi, "--draft-model", DRAFT,
        "--host-facts", HOST8, "--env", ALLOW_LONGER, "--", *EAGLE, *RECIPE, *BF16, *QUANT, *UNQUANT_DRAFT,
        "--enable-flashinfer-allreduce-fusion",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] is True and report["verdict_scope"] == "complete" and report["partial_reason"] is None
    assert report["parser"] == "server_args" and report["version"] == "0.5.9"
    assert report["python"] == str(PYTHON) and "builds for SGLang 0.5.9; no --python given" in report["python_reason"]
    assert report["server_args"]["verdict"] == "ok" and report["server_args"]["error"] is None
    assert report["server_args"]["argv_checked"][1] == str(kimi)
    assert [w["reference"] for w in report["warnings"]] == ["sglang #16283, #18758"]
    sf = report["start_failures"]
    assert sorted(v["id"] for v in sf["verdicts"]) == sorted(ENTRIES) and sf["flag_values"] == "resolved"
    assert all(v["evidence"] for v in sf["verdicts"]), sf["verdicts"]
    # beside the no-op: FlashInfer 0.6.3's SM120 FP4 GEMM without its PDL barriers (the NVFP4 model, flashinfer_cutlass)
    warned = sorted(v["id"] for v in sf["verdicts"] if v["verdict"] == "warning")
    assert warned == ["allreduce-fusion-noop-on-sm120", "flashinfer-fp4-gemm-pdl-race-on-sm120"]
    assert sf["counts"]["refused"] == 0 and sf["catalogue"] == str(CATALOGUE)


@needs_runtime
def test_cli_wheel_abbreviation_and_topk_tree_refused(kimi: Path) -> None:
    """A wheel (unpacked once into the cache) under --python; SGLang's argparse expands --tp, the toolkit refuses it."""
    out = run(
        "--sglang", WHEEL_059, "--model-class", KIMI, "--python", PYTHON, "--model", kimi, "--", *EAGLE, *TOPK4, *BF16, *QUANT, "--tp", "8"
    )
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[1] == f"python: {PYTHON} (given with --python)"
    assert "parser: sglang (imported; its ServerArgs built and checked: prepare_server_args, check_server_args)" in lines
    assert any(line.startswith("verdict: complete") for line in lines)
    assert "error: --tp is an abbreviation (SGLang's parser expands it to --tp-size), which is refused; fix: use --tp-size" in lines
    assert any(line.startswith("error: --speculative-eagle-topk 4") and "#19689" in line and "triton" in line for line in lines)
    assert any(line.startswith("refused: [topk-tree-flashinfer-mla]") for line in lines)
    assert lines[-1] == "flags refused: 3 problem(s)"


RUNTIME_0523 = CACHE / "sglang-runtime" / "0.5.23"
PYTHON_0523 = RUNTIME_0523 / "venv" / "bin" / "python"
TREE_0523 = CACHE / "sglang" / "0.5.23"
needs_runtime_0523 = pytest.mark.skipif(
    not (RUNTIME_0523 / ".stamp").exists() or not (TREE_0523 / "sglang" / "srt" / "server_args.py").is_file(),
    reason=f"needs the SGLang 0.5.23 runtime at {RUNTIME_0523} (`make sglang-runtime`) "
    f"and the unpacked tree at {TREE_0523} (`make sglang-wheels`)",
)


@pytest.fixture(scope="module")
def gate_0523(kimi: Path, host8: HostFacts) -> dict[str, GateReport]:
    """The real 0.5.23 through the gate, its own runtime found by itself, --gpu-cc 12.0 on the host
    facts' GPUs, in one runtime process."""
    base = ["--model-path", "/data/Kimi-K2.5-NVFP4", "--tp-size", "8", *BF16]
    eagle3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/data/eagle3"]
    recipe = eagle3_recipe(Path("/data/Kimi-K2.5-NVFP4"), Path("/data/eagle3/output_100k_sglang/4"), TREE_0523)
    # Without --kv-cache-dtype: 0.5.23 itself refuses trtllm_mla with "bfloat16" (its MLA check knows
    # only the spelling "bf16"), which would hide the catalogue's verdict on the resolved values.
    no_kv = ["--model-path", "/data/Kimi-K2.5-NVFP4", "--tp-size", "8"]
    sets = {
        "trtllm-mla": [*no_kv, "--attention-backend", "trtllm_mla"],
        "trtllm-mla-decode": [*no_kv, "--decode-attention-backend", "trtllm_mla"],
        "trtllm-mla-bf16": [*base, "--attention-backend", "trtllm_mla"],
        "fa3": [*base, "--attention-backend", "fa3"],
        "moe-flashinfer-trtllm": [*base, "--moe-runner-backend", "flashinfer_trtllm"],
        "no-num-steps": [*base, *eagle3, "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
        "base-gpu-id": [*base, "--base-gpu-id", "-1"],
        "draft-tokens-16": [*base, *eagle3, *SPEC_3_1_16, "--attention-backend", "flashinfer", *CUTLASS_MOE],
        # With DP attention SGLang lowers its automatic --mem-fraction-static to 0.61, which the weights
        # do not fit (weights-exceed-static-memory): given explicitly here.
        "deprecated": [
            *base,
            *CUTLASS_MOE,
            "--dp-size",
            "8",
            "--enable-dp-attention",
            "--disable-cuda-graph",
            "--mem-fraction-static",
            "0.85",
        ],
        "recipe": recipe,
        "recipe-bf16": [*recipe, *BF16],
        # the toolkit's eagle3 profile for 0.5.23 (role toolkit_defaults: stack_moe_runner_backend)
        "recipe-toolkit": [*recipe, *BF16, *CUTLASS_MOE],
        # SGLang's own remap: with --quantization modelopt_fp4 its ServerArgs turns auto into flashinfer_cutlass on SM120
        "recipe-quantization": [*recipe, *BF16, "--quantization", "modelopt_fp4"],
    }
    # the role's fixed environment (sglang_launch_base_env): the draft's 131072 positions are below Kimi's 262144
    # (catalogue entry draft-context-longer-than-draft)
    allow = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    flag_sets = [FlagSet(argv, env=allow, model=kimi, draft_model=DRAFT, label=label) for label, argv in sets.items()]
    reports = check_flag_sets(TREE_0523, flag_sets, model_class=KIMI, gpu_cc="12.0", host=host8)
    return {r.label or "": r for r in reports}


@needs_runtime_0523
def test_0_5_23_sglangs_own_check_ran_in_its_runtime(gate_0523: dict[str, GateReport]) -> None:
    report = gate_0523["recipe-bf16"]
    assert report.complete and report.python == str(PYTHON_0523)
    assert report.python_reason == "the runtime environment `make sglang-runtime` builds for SGLang 0.5.23; no --python given"
    assert report.device is not None and report.device["flashinfer_version"] == "0.7.2"
    assert report.server_args is not None and report.server_args["sglang_version"] == "0.5.23"
    assert report.verdict_line.startswith("verdict: complete")


@needs_runtime_0523
@pytest.mark.parametrize(
    ("label", "entry_id"),
    [
        ("trtllm-mla", "trtllm-mla-on-sm120"),
        ("trtllm-mla-decode", "trtllm-mla-on-sm120"),
        ("fa3", "fa3-on-sm120"),
        ("moe-flashinfer-trtllm", "flashinfer-trtllm-moe-fp4-on-sm120"),
    ],
)
def test_0_5_23_backends_sm120_cannot_run_are_refused(gate_0523: dict[str, GateReport], label: str, entry_id: str) -> None:
    """SGLang 0.5.23's ServerArgs takes them on 12.0 (tests/unit/host/test_server_args_check.py); the catalogue,
    reading the values SGLang resolved, refuses them."""
    report = gate_0523[label]
    assert report.complete and report.server_args is not None and report.server_args["verdict"] == "ok"
    assert not report.ok
    assert report.start_failures is not None and report.start_failures["flag_values"] == "resolved"
    assert entry_id in [v.id for v in report.refused_entries], [v.text() for v in report.verdicts if v.verdict != "ok"]


@needs_runtime_0523
def test_0_5_23_refusals_are_sglangs_own(gate_0523: dict[str, GateReport]) -> None:
    mla = gate_0523["trtllm-mla-bf16"]
    assert not mla.ok and mla.server_args is not None and mla.server_args["stage"] == "resolve"
    assert mla.flags.errors[0].message.startswith(
        "SGLang 0.5.23 refuses the flags (resolve): ValueError: TensorRT-LLM MLA backend only supports kv-cache-dtype of "
        "fp8_e4m3, bf16, or auto.; raised at sglang/srt/arg_groups/overrides.py:1215 in _mla_kv_cache_dtype_checks"
    )
    assert "trtllm-mla-on-sm120" in [v.id for v in mla.refused_entries]  # on the flags as typed
    steps = gate_0523["no-num-steps"]
    assert not steps.ok and steps.server_args is not None and steps.server_args["stage"] == "resolve"
    assert steps.flags.errors[0].message == (
        "SGLang 0.5.23 refuses the flags (resolve): AssertionError: (no message); raised at "
        "sglang/srt/arg_groups/speculative_hook.py:1162 in _handle_eagle_family: `and cfg.speculative_num_draft_tokens is None`"
    )
    gpu = gate_0523["base-gpu-id"]
    assert not gpu.ok and gpu.server_args is not None and gpu.server_args["stage"] == "check_server_args"
    assert gpu.flags.errors[0].message.startswith(
        "SGLang 0.5.23 refuses the flags (check_server_args): AssertionError: base_gpu_id must be non-negative; "
        "raised at sglang/srt/arg_groups/validation_hook.py:204 in check_server_args"
    )


@needs_runtime_0523
def test_0_5_23_rewrites_are_warnings(gate_0523: dict[str, GateReport]) -> None:
    report = gate_0523["draft-tokens-16"]
    assert report.ok and report.flags.errors == [], [e.text() for e in report.flags.errors]
    assert [w.message for w in report.flags.warnings] == [draft_tokens_rewrite("0.5.23", "speculative_hook.py:1259")]


@needs_runtime_0523
def test_0_5_23_deprecated_switches_are_accepted(gate_0523: dict[str, GateReport]) -> None:
    """--enable-dp-attention and --disable-cuda-graph take no value on 0.5.23 (the static table
    refused them: "takes one value, found 0"); SGLang accepts them, logs their deprecation, and turns
    --dp-size 8 --enable-dp-attention into attention-DP width 8: reported as warnings."""
    report = gate_0523["deprecated"]
    assert report.complete and report.ok, [e.text() for e in report.flags.errors]
    assert report.server_args is not None and report.server_args["resolved"]["attn_dp_size"] == 8
    assert [v.id for v in report.refused_entries] == []
    warnings = [w.message for w in report.flags.warnings]
    assert any(w.startswith("--dp-size 8: SGLang 0.5.23 uses 1 instead (dp_size") for w in warnings), warnings
    assert "--attn-dp-size 8" in report.chosen
    assert any("'--enable-dp-attention' is deprecated" in line for line in report.server_args["log"])
    assert any("'--disable-cuda-graph' is deprecated" in line for line in report.server_args["log"])
    # 0.85 given: with DP attention SGLang itself would keep more outside the static pool (a warning)
    chosen = report.server_args["sglang_reserve"]["auto_mem_fraction_static"]
    assert 0.5 < chosen < 0.85, report.server_args["sglang_reserve"]
    reserve = [v for v in report.verdicts if v.id == "static-fraction-above-sglang-reserve"]
    assert [v.verdict for v in reserve] == ["warning"]
    expected = f"--mem-fraction-static 0.85 leaves 0.150 of each GPU outside the static pool; SGLang 0.5.23 picks {chosen:.4g} itself"
    assert expected in reserve[0].text()


@needs_runtime_0523
def test_0_5_23_upstream_kimi_eagle3_recipe_on_the_kimi_fixtures(gate_0523: dict[str, GateReport]) -> None:
    """SGLang 0.5.23 accepts upstream's recipe and rewrites nothing, but leaves the NVFP4 checkpoint's
    MoE runner on auto, which it turns into flashinfer_trtllm after the load: the catalogue refuses it
    on the value SGLang resolved (and warns of the checkpoint's FP8 KV without --kv-cache-dtype). With
    the toolkit's profile for 0.5.23 (--moe-runner-backend flashinfer_cutlass) nothing is left; with
    --quantization modelopt_fp4 instead, SGLang's own remap picks flashinfer_cutlass, and the gate reads that."""
    report = gate_0523["recipe"]
    assert report.server_args is not None and report.server_args["verdict"] == "ok" and report.server_args["rewritten"] == []
    assert not report.ok and [v.id for v in report.refused_entries] == ["nvfp4-moe-runner-auto-is-trtllm-on-sm120"]
    assert [v.id for v in report.verdicts if v.verdict == "warning"] == ["fp8-kv-from-checkpoint-later"]
    bf16 = gate_0523["recipe-bf16"]
    assert bf16.flags.errors == [] and [v.id for v in bf16.refused_entries] == ["nvfp4-moe-runner-auto-is-trtllm-on-sm120"]
    moe = entry(bf16, "nvfp4-moe-runner-auto-is-trtllm-on-sm120")
    assert "--moe-runner-backend auto (not given: the value SGLang resolved)" in moe.evidence, moe.evidence
    assert any(e.startswith("model quantization modelopt_fp4") for e in moe.evidence), moe.evidence
    toolkit = gate_0523["recipe-toolkit"]
    assert toolkit.ok and toolkit.flags.errors == [] and toolkit.flags.warnings == []
    assert [v.id for v in toolkit.verdicts if v.verdict in ("refused", "warning")] == []
    remapped = gate_0523["recipe-quantization"]
    assert remapped.server_args is not None and remapped.server_args["resolved"]["moe_runner_backend"] == "flashinfer_cutlass"
    assert entry(remapped, "nvfp4-moe-runner-auto-is-trtllm-on-sm120").verdict == "ok"


def test_a_wheel_that_is_not_sglang_is_refused_before_anything_is_unpacked(tmp_path: Path) -> None:
    wheel = tmp_path / "notsglang-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("notsglang/__init__.py", "")
    cache = tmp_path / "flags-cache"
    out = run(
        "--sglang", wheel, "--model-class", KIMI, "--python", PYTHON, "--", "--model-path", "/m", env={"SGLANG_FLAGS_CACHE": f"{cache}"}
    )
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    assert f"--sglang {wheel} is not SGLang, refused before anything was unpacked" in out.stderr
    assert "srt/server_args.py" in out.stderr
    assert not cache.exists()


def test_partial_verdict_says_why(tmp_path: Path, kimi: Path) -> None:
    """No model config here, no runtime for the release, a --python that is not there: the flags
    get today's check (here the static table) and the verdict says it is partial, and why."""
    argv = ["--model-path", "/data/Kimi-K2.5-NVFP4", "--tp-size", "8"]
    not_here, no_runtime = check_flag_sets(
        TREE, [FlagSet(argv), FlagSet(argv, model=kimi)], model_class=KIMI, python="/nonexistent/python", catalogue_when_partial=False
    )
    assert not not_here.complete and not not_here.server_args and not_here.start_failures is None
    assert not_here.partial_reason.startswith("--python /nonexistent/python: no such file; and the model's config files are not here")
    assert "(--model-path /data/Kimi-K2.5-NVFP4 is no directory holding config.json on this machine)" in not_here.partial_reason
    assert "give --model DIR" in not_here.partial_reason
    assert not_here.flags.parser == "static" and "/nonexistent/python" in not_here.flags.parser_reason
    assert no_runtime.partial_reason == "--python /nonexistent/python: no such file"
    assert no_runtime.verdict_line.startswith("verdict: partial: SGLang's ServerArgs did not run (--python /nonexistent/python")
    assert no_runtime.lines()[-1] == "flags accepted"


def test_resolved_values_replace_the_typed_ones(host8: HostFacts, kimi: Path) -> None:
    """Without a runtime: a Context holding SGLang's values (as flag_gate builds it) is what the
    conditions read; a switch or path is set when it is neither None nor false; the evidence says so."""
    entries = {e.id: e for e in load_catalogue()}
    typed = {"speculative-algorithm": "NEXTN", "speculative-eagle-topk": "4", "attention-backend": "flashinfer"}
    resolved = {
        "speculative-algorithm": "EAGLE",
        "speculative-eagle-topk": 4,
        "attention-backend": "flashinfer",
        "decode-attention-backend": None,
        "enable-torch-symm-mem": False,
        "mem-fraction-static": 0.7523519433593749,
        "tensor-parallel-size": 8,
        "pipeline-parallel-size": 1,
    }
    aliases = {"tp-size": "tensor-parallel-size", "pp-size": "pipeline-parallel-size"}
    common = dict(env={}, version="0.5.9", capability="12.0", model=read_model_dir(kimi), host=host8, aliases=aliases)
    ctx = Context(flags=typed, resolved=resolved, resolved_by="SGLang 0.5.9's ServerArgs", **common)
    tree = evaluate_entry(entries["topk-tree-flashinfer-mla"], ctx)
    assert tree.verdict == "refused"
    assert "--speculative-algorithm EAGLE (typed NEXTN: the value SGLang resolved)" in tree.evidence
    assert "--attention-backend flashinfer" in tree.evidence  # typed and resolved agree: no note
    symm = evaluate_entry(entries["torch-symm-mem-inactive-on-pcie"], ctx)
    assert symm.verdict == "ok" and symm.evidence == ["flags as SGLang 0.5.9's ServerArgs resolved them", "--enable-torch-symm-mem not set"]
    memory = evaluate_entry(entries["weights-exceed-static-memory"], ctx).text()
    assert "/ (--tp-size 8 (not given: the value SGLang resolved) x --pp-size 1 (not given: the value SGLang resolved))" in memory
    assert "--mem-fraction-static 0.7524 (not given: the value SGLang resolved) x 97887 MiB" in memory
    as_typed = evaluate_entry(entries["topk-tree-flashinfer-mla"], Context(flags=typed, **common))
    assert as_typed.evidence[1] == "flags as typed (SGLang's ServerArgs did not resolve them)"
    assert "--speculative-algorithm NEXTN" in as_typed.evidence


def test_runtime_is_the_releases_own(tmp_path: Path) -> None:
    assert "no runtime environment for SGLang 0.5.23 at" in find_runtime("0.5.23", cache=tmp_path).reason
    unfinished = tmp_path / "sglang-runtime" / "0.5.23" / "venv" / "bin"
    unfinished.mkdir(parents=True)
    (unfinished / "python").touch()
    runtime = find_runtime("0.5.23", cache=tmp_path)
    assert runtime.python is None and "unfinished (no .stamp)" in runtime.reason
    (tmp_path / "sglang-runtime" / "0.5.23" / ".stamp").write_text("x\n")
    assert find_runtime("0.5.23", cache=tmp_path).python == str(unfinished / "python")
    assert find_runtime(None, cache=tmp_path).python is None
    assert find_runtime("0.5.9", python=sys.executable, cache=tmp_path).reason == "given with --python"


def test_device_from_host_facts_or_capability(host8: HostFacts, wheel_0523: Path) -> None:
    assert flashinfer_pin(TREE) == flashinfer_pin(WHEEL_059) == "0.6.3"
    pin = flashinfer_pin(wheel_0523)
    assert pin is not None and pin != "0.6.3"
    device, said = device_for(None, "10.0", None, "0.5.9")
    assert (device["capability"], device["memory_mib"], device["count"]) == ("10.0", 97887, 8)
    assert said[1].endswith("the target host's (give --host-facts for this host's)")
    assert "the release pins no version" in said[2]
    device, said = device_for(host8, None, "0.6.3", "0.5.9")
    assert (device["capability"], device["memory_mib"], device["count"]) == ("12.0", 97887, 8)
    assert said[0] == f"compute capability 12.0 (--host-facts {HOST8})"


def test_0_5_23_recipe_passes_on_the_static_table_with_a_partial_verdict(wheel_0523: Path, tmp_path: Path) -> None:
    """Where no runtime was built (a cache without .cache/sglang-runtime): the static table, said to be partial."""
    out = run("--sglang", wheel_0523, "--model-class", KIMI, "--", *EAGLE, *RECIPE, env={"SGLANG_TOOLKIT_CACHE": str(tmp_path)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "sglang 0.5.23" in out.stdout
    assert "parser: static table (" in out.stdout
    assert f"python: none (no runtime environment for SGLang 0.5.23 at {tmp_path}" in out.stdout
    assert "verdict: partial: SGLang's ServerArgs did not run (no runtime environment for SGLang 0.5.23" in out.stdout


def test_0_5_23_fusion_refused_topk_tree_acknowledged(wheel_0523: Path) -> None:
    out = run(
        "--sglang", wheel_0523, "--model-class", KIMI, "--allow-topk-tree-on-mla", "--python", "/nonexistent/python", "--json",
        "--", *EAGLE, *TOPK4, "--enable-flashinfer-allreduce-fusion",
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["parser"] == "static" and "/nonexistent/python" in report["parser_reason"]
    assert report["verdict_scope"] == "partial" and report["server_args"] is None
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


@needs_runtime
def test_the_same_check_again_reads_sglangs_verdict_back_without_importing_it(kimi: Path, tmp_path: Path) -> None:
    """SGLang's accepted verdict is kept under the cache (flag-gate/verdicts), keyed by every input;
    a changed input (here the environment) is checked again."""
    args = ["--sglang", TREE, "--python", PYTHON, "--model-class", KIMI, "--model", kimi, "--draft-model", DRAFT, "--env", ALLOW_LONGER]
    argv = ["--", *EAGLE, *SPEC_3_1_16, *BF16, *QUANT, *UNQUANT_DRAFT]
    env = {"SGLANG_TOOLKIT_CACHE": str(tmp_path)}
    first = run(*args, *argv, env=env)
    again = run(*args, *argv, env=env)
    assert first.returncode == 0 and again.returncode == 0, first.stdout + first.stderr + again.stdout + again.stderr
    assert "SGLang imported in" in first.stdout and "verdict read back from" not in first.stdout
    assert "verdict read back from " in again.stdout and "same inputs, SGLang not imported" in again.stdout
    assert len(list((tmp_path / "flag-gate" / "verdicts").glob("server-args-*.json"))) == 1

    def verdicts(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith(("warning:", "error:", "ok:", "refused:", "unknown:"))]

    assert verdicts(again.stdout) == verdicts(first.stdout)
    assert any("--speculative-num-draft-tokens 16: SGLang 0.5.9 uses 4 instead" in line for line in verdicts(again.stdout))
    other = run(*args, "--env", "SGLANG_ENABLE_JIT_DEEPGEMM=0", *argv, env=env)
    assert other.returncode == 0 and "SGLang imported in" in other.stdout, other.stdout + other.stderr


@needs_runtime
def test_the_warm_checker_keeps_sglang_imported_for_the_next_checks(kimi: Path, tmp_path: Path) -> None:
    """--warm: the first check starts a checker process (SGLang imported once, a unix socket only its
    user can reach); the next check, with other flags, is answered by the same process."""
    args = ["--sglang", TREE, "--python", PYTHON, "--model-class", KIMI, "--model", kimi, "--draft-model", DRAFT, "--warm", "120"]
    args += ["--env", ALLOW_LONGER]
    env = {"SGLANG_TOOLKIT_CACHE": str(tmp_path)}
    first = run(*args, "--", *EAGLE, *RECIPE, *BF16, *QUANT, *UNQUANT_DRAFT, env=env)
    second = run(*args, "--", *EAGLE, *SPEC_3_1_16, *BF16, *QUANT, *UNQUANT_DRAFT, env=env)
    pids = [re.search(r"by the warm checker pid (\d+) \(", out.stdout) for out in (first, second)]
    try:
        assert first.returncode == 0 and second.returncode == 0, first.stdout + first.stderr + second.stdout + second.stderr
        assert pids[0] and pids[1] and pids[0].group(1) == pids[1].group(1), first.stdout + second.stdout
        assert "; 1 checks answered)" in first.stdout and "; 2 checks answered)" in second.stdout
        # the second flag set is SGLang's own verdict, not the first one's
        assert "--speculative-num-draft-tokens 16: SGLang 0.5.9 uses 4 instead" in second.stdout
        assert "uses 4 instead" not in first.stdout
        (sock,) = (tmp_path / "flag-gate" / "warm").glob("*.sock")
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600 and stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    finally:
        for found in pids:
            if found:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(found.group(1)), signal.SIGTERM)
    bad = run(*args[:-2], "--warm", "-1", "--", *EAGLE, *RECIPE, env=env)
    assert bad.returncode == 2 and "--warm takes seconds, 0 or more" in bad.stderr


# --- the PCIe fabric's host facts through --host-facts ----------------------------------------------

# entry -> (the fact, its value on a host that hangs NCCL, how the evidence names it, a piece of the fix)
FABRIC = {
    "nccl-p2p-uvm-hmm-on": ("uvm_disable_hmm", False, "host uvm_disable_hmm false", "options nvidia_uvm uvm_disable_hmm=1"),
    "nccl-p2p-iommu-translated": ("iommu_mode", "translated", "host iommu_mode translated", "boot with iommu=off"),
    "pcie-aspm-surprise-link-down": ("pcie_aspm_policy", "default", "host pcie_aspm_policy default", "add pcie_aspm=off pcie_port_pm=off"),
}
MULTI_GPU = ["--model-path", "/data/Kimi-K2.5-NVFP4", "--tp-size", "8"]


def saved_facts(path: Path, folder: str, **changes: Any) -> Path:
    """A host-facts file as preflight saves it: the GPU query's parse and what gather reads from a
    tests/data/host-facts folder, with `changes` on top."""
    gpus = [g.as_dict() for g in parse_query_output(EIGHT_GPUS.read_text())]
    path.write_text(json.dumps({"changed": False, "gpus": gpus, **FakeHost(HF / folder).gather().as_dict(), **changes}))
    return path


def gate_on(facts: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """sglang-flags on the static table (no runtime asked for): the catalogue on the flags as typed."""
    return run("--sglang", TREE, "--model-class", KIMI, "--python", "/nonexistent/python", "--host-facts", facts, "--", *argv)


def said(out: subprocess.CompletedProcess[str], entry_id: str) -> str:
    return next(line for line in out.stdout.splitlines() if f"[{entry_id}]" in line)


@pytest.mark.parametrize("entry_id", sorted(FABRIC))
def test_a_fabric_condition_refuses_a_multi_gpu_plan_naming_the_fact_and_the_fix(entry_id: str, tmp_path: Path) -> None:
    """The 8x RTX PRO 6000 host with the operators' fixes (tests/data/host-facts/rtx-pro-6000-pcie) is the
    control: the plan passes there; the same host with one fact put back refuses it, naming that fact
    and the fix; a one-GPU plan on it is not refused."""
    fact, value, evidence, fix = FABRIC[entry_id]
    control = gate_on(saved_facts(tmp_path / "control.json", "rtx-pro-6000-pcie"), *MULTI_GPU)
    assert control.returncode == 0 and control.stdout.splitlines()[-1] == "flags accepted", control.stdout + control.stderr
    assert said(control, entry_id).startswith(f"ok: [{entry_id}]")
    bad = saved_facts(tmp_path / f"{fact}.json", "rtx-pro-6000-pcie", **{fact: value})
    out = gate_on(bad, *MULTI_GPU)
    assert out.returncode == 1, out.stdout + out.stderr
    refused = [line for line in out.stdout.splitlines() if line.startswith("refused: ")]
    assert len(refused) == 1 and refused[0].startswith(f"refused: [{entry_id}]"), out.stdout
    assert "--tp-size 8 (> 1)" in refused[0] and evidence in refused[0] and fix in refused[0], refused[0]
    assert "voipmonitor/rtx6kpro " in refused[0] and out.stdout.splitlines()[-1] == "flags refused: 1 problem(s)"
    one_gpu = gate_on(bad, "--model-path", "/data/Kimi-K2.5-NVFP4", "--tp-size", "1")
    assert one_gpu.returncode == 0 and said(one_gpu, entry_id).startswith(f"ok: [{entry_id}]"), one_gpu.stdout


def test_the_host_as_installed_is_refused_for_all_three_and_warned_about_what_only_slows_it(tmp_path: Path) -> None:
    """tests/data/host-facts/rtx-pro-6000-stock: HMM on, the default ASPM policy, a translating IOMMU, two
    GPUs power-limited to 300 W, BAR1 at 256 MiB; --json carries every verdict with its evidence."""
    out = run(
        "--sglang", TREE, "--model-class", KIMI, "--python", "/nonexistent/python", "--json",
        "--host-facts", saved_facts(tmp_path / "stock.json", "rtx-pro-6000-stock"), "--", *MULTI_GPU,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    verdicts = {v["id"]: v for v in json.loads(out.stdout)["start_failures"]["verdicts"]}
    assert sorted(i for i, v in verdicts.items() if v["verdict"] == "refused") == sorted(FABRIC)
    assert sorted(i for i, v in verdicts.items() if v["verdict"] == "warning") == ["gpu-bar1-below-memory", "gpu-power-limit-below-default"]
    assert (
        "host gpus_power_below_default: GPU2 300 W (default 600 W), GPU3 300 W (default 600 W)"
        in verdicts["gpu-power-limit-below-default"]["evidence"]
    )
    # unknown is never a pass: a file without the facts (the RTX PRO 6000 fixture of the GPU query alone)
    bare = gate_on(HOST8, *MULTI_GPU)
    for entry_id in FABRIC:
        assert said(bare, entry_id).startswith(f"unknown: [{entry_id}]") and "not in the file" in said(bare, entry_id)
