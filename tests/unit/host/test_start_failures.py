"""The start-failure catalogue (roles/sglang_launch/files/start-failures.yml,
plugins/module_utils/sglang_sm120/launch/start_failures.py) and its
use through sglang-flags: each entry triggered and not, inside and outside its versions,
with model directories shaped like Kimi-K2.5-NVFP4 and its EAGLE-3 draft and host facts parsed
from nvidia-smi output. Fast: the flag table and model registry are read once from the real
unpacked 0.5.9 / 0.5.23 trees; the CLI runs take the static table (--python /nonexistent)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import BIN, CACHE, DATA, ROOT, unpacked_sglang
from sglang_sm120.host.nvidia_smi import parse_query_output
from sglang_sm120.launch.flags import _lookup, release_flag_table
from sglang_sm120.launch.invariants import read_release_data
from sglang_sm120.launch.start_failures import (
    CatalogueError,
    Context,
    FactsError,
    HostFacts,
    evaluate,
    evaluate_entry,
    log_signatures,
    match_log,
    parse_argv,
    parse_catalogue,
    parse_env,
    parse_host_facts,
    read_host_facts,
    read_model_dir,
    registered_architectures,
    version_tuple,
)
from sglang_sm120_controller.compat import render_profile
from sglang_sm120_controller.paths import CATALOGUE
from sglang_sm120_controller.pinned_stack import stack_from_metadata
from sglang_sm120_controller.toolkit_data import load_catalogue

MODELS = DATA / "models"
SF = DATA / "start-failures"
HOST8 = SF / "host-8x-rtx-pro-6000.json"
CLI = BIN / "sglang-flags"
KIMI_CLASS = "KimiK25ForConditionalGeneration"
# the entries the gate decides (a run-time-only entry, trigger [], is named by the canary from its log)
ENTRIES = {e.id: e for e in load_catalogue() if not e.run_time_only}
RUN_TIME_ONLY = {e.id: e for e in load_catalogue() if e.run_time_only}


tree = unpacked_sglang


@pytest.fixture(scope="module")
def aliases() -> dict[str, str]:
    """The real 0.5.9 flag table's names -> canonical (--tp-size -> tensor-parallel-size)."""
    return {name: flag.name for name, flag in _lookup(release_flag_table(tree("0.5.9"))).items()}


@pytest.fixture(scope="module")
def registry() -> set[str]:
    names = registered_architectures(tree("0.5.9"))
    assert names is not None and KIMI_CLASS in names and "LlamaForCausalLMEagle3" in names
    return names


@pytest.fixture(scope="module")
def kimi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Kimi-K2.5-NVFP4 shaped: its config.json and hf_quant_config.json, and an index holding only
    metadata.total_size (tests/data/start-failures/README.md says where the number comes from)."""
    directory = tmp_path_factory.mktemp("kimi-k2.5-nvfp4")
    for name in ("config.json", "hf_quant_config.json"):
        shutil.copy(MODELS / "kimi-k2.5-nvfp4" / name, directory / name)
    shutil.copy(SF / "kimi-k2.5-nvfp4" / "model.safetensors.index.json", directory)
    return directory


@pytest.fixture(scope="module")
def host8() -> HostFacts:
    return read_host_facts(HOST8)


def context(aliases: dict[str, str], argv: list[str] = (), **kw: Any) -> Context:  # type: ignore[assignment]
    kw.setdefault("version", "0.5.9")
    kw.setdefault("capability", "12.0")
    kw.setdefault("env", {})
    return Context(flags=parse_argv(list(argv), aliases), aliases=aliases, **kw)


def host_with(base: HostFacts, **changes: Any) -> HostFacts:
    data = {"gpus": copy.deepcopy(base.gpus), "pcie_only": base.pcie_only, **changes}
    if "driver_version" in changes:
        for gpu in data["gpus"]:
            gpu["driver_version"] = changes["driver_version"]
        del data["driver_version"]
    return parse_host_facts(data, "test host")


def verdict(entry_id: str, ctx: Context) -> Any:
    return evaluate_entry(ENTRIES[entry_id], ctx)


# --- each entry: triggered, not triggered, outside its versions -------------------------------

EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/data/eagle3"]
FP4_ENV = {"SGLANG_FLASHINFER_FP4_GEMM_BACKEND": "trtllm"}
ALLOW_LONGER = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}


def cases(kimi: Path, host8: HostFacts, registry: set[str], tmp: Path) -> dict[str, dict[str, Any]]:
    """entry id -> {hit: (kwargs, verdict), miss: (kwargs, verdict), outside: kwargs or None}."""
    model = read_model_dir(kimi)
    draft = read_model_dir(MODELS / "kimi-k2.5-eagle3")
    (tmp / "odd-draft").mkdir(exist_ok=True)
    (tmp / "odd-draft" / "config.json").write_text(json.dumps({"architectures": ["NoSuchDraftForCausalLM"], "model_type": "llama"}))
    odd = read_model_dir(tmp / "odd-draft")
    llama, llama_draft = read_model_dir(MODELS / "llama-3.1-8b-instruct"), read_model_dir(MODELS / "llama-3.1-8b-eagle3")
    release = read_release_data(tree("0.5.9"))
    with_code = tmp / "kimi-with-code"
    if not with_code.exists():
        shutil.copytree(kimi, with_code)
        for module in model.auto_map_modules:
            (with_code / f"{module}.py").write_text("# the model's remote code\n")
    return {
        "trtllm-mla-on-sm120": {
            "hit": (dict(argv=["--decode-attention-backend=trtllm_mla"]), "refused"),
            "miss": (dict(argv=["--decode-attention-backend=trtllm_mla"], capability="10.0"), "ok"),
            "outside": dict(argv=["--decode-attention-backend=trtllm_mla"], version="0.5.8"),
        },
        "fa3-on-sm120": {
            "hit": (dict(argv=["--mm-attention-backend", "fa3"], version="0.5.23"), "refused"),
            "miss": (dict(argv=["--attention-backend", "triton"]), "ok"),
            "outside": dict(argv=["--attention-backend", "fa3"], version="0.5.8"),
        },
        "cutlass-mla-flashmla-on-sm120": {
            "hit": (dict(argv=["--attention-backend", "flashmla"]), "warning"),
            "miss": (dict(argv=["--attention-backend", "flashinfer"]), "ok"),
            "outside": dict(argv=["--attention-backend", "flashmla"], version="0.5.8"),
        },
        "draft-inherits-mla-only-backend": {
            "hit": (dict(argv=["--attention-backend", "cutlass_mla"], draft=draft), "warning"),
            "miss": (
                dict(argv=["--attention-backend", "cutlass_mla", "--speculative-draft-attention-backend", "triton"], draft=draft),
                "ok",
            ),
            "outside": dict(argv=["--attention-backend", "cutlass_mla"], draft=draft, version="0.5.8"),
        },
        "flashinfer-trtllm-moe-fp4-on-sm120": {
            "hit": (dict(argv=["--moe-runner-backend", "flashinfer_trtllm"]), "refused"),
            "miss": (dict(argv=["--moe-runner-backend", "flashinfer_cutlass"]), "ok"),
            "outside": dict(argv=["--moe-runner-backend", "flashinfer_trtllm"], version="0.5.8"),
        },
        "fp4-gemm-env-trtllm-on-sm120": {
            "hit": (dict(argv=["--fp4-gemm-backend", "auto"], env=FP4_ENV, model=model), "refused"),
            # not given: 0.5.9's default is flashinfer_cutlass, and the variable is only warned about
            "miss": (dict(env=FP4_ENV, model=model), "ok"),
            "outside": dict(argv=["--fp4-gemm-backend", "auto"], env=FP4_ENV, model=model, version="0.5.10"),
        },
        "draft-inherits-target-quantization": {
            "hit": (dict(argv=["--quantization", "modelopt_fp4", *EAGLE], draft=draft, version="0.5.17"), "refused"),
            "miss": (
                dict(argv=["--quantization", "modelopt_fp4", *EAGLE, "--speculative-draft-model-quantization", "unquant"], draft=draft),
                "ok",
            ),
            "outside": dict(argv=["--quantization", "modelopt_fp4", *EAGLE], draft=draft, version="0.5.18"),
        },
        "draft-quantized-online-to-nvfp4": {
            "hit": (dict(argv=["--quantization", "modelopt_fp4", *EAGLE], draft=draft, version="0.5.18"), "warning"),
            "miss": (
                dict(
                    argv=["--quantization", "modelopt_fp4", *EAGLE, "--speculative-draft-model-quantization", "unquant"],
                    draft=draft,
                    version="0.5.23",
                ),
                "ok",
            ),
            "outside": dict(argv=["--quantization", "modelopt_fp4", *EAGLE], draft=draft, version="0.5.17"),
        },
        "flashinfer-cutlass-moe-autotune-corrupts-on-sm120": {
            "hit": (dict(argv=["--moe-runner-backend", "flashinfer_cutlass"], model=model, version="0.5.19"), "refused"),
            "miss": (
                dict(argv=["--moe-runner-backend", "flashinfer_cutlass", "--disable-flashinfer-autotune"], model=model, version="0.5.19"),
                "ok",
            ),
            "outside": dict(argv=["--moe-runner-backend", "flashinfer_cutlass"], model=model, version="0.5.22"),
        },
        # the resolved value where SGLang's ServerArgs ran: --quantization modelopt_fp4 makes it flashinfer_cutlass on SM120
        "nvfp4-moe-runner-auto-is-trtllm-on-sm120": {
            "hit": (dict(model=model, version="0.5.23"), "refused"),
            "miss": (dict(argv=["--moe-runner-backend", "flashinfer_cutlass"], model=model, version="0.5.16"), "ok"),
            "outside": dict(model=model, version="0.5.15"),
        },
        "modelopt-nvfp4-read-as-fp8": {
            "hit": (dict(model=model), "refused"),
            "miss": (dict(argv=["--quantization", "modelopt_fp4"], model=model), "ok"),
            "outside": dict(model=model, version="0.5.10"),
        },
        "fp8-kv-from-checkpoint": {
            "hit": (dict(model=model), "refused"),
            "miss": (dict(argv=["--kv-cache-dtype", "bf16"], model=model), "ok"),
            "outside": dict(model=model, version="0.5.10"),
        },
        "fp8-kv-from-checkpoint-later": {
            "hit": (dict(argv=["--kv-cache-dtype=auto"], model=model, version="0.5.23"), "warning"),
            "miss": (dict(argv=["--kv-cache-dtype", "bfloat16"], model=model, version="0.5.23"), "ok"),
            "outside": dict(model=model, version="0.5.9"),
        },
        "trtllm-mha-fp8-kv-on-sm120": {
            "hit": (dict(argv=["--speculative-draft-attention-backend", "trtllm_mha", "--kv-cache-dtype", "fp8_e4m3"]), "warning"),
            "miss": (dict(argv=["--speculative-draft-attention-backend", "trtllm_mha", "--kv-cache-dtype", "bfloat16"]), "ok"),
            "outside": None,
        },
        "triton-mla-decode-fp8-kv-smem-on-sm120": {
            "hit": (dict(argv=["--attention-backend", "triton", "--kv-cache-dtype", "fp8_e4m3"], model=model), "warning"),
            "miss": (dict(argv=["--attention-backend", "triton", "--kv-cache-dtype", "bfloat16"], model=model), "ok"),
            "outside": None,
        },
        "weights-exceed-static-memory": {
            "hit": (dict(argv=["--tp-size", "4"], model=model, host=host8), "refused"),
            "miss": (dict(argv=["--tp-size", "8"], model=model, host=host8), "ok"),
            "outside": None,
        },
        # sglang_auto_fraction: what server_args_check's second resolution without the flag found
        "static-fraction-above-sglang-reserve": {
            "hit": (dict(argv=["--mem-fraction-static", "0.9"], host=host8, sglang_auto_fraction=0.827), "warning"),
            "miss": (dict(argv=["--mem-fraction-static=0.8"], host=host8, sglang_auto_fraction=0.827), "ok"),
            "outside": None,
        },
        "jit-all-reduce-on-pcie": {
            "hit": (dict(env={"SGLANG_USE_JIT_ALL_REDUCE": "1"}, host=host8, version="0.5.11"), "refused"),
            "miss": (dict(env={"SGLANG_USE_JIT_ALL_REDUCE": "0"}, host=host8, version="0.5.11"), "ok"),
            "outside": dict(env={"SGLANG_USE_JIT_ALL_REDUCE": "1"}, host=host8, version="0.5.12"),
        },
        "pcie-ipc-allreduce-kernels": {
            "hit": (dict(env={"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, version="0.5.23"), "warning"),
            "miss": (dict(version="0.5.23"), "ok"),
            "outside": dict(env={"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, version="0.5.20"),
        },
        "nccl-p2p-acs-redirect": {
            "hit": (dict(argv=["--tp-size", "8"], host=host_with(host8, acs_redirect=True)), "refused"),
            "miss": (dict(argv=["--tp-size", "8"], env={"NCCL_P2P_DISABLE": "1"}, host=host_with(host8, acs_redirect=True)), "ok"),
            "outside": None,
        },
        "nccl-p2p-iommu-translated": {
            "hit": (dict(argv=["--pp-size", "2"], host=host_with(host8, iommu_mode="translated")), "refused"),
            "miss": (dict(argv=["--tp-size", "8"], host=host_with(host8, iommu_mode="passthrough")), "ok"),
            "outside": None,
        },
        "nccl-p2p-uvm-hmm-on": {
            "hit": (dict(argv=["--tp-size", "8"], host=host_with(host8, uvm_disable_hmm=False)), "refused"),
            "miss": (dict(argv=["--tp-size", "8"], host=host_with(host8, uvm_disable_hmm=True)), "ok"),
            "outside": None,
        },
        "pcie-aspm-surprise-link-down": {
            "hit": (dict(argv=["--tp-size", "8"], host=host_with(host8, pcie_aspm_policy="powersupersave")), "refused"),
            "miss": (dict(argv=["--tp-size", "8"], host=host_with(host8, pcie_aspm_policy="performance")), "ok"),
            "outside": None,
        },
        "flashinfer-fp4-gemm-pdl-race-on-sm120": {
            "hit": (dict(model=model), "warning"),
            "miss": (dict(argv=["--fp4-gemm-backend", "flashinfer_cudnn"], model=model), "ok"),
            "outside": dict(model=model, version="0.5.10"),
        },
        "parallel-size-exceeds-host-gpus": {
            "hit": (dict(argv=["--tp-size", "16"], host=host8), "refused"),
            "miss": (dict(argv=["--tp-size", "8"], host=host8), "ok"),
            "outside": None,
        },
        "v1-loads-500-metrics-middleware-fastapi-0137": {
            "hit": (dict(argv=["--enable-metrics"], version="0.5.13"), "warning"),
            "miss": (dict(version="0.5.13"), "ok"),
            "outside": dict(argv=["--enable-metrics"], version="0.5.16"),
        },
        "gpu-power-limit-below-default": {
            "hit": (dict(host=host_with(host8, gpus_power_below_default=["GPU7"])), "warning"),
            "miss": (dict(host=host_with(host8, gpus_power_below_default=[])), "ok"),
            "outside": None,
        },
        "gpu-bar1-below-memory": {
            "hit": (dict(argv=["--tp-size", "8"], host=host_with(host8, gpus_bar1_below_memory=["GPU0"])), "warning"),
            "miss": (dict(argv=["--tp-size", "1"], host=host_with(host8, gpus_bar1_below_memory=["GPU0"])), "ok"),
            "outside": None,
        },
        "deepgemm-on-sm120": {
            "hit": (dict(host=host_with(host8, deep_gemm_importable=True), version="0.5.12"), "refused"),
            "miss": (dict(env={"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}, host=host_with(host8, deep_gemm_importable=True)), "ok"),
            "outside": dict(host=host_with(host8, deep_gemm_importable=True), version="0.5.13"),
        },
        "flashinfer-jit-nvcc-too-old": {
            "hit": (dict(host=host_with(host8, nvcc_version="12.8")), "refused"),
            "miss": (dict(host=host_with(host8, nvcc_version="13.0")), "ok"),
            "outside": None,
        },
        "flashinfer-jit-toolchain-missing": {
            "hit": (dict(host=host_with(host8, jit_tools_missing=["c++"])), "warning"),
            "miss": (dict(host=host_with(host8, jit_tools_missing=[])), "ok"),
            "outside": None,
        },
        "sglang-jit-toolchain-missing": {
            "hit": (dict(host=host_with(host8, jit_tools_missing=["nvcc"]), version="0.5.11"), "refused"),
            "miss": (dict(host=host_with(host8, jit_tools_missing=["ninja"]), version="0.5.23"), "ok"),  # the venv brings ninja
            "outside": dict(host=host_with(host8, jit_tools_missing=["c++"]), version="0.5.10"),
        },
        "jit-cuda-headers-missing": {
            "hit": (dict(host=host_with(host8, cuda_cccl_headers=False)), "refused"),
            "miss": (dict(host=host_with(host8, cuda_cccl_headers=True)), "ok"),
            "outside": None,
        },
        "sglang-jit-activation-vs-gcc-12": {
            "hit": (dict(host=host_with(host8, gcc_version="12.2.0"), version="0.5.12"), "refused"),
            "miss": (dict(host=host_with(host8, gcc_version="14.2.0"), version="0.5.12"), "ok"),
            "outside": dict(host=host_with(host8, gcc_version="12.2.0"), version="0.5.13"),
        },
        "glibc-c23-math-vs-cuda-12-headers": {
            "hit": (dict(host=host_with(host8, glibc_version="2.41", nvcc_version="12.9")), "refused"),
            "miss": (dict(host=host_with(host8, glibc_version="2.41", nvcc_version="13.0")), "ok"),
            "outside": None,
        },
        "glibc-rsqrt-vs-cuda-13-0-headers": {
            "hit": (dict(host=host_with(host8, glibc_version="2.42", nvcc_version="13.0")), "warning"),
            "miss": (dict(host=host_with(host8, glibc_version="2.41", nvcc_version="13.0")), "ok"),
            "outside": None,
        },
        "triton-python-headers-missing": {
            "hit": (dict(host=host_with(host8, python_headers=False)), "refused"),
            "miss": (dict(host=host_with(host8, python_headers=True)), "ok"),
            "outside": None,
        },
        "triton-ptxas-lacks-gpu-arch": {
            "hit": (dict(host=host_with(host8, triton_ptxas_knows_arch=False)), "refused"),
            "miss": (dict(host=host_with(host8, triton_ptxas_knows_arch=True)), "ok"),
            "outside": None,
        },
        "draft-does-not-fit-target": {
            "hit": (dict(argv=EAGLE, model=model, draft=read_model_dir(MODELS / "llama-3.1-8b-eagle3")), "refused"),
            "miss": (dict(argv=EAGLE, model=model, draft=draft), "ok"),
            "outside": None,
        },
        # the generic invariants (tests/unit/host/test_start_invariants.py has their cases on 0.5.9 and 0.5.23)
        "draft-dtype-differs-from-target": {
            "hit": (dict(argv=EAGLE, model=llama, draft=llama_draft), "refused"),
            "miss": (dict(argv=[*EAGLE, "--dtype", "bfloat16"], model=llama, draft=llama_draft), "ok"),
            "outside": None,
        },
        "draft-context-longer-than-draft": {
            "hit": (dict(argv=EAGLE, model=model, draft=draft, release=release), "refused"),
            "miss": (dict(argv=EAGLE, model=model, draft=draft, release=release, env=ALLOW_LONGER), "ok"),
            "outside": None,
        },
        "draft-not-an-eagle3-class": {
            "hit": (dict(argv=EAGLE, model=llama, draft=llama, release=release), "refused"),
            "miss": (dict(argv=EAGLE, model=model, draft=draft, release=release), "ok"),
            "outside": None,
        },
        "quantization-flag-not-backed-by-checkpoint": {
            "hit": (dict(argv=["--quantization", "fp8"], model=model, release=release), "refused"),
            "miss": (dict(argv=["--quantization", "modelopt_fp4"], model=model, release=release), "ok"),
            "outside": None,
        },
        "backend-refuses-capability-or-kv-dtype": {
            "hit": (dict(argv=["--attention-backend", "trtllm_mha"], model=llama, release=release), "refused"),
            "miss": (dict(argv=["--attention-backend", "triton"], model=llama, release=release), "ok"),
            "outside": None,  # every release: each rule has its own range (a release before 0.5.9 has none)
        },
        # MoeRunner: flashinfer_trtllm has no runner core and no fused function for (deepep, flashinfer_trtllm)
        "moe-runner-backend-refused-by-moerunner": {
            "hit": (
                dict(argv=["--moe-runner-backend", "flashinfer_trtllm", "--moe-a2a-backend", "deepep"], model=model, release=release),
                "refused",
            ),
            "miss": (dict(argv=["--moe-runner-backend", "flashinfer_trtllm"], model=model, release=release), "ok"),
            "outside": None,
        },
        "draft-architecture-unknown": {
            "hit": (dict(argv=EAGLE, draft=odd, registry=registry), "refused"),
            "miss": (dict(argv=EAGLE, draft=draft, registry=registry), "ok"),
            "outside": None,
        },
        "remote-code-missing-offline": {
            "hit": (dict(argv=["--trust-remote-code"], env={"HF_HUB_OFFLINE": "1"}, model=model), "warning"),
            "miss": (dict(argv=["--trust-remote-code"], env={"HF_HUB_OFFLINE": "1"}, model=read_model_dir(with_code)), "ok"),
            "outside": None,
        },
        "driver-too-old": {
            "hit": (dict(host=host_with(host8, driver_version="570.133.20")), "refused"),
            "miss": (dict(host=host8), "ok"),
            "outside": None,
        },
        "proprietary-kernel-module-on-blackwell": {
            "hit": (dict(host=host_with(host8, nvidia_kernel_module="proprietary")), "refused"),
            "miss": (dict(host=host_with(host8, nvidia_kernel_module="open")), "ok"),
            "outside": None,
        },
        "topk-tree-flashinfer-mla": {
            "hit": (
                dict(
                    argv=["--speculative-algorithm", "NEXTN", "--speculative-eagle-topk", "4", "--attention-backend", "flashinfer"],
                    model=model,
                ),
                "refused",
            ),
            "miss": (
                dict(
                    argv=["--speculative-algorithm", "NEXTN", "--speculative-eagle-topk", "4", "--attention-backend", "triton"], model=model
                ),
                "ok",
            ),
            "outside": None,
        },
        "allreduce-fusion-noop-on-sm120": {
            "hit": (dict(argv=["--enable-flashinfer-allreduce-fusion"]), "warning"),
            "miss": (dict(argv=["--enable-flashinfer-allreduce-fusion"], planned_patches=["flashinfer_allreduce_fusion_sm120"]), "ok"),
            "outside": dict(argv=["--enable-flashinfer-allreduce-fusion"], version="0.5.14"),
        },
        "allreduce-fusion-raises-on-sm120": {
            "hit": (dict(argv=["--enable-flashinfer-allreduce-fusion"], version="0.5.14"), "refused"),
            "miss": (dict(argv=["--enable-flashinfer-allreduce-fusion"], version="0.5.14", capability="9.0"), "ok"),
            "outside": dict(argv=["--enable-flashinfer-allreduce-fusion"], version="0.5.13"),
        },
        "torch-symm-mem-keyerror-on-sm120": {
            "hit": (dict(argv=["--enable-torch-symm-mem"], version="0.5.13"), "refused"),
            "miss": (dict(argv=["--enable-torch-symm-mem"], planned_patches=["torch_symm_mem_sm120"]), "ok"),
            "outside": dict(argv=["--enable-torch-symm-mem"], version="0.5.14"),
        },
        "torch-symm-mem-inactive-on-pcie": {
            "hit": (dict(argv=["--enable-torch-symm-mem"], version="0.5.14"), "warning"),
            "miss": (dict(version="0.5.14"), "ok"),
            "outside": dict(argv=["--enable-torch-symm-mem"], version="0.5.8"),
        },
    }


@pytest.fixture(scope="module")
def table(kimi: Path, host8: HostFacts, registry: set[str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return cases(kimi, host8, registry, tmp_path_factory.mktemp("cases"))


def test_every_entry_has_cases(table: dict[str, dict[str, Any]]) -> None:
    """Adding an entry to the catalogue without its cases here fails."""
    assert sorted(table) == sorted(ENTRIES)
    ranged = [e.id for e in ENTRIES.values() if e.versions != ("0.0.0", None)]
    assert all(table[i]["outside"] is not None for i in ranged), [i for i in ranged if table[i]["outside"] is None]


@pytest.mark.parametrize("entry_id", sorted(ENTRIES))
def test_entry_triggered_and_not(entry_id: str, table: dict[str, dict[str, Any]], aliases: dict[str, str]) -> None:
    entry = ENTRIES[entry_id]
    kwargs, expected = table[entry_id]["hit"]
    hit = verdict(entry_id, context(aliases, **kwargs))
    assert hit.verdict == expected == ("refused" if entry.severity == "refuse" else "warning"), hit.text()
    assert entry.fix in hit.text() and entry.refs[0] in hit.text()
    assert ("unconfirmed:" in hit.text()) == (entry.evidence == "unconfirmed")
    kwargs, expected = table[entry_id]["miss"]
    miss = verdict(entry_id, context(aliases, **kwargs))
    assert miss.verdict == expected == "ok", miss.text()
    outside = table[entry_id]["outside"]
    if outside is not None:
        out = verdict(entry_id, context(aliases, **outside))
        assert out.verdict == "n/a" and f"is outside {entry.range_text}" in out.evidence[0], out.text()


def test_sglangs_own_reserve_is_named_and_unknown_without_its_serverargs(aliases: dict[str, str], host8: HostFacts) -> None:
    entry = "static-fraction-above-sglang-reserve"
    hit = verdict(entry, context(aliases, ["--mem-fraction-static", "0.9"], host=host8, sglang_auto_fraction=0.827))
    gpu_mib = host8.memory_mib
    assert gpu_mib
    assert "--mem-fraction-static 0.9 leaves 0.100 of each GPU outside the static pool; SGLang 0.5.9 picks 0.827 itself" in hit.text()
    assert f"({0.1 * gpu_mib / 1024:.1f} GiB against {0.173 * gpu_mib / 1024:.1f} GiB of {gpu_mib} MiB)" in hit.text()
    # typed but no ServerArgs ran (the deploy's gate, the static table): unknown, never ok
    typed = verdict(entry, context(aliases, ["--mem-fraction-static", "0.9"], host=host8))
    assert typed.verdict == "unknown" and "known only where its ServerArgs ran" in typed.text()
    given_in_config = verdict(entry, context(aliases, ["--mem-fraction-static", "0.9"], sglang_auto_unknown="given in --config"))
    assert given_in_config.verdict == "unknown" and "given in --config" in given_in_config.text()
    # not given: SGLang picks its own reserve
    assert verdict(entry, context(aliases, ["--tp-size", "8"])).verdict == "ok"


def test_absent_facts_are_unknown_never_ok(aliases: dict[str, str], kimi: Path) -> None:
    model = read_model_dir(kimi)
    assert verdict("weights-exceed-static-memory", context(aliases, ["--tp-size", "8"], model=model)).verdict == "unknown"
    assert (
        verdict("jit-all-reduce-on-pcie", context(aliases, env={"SGLANG_USE_JIT_ALL_REDUCE": "1"}, version="0.5.11")).verdict == "unknown"
    )
    assert verdict("draft-architecture-unknown", context(aliases, EAGLE)).verdict == "unknown"
    assert verdict("trtllm-mla-on-sm120", context(aliases, ["--attention-backend", "trtllm_mla"], capability=None)).verdict == "unknown"
    assert verdict("fa3-on-sm120", context(aliases, ["--attention-backend", "fa3"], version=None)).verdict == "unknown"
    # the PCIe fabric's facts: a file without them, or one that says why it could not read them
    for entry_id in ("nccl-p2p-uvm-hmm-on", "pcie-aspm-surprise-link-down", "nccl-p2p-iommu-translated"):
        absent = verdict(entry_id, context(aliases, ["--tp-size", "8"], host=read_host_facts(HOST8)))
        assert absent.verdict == "unknown" and "not in the file" in absent.text(), absent.text()
    gpus = read_host_facts(HOST8).gpus
    said = parse_host_facts({"gpus": gpus, "facts_unknown": {"uvm_disable_hmm": "nvidia_uvm is not loaded"}}, "f.json")
    hmm = verdict("nccl-p2p-uvm-hmm-on", context(aliases, ["--tp-size", "8"], host=said))
    assert hmm.verdict == "unknown" and "host uvm_disable_hmm unknown (nvidia_uvm is not loaded: f.json)" in hmm.text()
    # a condition that fails decides even when another fact is absent
    ok = verdict("jit-all-reduce-on-pcie", context(aliases, env={"SGLANG_USE_JIT_ALL_REDUCE": "0"}, version="0.5.11"))
    assert ok.verdict == "ok"


def test_the_fabric_entries_need_gpus_on_the_fabric(aliases: dict[str, str]) -> None:
    """A host checked without GPUs (the lab's containers, which read the real kernel's ASPM policy and IOMMU
    groups) is not refused for the GPUs' PCIe fabric; the same facts with GPUs listed are."""
    facts = {"iommu_mode": "translated", "uvm_disable_hmm": False, "pcie_aspm_policy": "default"}
    bare = parse_host_facts(facts, "lab.json")
    with_gpus = parse_host_facts({"gpus": read_host_facts(HOST8).gpus, **facts}, "gpu-host.json")
    for entry_id in ("nccl-p2p-uvm-hmm-on", "pcie-aspm-surprise-link-down", "nccl-p2p-iommu-translated"):
        lab = verdict(entry_id, context(aliases, ["--tp-size", "8"], host=bare))
        assert lab.verdict == "ok" and "host nvidia_gpus false" in lab.text(), lab.text()
        assert verdict(entry_id, context(aliases, ["--tp-size", "8"], host=with_gpus)).verdict == "refused"


def test_aliases_equals_form_and_acknowledgement(aliases: dict[str, str], kimi: Path, host8: HostFacts) -> None:
    model = read_model_dir(kimi)
    argv = ["--speculative-algorithm=EAGLE", "--speculative-eagle-topk=2", "--attention-backend=flashinfer"]
    assert verdict("topk-tree-flashinfer-mla", context(aliases, argv, model=model)).verdict == "refused"
    acked = verdict("topk-tree-flashinfer-mla", context(aliases, argv, model=model, acknowledged=["allow-topk-tree-on-mla"]))
    assert acked.verdict == "warning" and "acknowledged (--allow-topk-tree-on-mla)" in acked.text()
    # --tensor-parallel-size (0.5.9's canonical name, --tp-size its alias) is what the memory entry reads as tp-size
    mem = verdict("weights-exceed-static-memory", context(aliases, ["--tensor-parallel-size=8"], model=model, host=host8))
    assert mem.verdict == "ok" and "--tp-size 8" in mem.evidence[-1]
    # the MLA fact comes from --model-class when no directory is given
    llama = verdict("topk-tree-flashinfer-mla", context(aliases, argv, model_class="LlamaForCausalLM"))
    assert llama.verdict == "ok" and "not MLA" in llama.text()


def test_memory_arithmetic_names_every_number(aliases: dict[str, str], kimi: Path, host8: HostFacts) -> None:
    model = read_model_dir(kimi)
    refused = verdict(
        "weights-exceed-static-memory", context(aliases, ["--tp-size", "8", "--mem-fraction-static", "0.7"], model=model, host=host8)
    )
    text = refused.text()
    assert refused.verdict == "refused", text
    for part in (
        "591,000,000,000 B",
        "metadata.total_size",
        "--tp-size 8",
        "= 68.8 GiB",
        "--mem-fraction-static 0.7",
        "97887 MiB",
        "= 66.9 GiB",
        "short by 1.9 GiB",
        "raise --mem-fraction-static",
    ):
        assert part in text, (part, text)
    auto = verdict("weights-exceed-static-memory", context(aliases, ["--tp-size", "8", *EAGLE], model=model, host=host8))
    assert auto.verdict == "ok" and "(97887 MiB - 12288 MiB reserved incl. the draft) / 97887 MiB = 0.874" in auto.text(), auto.text()
    assert "= 83.6 GiB" in auto.text() and "14.8 GiB left for the KV cache" in auto.text()


# --- the upstream recipe ------------------------------------------------------------------------


# What the toolkit's eagle3 profile adds to upstream's recipe (#19689).
TOOLKIT_ADDITIONS = (
    "kv-cache-dtype",
    "moe-runner-backend",
    "disable-flashinfer-autotune",
    "quantization",
    "speculative-draft-model-quantization",
)


def stack_variables(version: str) -> dict[str, Any]:
    """stack.yml's variables for `version` as Ansible has them: the FlashInfer pin read from that
    release's wheel METADATA by the code of the lookup sglang_release_stack (stack_release)."""
    stack = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/stack.yml").read_text())
    metadata = next((CACHE / "sglang" / version).glob("sglang-*.dist-info/METADATA")).read_text()
    return {**stack, "stack_sglang_version": version, "stack_flashinfer_version": stack_from_metadata(metadata)["flashinfer"]}


def recipe_argv(version: str) -> list[str]:
    """Upstream's recipe: the eagle3 profile of roles/toolkit_defaults/defaults/main/service.yml as the
    toolkit renders it for `version`, as a command line, without the flags the toolkit adds to it
    (TOOLKIT_ADDITIONS: --kv-cache-dtype bfloat16, --quantization modelopt_fp4 with the draft unquantized,
    and --moe-runner-backend where stack.yml sets it), which test_upstream_recipe_with_kimi_fixtures puts back."""
    service = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/service.yml").read_text())
    variables = {**stack_variables(version), "stack_model_path": "/data/kimi", "stack_draft_model_path": "/data/eagle3"}
    profile = render_profile(service["sglang_profiles"]["eagle3"], variables)
    for name in TOOLKIT_ADDITIONS:
        profile.pop(name)
    argv: list[str] = []
    for name, value in profile.items():
        argv += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return argv


def toolkit_additions(version: str) -> list[str]:
    """What the toolkit's profile adds to upstream's recipe on `version`, rendered as Ansible does."""
    service = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/service.yml").read_text())
    profile = render_profile(service["sglang_profiles"]["eagle3"], stack_variables(version))
    return [
        item
        for name in TOOLKIT_ADDITIONS
        if profile[name] not in (None, False)
        for item in ((f"--{name}",) if profile[name] is True else (f"--{name}", str(profile[name])))
    ]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.15.post1", "0.5.16", "0.5.18", "0.5.21", "0.5.22", "0.5.23"])
def test_upstream_recipe_with_kimi_fixtures(version: str, kimi: Path, host8: HostFacts) -> None:
    """Upstream's recipe on the Kimi-shaped model, draft and host: refused on 0.5.9 for the checkpoint's
    FP8 KV hint (domain notes row 6: --kv-cache-dtype auto takes FP8 from the checkpoint) and for its
    config.json's quant_method modelopt (read as ModelOpt FP8), and from 0.5.16 for the NVFP4 MoE runner
    left on auto (flashinfer_trtllm after the load); with the toolkit's additions for that release
    (--kv-cache-dtype, --quantization modelopt_fp4 with the draft unquantized, and --moe-runner-backend
    flashinfer_cutlass from 0.5.16 only) nothing refuses; the metrics middleware's /v1/loads warns
    (0.5.9-0.5.15), and 0.5.9's FlashInfer FP4 GEMM race."""
    sglang = tree(version)
    aliases = {name: flag.name for name, flag in _lookup(release_flag_table(sglang)).items()}
    argv = recipe_argv(version)
    assert argv[argv.index("--speculative-eagle-topk") : argv.index("--speculative-eagle-topk") + 2] == ["--speculative-eagle-topk", "1"]
    kw = dict(
        version=version,
        model=read_model_dir(kimi),
        draft=read_model_dir(MODELS / "kimi-k2.5-eagle3"),
        host=host8,
        registry=registered_architectures(sglang),
        release=read_release_data(sglang),  # the invariants read the release's own tables
        env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
    )
    verdicts = {e.id: evaluate_entry(e, context(aliases, argv, **kw)) for e in ENTRIES.values()}
    refused = sorted(i for i, v in verdicts.items() if v.verdict == "refused")
    late = version_tuple(version) >= (0, 5, 16)
    first = ["fp8-kv-from-checkpoint", "modelopt-nvfp4-read-as-fp8"]
    assert refused == (first if version == "0.5.9" else ["nvfp4-moe-runner-auto-is-trtllm-on-sm120"] if late else []), refused
    if late:
        moe = verdicts["nvfp4-moe-runner-auto-is-trtllm-on-sm120"]
        assert "--moe-runner-backend auto (SGLang's default, not given)" in moe.text() and "model quantization modelopt_fp4" in moe.text()
        assert "flashinfer_cutlass" in moe.fix
    assert verdicts["weights-exceed-static-memory"].verdict == "ok"
    assert verdicts["draft-architecture-unknown"].verdict == "ok"
    assert verdicts["topk-tree-flashinfer-mla"].verdict == "ok"
    additions = toolkit_additions(version)
    assert ("--moe-runner-backend" in additions) == late and "--quantization" in additions, additions
    # FlashInfer 0.6.17 / 0.6.18 (SGLang 0.5.18-0.5.21): autotune off, else its MoE tactics corrupt output on SM120
    autotune_off = version in ("0.5.18", "0.5.21")
    assert ("--disable-flashinfer-autotune" in additions) == autotune_off, additions
    if autotune_off:
        without = [a for a in additions if a != "--disable-flashinfer-autotune"]
        bad = evaluate_entry(ENTRIES["flashinfer-cutlass-moe-autotune-corrupts-on-sm120"], context(aliases, [*argv, *without], **kw))
        assert bad.verdict == "refused" and "--disable-flashinfer-autotune not given" in bad.text(), bad.text()
    explicit = [evaluate_entry(e, context(aliases, [*argv, *additions], **kw)) for e in ENTRIES.values()]
    # the generic invariants decide the production profile on the real Kimi configs: each ok, none unknown
    generic = ("draft-dtype-differs-from-target", "draft-context-longer-than-draft", "draft-not-an-eagle3-class")
    generic += ("quantization-flag-not-backed-by-checkpoint", "backend-refuses-capability-or-kv-dtype")
    assert {v.id: v.verdict for v in explicit if v.id in generic} == dict.fromkeys(generic, "ok"), [
        v.text() for v in explicit if v.id in generic
    ]
    # --enable-metrics (the recipe's and every profile's) on 0.5.9-0.5.15: /v1/loads answers 500 with FastAPI 0.137+
    warned = ["v1-loads-500-metrics-middleware-fastapi-0137"] if version_tuple(version) <= (0, 5, 15) else []
    # FlashInfer 0.6.3 (0.5.9's pin) builds the SM120 FP4 GEMM without its PDL barriers: wrong tiles under load
    warned = (["flashinfer-fp4-gemm-pdl-race-on-sm120"] if version == "0.5.9" else []) + warned
    assert sorted(v.id for v in explicit if v.verdict in ("refused", "warning")) == sorted(warned)


# --- the catalogue's schema ------------------------------------------------------------------


def raw_catalogue() -> dict[str, Any]:
    return yaml.safe_load(CATALOGUE.read_text())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e.pop("fix"), "entry 'fa3-on-sm120': missing field(s) fix"),
        (
            lambda e: e.update(severity="refuse", evidence="unconfirmed", unconfirmed="x"),
            "entry 'fa3-on-sm120': field severity must be warn",
        ),
        (
            lambda e: e.update(evidence="unconfirmed", severity="warn"),
            "entry 'fa3-on-sm120': field unconfirmed must say what is not proven",
        ),
        (
            lambda e: e.update(versions={"from": 0.5, "to": None}),
            "entry 'fa3-on-sm120': field versions.from must be a quoted X.Y.Z version, found 0.5",
        ),
        (
            lambda e: e.update(versions={"from": "0.5.9", "to": "0.5.1"}),
            "entry 'fa3-on-sm120': field versions: to 0.5.1 is before from 0.5.9",
        ),
        (lambda e: e.update(refs=[]), "entry 'fa3-on-sm120': field refs must be a non-empty list"),
        (lambda e: e.pop("phase"), "entry 'fa3-on-sm120': missing field(s) phase"),
        (lambda e: e.update(phase="start"), "entry 'fa3-on-sm120': field phase must be one of init, argument-check, load,"),
        (lambda e: e.update(caught_by="luck"), "entry 'fa3-on-sm120': field caught_by must be one of gate, canary, none, found 'luck'"),
        (lambda e: e.update(severity="fatal"), "entry 'fa3-on-sm120': field severity must be one of refuse, warn, found 'fatal'"),
        (lambda e: e.update(colour="red"), "entry 'fa3-on-sm120': unknown field(s) colour"),
        (lambda e: e["trigger"].append({"host": "ram_gib", "is": True}), "entry 'fa3-on-sm120': trigger[2]: host must name one of"),
        (
            lambda e: e["trigger"].append({"flags": ["--tp-size"], "gt": 1}),
            "entry 'fa3-on-sm120': trigger[2]: flags must be a list of names without '--'",
        ),
        (
            lambda e: e["trigger"].append({"flags": ["tp-size"]}),
            "entry 'fa3-on-sm120': trigger[2]: flags needs exactly one of in, gt or given",
        ),
        (lambda e: e["trigger"].append({"env": ["X"], "truthy": True, "capability_major": [12]}), "trigger[2]: expected exactly one of"),
        (lambda e: e.update(id="trtllm-mla-on-sm120"), "field id 'trtllm-mla-on-sm120' is used by an earlier entry"),
        (
            lambda e: e.update(trigger=[]),
            "entry 'fa3-on-sm120': field trigger may be empty only for an entry the gate cannot decide (caught_by canary or none) "
            "that names its log signature (logs), found caught_by 'gate'",
        ),
        (lambda e: e.update(logs={"phases": ["exited"]}), "entry 'fa3-on-sm120': field logs must be {patterns: [regex...]"),
        (
            lambda e: e.update(logs={"patterns": ["FA3 ("]}),
            "entry 'fa3-on-sm120': field logs.patterns: 'FA3 (' is not a regular expression",
        ),
        (
            lambda e: e.update(logs={"patterns": ["FA3"], "phases": ["loading"]}),
            "entry 'fa3-on-sm120': field logs.phases must name run phases (port closed, no answer, 503,",
        ),
    ],
)
def test_bad_entry_names_entry_and_field(change: Any, message: str) -> None:
    data = raw_catalogue()
    entry = next(e for e in data["entries"] if e["id"] == "fa3-on-sm120")
    change(entry)
    with pytest.raises(CatalogueError) as info:
        parse_catalogue(data, "roles/sglang_launch/files/start-failures.yml")
    assert message in str(info.value) and str(info.value).startswith("roles/sglang_launch/files/start-failures.yml: "), str(info.value)


def test_catalogue_file_errors(tmp_path: Path) -> None:
    with pytest.raises(CatalogueError, match=r"nothing\.yml: cannot read the catalogue"):
        load_catalogue(tmp_path / "nothing.yml")
    (tmp_path / "bad.yml").write_text("schema: 2\nentries: []\n")
    with pytest.raises(CatalogueError, match=r"bad\.yml: schema must be 1, found 2"):
        load_catalogue(tmp_path / "bad.yml")


def test_run_time_only_entries_are_the_canarys_not_the_gates(aliases: dict[str, str]) -> None:
    """One catalogue: an entry the gate cannot decide (trigger []) says so (caught_by canary), carries its log
    signature, and is left out of the gate's verdicts; every entry with a signature is matched by it."""
    assert set(RUN_TIME_ONLY) == {
        "no-kernel-image",
        "out-of-memory-after-load",
        "still-capturing-cuda-graphs",
        "reasoning-parser-think-end-not-one-token",
    }
    assert all(e.logs["patterns"] for e in RUN_TIME_ONLY.values())
    # the canary names them, except the one the canary's argv leaves out (--reasoning-parser): only the real start shows it
    assert {e.id for e in RUN_TIME_ONLY.values() if e.caught_by != "canary"} == {"reasoning-parser-think-end-not-one-token"}
    assert RUN_TIME_ONLY["reasoning-parser-think-end-not-one-token"].caught_by == "none"
    verdicts = evaluate(load_catalogue(), context(aliases, ["--tp-size", "8"]))
    assert {v.id for v in verdicts} == set(ENTRIES)
    signatures = log_signatures(load_catalogue(), None)
    assert {s["id"] for s in signatures} >= set(RUN_TIME_ONLY) | {"fa3-on-sm120", "draft-does-not-fit-target"}
    # a signature names its entry, with the entry's own message, fix and references
    named = match_log(["ImportError: Can not import FA3 in sgl_kernel. Please check your installation."], "exited", signatures)
    fa3 = ENTRIES["fa3-on-sm120"]
    assert named is not None and (named["name"], named["cause"], named["fix"], named["refs"]) == (
        "fa3-on-sm120",
        fa3.message,
        fa3.fix,
        fa3.refs,
    )
    # the registry's skipped imports are never a cause
    assert match_log(["Ignore import error when loading sglang.srt.models.x: CUDA out of memory"], "exited", signatures) is None


def test_catalogue_covers_the_rows_asked_for() -> None:
    rows = {e.row for e in ENTRIES.values()}
    assert {1, 2, 4, 6, 7, 9, 10, 11, 12, 14, 15} <= rows
    old_rules = {"topk-tree-flashinfer-mla", "allreduce-fusion-raises-on-sm120", "torch-symm-mem-keyerror-on-sm120"}
    assert old_rules <= {e.id for e in ENTRIES.values() if e.row is None}


# --- facts: model directories and host facts -------------------------------------------------


def test_kimi_model_and_draft_facts(kimi: Path) -> None:
    model = read_model_dir(kimi)
    assert model.architectures == [KIMI_CLASS] and model.model_type == "kimi_k25" and model.is_mla
    # config.json's quantization_config is read first, as SGLang 0.5.9 does (kv_cache_scheme float 8)
    assert model.kv_cache_quant_algo == "FP8" and "config.json: quantization_config.kv_cache_scheme" in model.kv_cache_quant_source
    assert model.total_size == 591_000_000_000
    assert model.auto_map_missing == ["configuration_kimi_k25", "modeling_kimi_k25"]
    draft = read_model_dir(MODELS / "kimi-k2.5-eagle3")
    assert draft.architectures == ["LlamaForCausalLMEagle3"] and not draft.is_mla and draft.total_size is None


def test_hf_quant_config_read_when_config_has_none(tmp_path: Path) -> None:
    config = json.loads((MODELS / "kimi-k2.5-nvfp4" / "config.json").read_text())
    del config["quantization_config"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    shutil.copy(MODELS / "kimi-k2.5-nvfp4" / "hf_quant_config.json", tmp_path)
    facts = read_model_dir(tmp_path)
    assert facts.kv_cache_quant_algo == "FP8" and "hf_quant_config.json: quantization.kv_cache_quant_algo" in facts.kv_cache_quant_source
    (tmp_path / "hf_quant_config.json").unlink()
    assert read_model_dir(tmp_path).kv_cache_quant_algo is None


def test_model_directory_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FactsError, match=r"^--model .*/absent: no such directory$"):
        read_model_dir(tmp_path / "absent")
    with pytest.raises(FactsError, match=r"config\.json: missing; a model directory holds config\.json"):
        read_model_dir(tmp_path, "--draft-model")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(FactsError, match=r"config\.json: not JSON"):
        read_model_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {}}))
    with pytest.raises(FactsError, match=r"model\.safetensors\.index\.json: expected metadata\.total_size.*found None"):
        read_model_dir(tmp_path)


def test_host_facts_follow_the_captures() -> None:
    """The fixtures are the nvidia-smi parser's reading of the captures, kept in step."""
    rtx = json.loads(HOST8.read_text())
    assert rtx["gpus"] == [g.as_dict() for g in parse_query_output((DATA / "nvidia-smi" / "eight-rtx-pro-6000.txt").read_text())]
    h200 = read_host_facts(SF / "host-h200.json")
    assert [g.as_dict() for g in parse_query_output((SF / "nvidia-smi-query-h200.txt").read_text())] == h200.gpus
    assert h200.capability == "9.0" and h200.memory_mib == 143771 and h200.pcie_only is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a JSON object as the preflight module returns it, found list"),
        ({"gpu": []}, "unknown key(s) gpu"),
        ({"gpus": [{"index": 0}]}, "gpus[0].name must be str, found None"),
        (
            {"gpus": [{"index": 0, "name": "x", "compute_cap": "sm120", "driver_version": "580.1", "memory_mib": 1}]},
            "compute_cap should look like '12.0'",
        ),
        ({"pcie_only": "yes"}, "pcie_only must be true, false or null, found 'yes'"),
        ({"nvidia_kernel_module": "closed"}, "nvidia_kernel_module must be 'open' or 'proprietary'"),
        ({"iommu_mode": "on"}, "iommu_mode must be one of off, passthrough, translated or null, found 'on'"),
        ({"nvcc_version": 13}, "nvcc_version must be a dotted version such as '13.0' or null, found 13"),
        ({"jit_tools_missing": ["clang"]}, "jit_tools_missing names only nvcc, ninja, gcc, c++, found ['clang']"),
        ({"gpu_topology": ["GPU0"]}, "gpu_topology must map each GPU to {other GPU: link} or be null"),
        ({"acs_redirect": "no", "facts_unknown": {"x": 1}}, "acs_redirect must be true, false or null, found 'no' (and 1 more)"),
        ({"uvm_disable_hmm": "Y"}, "uvm_disable_hmm must be true, false or null, found 'Y'"),
        ({"pcie_aspm_policy": "on"}, "pcie_aspm_policy must be one of off, default, performance, powersave, powersupersave or null"),
        ({"gpus_power_below_default": "GPU0"}, "gpus_power_below_default must be a list of GPU<n> or null, found 'GPU0'"),
    ],
)
def test_bad_host_facts(data: Any, message: str) -> None:
    with pytest.raises(FactsError) as info:
        parse_host_facts(data, "facts.json")
    assert str(info.value).startswith("facts.json: ") and message in str(info.value)


def test_parse_env_and_argv() -> None:
    assert parse_env(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    with pytest.raises(ValueError, match=r"--env takes KEY=VALUE.*'NOEQUALS'"):
        parse_env(["NOEQUALS"])
    flags = parse_argv(["--tp", "8", "--trust-remote-code", "--cuda-graph-bs", "1", "2", "--x=y"], {"tp": "tensor-parallel-size"})
    assert flags == {"tensor-parallel-size": "8", "trust-remote-code": True, "cuda-graph-bs": ["1", "2"], "x": "y"}


# --- sglang-flags ----------------------------------------------------------------------------


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CLI), "--python", "/nonexistent/python", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_recipe_accepted_json_lists_every_entry(kimi: Path) -> None:
    """sglang-flags with the Kimi-K2.5-NVFP4 config on the 8x RTX PRO 6000 host facts: the
    production eagle3 profile as it stood (upstream's recipe plus --kv-cache-dtype) is refused on 0.5.23,
    naming the MoE runner and its fix; with the toolkit's profile for 0.5.23 it is accepted, and on
    0.5.9 (where the profile leaves the runner to SGLang) too."""
    common = ["--model-class", KIMI_CLASS, "--model", kimi, "--draft-model", MODELS / "kimi-k2.5-eagle3", "--host-facts", HOST8]
    env = ["--env", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"]
    old = cli("--sglang", tree("0.5.23"), *common, *env, "--", *recipe_argv("0.5.23"), "--kv-cache-dtype", "bfloat16")
    assert old.returncode == 1, old.stdout + old.stderr
    refused = [line for line in old.stdout.splitlines() if line.startswith("refused: ")]
    assert len(refused) == 1 and refused[0].startswith("refused: [nvfp4-moe-runner-auto-is-trtllm-on-sm120]"), old.stdout
    assert "--moe-runner-backend auto (SGLang's default, not given)" in refused[0]
    assert "fix: add moe-runner-backend: flashinfer_cutlass to the profile" in refused[0]
    for version in ("0.5.23", "0.5.9"):
        out = cli("--sglang", tree(version), *common, "--json", *env, "--", *recipe_argv(version), *toolkit_additions(version))
        assert out.returncode == 0, version + out.stdout + out.stderr
        report = json.loads(out.stdout)
        sf = report["start_failures"]
        assert report["ok"] is True and sf["capability"] == "12.0" and sf["capability_from"] == "--host-facts"
        assert sorted(v["id"] for v in sf["verdicts"]) == sorted(ENTRIES)
        # every profile gives --enable-metrics: on 0.5.9-0.5.15 the metrics middleware's /v1/loads 500 is a warning
        # 0.5.9: the metrics middleware's /v1/loads 500 (every profile gives --enable-metrics) and FlashInfer 0.6.3's
        # FP4 GEMM without its PDL barriers (the NVFP4 target, flashinfer_cutlass by default) are warnings
        warned = {"v1-loads-500-metrics-middleware-fastapi-0137", "flashinfer-fp4-gemm-pdl-race-on-sm120"} if version == "0.5.9" else set()
        assert {v["id"] for v in sf["verdicts"] if v["verdict"] == "warning"} == warned, sf["verdicts"]
        others = [v for v in sf["verdicts"] if v["id"] not in warned]
        assert all(v["verdict"] in ("ok", "unknown", "n/a") and v["evidence"] for v in others), others
        assert sf["counts"]["refused"] == 0 and sf["env"] == {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
        moe = next(v for v in sf["verdicts"] if v["id"] == "nvfp4-moe-runner-auto-is-trtllm-on-sm120")
        assert moe["verdict"] == ("ok" if version == "0.5.23" else "n/a"), moe


def test_cli_refuses_and_says_why(kimi: Path) -> None:
    out = cli(
        "--sglang",
        tree("0.5.9"),
        "--model-class",
        KIMI_CLASS,
        "--model",
        kimi,
        "--",
        "--model-path",
        "/data/kimi",
        "--tp-size",
        "8",
        "--attention-backend=trtllm_mla",
    )
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("refused: [trtllm-mla-on-sm120]") and "sglang #24633" in line for line in lines), out.stdout
    # each refusal says where the start would have failed
    assert any(
        line.startswith("refused: [trtllm-mla-on-sm120]") and "(fails after the weights load, at SGLang's warm-up request)" in line
        for line in lines
    ), out.stdout
    assert any(line.startswith("refused: [fp8-kv-from-checkpoint]") for line in lines)
    assert any(
        line.startswith("refused: [modelopt-nvfp4-read-as-fp8]") and "quant_method modelopt" in line and "sglang #14285" in line
        for line in lines
    ), out.stdout
    assert any(line.startswith("unknown: [weights-exceed-static-memory]") and "no --host-facts given" in line for line in lines)
    assert lines[-1] == "flags refused: 3 problem(s)"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "/nonexistent/kimi"], "--model /nonexistent/kimi: no such directory"),
        (["--draft-model", str(MODELS)], f"{MODELS}/config.json: missing"),
        (["--host-facts", "/nonexistent/facts.json"], "/nonexistent/facts.json: missing"),
        (["--env", "BROKEN"], "--env takes KEY=VALUE"),
        (["--host-facts", str(SF / "host-h200.json"), "--gpu-cc", "12.0"], "--gpu-cc 12.0 differs from the GPUs in --host-facts"),
    ],
)
def test_cli_bad_inputs_exit_2(extra: list[str], message: str) -> None:
    out = cli("--sglang", tree("0.5.9"), "--model-class", KIMI_CLASS, *extra, "--", "--tp-size", "8")
    assert out.returncode == 2 and message in out.stderr and out.stdout == "", out.stdout + out.stderr


def test_cli_without_new_options_prints_no_catalogue() -> None:
    out = cli(
        "--sglang",
        tree("0.5.9"),
        "--model-class",
        KIMI_CLASS,
        "--",
        "--model-path",
        "/data/kimi",
        "--tp-size",
        "8",
        "--attention-backend",
        "trtllm_mla",
    )
    assert out.returncode == 0 and "start failures" not in out.stdout and out.stdout.splitlines()[-1] == "flags accepted", out.stdout


def test_registry_read_from_wheel_as_from_tree() -> None:
    wheel = CACHE / "sglang" / "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
    if not wheel.exists():
        pytest.fail(f"no SGLang 0.5.23 wheel at {wheel}: run `make sglang-wheels` first")
    from_wheel = registered_architectures(wheel)
    assert from_wheel is not None and from_wheel == registered_architectures(tree("0.5.23"))
    assert {"LlamaForCausalLMEagle3", KIMI_CLASS} <= from_wheel and "NoSuchDraftForCausalLM" not in from_wheel
    assert registered_architectures(DATA) is None


def test_a_draft_made_for_another_target_is_refused_naming_both_values(aliases: dict[str, str], kimi: Path) -> None:
    """The Llama-3.1-8B EAGLE-3 draft with the Kimi-shaped target (the pair that failed on the real H200
    in CUDA-graph capture): every mismatch named with both values and both directories."""
    llama_draft = MODELS / "llama-3.1-8b-eagle3"
    result = verdict("draft-does-not-fit-target", context(aliases, EAGLE, model=read_model_dir(kimi), draft=read_model_dir(llama_draft)))
    text = result.text()
    assert result.verdict == "refused", text
    assert f"hidden size: draft's target_hidden_size/hidden_size 4096 ({llama_draft}) != target's hidden_size 7168 ({kimi})" in text
    assert "vocabulary: draft's vocab_size 128256" in text and "target's vocab_size 163840" in text
    fits = verdict(
        "draft-does-not-fit-target", context(aliases, EAGLE, model=read_model_dir(kimi), draft=read_model_dir(MODELS / "kimi-k2.5-eagle3"))
    )
    assert (
        fits.verdict == "ok"
        and "the draft fits the target (hidden size 7168, vocabulary 163840, auxiliary layers [1, 29, 57] of 61)" in fits.text()
    )
    # no speculation: ok without a draft; a draft flag without its directory: unknown, never ok
    assert verdict("draft-does-not-fit-target", context(aliases, [], model=read_model_dir(kimi))).verdict == "ok"
    assert verdict("draft-does-not-fit-target", context(aliases, EAGLE, model=read_model_dir(kimi))).verdict == "unknown"


def test_a_draft_told_unquant_is_not_taken_for_one_left_to_inherit(aliases: dict[str, str]) -> None:
    """On the values SGLang's ServerArgs resolved, --speculative-draft-model-quantization unquant is None
    (0.5.9 _handle_missing_default_values) and a draft left to inherit holds the target's method: the
    entry reads the first as fixed and the second as the failure, not None as "left to its default"
    (a deploy's second gate refused the production profile for this before the rule)."""
    draft = read_model_dir(MODELS / "kimi-k2.5-eagle3")
    typed = ["--quantization", "modelopt_fp4", *EAGLE, "--speculative-draft-model-quantization", "unquant"]
    entry = ENTRIES["draft-inherits-target-quantization"]
    told = {"quantization": "modelopt_fp4", "speculative-draft-model-quantization": None}
    fixed = evaluate_entry(entry, context(aliases, typed, draft=draft, resolved=told))
    assert fixed.verdict == "ok", fixed.text()
    left = {"quantization": "modelopt_fp4", "speculative-draft-model-quantization": "modelopt_fp4"}
    inherits = evaluate_entry(entry, context(aliases, ["--quantization", "modelopt_fp4", *EAGLE], draft=draft, resolved=left))
    assert inherits.verdict == "refused" and "--speculative-draft-model-quantization modelopt_fp4" in inherits.text(), inherits.text()


def test_the_glibc_entries_read_cuda_13_0_1s_own_math_header(cuda_home: Path) -> None:
    """What the two glibc entries claim of the toolkit the roles install (NVIDIA's own CUDA 13.0.1
    headers): its math_functions.h leaves sinpi and cospi to glibc 2.41's C23 declarations (their
    exception specification follows a guard on glibc), but declares rsqrt(double) with none, which glibc
    2.42 declares with one."""
    lines = (cuda_home / "include" / "crt" / "math_functions.h").read_text().splitlines()
    assert "#    define __NV_GLIBC_PROVIDES_IEC_60559_FUNCS 1" in lines
    sinpi = [line for line in lines if re.search(r"\bdouble\s+sinpi\(double x\)", line)]
    assert len(sinpi) == 1 and sinpi[0].rstrip().endswith("sinpi(double x) __NV_IEC_60559_FUNCS_EXCEPTION_SPECIFIER;"), sinpi
    rsqrt = [line for line in lines if re.search(r"\bdouble\s+rsqrt\(double x\)", line)]
    assert len(rsqrt) == 1 and rsqrt[0].rstrip().endswith("rsqrt(double x);"), rsqrt


# Triton's own build of its CUDA launcher (what runs at a server's first Triton kernel), with the include
# directory of the running Python as sysconfig gives it, or replaced by one without Python.h.
TRITON_LAUNCHER_BUILD = """
import shutil, sys, sysconfig, tempfile
from pathlib import Path
import triton
import triton.backends.nvidia as nvidia
from triton.runtime import build
if sys.argv[1] != "-":
    real = sysconfig.get_paths
    sysconfig.get_paths = lambda *a, **k: {**real(*a, **k), "include": sys.argv[1]}
here = Path(nvidia.__file__).parent
with tempfile.TemporaryDirectory() as tmp:
    shutil.copy(here / "driver.c", Path(tmp) / "cuda_utils.c")
    so = build._build("cuda_utils", str(Path(tmp) / "cuda_utils.c"), tmp, [], [str(here / "include")], [], [])
    print("triton", triton.__version__, "built", Path(so).name)
"""


def test_triton_builds_its_launcher_against_pythons_headers_and_fails_without_them(sglang_runtime_python: Path, tmp_path: Path) -> None:
    """triton-python-headers-missing on real sources: the Triton of SGLang's runtime environment compiles its
    driver.c (which includes Python.h) with gcc and sysconfig's include directory; without Python.h there, it
    fails as the report says, and the host fact the gate reads is what tells the two apart."""
    from sglang_sm120.host.facts import GatheredFacts, _headers

    with_headers = subprocess.run([str(sglang_runtime_python), "-c", TRITON_LAUNCHER_BUILD, "-"], capture_output=True, text=True)
    assert with_headers.returncode == 0, with_headers.stderr[-2000:]
    assert re.fullmatch(r"triton \S+ built cuda_utils\.\S+\.so", with_headers.stdout.strip()), with_headers.stdout
    empty = tmp_path / "include"
    empty.mkdir()
    without = subprocess.run([str(sglang_runtime_python), "-c", TRITON_LAUNCHER_BUILD, str(empty)], capture_output=True, text=True)
    assert without.returncode != 0
    assert "fatal error: Python.h: No such file or directory" in without.stderr, without.stderr[-2000:]
    # the fact preflight gathers from the same include directory
    facts = GatheredFacts()
    _headers(facts, lambda path: Path(path).exists(), str(empty))
    assert facts.python_headers is False
    _headers(facts, lambda path: Path(path).exists(), sysconfig_include(sglang_runtime_python))
    assert facts.python_headers is True


def sysconfig_include(python: Path) -> str:
    done = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"], capture_output=True, text=True)
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("argv", "expected", "said"),
    [
        (["--tp-size", "8"], "ok", "the highest GPU SGLang uses is 7, of 8"),
        (["--tp-size", "16"], "refused", "SGLang places a rank on GPU 15, the host facts list 8 GPUs"),
        (["--tp-size", "4", "--pp-size", "2"], "ok", "the highest GPU SGLang uses is 7"),
        (["--tp-size", "4", "--dp-size", "2"], "ok", "the highest GPU SGLang uses is 7"),
        (["--tp-size", "8", "--dp-size", "2"], "refused", "places a rank on GPU 15"),
        (["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention"], "ok", "the highest GPU SGLang uses is 7"),
        (["--tp-size", "4", "--base-gpu-id", "4"], "ok", "the highest GPU SGLang uses is 7"),
        (["--tp-size", "4", "--base-gpu-id", "6"], "refused", "places a rank on GPU 9"),
        (["--tp-size", "16", "--nnodes", "2"], "ok", "the highest GPU SGLang uses is 7"),
    ],
)
def test_parallel_sizes_are_placed_as_sglang_places_them(
    argv: list[str], expected: str, said: str, aliases: dict[str, str], host8: HostFacts
) -> None:
    result = verdict("parallel-size-exceeds-host-gpus", context(aliases, argv, host=host8))
    assert result.verdict == expected and said in result.text(), result.text()
    unknown = verdict("parallel-size-exceeds-host-gpus", context(aliases, argv))
    assert unknown.verdict == "unknown" and "the host's GPU count is unknown" in unknown.text()
