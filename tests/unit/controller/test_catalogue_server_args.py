"""Every start-failure catalogue entry's triggering input through the real ServerArgs of the first and last release of
its range (issue 48), then through the gate as a deploy runs it (flag_gate.check_flag_sets): SGLang's own argparse and
resolution on a faked 8 x RTX PRO 6000 (capability 12.0), the catalogue reading the values SGLang resolved.

An entry's range is clipped to the supported releases (tests/data/sglang-wheels.txt); each end runs in that release's
own CPU runtime (`make sglang-runtime`: 0.5.9 and 0.5.23 whole, the other ends as overlays written by
scripts/runtime_overlay.py from the release's lock). All flag sets of one release run in one import of it.

The verdict asserted is the entry's own (refused for `refuse`, warning for `warn`), whether SGLang's ServerArgs took
the flags (the catalogue then reads its resolved values) or refused them itself (the flags as typed: the launch
still stops before the load). An entry without a trigger is a run-time log signature only (NO_TRIGGER says so).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest
from test_server_args_check import REMOTE_CODE_STANDIN
from test_start_failures import host_with

from conftest import CACHE, DATA
from sglang_sm120.launch.start_failures import FactsError, read_host_facts, version_tuple
from sglang_sm120_controller.flag_gate import FlagSet, GateReport, check_flag_sets
from sglang_sm120_controller.toolkit_data import load_catalogue

ENTRIES = {e.id: e for e in load_catalogue()}
RELEASES = [line.split()[0] for line in (DATA / "sglang-wheels.txt").read_text().splitlines() if line.strip() and not line.startswith("#")]
MODELS = DATA / "models"
SF = DATA / "start-failures"
KIMI, LLAMA = "KimiK25ForConditionalGeneration", "LlamaForCausalLM"
ALLOW_LONGER = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
EAGLE = [
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/data/eagle3",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
]  # fmt: skip
TOPK_TREE = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2", "--speculative-eagle-topk", "4"]
TOPK_TREE += ["--speculative-num-draft-tokens", "8", "--attention-backend", "flashinfer"]

# Entries that are log signatures of a running start only: nothing before the load triggers them.
NO_TRIGGER = {
    "no-kernel-image": "a kernel image missing for the GPU shows only when a kernel launches",
    "out-of-memory-after-load": "memory runs out during the load or the CUDA-graph capture",
    "reasoning-parser-think-end-not-one-token": "the tokenizer decides, read at the first constrained request",
    "still-capturing-cuda-graphs": "a start that has not answered yet, seen in the log while it waits",
}


@dataclass(frozen=True)
class Case:
    """The triggering input of one entry: flags after --model-path (--tp-size 8 unless a parallel size is given), the
    server's environment (the role's ALLOW_LONGER unless `env` replaces it), host-fact changes, the model and draft."""

    argv: list[str] = field(default_factory=list)
    env: Optional[dict[str, str]] = None
    host: dict[str, Any] = field(default_factory=dict)
    model: str = "kimi"  # kimi | kimi-no-code | llama
    draft: Optional[str] = None  # kimi-eagle3 | llama-eagle3 | llama | odd
    # per release, where a flag of the case is not in a release's choices
    argv_by_release: dict[str, list[str]] = field(default_factory=dict)


CASES: dict[str, Case] = {
    "trtllm-mla-on-sm120": Case(["--attention-backend", "trtllm_mla"]),
    "fa3-on-sm120": Case(["--attention-backend", "fa3", "--kv-cache-dtype", "bfloat16"]),
    "cutlass-mla-flashmla-on-sm120": Case(["--attention-backend", "flashmla", "--kv-cache-dtype", "bfloat16"]),
    "draft-inherits-mla-only-backend": Case(
        ["--attention-backend", "flashmla", "--kv-cache-dtype", "bfloat16", *EAGLE], draft="kimi-eagle3"
    ),
    "flashinfer-trtllm-moe-fp4-on-sm120": Case(["--moe-runner-backend", "flashinfer_trtllm", "--kv-cache-dtype", "bfloat16"]),
    "fp4-gemm-env-trtllm-on-sm120": Case(
        ["--fp4-gemm-backend", "auto"], env={**ALLOW_LONGER, "SGLANG_FLASHINFER_FP4_GEMM_BACKEND": "trtllm"}
    ),
    "flashinfer-cutlass-moe-autotune-corrupts-on-sm120": Case(
        ["--moe-runner-backend", "flashinfer_cutlass", "--kv-cache-dtype", "bfloat16"]
    ),
    "draft-inherits-target-quantization": Case(
        ["--quantization", "modelopt_fp4", "--kv-cache-dtype", "bfloat16", *EAGLE], draft="kimi-eagle3"
    ),
    "draft-quantized-online-to-nvfp4": Case(
        ["--quantization", "modelopt_fp4", "--kv-cache-dtype", "bfloat16", *EAGLE], draft="kimi-eagle3"
    ),
    "nvfp4-moe-runner-auto-is-trtllm-on-sm120": Case(["--kv-cache-dtype", "bfloat16"]),
    "modelopt-nvfp4-read-as-fp8": Case(["--kv-cache-dtype", "bfloat16"]),
    "fp8-kv-from-checkpoint": Case([]),
    "fp8-kv-from-checkpoint-later": Case(["--kv-cache-dtype", "auto"]),
    "trtllm-mha-fp8-kv-on-sm120": Case(
        ["--speculative-draft-attention-backend", "trtllm_mha", "--kv-cache-dtype", "fp8_e4m3", *EAGLE], draft="kimi-eagle3"
    ),
    "triton-mla-decode-fp8-kv-smem-on-sm120": Case(["--attention-backend", "triton", "--kv-cache-dtype", "fp8_e4m3"]),
    "weights-exceed-static-memory": Case(["--tp-size", "4", "--kv-cache-dtype", "bfloat16"]),
    "static-fraction-above-sglang-reserve": Case(["--mem-fraction-static", "0.95", "--kv-cache-dtype", "bfloat16"]),
    "jit-all-reduce-on-pcie": Case(env={**ALLOW_LONGER, "SGLANG_USE_JIT_ALL_REDUCE": "1"}),
    "pcie-ipc-allreduce-kernels": Case(env={**ALLOW_LONGER, "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}),
    "nccl-p2p-acs-redirect": Case(host={"acs_redirect": True}),
    "nccl-p2p-iommu-translated": Case(host={"iommu_mode": "translated"}),
    "nccl-p2p-uvm-hmm-on": Case(host={"uvm_disable_hmm": False}),
    "pcie-aspm-surprise-link-down": Case(host={"pcie_aspm_policy": "powersupersave"}),
    "flashinfer-fp4-gemm-pdl-race-on-sm120": Case(["--kv-cache-dtype", "bfloat16"]),
    "parallel-size-exceeds-host-gpus": Case(["--tp-size", "16"]),
    "v1-loads-500-metrics-middleware-fastapi-0137": Case(["--enable-metrics"]),
    "gpu-power-limit-below-default": Case(host={"gpus_power_below_default": ["GPU7"]}),
    "gpu-bar1-below-memory": Case(host={"gpus_bar1_below_memory": ["GPU0"]}),
    "deepgemm-on-sm120": Case(host={"deep_gemm_importable": True}),
    "flashinfer-jit-nvcc-too-old": Case(host={"nvcc_version": "12.8"}),
    "flashinfer-jit-toolchain-missing": Case(host={"jit_tools_missing": ["c++"]}),
    "sglang-jit-toolchain-missing": Case(host={"jit_tools_missing": ["nvcc"]}),
    "jit-cuda-headers-missing": Case(host={"cuda_cccl_headers": False}),
    "triton-python-headers-missing": Case(host={"python_headers": False}),
    "sglang-jit-activation-vs-gcc-12": Case(host={"gcc_version": "12.2.0"}),
    "glibc-c23-math-vs-cuda-12-headers": Case(host={"glibc_version": "2.41", "nvcc_version": "12.9"}),
    "glibc-rsqrt-vs-cuda-13-0-headers": Case(host={"glibc_version": "2.42", "nvcc_version": "13.0"}),
    "triton-ptxas-lacks-gpu-arch": Case(host={"triton_ptxas_knows_arch": False}),
    "draft-does-not-fit-target": Case(["--kv-cache-dtype", "bfloat16", *EAGLE], draft="llama-eagle3"),
    "draft-architecture-unknown": Case(["--kv-cache-dtype", "bfloat16", *EAGLE], draft="odd"),
    "draft-dtype-differs-from-target": Case(EAGLE, model="llama", draft="llama-eagle3"),
    "draft-context-longer-than-draft": Case(["--kv-cache-dtype", "bfloat16", *EAGLE], env={}, draft="kimi-eagle3"),
    "draft-not-an-eagle3-class": Case(EAGLE, model="llama", draft="llama"),
    "quantization-flag-not-backed-by-checkpoint": Case(["--quantization", "fp8", "--kv-cache-dtype", "bfloat16"]),
    # 0.5.9 refuses trtllm_mha on capability 12; 0.5.19 on takes it there, but not with an FP8 KV cache for prefill
    "backend-refuses-capability-or-kv-dtype": Case(["--attention-backend", "trtllm_mha", "--kv-cache-dtype", "fp8_e4m3"], model="llama"),
    "moe-runner-backend-refused-by-moerunner": Case(
        ["--moe-runner-backend", "flashinfer_trtllm", "--moe-a2a-backend", "deepep", "--kv-cache-dtype", "bfloat16"]
    ),
    "remote-code-missing-offline": Case(env={**ALLOW_LONGER, "HF_HUB_OFFLINE": "1"}, model="kimi-no-code"),
    "driver-too-old": Case(host={"driver_version": "570.133.20"}),
    "proprietary-kernel-module-on-blackwell": Case(host={"nvidia_kernel_module": "proprietary"}),
    "topk-tree-flashinfer-mla": Case([*TOPK_TREE, "--kv-cache-dtype", "bfloat16"]),
    "allreduce-fusion-noop-on-sm120": Case(["--enable-flashinfer-allreduce-fusion", "--kv-cache-dtype", "bfloat16"]),
    "allreduce-fusion-raises-on-sm120": Case(["--enable-flashinfer-allreduce-fusion", "--kv-cache-dtype", "bfloat16"]),
    "torch-symm-mem-keyerror-on-sm120": Case(["--enable-torch-symm-mem", "--kv-cache-dtype", "bfloat16"]),
    "torch-symm-mem-inactive-on-pcie": Case(["--enable-torch-symm-mem", "--kv-cache-dtype", "bfloat16"]),
}


def ends(entry_id: str) -> list[str]:
    """The first and last supported release inside the entry's range (one when they are the same)."""
    low, high = ENTRIES[entry_id].versions
    inside = [v for v in RELEASES if version_tuple(low) <= version_tuple(v) and (high is None or version_tuple(v) <= version_tuple(high))]
    assert inside, f"{entry_id}: no supported release is inside {ENTRIES[entry_id].range_text}"
    return sorted({inside[0], inside[-1]}, key=version_tuple)


def needed_releases() -> list[str]:
    return sorted({v for i in CASES for v in ends(i)}, key=version_tuple)


def test_every_entry_has_a_case_or_says_why_not() -> None:
    triggered = {i for i, e in ENTRIES.items() if e.trigger}
    assert sorted(CASES) == sorted(triggered), (sorted(set(triggered) - set(CASES)), sorted(set(CASES) - triggered))
    assert sorted(NO_TRIGGER) == sorted(set(ENTRIES) - triggered)


def test_every_end_has_a_runtime_to_build() -> None:
    """`make sglang-runtime` builds a runtime for each release an end falls on (a requirements file in tests/runtime)."""
    missing = [v for v in needed_releases() if not (DATA.parent / "runtime" / f"sglang-{v}.txt").is_file()]
    assert not missing, f"no tests/runtime/sglang-VERSION.txt for {missing}: scripts/runtime_overlay.py writes one"


def _model_dir(root: Path, name: str) -> Path:
    target = root / name
    if target.exists():
        return target
    target.mkdir(parents=True)
    if name in ("kimi", "kimi-no-code"):
        for file in ("config.json", "hf_quant_config.json"):
            shutil.copy(MODELS / "kimi-k2.5-nvfp4" / file, target / file)
        shutil.copy(SF / "kimi-k2.5-nvfp4" / "model.safetensors.index.json", target)
        if name == "kimi":
            (target / "configuration_kimi_k25.py").write_text(REMOTE_CODE_STANDIN)
    elif name == "odd":
        (target / "config.json").write_text(json.dumps({"architectures": ["NoSuchDraftForCausalLM"], "model_type": "llama"}))
    else:
        source = {"llama": "llama-3.1-8b-instruct", "llama-eagle3": "llama-3.1-8b-eagle3", "kimi-eagle3": "kimi-k2.5-eagle3"}[name]
        shutil.rmtree(target)
        shutil.copytree(MODELS / source, target)
    return target


def _argv(case: Case, release: str) -> list[str]:
    argv = case.argv_by_release.get(release, case.argv)
    parallel = [] if {"--tp-size", "--pp-size"} & set(argv) else ["--tp-size", "8"]
    remote = ["--trust-remote-code"] if case.model.startswith("kimi") else []
    return ["--model-path", f"/data/{case.model}", *remote, *parallel, *argv]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], GateReport]:
    """(entry id, release) -> the gate's report on the entry's case; one SGLang import per release and model class."""
    root = tmp_path_factory.mktemp("models")
    host8 = read_host_facts(SF / "host-8x-rtx-pro-6000.json")
    missing = [v for v in needed_releases() if not (CACHE / "sglang-runtime" / v / ".stamp").exists()]
    if missing:
        pytest.skip(f"needs the SGLang runtimes of {missing} (`make sglang-runtime`)")
    out: dict[tuple[str, str], GateReport] = {}
    for release in needed_releases():
        tree = CACHE / "sglang" / release
        for model_class in (KIMI, LLAMA):
            ids = [i for i, c in CASES.items() if release in ends(i) and (c.model == "llama") == (model_class == LLAMA)]
            if not ids:
                continue
            sets = []
            for i in ids:
                case = CASES[i]
                sets.append(
                    FlagSet(
                        _argv(case, release),
                        env=dict(ALLOW_LONGER if case.env is None else case.env),
                        model=_model_dir(root, case.model),
                        draft_model=_model_dir(root, case.draft) if case.draft else None,
                        label=i,
                        host=host_with(host8, **case.host) if case.host else None,
                    )
                )
            for report in check_flag_sets(tree, sets, model_class=model_class, host=host8):
                out[(report.label or "", release)] = report
    return out


@pytest.mark.parametrize("entry_id", sorted(CASES))
def test_the_triggering_input_is_refused_through_sglangs_serverargs_at_both_ends(
    entry_id: str, reports: dict[tuple[str, str], GateReport]
) -> None:
    entry = ENTRIES[entry_id]
    expected = "refused" if entry.severity == "refuse" else "warning"
    for release in ends(entry_id):
        report = reports[(entry_id, release)]
        own = [v.text() for v in report.verdicts if v.id == entry_id]
        said = f"SGLang {release}: " + "; ".join([e.text() for e in report.flags.errors] + own)
        assert report.complete and report.server_args is not None, (
            f"{entry_id} on {release}: ServerArgs did not run: {report.partial_reason}"
        )
        assert report.server_args["sglang_version"] == release
        if report.server_args["verdict"] == "ok":
            assert report.start_failures is not None and report.start_failures["flag_values"] == "resolved"
        found = [v for v in report.verdicts if v.id == entry_id]
        assert found and found[0].verdict == expected, f"{entry_id}: expected {expected} -- {said}"


def test_a_host_whose_gpus_differ_from_the_checks_device_is_refused(tmp_path: Path) -> None:
    host8 = read_host_facts(SF / "host-8x-rtx-pro-6000.json")
    four = host_with(host8, gpus=host8.gpus[:4])
    model = _model_dir(tmp_path, "kimi")
    with pytest.raises(FactsError, match=r"4 GPU\(s\) of 97887 MiB.*8 of 97887 MiB.*a call of its own"):
        check_flag_sets(
            CACHE / "sglang" / "0.5.9",
            [FlagSet(["--model-path", str(model)], model=model, label="four", host=four)],
            model_class=KIMI,
            host=host8,
        )


def test_the_overlays_are_what_the_script_writes_from_the_locks() -> None:
    """tests/runtime's overlays re-made from the locks as they are now (a lock updated without its overlay fails)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("runtime_overlay", DATA.parent.parent / "scripts" / "runtime_overlay.py")
    assert spec and spec.loader
    runtime_overlay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtime_overlay)
    for path in sorted((DATA.parent / "runtime").glob("sglang-*.txt")):
        text = path.read_text()
        if "# runtime-base: " not in text:
            continue
        version = path.stem.removeprefix("sglang-")
        borrowed = re.search(r"locks/sglang-(\S+)\.txt", text)
        assert borrowed, f"{path}: no lock named in its header"
        lock_from = borrowed[1] if borrowed[1] != version else None
        base, pins, said = runtime_overlay.overlay(version, lock_from)
        assert runtime_overlay.text(version, base, pins, said) == text, f"{path} is not what scripts/runtime_overlay.py writes now"
        assert pins and all(not runtime_overlay.NEVER.match(n) for n in pins)


def test_the_fusion_entry_reads_the_backend_sglang_resolves_from_either_spelling(tmp_path: Path) -> None:
    """From 0.5.14 SGLang's ServerArgs turns --enable-flashinfer-allreduce-fusion into
    flashinfer_allreduce_fusion_backend=auto and resets the switch: on the resolved values the entry must still refuse
    it, and the new spelling too; without either the entry is ok."""
    if not (CACHE / "sglang-runtime" / "0.5.23" / ".stamp").exists():
        pytest.skip("needs the SGLang 0.5.23 runtime (`make sglang-runtime`)")
    host8 = read_host_facts(SF / "host-8x-rtx-pro-6000.json")
    model = _model_dir(tmp_path, "kimi")
    base = ["--model-path", "/data/kimi", "--trust-remote-code", "--tp-size", "8", "--kv-cache-dtype", "bfloat16"]
    sets = {
        "switch": [*base, "--enable-flashinfer-allreduce-fusion"],
        "backend": [*base, "--flashinfer-allreduce-fusion-backend", "trtllm"],
        "neither": base,
    }
    flag_sets = [FlagSet(argv, env=dict(ALLOW_LONGER), model=model, label=label) for label, argv in sets.items()]
    reports = {r.label: r for r in check_flag_sets(CACHE / "sglang" / "0.5.23", flag_sets, model_class=KIMI, host=host8)}
    for label, expected in (("switch", "refused"), ("backend", "refused"), ("neither", "ok")):
        report = reports[label]
        assert report.server_args is not None and report.server_args["verdict"] == "ok", label
        assert report.start_failures is not None and report.start_failures["flag_values"] == "resolved"
        verdict = next(v for v in report.verdicts if v.id == "allreduce-fusion-raises-on-sm120")
        assert verdict.verdict == expected, (label, verdict.text())
    switch = next(v for v in reports["switch"].verdicts if v.id == "allreduce-fusion-raises-on-sm120")
    assert "--flashinfer-allreduce-fusion-backend auto" in switch.text(), switch.text()  # the value SGLang resolved, named
