"""Check GPUs against what the stack needs, the same way the preflight role does.

    gpu-check                         run nvidia-smi here
    nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total \\
        --format=csv,noheader | gpu-check -      read a captured output
    gpu-check FILE [--count 8] [--name-pattern 'RTX PRO 6000'] [--compute-cap 12.0] [--min-driver 580.65.06]

Exit 0 when every check passes, 1 when one fails, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from sglang_sm120.host.nvidia_smi import QUERY_ARGS, GpuExpectation, gpu_report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("capture", nargs="?", help="captured nvidia-smi output, or - for stdin; default: run nvidia-smi")
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--name-pattern", default="RTX PRO 6000")
    parser.add_argument("--compute-cap", default="12.0")
    parser.add_argument("--min-driver", default="580.65.06")
    args = parser.parse_args(argv)
    expected = GpuExpectation(args.count, args.name_pattern, args.compute_cap, args.min_driver)

    if args.capture == "-":
        report = gpu_report(sys.stdin.read(), expected)
    elif args.capture:
        report = gpu_report(Path(args.capture).read_text(), expected)
    elif shutil.which("nvidia-smi") is None:
        report = gpu_report(None, expected, "nvidia-smi not found on PATH (is the NVIDIA driver installed?)")
    else:
        proc = subprocess.run(["nvidia-smi", *QUERY_ARGS], capture_output=True, text=True, check=False)
        error = f"nvidia-smi exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()}"
        report = gpu_report(proc.stdout if proc.returncode == 0 else None, expected, error)

    for gpu in report.gpus:
        print(f"GPU {gpu.index}: {gpu.name}, compute {gpu.compute_cap}, driver {gpu.driver_version}, {gpu.memory_mib} MiB")
    for problem in report.problems:
        print(f"PROBLEM: {problem}")
    print("ok" if report.ok else f"{len(report.problems)} problem(s)")
    return 0 if report.ok else 1


def run() -> int:
    """The console script's entry point."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(run())
