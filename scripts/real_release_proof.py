#!/usr/bin/env python3
"""A release made of the package index's own wheels, installed by the toolkit's own code on a GPU machine, then served.

Not part of `make test` (CI has no GPU): this is how tests/data/real-server/0.5.13-h200-index-release/ is
made (its README says when and where). Run it on the GPU machine from the repository root, with the
toolkit's packages on the import path and the release's wheel FILES unpacked in a folder:

    PYTHONPATH=plugins/module_utils:plugins/plugin_utils /opt/torch/.venv/bin/python scripts/real_release_proof.py \\
        --wheels /tmp/bundle/wheels --out /tmp/proof --expect sglang-kernel=<sha256 of the index wheel>

What it does, each step with the code a deploy runs on a host (roles/sglang_release/tasks/create.yml,
plugins/modules/sglang_release_install.py), and what each step saw is written to --out as it goes:
  1. the release venv: `<base python> -m venv`, then the role's `zz-sglang-release-site-packages.pth`
     naming the base Python's site-packages (sglang_release_site_packages: a shared runtime whose torch
     2.11.0+cu130 stands in for the index's torch 2.11.0 and its CUDA wheels, several GB). Not
     `--system-site-packages`: that would add the BASE interpreter's site-packages, not the runtime venv's,
     and the ELF closure check models a shared runtime through the .pth files (elf_closure.pth_dirs);
  2. a host wheelhouse of the carried wheel files (build_root/wheelhouse/<artifact>/index/<wheel>), one
     artifact per distribution, each record carrying the sha256 the controller knows
     (release.install.release_wheels refuses a file whose sha256 differs);
  3. `install_argv(..., install_deps=False)`: pip install --no-index --no-deps of the FILES;
  4. `read_back` of every distribution (METADATA version; every file of the wheel against RECORD and the
     bytes on disk; the GPU code of the installed objects for the CUDA artifacts, with the build specs'
     own verify rules from roles/toolkit_defaults/defaults/main/build.yml, stack_cuda_arch 12.0);
  5. the ELF closure of the venv (elf_closure.scan_venv with the role's allowlist, CUDA_HOME/lib64 and the
     .pth's runtime as providers), as the module runs it;
  6. the import check (patches.import_check.check_imports) of sgl_kernel, SGLang's server modules, ...;
  7. sgl_kernel's rmsnorm and silu_and_mul on the GPU, against torch, with the objects the process mapped;
  8. the start canary (serve.canary.run_canary, through scripts/real_canary_proof.py's plan and runner)
     started with the RELEASE VENV's Python: a Llama-shaped tiny target and its EAGLE-3 draft (bf16; the
     production Kimi NVFP4 target JIT-compiles Marlin on Hopper for longer than a canary budget,
     tests/data/real-server/0.5.13-h200-nvfp4-canary/), `--target kimi-nvfp4` takes that one instead.
With --skipped-from-runtime (the re-run, rerun/ beside the first captures), the distributions pip skipped because the
runtime already has that version are read from the runtime (OUT/from-runtime.json), and read_back runs on the others
only: one wheel at a time and once with all of them, as plugins/modules/sglang_release_install.py calls it.
Writes OUT/report.json (all of it), OUT/install.log, OUT/readback.json, OUT/closure.json, OUT/gpu-op.json,
OUT/canary/... ; never prints the canary's API key.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from sglang_sm120.build.elf_closure import pth_dirs, scan_venv
from sglang_sm120.build.pipeline import normalize, wheel_name_version
from sglang_sm120.files import file_sha256
from sglang_sm120.patches.import_check import check_imports
from sglang_sm120.release.install import find_dist, install_argv, read_back, release_wheels, site_packages
from sglang_sm120_controller.toolkit_data import role_allowlist

ROOT = Path(__file__).resolve().parent.parent
BUILD_SPECS = ROOT / "roles/toolkit_defaults/defaults/main/build.yml"
PTH_NAME = "zz-sglang-release-site-packages.pth"  # roles/sglang_release/tasks/create.yml
# distribution (normalized) -> the build spec whose verify rules apply (the CUDA artifacts of the stack)
CUDA_ARTIFACTS = {"sglang-kernel": "sgl_kernel", "sgl-kernel": "sgl_kernel", "torch-memory-saver": "torch_memory_saver"}
IMPORTS = [
    "sgl_kernel",
    "torch_memory_saver",
    "flashinfer",
    "xgrammar",
    "sglang",
    "sglang.srt.server_args",
    "sglang.srt.entrypoints.http_server",
    "sglang.srt.managers.scheduler",
    "sglang.srt.model_executor.model_runner",
    "sglang.launch_server",
]
SENTINEL = "@@release-proof@@"
GPU_OP = r"""
import json, sys, time
t0 = time.time()
import torch
import sgl_kernel
out = {"import_s": round(time.time() - t0, 2), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
       "sgl_kernel_file": sgl_kernel.__file__, "device": torch.cuda.get_device_name(0),
       "capability": list(torch.cuda.get_device_capability(0)), "ops": {}}
torch.manual_seed(0)
def rms():
    x = torch.randn(64, 4096, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(4096, dtype=torch.bfloat16, device="cuda")
    y = sgl_kernel.rmsnorm(x, w, 1e-6)
    xf = x.float()
    ref = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float())
    return y, ref
def silu():
    x = torch.randn(64, 2 * 2048, dtype=torch.bfloat16, device="cuda")
    y = sgl_kernel.silu_and_mul(x)
    ref = torch.nn.functional.silu(x[:, :2048].float()) * x[:, 2048:].float()
    return y, ref
for name, fn in (("rmsnorm", rms), ("silu_and_mul", silu)):
    try:
        y, ref = fn()
        torch.cuda.synchronize()
        err = (y.float() - ref).abs().max().item()
        out["ops"][name] = {"ok": bool(err < 0.1 * max(1.0, ref.abs().max().item())), "shape": list(y.shape), "dtype": str(y.dtype),
                            "device": str(y.device), "max_abs_err_vs_torch": err, "ref_max_abs": ref.abs().max().item()}
    except BaseException as exc:
        out["ops"][name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
maps = set()
for line in open("/proc/self/maps"):
    parts = line.split()
    if len(parts) >= 6 and ("sgl_kernel" in parts[5] or "libcudart" in parts[5] or "libcublas" in parts[5] or "libtorch_cuda" in parts[5]):
        maps.add(parts[5])
out["mapped_objects"] = sorted(maps)
print(sys.argv[1] + json.dumps(out), flush=True)
"""


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def save(out: Path, name: str, data: Any) -> None:
    (out / name).write_text(json.dumps(data, indent=1, default=str) + "\n")


def step(report: dict[str, Any], out: Path, name: str, fn: Callable[[], Any]) -> Any:
    """Run one step, record its seconds and result (or the exception), write the report so far."""
    t0 = time.monotonic()
    print(f"[{now()}] {name} ...", flush=True)
    try:
        result = fn()
        report["steps"][name] = {"ok": True, "seconds": round(time.monotonic() - t0, 1)}
    except Exception as exc:  # recorded, and the steps that do not need it still run
        result = None
        report["steps"][name] = {
            "ok": False,
            "seconds": round(time.monotonic() - t0, 1),
            "error": f"{type(exc).__name__}: {exc}"[:4000],
            "traceback": traceback.format_exc()[-3000:],
        }
    print(f"[{now()}] {name}: {report['steps'][name]['ok']} in {report['steps'][name]['seconds']} s", flush=True)
    save(out, "report.json", report)
    return result


def verify_rules(cuda_arch: str) -> dict[str, dict[str, Any]]:
    """The build specs' own verify rules, stack_cuda_arch rendered (the only template in them)."""
    import yaml  # the runtime's PyYAML; the controller renders these with Ansible

    data = yaml.safe_load(BUILD_SPECS.read_text(encoding="utf-8"))
    specs = [s for key in ("sglang_build_core_specs", "sglang_build_companion_specs") for s in data.get(key) or []]
    out = {}
    for spec in specs:
        text = json.dumps(spec.get("verify") or {}).replace("{{ stack_cuda_arch }}", cuda_arch)
        out[str(spec["name"])] = json.loads(text)
    return out


def make_venv(base: str, venv: Path) -> dict[str, Any]:
    base_site = subprocess.run(
        [base, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    argv = [base, "-m", "venv", str(venv)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    made = {"argv": argv, "rc": proc.returncode, "output": (proc.stdout + proc.stderr)[-2000:]}
    if proc.returncode != 0:  # no ensurepip in the base: pip then comes from the runtime through the .pth
        argv = [base, "-m", "venv", "--without-pip", str(venv)]
        proc = subprocess.run(argv, capture_output=True, text=True, check=True)
        made["fallback"] = {"argv": argv, "rc": proc.returncode}
    (site,) = [p for p in site_packages(str(venv))][:1]
    (site / PTH_NAME).write_text(base_site + "\n")
    made.update({"site_packages": str(site), "pth": {"file": str(site / PTH_NAME), "lines": [base_site]}})
    made["pyvenv.cfg"] = (venv / "pyvenv.cfg").read_text()
    return made


def wheelhouse(wheels_dir: Path, build_root: Path, expect: dict[str, str], rules: dict[str, dict[str, Any]]) -> tuple[list, dict]:
    """One artifact per carried wheel, laid out as the host wheelhouse is, records with the known sha256."""
    artifacts: dict[str, dict[str, Any]] = {}
    specs: dict[str, dict[str, Any]] = {}
    sums = {}
    sums_file = wheels_dir.parent / "WHEELS.SHA256SUMS"
    if sums_file.is_file():
        for line in sums_file.read_text().splitlines():
            digest, _, name = line.partition("  ")
            sums[name.strip()] = digest
    for wheel in sorted(wheels_dir.glob("*.whl")):
        dist, _ = wheel_name_version(wheel.name)
        key = normalize(dist)
        artifact = CUDA_ARTIFACTS.get(key, key)
        target = build_root / "wheelhouse" / artifact / "index"
        target.mkdir(parents=True, exist_ok=True)
        if not (target / wheel.name).exists():
            os.link(wheel, target / wheel.name)
        sha = expect.get(key) or sums.get(wheel.name)
        artifacts[artifact] = {
            "key": "index",
            "kind": "wheel",
            "package": dist,
            "wheels": [{"wheel": wheel.name, "sha256": sha}],
            "pins": [],
        }
        specs[artifact] = {"verify": rules.get(artifact, {"device_code": "none"})}
    return release_wheels(str(build_root), artifacts, specs), specs


def install(python: str, wheels: list[dict[str, Any]], log: Path) -> dict[str, Any]:
    argv = install_argv(python, wheels, False, [], None)
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    log.write_text("+ " + " ".join(argv) + "\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"pip install of the wheel files failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}")
    return {"argv_head": argv[:8], "wheels": len(wheels), "rc": proc.returncode, "seconds": round(time.monotonic() - t0, 1)}


SAME_VERSION = re.compile(r"^(\S+) is already installed with the same version as the provided wheel", re.M)


def pip_skipped(log: Path) -> list[str]:
    """Distributions pip did not install because one of the same version is on the venv's path already (the .pth's runtime)."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    return sorted({normalize(m) for m in SAME_VERSION.findall(text)})


def readback_all(venv: Path, wheels: list[dict[str, Any]], cuobjdump: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for wheel in wheels:
        t0 = time.monotonic()
        try:
            found = read_back(str(venv), [wheel], cuobjdump)
            out[normalize(wheel["distribution"])] = {"ok": True, "seconds": round(time.monotonic() - t0, 1), **found}
        except Exception as exc:
            out[normalize(wheel["distribution"])] = {
                "ok": False,
                "seconds": round(time.monotonic() - t0, 1),
                "wheel": Path(wheel["wheel"]).name,
                "error": f"{type(exc).__name__}: {exc}"[:3000],
            }
    return out


def from_runtime(venv: Path, wheels: list[dict[str, Any]], skipped: list[str]) -> dict[str, Any]:
    """The distributions pip skipped, as the runtime the venv's .pth names has them (the proof's stand-in torch's
    runtime; a production release has none): its dist-info and version against the release wheel's."""
    runtime = pth_dirs(site_packages(str(venv)))
    out: dict[str, Any] = {}
    for wheel in wheels:
        key = normalize(wheel["distribution"])
        if key not in skipped:
            continue
        copies = find_dist(runtime, wheel["distribution"])
        out[key] = {
            "wheel": Path(wheel["wheel"]).name,
            "wheel_version": wheel["version"],
            "runtime": [{"dist_info": str(d), "version": v} for _, d, v in copies],
            "same_version": len(copies) == 1 and copies[0][2] == wheel["version"],
        }
    return out


def readback_together(venv: Path, wheels: list[dict[str, Any]], cuobjdump: str | None) -> dict[str, Any]:
    """read_back once with all the wheels, as plugins/modules/sglang_release_install.py calls it (a file two wheels
    both ship is judged only when read_back sees both)."""
    t0 = time.monotonic()
    try:
        found = read_back(str(venv), wheels, cuobjdump)
        result = {"ok": True, "shared_files": found.get("shared_files")}
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:4000]}
    return {"wheels": len(wheels), "seconds": round(time.monotonic() - t0, 1), **result}


def closure(venv: Path, cuda_home: str) -> dict[str, Any]:
    sites = site_packages(str(venv))
    found = scan_venv(sites, host_dirs=[f"{cuda_home}/lib64"], allowlist=role_allowlist(), provider_sites=pth_dirs(sites))
    failure = found.failure()
    return {"passed": failure is None, "failure": failure, "provider_sites": [str(p) for p in pth_dirs(sites)], "summary": found.summary()}


def gpu_op(python: str) -> dict[str, Any]:
    proc = subprocess.run([python, "-c", GPU_OP, SENTINEL], capture_output=True, text=True, check=False, timeout=300)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(SENTINEL):
            data = json.loads(line[len(SENTINEL) :])
            data["rc"] = proc.returncode
            data["stderr_tail"] = proc.stderr[-1500:]
            return data
    raise RuntimeError(f"the op process exited {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}")


def canary_phase(args: argparse.Namespace) -> int:
    """Runs IN the release venv's Python: scripts/real_canary_proof.py's plan and runner (canary.run_canary with sys.executable)."""
    spec = importlib.util.spec_from_file_location("real_canary_proof", ROOT / "scripts" / "real_canary_proof.py")
    proof = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(proof)  # type: ignore[union-attr]
    from sglang_sm120.serve import canary

    out = Path(args.out)
    work = Path("/tmp/release-canary")
    keys_file = proof.prepare(out, work)
    target, draft = (
        ("kimi-k2.5-nvfp4", "kimi-k2.5-eagle3") if args.target == "kimi-nvfp4" else ("llama-3.1-8b-instruct", "llama-3.1-8b-eagle3")
    )
    models = proof.tiny(work / f"models-{args.target}", target, draft)
    hints = models["launch_hints"]
    env = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", **hints.get("env", {})}
    plan = proof.plan_argv(keys_file)
    if args.target != "kimi-nvfp4":  # a bf16 target: the production profile's quantization flags name NVFP4
        i = plan.index("--quantization")
        plan = plan[:i] + plan[i + 4 :]
    plan += args.canary_arg
    smi, gpus = proof.gpus()
    placement = canary.place("auto", gpus, canary.canary_gpus(plan, env), 0.1, 16384)
    argv = canary.canary_argv(plan, models["target"], models["draft"], 30100, placement.mem_fraction, hints.get("kv_cache_dtype"))
    summary: dict[str, Any] = {
        "python": sys.executable,
        "target": args.target,
        "added_flags": args.canary_arg,
        "models": {k: models[k] for k in ("key", "differences", "launch_hints")},
        "nvidia_smi": smi,
        "placement": placement.to_dict(),
    }
    summary["serves"] = proof.run("serves", out, argv, env, args.sglang_version, {"api-key": proof.KEY}, args.budget)
    text = json.dumps(summary, indent=1, default=str) + "\n"
    leaked = [str(f) for f in out.rglob("*") if f.is_file() and proof.KEY in f.read_text(errors="replace")]
    summary["key_found_in"] = leaked + (["summary"] if proof.KEY in text else [])
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return 0


def classify(result: dict[str, Any]) -> str:
    if result.get("ok"):
        return "served"
    text = f"{result.get('phase')} {result.get('message', '')}".lower()
    for needle, label in (
        ("timeout", "start budget ran out"),
        ("timed out", "start budget ran out"),
        ("exited", "server exited"),
        ("outofmemory", "out of memory"),
        ("importerror", "import error"),
    ):
        if needle in text:
            return label
    return f"failed in phase {result.get('phase')}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--wheels", help="the carried wheel files (a folder of *.whl)")
    parser.add_argument("--base-python", default="/opt/torch/.venv/bin/python")
    parser.add_argument("--venv", default="/tmp/release/venv")
    parser.add_argument("--build-root", default="/tmp/release/build")
    parser.add_argument(
        "--expect", action="append", default=[], help="DIST=SHA256 the controller knows for a wheel (the index judgement's)"
    )
    parser.add_argument("--cuda-home", default="/usr/local/cuda-13.0")
    parser.add_argument(
        "--cuobjdump", default="", help="cuobjdump for the GPU code of the installed objects (default: the built-in reader)"
    )
    parser.add_argument("--cuda-arch", default="12.0", help="stack_cuda_arch for the verify rules")
    parser.add_argument("--sglang-version", default="0.5.13")
    parser.add_argument("--target", choices=["llama", "kimi-nvfp4"], default="llama")
    parser.add_argument("--budget", type=float, default=240.0, help="the canary's start timeout, seconds")
    parser.add_argument("--deadline", type=float, default=540.0, help="seconds for everything; the canary's budget is cut to fit")
    parser.add_argument("--skip-canary", action="store_true")
    parser.add_argument(
        "--skipped-from-runtime",
        action="store_true",
        help="read the distributions pip skipped (the .pth's runtime has that version) from the runtime, read_back the others only",
    )
    parser.add_argument(
        "--canary-arg",
        action="append",
        default=[],
        help="a flag added to the canary's plan (repeat; e.g. --canary-arg=--dtype --canary-arg=bfloat16)",
    )
    parser.add_argument("--phase", choices=["all", "canary"], default="all", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "canary":
        return canary_phase(args)
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    venv = Path(args.venv)
    python = str(venv / "bin" / "python")
    expect = {normalize(k): v for k, v in (e.split("=", 1) for e in args.expect)}
    cuobjdump = args.cuobjdump or None
    report: dict[str, Any] = {"started": now(), "sglang_version": args.sglang_version, "base_python": args.base_python, "venv": str(venv)}
    report["steps"] = {}
    report["expect"] = expect
    report["cuobjdump"] = cuobjdump
    report["venv_made"] = step(report, out, "venv", lambda: make_venv(args.base_python, venv))
    rules = verify_rules(args.cuda_arch)
    report["verify_rules"] = {k: rules.get(k) for k in ("sgl_kernel", "torch_memory_saver")}
    made = step(report, out, "wheelhouse", lambda: wheelhouse(Path(args.wheels), Path(args.build_root), expect, rules))
    wheels = made[0] if made else []
    report["wheels"] = [
        {k: w[k] for k in ("artifact", "distribution", "version", "sha256")} | {"file": Path(w["wheel"]).name} for w in wheels
    ]
    report["install"] = step(report, out, "install", lambda: install(python, wheels, out / "install.log"))
    skipped = pip_skipped(out / "install.log")
    if args.skipped_from_runtime:  # the re-run: the runtime (the proof's stand-in torch's) holds these, not the release's wheels
        report["from_runtime"] = from_runtime(venv, wheels, skipped)
        save(out, "from-runtime.json", report["from_runtime"])
        wheels = [w for w in wheels if normalize(w["distribution"]) not in skipped]
    readback = step(report, out, "read_back", lambda: readback_all(venv, wheels, cuobjdump)) or {}
    save(out, "readback.json", readback)
    if args.skipped_from_runtime:
        report["read_back_together"] = step(report, out, "read_back_together", lambda: readback_together(venv, wheels, cuobjdump))
    report["read_back"] = {
        "distributions": len(readback),
        "pip_skipped_same_version_in_runtime": skipped,
        "failed_other_than_skipped": sorted(k for k, v in readback.items() if not v["ok"] and k not in skipped),
        "ok": sorted(k for k, v in readback.items() if v["ok"]),
        "failed": {k: v["error"] for k, v in readback.items() if not v["ok"]},
        "cuda_artifacts": {k: readback[k] for k in readback if k in CUDA_ARTIFACTS},
    }
    found = step(report, out, "elf_closure", lambda: closure(venv, args.cuda_home))
    if found:
        save(out, "closure.json", found)
        report["elf_closure"] = {k: found[k] for k in ("passed", "failure", "provider_sites")} | {
            "objects_checked": found["summary"].get("objects_checked"),
            "unmet": found["summary"].get("unmet"),
            "allowed": len(found["summary"].get("allowed") or []),
        }
    outcomes = step(report, out, "imports", lambda: check_imports(python, IMPORTS, timeout=400))
    report["imports"] = [o.to_dict() for o in outcomes or []]
    op = step(report, out, "gpu_op", lambda: gpu_op(python))
    if op:
        save(out, "gpu-op.json", op)
    report["gpu_op"] = op
    left = args.deadline - (time.monotonic() - t0)
    budget = min(args.budget, left - 60)  # the requests and the stop come after the budget
    if args.skip_canary or budget < 60:
        report["canary"] = {"skipped": f"--skip-canary or too little time left ({left:.0f} s)"}
    else:
        argv = [python, str(Path(__file__).resolve()), "--phase", "canary", "--out", str(out / "canary"), "--target", args.target]
        argv += ["--budget", str(budget), "--sglang-version", args.sglang_version, *[f"--canary-arg={a}" for a in args.canary_arg]]
        env = dict(os.environ, PYTHONPATH=str(ROOT / "plugins" / "module_utils"), PYTHONUNBUFFERED="1")

        def canary_run() -> dict[str, Any]:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=budget + 150, cwd=ROOT)
            (out / "canary-run-output.txt").write_text(proc.stdout + proc.stderr)
            summary = json.loads((out / "canary" / "summary.json").read_text())
            serves = summary["serves"]
            return {
                "python": summary["python"],
                "target": summary["target"],
                "added_flags": summary["added_flags"],
                "command": serves.get("command"),
                "budget_s": budget,
                "placement": summary["placement"],
                "ok": serves["ok"],
                "phase": serves["phase"],
                "seconds": serves["seconds"],
                "healthy_at": serves["healthy_at"],
                "message": serves["message"][:1500],
                "classified": classify(serves),
                "key_found_in": summary["key_found_in"],
            }

        report["canary"] = step(report, out, "canary", canary_run)
    report["finished"] = now()
    report["seconds"] = round(time.monotonic() - t0, 1)
    kernel = next((v for k, v in readback.items() if k == "sglang-kernel"), {})
    report["verdict"] = {
        "installed_with_toolkit_code": bool(report["steps"].get("install", {}).get("ok")),
        "sglang_kernel_read_back": bool(kernel.get("ok")),
        "sglang_kernel_sha256_is_index": bool(kernel.get("ok")) and kernel["installed"][0]["wheel_sha256"] == expect.get("sglang-kernel"),
        "all_read_back": bool(readback) and all(v["ok"] for v in readback.values()),
        "elf_closure_passed": bool(found and found["passed"]),
        "imports_ok": bool(outcomes) and all(o.ok for o in outcomes),
        "gpu_op_ran": bool(op) and all(v.get("ok") for v in op["ops"].values()),
        "canary": (report.get("canary") or {}).get("classified") if isinstance(report.get("canary"), dict) else None,
    }
    if args.skipped_from_runtime:
        report["verdict"]["read_back_distributions"] = len(readback)
        report["verdict"]["skipped_same_version_in_runtime"] = len(report["from_runtime"])
        report["verdict"]["skipped_all_same_version_in_runtime"] = all(v["same_version"] for v in report["from_runtime"].values())
        report["verdict"]["read_back_together"] = bool((report.get("read_back_together") or {}).get("ok"))
    report["wheel_sha256_sglang_kernel"] = file_sha256(next(Path(args.wheels).glob("sglang_kernel-*.whl"))) if args.wheels else None
    save(out, "report.json", report)
    print(json.dumps(report["verdict"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
