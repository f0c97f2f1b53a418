"""plugins/module_utils/sglang_sm120/launch/server_args.py on the real SGLang 0.5.9: its own ServerArgs, on a faked SM120 host.

All flag sets run in one subprocess under the runtime environment's Python (`make sglang-runtime`),
so SGLang is imported once. Skipped, with the reason, only where that runtime or the unpacked 0.5.9
tree is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]

from sglang_sm120.launch import flags as server_flags  # noqa: E402
from sglang_sm120.launch import server_args as server_args_check  # noqa: E402
from sglang_sm120.release.venv import sglang_version  # noqa: E402
from sglang_sm120_controller.compat import render_profile  # noqa: E402

CACHE = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache"))
RUNTIME = CACHE / "sglang-runtime" / "0.5.9"
PYTHON = RUNTIME / "venv" / "bin" / "python"
TREE = CACHE / "sglang" / "0.5.9"
MODELS = ROOT / "tests" / "data" / "models"
SCRIPT = ROOT / "plugins" / "module_utils" / "sglang_sm120" / "launch" / "server_args.py"
# An RTX PRO 6000 Blackwell as nvidia-smi reports it: capability 12.0, 97887 MiB, eight of them.
SM120 = {"capability": "12.0", "memory_mib": 97887, "count": 8, "flashinfer_version": "0.6.3"}

needs_runtime = pytest.mark.skipif(
    not (RUNTIME / ".stamp").exists() or not (TREE / "sglang" / "srt" / "server_args.py").is_file(),
    reason=f"needs the SGLang 0.5.9 runtime at {RUNTIME} (`make sglang-runtime`) and the unpacked tree at {TREE} (`make sglang-wheels`)",
)

# TEST FIXTURE stand-in for Moonshot's configuration_kimi_k25.py, which the real model directory
# holds and its config.json's auto_map names: with --trust-remote-code, transformers loads the
# config class from the directory. This one re-exports SGLang 0.5.9's own KimiK25Config.
REMOTE_CODE_STANDIN = (
    "# TEST FIXTURE stand-in for the model's own configuration_kimi_k25.py (see tests/unit/host/test_server_args_check.py)\n"
    "from sglang.srt.configs.kimi_k25 import KimiK25Config  # noqa: F401\n"
)


def eagle3_recipe(model: Path, draft: Path, tree: Path = TREE) -> list[str]:
    """Upstream's Kimi-K2.5 EAGLE-3 recipe with --tp-size 8: the eagle3 profile of
    roles/toolkit_defaults/defaults/main/service.yml as the toolkit renders it for that release
    (render_profile, stack_sglang_version = the tree's), paths pointed at the fixtures, without the flags
    the toolkit adds to it: --kv-cache-dtype, --moe-runner-backend, --quantization and
    --speculative-draft-model-quantization (the start gate refuses the recipe without them:
    tests/unit/host/test_start_failures.py, tests/unit/host/test_launch_plan.py, tests/unit/controller/test_sglang_flags_cli.py)."""
    service = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/service.yml").read_text())
    eagle3 = service["sglang_profiles"]["eagle3"]
    assert eagle3.pop("kv-cache-dtype") == "bfloat16"
    assert eagle3.pop("moe-runner-backend") == "{{ stack_moe_runner_backend }}"
    assert eagle3.pop("disable-flashinfer-autotune") == "{{ stack_disable_flashinfer_autotune }}"
    assert eagle3.pop("quantization") == "{{ stack_quantization }}"
    assert eagle3.pop("speculative-draft-model-quantization") == "unquant"
    stack = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/stack.yml").read_text())
    variables = {
        **stack,
        "stack_sglang_version": sglang_version(tree / "sglang"),
        "stack_model_path": str(model),
        "stack_draft_model_path": str(draft),
    }
    profile = render_profile(eagle3, variables)
    for name, text in profile.items():
        assert not (isinstance(text, str) and ("{{" in text or text.startswith("<"))), (
            f"eagle3 profile: {name} is an unrendered template {text!r}"
        )
    validation = server_flags.validate(server_flags.release_flag_table(tree), profile)
    assert validation.ok, validation.errors
    return validation.argv


@pytest.fixture(scope="module")
def kimi_with_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("kimi-k2.5-nvfp4-with-code")
    for name in ("config.json", "hf_quant_config.json"):
        shutil.copy(MODELS / "kimi-k2.5-nvfp4" / name, directory / name)
    (directory / "configuration_kimi_k25.py").write_text(REMOTE_CODE_STANDIN)
    return directory


@pytest.fixture(scope="module")
def report(kimi_with_code: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    config_file = tmp_path_factory.mktemp("config") / "server.yaml"
    config_file.write_text("speculative-eagle-topk: 1\nspeculative-num-draft-tokens: 16\n")
    kimi, draft = MODELS / "kimi-k2.5-nvfp4", MODELS / "kimi-k2.5-eagle3"
    eagle = ["--model-path", str(kimi), "--tp-size", "8", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft)]
    topk4 = ["--attention-backend", "flashinfer", "--speculative-num-steps", "2", "--speculative-eagle-topk", "4"]
    topk4 += ["--speculative-num-draft-tokens", "16"]
    checks = [
        {"label": "no-num-steps", "argv": [*eagle, "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]},
        {"label": "trtllm-mha", "argv": ["--model-path", str(kimi), "--tp-size", "8", "--attention-backend", "trtllm_mha"]},
        # The same flags on a faked SM100: SGLang accepts them there, so the refusal above is the device's.
        {
            "label": "trtllm-mha-sm100",
            "argv": ["--model-path", str(kimi), "--tp-size", "8", "--attention-backend", "trtllm_mha"],
            "device": {"capability": "10.0", "memory_mib": 183359, "name": "NVIDIA B200"},
        },
        {"label": "base-gpu-id", "argv": ["--model-path", str(kimi), "--tp-size", "8", "--base-gpu-id", "-1"]},
        {
            "label": "draft-tokens-16",
            "argv": [*eagle, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "16"],
        },
        {"label": "recipe", "argv": eagle3_recipe(kimi_with_code, draft)},
        # The same recipe on the config-only directory: with --trust-remote-code SGLang needs the
        # model's own configuration module, which a config-only copy lacks.
        {"label": "recipe-config-only", "argv": eagle3_recipe(kimi, draft)},
        # The server's environment is SGLang's too: spec v2 takes topk 1 only; the next check runs
        # without it again (each check restores the environment).
        {"label": "spec-v2-topk4", "argv": [*eagle, *topk4], "env": {"SGLANG_ENABLE_SPEC_V2": "True"}},
        {"label": "spec-v1-topk4", "argv": [*eagle, *topk4]},
        # Flags from SGLang's --config file count as given (the toolkit's API keys come that way).
        {"label": "config-file", "argv": [*eagle, "--speculative-num-steps", "3", "--config", str(config_file)]},
        {"label": "bad-choice", "argv": ["--model-path", str(kimi), "--attention-backend", "no_such_backend"]},
        # An explicit --mem-fraction-static: the check also resolves the flags without it (SGLang's own
        # choice, its reserve for activations, CUDA graphs and the draft), to compare with fraction-auto.
        {"label": "fraction-given", "argv": [*eagle, *STEPS_3_1_4, "--mem-fraction-static=0.95"]},
        {"label": "fraction-auto", "argv": [*eagle, *STEPS_3_1_4]},
    ]
    return server_args_check.run_checks(PYTHON, TREE, SM120, checks, timeout=240)


STEPS_3_1_4 = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def result(report: dict[str, Any], label: str) -> dict[str, Any]:
    found = [r for r in report["results"] if r["label"] == label]
    assert len(found) == 1, f"expected one result labelled {label}, found {[r['label'] for r in report['results']]}"
    return found[0]


def refused(report: dict[str, Any], label: str, error_type: str) -> dict[str, Any]:
    """The result labelled ``label``, which SGLang refused with an ``error_type``."""
    res = result(report, label)
    assert res["verdict"] == "refused"
    assert res["error"]["type"] == error_type
    return res


def change(res: dict[str, Any], field: str) -> dict[str, Any]:
    found = [c for c in res["changes"] if c["field"] == field]
    assert len(found) == 1, f"expected one change of {field}, found {[c['field'] for c in res['changes']]}"
    return found[0]


@needs_runtime
def test_the_real_sglang_was_checked(report: dict[str, Any]) -> None:
    assert report["sglang_version"] == "0.5.9"
    assert Path(report["sglang_dir"]) == (TREE / "sglang").resolve()
    # the times are reported (speed goals belong in make bench, not here)
    assert isinstance(report["import_seconds"], float) and report["import_seconds"] > 0
    assert all(isinstance(res["seconds"], float) for res in report["results"])


@needs_runtime
def test_a_given_fraction_comes_with_sglangs_own_choice_for_the_same_flags(report: dict[str, Any]) -> None:
    given, auto = result(report, "fraction-given"), result(report, "fraction-auto")
    assert given["verdict"] == auto["verdict"] == "ok"
    assert given["resolved"]["mem_fraction_static"] == 0.95
    chosen = auto["resolved"]["mem_fraction_static"]
    assert given["sglang_reserve"] == {"auto_mem_fraction_static": chosen}
    # 0.5.9 on 97887 MiB with an EAGLE draft: at most (97887 - 10240 - 2048) / 97887, lowered for a multimodal model
    assert 0.5 < chosen <= round((97887 - 12288) / 97887, 3), chosen
    assert "sglang_reserve" not in auto
    # the second resolution's log stays out of the check's own
    assert len(given["log"]) == len(auto["log"]), (given["log"], auto["log"])


def test_the_fraction_is_taken_out_of_the_command_line_in_both_spellings() -> None:
    without = server_args_check._without_option
    argv = ["--tp-size", "8", "--mem-fraction-static", "0.9", "--port", "1"]
    assert without(argv, "--mem-fraction-static") == ["--tp-size", "8", "--port", "1"]
    assert without(["--mem-fraction-static=0.9", "--tp-size", "8"], "--mem-fraction-static") == ["--tp-size", "8"]
    assert without(["--tp-size", "8", "--config", "server.yaml"], "--mem-fraction-static") is None


@needs_runtime
def test_eagle3_without_num_steps_is_sglangs_assertion(report: dict[str, Any]) -> None:
    res = refused(report, "no-num-steps", "AssertionError")
    assert res["stage"] == "post_init"
    # SGLang 0.5.9 asserts topk and draft tokens are unset when num_steps is, in _handle_speculative_decoding.
    assert res["error"]["message"] == ""  # SGLang's assert has no message: the location says it all
    # The traceback's line: the failing clause of `assert (self.speculative_eagle_topk is None and
    # self.speculative_num_draft_tokens is None)` (lines 2423-2426).
    assert res["error"]["raised_at"] == "sglang/srt/server_args.py:2425"
    assert res["error"]["function"] == "_handle_speculative_decoding"
    assert res["error"]["source"] == "and self.speculative_num_draft_tokens is None"


@needs_runtime
def test_trtllm_mha_is_sm100_only(report: dict[str, Any]) -> None:
    res = refused(report, "trtllm-mha", "ValueError")
    assert res["error"]["message"] == "TRTLLM MHA backend is only supported on Blackwell GPUs (SM100). Please use a different backend."
    assert res["error"]["raised_at"] == "sglang/srt/server_args.py:1900"
    assert res["error"]["function"] == "_handle_attention_backend_compatibility"
    sm100 = result(report, "trtllm-mha-sm100")
    assert sm100["verdict"] == "ok", sm100["error"]
    assert sm100["device"]["capability"] == "10.0"
    assert sm100["resolved"]["attention_backend"] == "trtllm_mha"
    # ... where SGLang moves the page size to one the backend supports.
    assert change(sm100, "page_size")["resolved"] == 64


@needs_runtime
def test_negative_base_gpu_id_is_refused_by_check_server_args(report: dict[str, Any]) -> None:
    res = result(report, "base-gpu-id")
    assert res["verdict"] == "refused"
    assert res["stage"] == "check_server_args"
    assert res["error"] == {
        "type": "AssertionError",
        "message": "base_gpu_id must be non-negative",
        "raised_at": "sglang/srt/server_args.py:5147",
        "function": "check_server_args",
        "source": 'assert self.base_gpu_id >= 0, "base_gpu_id must be non-negative"',
        "sglang_frame": {
            "at": "sglang/srt/server_args.py:5147",
            "function": "check_server_args",
            "source": 'assert self.base_gpu_id >= 0, "base_gpu_id must be non-negative"',
        },
    }


@needs_runtime
def test_draft_tokens_16_with_topk_1_is_a_reported_rewrite(report: dict[str, Any]) -> None:
    res = result(report, "draft-tokens-16")
    assert res["verdict"] == "ok", res["error"]
    rewrite = change(res, "speculative_num_draft_tokens")
    assert rewrite["kind"] == "rewritten"
    assert rewrite["flag"] == "--speculative-num-draft-tokens"
    assert (rewrite["given"], rewrite["resolved"]) == (16, 4)
    assert "--speculative-num-draft-tokens 16: SGLang uses 4 instead (speculative_num_draft_tokens)" in res["warnings"]
    assert res["resolved"]["speculative_num_draft_tokens"] == 4
    assert any("speculative_num_draft_tokens is adjusted" in line for line in res["log"]), res["log"]
    # Flags SGLang kept as given are not reported as changes.
    assert all(c["field"] not in ("speculative_num_steps", "speculative_eagle_topk", "tp_size") for c in res["changes"])


@needs_runtime
def test_flags_from_sglangs_config_file_count_as_given(report: dict[str, Any]) -> None:
    res = result(report, "config-file")
    assert res["verdict"] == "ok", res["error"]
    assert "--speculative-num-draft-tokens" not in res["argv"]
    rewrite = change(res, "speculative_num_draft_tokens")
    assert (rewrite["kind"], rewrite["given"], rewrite["resolved"]) == ("rewritten", 16, 4)


@needs_runtime
def test_upstream_kimi_eagle3_recipe_is_accepted(report: dict[str, Any], kimi_with_code: Path) -> None:
    res = result(report, "recipe")
    assert res["verdict"] == "ok", res["error"]
    assert "--trust-remote-code" in res["argv"]
    resolved = res["resolved"]
    assert resolved["speculative_algorithm"] == "EAGLE3"
    assert (resolved["speculative_num_steps"], resolved["speculative_eagle_topk"], resolved["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert resolved["attention_backend"] == "flashinfer"
    assert resolved["tp_size"] == 8
    assert resolved["page_size"] == 1
    assert resolved["kv_cache_dtype"] == "auto"
    assert resolved["moe_runner_backend"] == "auto"
    assert resolved["enable_dp_attention"] is False
    assert resolved["cuda_graph_max_bs"] == 512  # SGLang's choice for 96-160 GB GPUs at tp >= 4
    # (97887 MiB - 10 GiB reserve - 2 GiB for the EAGLE draft) / 97887 MiB, lowered for a multimodal model.
    assert 0.70 < resolved["mem_fraction_static"] < 0.88, resolved["mem_fraction_static"]
    assert [c for c in res["changes"] if c["kind"] == "rewritten"] == []
    chosen = {c["field"]: c for c in res["changes"]}
    assert chosen["page_size"]["kind"] == "chosen" and chosen["page_size"]["resolved"] == 1
    assert chosen["max_running_requests"]["resolved"] == 48


@needs_runtime
def test_config_only_directory_with_remote_code_is_refused(report: dict[str, Any]) -> None:
    res = refused(report, "recipe-config-only", "OSError")
    assert "configuration_kimi_k25.py" in res["error"]["message"]
    assert res["error"]["raised_at"].startswith("transformers/")
    assert res["error"]["sglang_frame"]["at"].startswith("sglang/srt/utils/hf_transformers_utils.py:")


@needs_runtime
def test_the_servers_environment_reaches_sglang(report: dict[str, Any]) -> None:
    v2 = refused(report, "spec-v2-topk4", "ValueError")
    assert v2["error"]["message"] == "Spec v2 currently only supports topk = 1 for speculative decoding."
    assert v2["error"]["raised_at"].startswith("sglang/srt/server_args.py:")
    v1 = result(report, "spec-v1-topk4")
    assert v1["verdict"] == "ok", v1["error"]
    assert (v1["resolved"]["speculative_eagle_topk"], v1["resolved"]["speculative_num_draft_tokens"]) == (4, 16)
    assert "SGLANG_ENABLE_SPEC_V2" not in v1["env_set_by_sglang"]


@needs_runtime
def test_bad_choice_is_sglangs_argparse_error(report: dict[str, Any]) -> None:
    res = result(report, "bad-choice")
    assert res["verdict"] == "refused"
    assert res["stage"] == "parse"
    assert "argument --attention-backend: invalid choice: 'no_such_backend'" in res["error"]["message"]


@needs_runtime
def test_single_check_command_line_and_exit_code(tmp_path: Path) -> None:
    kimi = MODELS / "kimi-k2.5-nvfp4"
    base = [str(PYTHON), str(SCRIPT), "--sglang", str(TREE), "--capability", "12.0", "--gpu-memory-mib", "97887", "--gpu-count", "8"]
    proc = subprocess.run([*base, "--", "--model-path", str(kimi), "--base-gpu-id", "-1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["verdict"] == "refused"
    assert out["error"]["message"] == "base_gpu_id must be non-negative"


@needs_runtime
@pytest.mark.skipif(not (CACHE / "sglang" / "0.5.23" / "sglang").is_dir(), reason="no unpacked SGLang 0.5.23 (`make sglang-wheels`)")
def test_a_release_that_does_not_import_here_is_said_so() -> None:
    """0.5.23 needs transformers 5.x; the 0.5.9 runtime has 4.57.1: no verdict, a clear error instead."""
    with pytest.raises(server_args_check.CheckRunError) as caught:
        server_args_check.run_checks(
            PYTHON, CACHE / "sglang" / "0.5.23", SM120, [{"argv": ["--model-path", str(MODELS / "kimi-k2.5-nvfp4")]}]
        )
    message = str(caught.value)
    assert "SGLang from " in message and "0.5.23 does not import under" in message
    assert "AttributeError: type object 'PretrainedConfig' has no attribute '__class_validators__'" in message
    assert "sglang/srt/utils/hf_transformers_patches.py:" in message


def test_usage_errors_need_no_sglang(tmp_path: Path) -> None:
    """Bad requests are refused before SGLang is imported (any Python runs them)."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--gpu-memory-mib", "97887", "--", "--tp-size", "8"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "expected --capability, --gpu-memory-mib and --gpu-count (missing --capability, --gpu-count)" in proc.stderr
    (tmp_path / "empty").mkdir()
    args = [
        sys.executable,
        str(SCRIPT),
        "--capability",
        "12.0",
        "--gpu-memory-mib",
        "97887",
        "--gpu-count",
        "8",
        "--model",
        str(tmp_path / "empty"),
    ]
    proc = subprocess.run([*args, "--", "--model-path", "/data/Kimi-K2.5-NVFP4"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"model directory {tmp_path / 'empty'}: expected config.json in it, found []" in proc.stderr
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--capability", "sm120", "--gpu-memory-mib", "1", "--gpu-count", "8", "--", "--tp-size", "8"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "device capability: expected MAJOR.MINOR such as 12.0, found 'sm120'" in proc.stderr


# --------------------------------------------------------------------------------------------------
# The newest release, SGLang 0.5.23: ServerArgs resolves in resolve_once() (sglang.srt.arg_groups),
# the launcher's order is prepare_server_args, resolve_once, check_server_args. Its own runtime
# (tests/runtime/sglang-0.5.23.txt: transformers 5.19.0, ...), FlashInfer at the version it pins.

RUNTIME_0523 = CACHE / "sglang-runtime" / "0.5.23"
PYTHON_0523 = RUNTIME_0523 / "venv" / "bin" / "python"
TREE_0523 = CACHE / "sglang" / "0.5.23"
SM120_0523 = {**SM120, "flashinfer_version": "0.7.2"}

needs_runtime_0523 = pytest.mark.skipif(
    not (RUNTIME_0523 / ".stamp").exists() or not (TREE_0523 / "sglang" / "srt" / "server_args.py").is_file(),
    reason=f"needs the SGLang 0.5.23 runtime at {RUNTIME_0523} (`make sglang-runtime`) "
    f"and the unpacked tree at {TREE_0523} (`make sglang-wheels`)",
)


@pytest.fixture(scope="module")
def report_0523(kimi_with_code: Path) -> dict[str, Any]:
    kimi, draft = MODELS / "kimi-k2.5-nvfp4", MODELS / "kimi-k2.5-eagle3"
    base = ["--model-path", str(kimi), "--tp-size", "8"]
    eagle = [*base, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft)]
    recipe = eagle3_recipe(kimi_with_code, draft, TREE_0523)
    checks = [
        {"label": "no-num-steps", "argv": [*eagle, "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]},
        {"label": "base-gpu-id", "argv": [*base, "--base-gpu-id", "-1"]},
        {
            "label": "draft-tokens-16",
            "argv": [*eagle, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "16"],
        },
        {"label": "recipe", "argv": recipe},
        {"label": "recipe-bf16", "argv": [*recipe, "--kv-cache-dtype", "bfloat16"]},
        # 0.5.23's deprecated switches: store-true actions that log a deprecation warning.
        {"label": "deprecated", "argv": [*base, "--dp-size", "8", "--enable-dp-attention", "--disable-cuda-graph"]},
        # Backends that cannot run on SM120: 0.5.23's ServerArgs takes them (the catalogue refuses
        # them: tests/unit/controller/test_sglang_flags_cli.py).
        {"label": "trtllm-mla", "argv": [*base, "--attention-backend", "trtllm_mla"]},
        {"label": "fa3", "argv": [*base, "--attention-backend", "fa3"]},
        {"label": "moe-flashinfer-trtllm", "argv": [*base, "--moe-runner-backend", "flashinfer_trtllm"]},
        {"label": "bad-choice", "argv": [*base, "--attention-backend", "no_such_backend"]},
    ]
    return server_args_check.run_checks(PYTHON_0523, TREE_0523, SM120_0523, checks, timeout=300)


def report_of(request: pytest.FixtureRequest, release: str) -> dict[str, Any]:
    return request.getfixturevalue({"0.5.9": "report", "0.5.23": "report_0523"}[release])


BOTH = pytest.mark.parametrize("release", [pytest.param("0.5.9", marks=needs_runtime), pytest.param("0.5.23", marks=needs_runtime_0523)])


@needs_runtime_0523
def test_the_real_sglang_0_5_23_was_checked(report_0523: dict[str, Any]) -> None:
    assert report_0523["sglang_version"] == "0.5.23"
    assert Path(report_0523["sglang_dir"]) == (TREE_0523 / "sglang").resolve()
    assert report_0523["python"] == str(PYTHON_0523)
    assert {res["label"] for res in report_0523["results"]} >= {"recipe", "deprecated", "no-num-steps"}


@BOTH
def test_eagle3_without_num_steps_is_refused_on_both(request: pytest.FixtureRequest, release: str) -> None:
    res = result(report_of(request, release), "no-num-steps")
    assert res["verdict"] == "refused" and res["error"]["type"] == "AssertionError" and res["error"]["message"] == ""
    where = {
        "0.5.9": ("post_init", "sglang/srt/server_args.py:2425", "_handle_speculative_decoding"),
        # 0.5.23: the same assert, moved into the resolution step of the EAGLE family.
        "0.5.23": ("resolve", "sglang/srt/arg_groups/speculative_hook.py:1162", "_handle_eagle_family"),
    }[release]
    assert (res["stage"], res["error"]["raised_at"], res["error"]["function"]) == where
    source = "and self.speculative_num_draft_tokens is None" if release == "0.5.9" else "and cfg.speculative_num_draft_tokens is None"
    assert res["error"]["source"] == source


@BOTH
def test_negative_base_gpu_id_is_refused_by_check_server_args_on_both(request: pytest.FixtureRequest, release: str) -> None:
    res = result(report_of(request, release), "base-gpu-id")
    assert (res["verdict"], res["stage"]) == ("refused", "check_server_args")
    assert (res["error"]["type"], res["error"]["message"]) == ("AssertionError", "base_gpu_id must be non-negative")
    assert (
        res["error"]["raised_at"]
        == {
            "0.5.9": "sglang/srt/server_args.py:5147",
            "0.5.23": "sglang/srt/arg_groups/validation_hook.py:204",
        }[release]
    )


@BOTH
def test_draft_tokens_16_with_topk_1_is_a_reported_rewrite_on_both(request: pytest.FixtureRequest, release: str) -> None:
    res = result(report_of(request, release), "draft-tokens-16")
    assert res["verdict"] == "ok", res["error"]
    rewrite = change(res, "speculative_num_draft_tokens")
    assert (rewrite["kind"], rewrite["flag"]) == ("rewritten", "--speculative-num-draft-tokens")
    assert (rewrite["given"], rewrite["resolved"]) == (16, 4)
    assert "--speculative-num-draft-tokens 16: SGLang uses 4 instead (speculative_num_draft_tokens)" in res["warnings"]
    assert res["resolved"]["speculative_num_draft_tokens"] == 4
    assert any("speculative_num_draft_tokens is adjusted" in line for line in res["log"]), res["log"]
    assert all(c["field"] not in ("speculative_num_steps", "speculative_eagle_topk", "tp_size") for c in res["changes"])
    if release == "0.5.23":  # the resolution step whose declaration holds the value
        assert rewrite["source"] == "_handle_eagle_family"


@BOTH
def test_upstream_kimi_eagle3_recipe_is_accepted_on_both(request: pytest.FixtureRequest, release: str) -> None:
    report = report_of(request, release)
    for label in ("recipe", "recipe-bf16") if release == "0.5.23" else ("recipe",):
        res = result(report, label)
        assert res["verdict"] == "ok", (label, res["error"])
        resolved = res["resolved"]
        assert resolved["speculative_algorithm"] == "EAGLE3"
        spec = (resolved["speculative_num_steps"], resolved["speculative_eagle_topk"], resolved["speculative_num_draft_tokens"])
        assert spec == (3, 1, 4)
        assert (resolved["attention_backend"], resolved["tp_size"], resolved["page_size"]) == ("flashinfer", 8, 1)
        assert resolved["moe_runner_backend"] == "auto" and resolved["enable_dp_attention"] is False
        assert resolved["kv_cache_dtype"] == ("bfloat16" if label == "recipe-bf16" else "auto")
        assert 0.70 < resolved["mem_fraction_static"] < 0.88, resolved["mem_fraction_static"]
        assert [c for c in res["changes"] if c["kind"] == "rewritten"] == []
        assert {c["field"]: c["resolved"] for c in res["changes"]}["max_running_requests"] == 48


@BOTH
def test_bad_choice_is_sglangs_argparse_error_on_both(request: pytest.FixtureRequest, release: str) -> None:
    res = result(report_of(request, release), "bad-choice")
    assert (res["verdict"], res["stage"]) == ("refused", "parse")
    assert "argument --attention-backend: invalid choice: 'no_such_backend'" in res["error"]["message"]


@needs_runtime_0523
def test_0_5_23_deprecated_switches_are_accepted_as_sglang_accepts_them(report_0523: dict[str, Any]) -> None:
    """--enable-dp-attention and --disable-cuda-graph take no value on 0.5.23: SGLang's deprecation
    actions store True and log once each; resolution turns --dp-size 8 --enable-dp-attention into
    --attn-dp-size 8 (reported: dp_size given 8, used 1; enable_dp_attention given true, used false)."""
    res = result(report_0523, "deprecated")
    assert res["verdict"] == "ok", res["error"]
    deprecations = [line for line in res["log"] if "is deprecated" in line]
    assert deprecations == [
        "WARNING argparse_actions.py:29: '--enable-dp-attention' is deprecated and will be removed in a future release. "
        "Use '--attn-dp-size <dp-size>' instead.",
        "WARNING argparse_actions.py:29: '--disable-cuda-graph' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.",
    ]
    dp = change(res, "dp_size")
    assert (dp["kind"], dp["given"], dp["resolved"], dp["source"]) == ("rewritten", 8, 1, "_handle_deprecated_dp_attention")
    assert change(res, "enable_dp_attention")["resolved"] is False
    assert res["resolved"]["attn_dp_size"] == 8
    assert "--dp-size 8: SGLang uses 1 instead (dp_size)" in res["warnings"]
    assert res["values"]["disable_cuda_graph"] is True


@needs_runtime_0523
def test_0_5_23_takes_backends_sm120_cannot_run(report_0523: dict[str, Any]) -> None:
    """What SGLang 0.5.23's own ServerArgs says about them on a faked 12.0: nothing (0.5.9 refused
    trtllm_mha there; 0.5.23 no longer does): the catalogue is what refuses them."""
    mla = result(report_0523, "trtllm-mla")
    assert mla["verdict"] == "ok" and mla["resolved"]["attention_backend"] == "trtllm_mla"
    page = change(mla, "page_size")
    assert (page["kind"], page["resolved"], page["source"]) == ("chosen", 64, "_mla_backend_page_constraints")
    assert any("TensorRT-LLM MLA only supports page_size of 32 or 64" in line for line in mla["log"])
    assert result(report_0523, "fa3")["resolved"]["attention_backend"] == "fa3"
    moe = result(report_0523, "moe-flashinfer-trtllm")
    assert moe["verdict"] == "ok" and moe["resolved"]["moe_runner_backend"] == "flashinfer_trtllm"


# --- Triton's ptxas, asked in the release's venv (entry triton-ptxas-lacks-gpu-arch) ------------------


def probe_ptxas(capability: str, env: dict[str, str]) -> dict[str, Any]:
    """_probe_triton_ptxas run in the runtime's Python, on its real Triton (3.8.0 there)."""
    major, minor = capability.split(".")
    code = f"import json; from sglang_sm120.launch.server_args import _probe_triton_ptxas as p; print(json.dumps(p(({major}, {minor}))))"
    out = subprocess.run(
        [str(PYTHON), "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT / "plugins" / "module_utils"), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_runtime
def test_the_check_asks_tritons_own_ptxas_for_the_faked_gpu(report: dict[str, Any]) -> None:
    env = report["environment"]
    assert env["triton_ptxas_knows_arch"] is True, env
    assert "triton/backends/nvidia/bin/ptxas-blackwell (CUDA " in env["triton_ptxas_note"]  # Triton's pick for capability >= 10
    assert env["triton_ptxas_note"].endswith(") --gpu-name=sm_120a, PTX 9.3: assembled"), env  # CUDA 13.3's ptxas: PTX ISA 9.3


@needs_runtime
def test_a_ptxas_that_lacks_the_target_is_named_with_its_own_words() -> None:
    """Triton honours TRITON_PTXAS_BLACKWELL_PATH for capability 10 and up; its bundled CUDA 12.9
    `ptxas` (not the blackwell one) does not know sm_110a: the probe reports what the first kernel
    would meet. Then the same override on the RTX PRO 6000's 12.0: that ptxas knows sm_120a."""
    triton_bin = next((RUNTIME / "venv" / "lib").glob("python3*/site-packages/triton/backends/nvidia/bin"))
    plain = {"TRITON_PTXAS_BLACKWELL_PATH": str(triton_bin / "ptxas")}
    thor = probe_ptxas("11.0", plain)
    assert thor["triton_ptxas_knows_arch"] is False, thor
    assert f"{triton_bin / 'ptxas'} (CUDA 12.9) --gpu-name=sm_110a" in thor["triton_ptxas_note"]
    assert "Value 'sm_110a' is not defined for option 'gpu-name'" in thor["triton_ptxas_note"]
    rtx = probe_ptxas("12.0", plain)
    assert rtx["triton_ptxas_knows_arch"] is True and "(CUDA 12.9) --gpu-name=sm_120a" in rtx["triton_ptxas_note"], rtx


def test_without_triton_the_ptxas_fact_stays_unknown(tmp_path: Path) -> None:
    code = "import json; from sglang_sm120.launch.server_args import _probe_triton_ptxas as p; print(json.dumps(p((12, 0))))"
    out = subprocess.run(
        [sys.executable, "-c", code],  # the toolkit's own venv: no Triton there
        env={**os.environ, "PYTHONPATH": str(ROOT / "plugins" / "module_utils")},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=tmp_path,
    )
    found = json.loads(out.stdout)
    assert found["triton_ptxas_knows_arch"] is None
    assert found["triton_ptxas_note"].startswith("Triton's ptxas could not be asked: ModuleNotFoundError: No module named 'triton'")
