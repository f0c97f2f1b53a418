#!/usr/bin/env python3
"""The start canary's own code (plugins/module_utils/sglang_sm120/serve/canary.py) driving a REAL SGLang server on a GPU machine.

Not part of `make test` (CI has no GPU): this is how tests/data/real-server/<version>-<gpu>-canary/ is
made (its README says when and where). Run it on a machine with a GPU, torch and an SGLang release
importable (e.g. an unpacked bundle on PYTHONPATH); such a machine has no controller venv, so the
toolkit's packages come from PYTHONPATH=plugins/module_utils too. From the repository root:

    PYTHONPATH=plugins/module_utils:plugins/plugin_utils:<unpacked bundle> python3 scripts/real_canary_proof.py --out DIR \\
        [--sglang-version 0.5.13] [--hold-free-gib 24]

It does what the deploy's canary step does (role sglang_canary, module sglang_canary), with the same
functions, for a release whose launch plan is the eagle3 profile on one GPU:
  1. tiny models of Kimi-K2.5 (plugins/module_utils/sglang_sm120/serve/tiny_models.py, from tests/data/models/) and their hints;
  2. "serving": a process that holds the GPU's memory except --hold-free-gib, standing in for the
     serving server; the GPUs' memory read with nvidia-smi (canary.GPU_QUERY) and the placement decided
     by canary.place (policy auto, sglang_canary_min_free_mib 16384);
  3. run "fails": the plan with --attention-backend fa3, which SGLang accepts on capability 9.0 but
     whose kernels are not in this release's sgl-kernel (its 1 GB FA3 object left out of the bundle,
     as a kernel built without code for the GPU would be): canary.run_canary must fail, and say where;
  4. run "serves": the plan as it is (triton attention, EAGLE-3 topk 1, the API key through --config,
     the fp8 KV hint of the real checkpoint), beside the memory holder: canary.run_canary must serve;
     when it does not, once more without the KV hint ("serves-bf16kv") to tell the two apart;
  5. each run's result (canary.CanaryResult, keys redacted), log and timings.
Writes DIR/<run>/ (result.json, canary.log) and DIR/summary.json; never prints the key.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sglang_sm120.serve import (
    canary,
    tiny_models,
)

ROOT = Path(__file__).resolve().parent.parent
QUANT_LINE = re.compile(r"(?i)marlin|moe.runner|fp4|modelopt|quantiz|cutlass|trtllm")
QUANT_FLAGS = ("--quantization", "--speculative-draft-model-quantization")
KEY = "proof-" + os.urandom(12).hex()
HOLDER = """
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = int(float(sys.argv[1]) * (1 << 30))
held = torch.empty(max(0, free - keep), dtype=torch.uint8, device="cuda")
open(sys.argv[2], "w").write(str(held.numel()))
time.sleep(3600)
"""


def plan_argv(keys: Path) -> list[str]:
    """The eagle3 profile's flags on one GPU (model paths are the real ones'; the canary replaces them)."""
    return [
        "--model-path", "/data/Kimi-K2.5-NVFP4", "--tp-size", "1", "--attention-backend", "triton",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/data/eagle3/output_100k_sglang/4",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--trust-remote-code", "--cuda-graph-max-bs", "8", "--enable-metrics", "--host", "127.0.0.1", "--port", "30000",
        "--quantization", "modelopt_fp4", "--speculative-draft-model-quantization", "unquant",
        "--config", str(keys),
    ]  # fmt: skip


def prepare(out: Path, work: Path) -> Path:
    """Makes OUT and the work folder, and writes the API key file the plan's --config names (mode 0600) there."""
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    keys_file = work / "api-keys.yaml"
    keys_file.write_text(f'api-key: "{KEY}"\n')
    keys_file.chmod(0o600)
    return keys_file


def tiny(work: Path, target: str, draft: str, unquantized: bool = False) -> dict[str, Any]:
    """Tiny models of tests/data/models/<target> and <draft> for one GPU in work (tiny_models.ensure).
    unquantized: the target's config without its quantization (quantization_config and
    hf_quant_config.json left out), so the tiny target is bf16 (the shape the canary had before NVFP4)."""
    models = ROOT / "tests/data/models"
    source = models / target
    if unquantized:
        source = work.parent / f"{target}-unquantized"
        source.mkdir(parents=True, exist_ok=True)
        for f in (models / target).iterdir():
            if f.is_file() and f.name != "hf_quant_config.json":
                (source / f.name).write_bytes(f.read_bytes())
        config = json.loads((source / "config.json").read_text())
        config.pop("quantization_config", None)
        config.get("text_config", {}).pop("quantization_config", None)
        (source / "config.json").write_text(json.dumps(config, indent=1))
    return tiny_models.ensure(work, source, models / draft, ROOT / "roles/sglang_canary/files/tokenizer", tp_size=1)


def gpus() -> tuple[str, list[canary.GpuMemory]]:
    text = subprocess.run(canary.GPU_QUERY, capture_output=True, text=True, check=True).stdout
    return text, canary.parse_gpu_memory(text)


GRAPH_SIZES: list[int] = [1, 4]


def run(name: str, out: Path, argv: list[str], env: dict[str, str], version: str, keys: dict[str, str], budget: float) -> dict[str, Any]:
    """canary.run_canary on argv with the CUDA graphs trimmed as the module trims them (GRAPH_SIZES)."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    argv, graphs = canary.trim_cuda_graphs(argv, GRAPH_SIZES, version)
    print(f"{name}: {graphs}")
    started = time.time()
    result = canary.run_canary(
        sys.executable, "sglang.launch_server", argv, env, str(folder / "canary.log"), budget, 120, keys=keys, sglang_version=version
    )
    data = result.to_dict()
    data["wall_started"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    data["graphs"] = graphs
    (folder / "result.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"{name}: ok={result.ok} phase={result.phase} seconds={result.seconds} healthy_at={result.healthy_at}: {result.message[:300]}")
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--sglang-version", default="0.5.13")
    parser.add_argument("--hold-free-gib", type=float, default=24.0, help="GiB the stand-in serving process leaves free")
    parser.add_argument("--budget", type=float, default=240.0, help="each canary's start timeout, seconds")
    parser.add_argument("--deadline", type=float, default=540.0, help="seconds for everything: a retry that cannot fit is skipped")
    parser.add_argument("--skip-fails", action="store_true", help="leave out run 3 (fa3 without kernels)")
    parser.add_argument("--draft-mismatch", action="store_true", help="add a run whose draft was made for another target")
    parser.add_argument("--unquantized", action="store_true", help="the Kimi-shaped target in bf16 (its quantization config left out)")
    parser.add_argument("--graph-batch-sizes", default="1,4", help="the canary's trimmed CUDA-graph batch sizes ('' = as planned)")
    parser.add_argument("--no-holder", action="store_true", help="no process standing in for the serving server")
    parser.add_argument("--port", type=int, default=30100)
    parser.add_argument("--work", default="/tmp/canary-proof")
    args = parser.parse_args()
    GRAPH_SIZES[:] = [int(x) for x in args.graph_batch_sizes.split(",") if x.strip()]
    t0 = time.monotonic()
    out = Path(args.out)
    work = Path(args.work)
    keys_file = prepare(out, work)
    keys = {"api-key": KEY}
    models = tiny(work / "models", "kimi-k2.5-nvfp4", "kimi-k2.5-eagle3", unquantized=args.unquantized)
    hints = models["launch_hints"]
    kv = hints.get("kv_cache_dtype")
    env = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", **hints.get("env", {})}
    summary: dict[str, Any] = {
        "sglang_version": args.sglang_version,
        "target": "Kimi-shaped, bf16 (quantization config left out)" if args.unquantized else "Kimi-shaped, as the checkpoint is quantized",
        "graph_batch_sizes": GRAPH_SIZES,
        "models": {k: models[k] for k in ("key", "differences", "launch_hints")},
    }
    smi_idle, _ = gpus()
    summary["nvidia_smi_idle"] = smi_idle

    # 3. a backend this release has no kernels for: accepted by SGLang, fails at start.
    plan = plan_argv(keys_file)
    if args.unquantized:  # the bf16 target has no quantization for these flags to name
        plan = [a for i, a in enumerate(plan) if not (a in QUANT_FLAGS or (i and plan[i - 1] in QUANT_FLAGS))]
    if not args.skip_fails:
        failing = canary.canary_argv(
            [*plan[:5], "fa3", *plan[6:]], models["target"], models["draft"], args.port, 0.1, hints.get("kv_cache_dtype")
        )
        summary["fails"] = run("fails", out, failing, env, args.sglang_version, keys, args.budget)

    # 2. a process standing in for the serving server holds the memory; the placement reads it.
    ready = work / "holder.ready"
    ready.unlink(missing_ok=True)
    holder = None if args.no_holder else subprocess.Popen([sys.executable, "-c", HOLDER, str(args.hold_free_gib), str(ready)])
    try:
        for _ in range(240 if holder else 0):
            if ready.exists() or holder.poll() is not None:
                break
            time.sleep(0.5)
        smi_held, held = gpus()
        used = canary.canary_gpus(plan, env)
        placement = canary.place("auto", held, used, 0.1, 16384)
        summary["holder"] = {"bytes": int(ready.read_text() or 0) if ready.exists() else None, "nvidia_smi": smi_held}
        summary["placement"] = placement.to_dict()
        print(f"placement: {placement.mode} ({placement.reason})")
        # 4. the plan as it is, beside the holder when the placement says so.
        serving = canary.canary_argv(plan, models["target"], models["draft"], args.port, placement.mem_fraction, kv)
        summary["serves"] = run("serves", out, serving, env, args.sglang_version, keys, args.budget)
        # the quantized path as SGLang logged it (method, GEMM and MoE runners)
        log = (out / "serves" / "canary.log").read_text(errors="replace").splitlines()
        summary["quantized_path_lines"] = [line for line in log if QUANT_LINE.search(line)][:40]
        left = args.deadline - (time.monotonic() - t0)
        if args.draft_mismatch and left > 120:
            # 5. a draft made for another target (Llama-3.1-8B's EAGLE-3) with the Kimi-shaped target
            other = tiny(work / "models-mismatch", "kimi-k2.5-nvfp4", "llama-3.1-8b-eagle3", unquantized=args.unquantized)
            mismatch = canary.canary_argv(plan, other["target"], other["draft"], args.port, placement.mem_fraction, kv)
            summary["draft-mismatch"] = run("draft-mismatch", out, mismatch, env, args.sglang_version, keys, min(args.budget, left - 20))
        left = args.deadline - (time.monotonic() - t0)
        if not summary["serves"]["ok"] and left < args.budget:
            summary["serves-bf16kv"] = f"skipped: {left:.0f} s left of --deadline"
        elif not summary["serves"]["ok"]:
            plain = canary.canary_argv(plan, models["target"], models["draft"], args.port, placement.mem_fraction)
            summary["serves-bf16kv"] = run("serves-bf16kv", out, plain, env, args.sglang_version, keys, args.budget)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    text = json.dumps(summary, indent=1) + "\n"
    for folder in out.iterdir():
        for f in folder.glob("*") if folder.is_dir() else []:
            if KEY in f.read_text(errors="replace"):
                print(f"KEY FOUND in {f}")
    if KEY in text:
        print("KEY FOUND in summary")
    (out / "summary.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
