"""The fabric check: an all-reduce across every GPU a launch plan uses, with the release's own torch and NCCL and the
plan's NCCL environment, bounded in time, before anything is loaded.

Standard library only at import (torch is imported by the workers alone), so the same file is the orchestrator the
toolkit runs on the host and the worker script it starts once per rank with the release venv's Python:

    python fabric.py --python /opt/sglang/current/venv/bin/python --gpus 8 --timeout 120 --out fabric.json
    python fabric.py --python ... --gpus 2 --absent-ranks 1 --timeout 60     # a rank that never joins (the bound)

Each rank is one process (MASTER_ADDR 127.0.0.1, a free port, RANK / WORLD_SIZE / LOCAL_RANK, CUDA device = rank),
all-reduces float32 tensors of each size, after warm-up rounds, and prints one JSON line: its timings per size. The
orchestrator waits for all of them until the deadline; a rank that has not answered by then is killed with the
whole process group, and the result says which ranks answered, which did not and after how long: a hang is a
result, never a stuck play. Bus bandwidth is NCCL's convention (nccl-tests): algbw = bytes / time,
busbw = algbw * 2 (n - 1) / n; latency is the median time of one all-reduce of the smallest size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

# 32 KiB: the small all-reduce the operators of this hardware time (26 us tuned, 48 us untuned); 256 MiB: large
# enough that bus bandwidth, not latency, decides (their 37-41 GB/s tuned, 22 GB/s untuned, 8 GPUs).
DEFAULT_SIZES = (32 * 1024, 1024 * 1024, 256 * 1024 * 1024)
NCCL_PREFIXES = ("NCCL_", "CUDA_VISIBLE_DEVICES", "TORCH_NCCL_")


class FabricError(Exception):
    """The check could not be run as asked (bad arguments, no Python, no free port)."""


@dataclass
class SizeResult:
    bytes: int
    median_s: float
    algbw_gbs: float
    busbw_gbs: float


@dataclass
class FabricResult:
    """What one check found: `status` ok (every rank answered), timeout (some rank never did), failed (a rank
    exited with an error) or unchecked (nothing to check: one GPU, or none)."""

    status: str
    world_size: int
    backend: str
    seconds: float
    env: dict[str, str] = field(default_factory=dict)
    sizes: list[SizeResult] = field(default_factory=list)
    small_latency_us: Optional[float] = None
    large_busbw_gbs: Optional[float] = None
    answered: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    absent: list[int] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bus_bandwidth(size_bytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of one all-reduce of `size_bytes` that took `seconds` on `world_size` ranks."""
    if seconds <= 0 or world_size < 1:
        raise FabricError(f"expected a positive time and world size, found {seconds} s on {world_size} ranks")
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * (2 * (world_size - 1) / world_size)


def nccl_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of an environment that steers NCCL (what a report must show to be compared)."""
    return {k: str(v) for k, v in sorted(env.items()) if k.startswith(NCCL_PREFIXES)}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def combine(
    world_size: int, backend: str, reports: Mapping[int, Mapping[str, Any]]
) -> tuple[list[SizeResult], Optional[float], Optional[float]]:
    """Per size, the slowest rank's median (an all-reduce ends when its last rank does), as bandwidths."""
    by_size: dict[int, float] = {}
    for report in reports.values():
        for entry in report.get("sizes", []):
            by_size[int(entry["bytes"])] = max(by_size.get(int(entry["bytes"]), 0.0), float(entry["median_s"]))
    sizes = []
    for size in sorted(by_size):
        algbw, busbw = bus_bandwidth(size, by_size[size], world_size)
        sizes.append(SizeResult(size, by_size[size], round(algbw, 3), round(busbw, 3)))
    small = round(sizes[0].median_s * 1e6, 1) if sizes else None
    large = sizes[-1].busbw_gbs if sizes else None
    return sizes, small, large


def run_check(
    python: str,
    world_size: int,
    timeout: float,
    env: Optional[Mapping[str, str]] = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    iters: int = 20,
    warmup: int = 5,
    backend: str = "nccl",
    absent_ranks: Sequence[int] = (),
    script: Optional[str] = None,
) -> FabricResult:
    """Start one worker per rank (but the `absent_ranks`, which a test uses to stand for a GPU that never joins),
    wait for all of them until `timeout` seconds, kill what is left. Never raises for what the ranks do."""
    if world_size < 1:
        raise FabricError(f"expected at least one rank, found {world_size}")
    if timeout <= 0:
        raise FabricError(f"expected a positive timeout in seconds, found {timeout}")
    full_env = {**os.environ, **(env or {})}
    port = free_port()
    started = time.monotonic()
    procs: dict[int, subprocess.Popen[str]] = {}
    for rank in range(world_size):
        if rank in absent_ranks:
            continue
        rank_env = dict(full_env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
        rank_env["LOCAL_RANK"] = str(rank)
        argv = [python, script or os.path.abspath(__file__), "--worker", "--backend", backend, "--iters", str(iters)]
        argv += ["--warmup", str(warmup), "--sizes", ",".join(str(s) for s in sizes), "--init-timeout", str(int(timeout) + 30)]
        procs[rank] = subprocess.Popen(
            argv, env=rank_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    reports: dict[int, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    deadline = started + timeout
    for rank, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            continue
        if proc.returncode == 0 and out.strip():
            try:
                reports[rank] = json.loads(out.strip().splitlines()[-1])
            except json.JSONDecodeError:
                errors[str(rank)] = f"not a JSON report: {out.strip()[-300:]}"
        else:
            errors[str(rank)] = (err.strip() or out.strip())[-600:] or f"exited {proc.returncode}"
    for proc in procs.values():
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    seconds = round(time.monotonic() - started, 2)
    answered = sorted(reports)
    missing = [r for r in range(world_size) if r not in reports and str(r) not in errors]
    result = FabricResult("ok", world_size, backend, seconds, nccl_env(env or {}), answered=answered, missing=missing, errors=errors)
    result.absent = sorted(absent_ranks)
    what = "GPUs" if backend == "nccl" else f"{backend} ranks"
    if missing:
        result.status = "timeout"
        never = f"; rank(s) {', '.join(map(str, result.absent))} never started" if result.absent else ""
        result.message = (
            f"all-reduce across {world_size} {what} did not finish in {timeout:g} s: rank(s) {', '.join(map(str, missing))} never "
            f"answered ({len(answered)} of {world_size} did){never}; killed at the bound"
        )
    elif errors:
        result.status = "failed"
        first = sorted(errors)[0]
        result.message = f"all-reduce across {world_size} {what} failed: rank {first}: {errors[first].splitlines()[-1]}"
    elif world_size == 1:
        result.sizes, result.small_latency_us, _ = combine(world_size, backend, reports)
        result.message = (
            f"one {what[:-1]}: the all-reduce's code path ran ({result.small_latency_us} us a call at "
            f"{result.sizes[0].bytes // 1024} KiB, no data moved); a bus bandwidth needs two or more"
        )
    else:
        result.sizes, result.small_latency_us, result.large_busbw_gbs = combine(world_size, backend, reports)
        result.message = (
            f"all-reduce across {world_size} {what}: {result.large_busbw_gbs} GB/s bus bandwidth at "
            f"{result.sizes[-1].bytes // (1024 * 1024)} MiB, {result.small_latency_us} us at {result.sizes[0].bytes // 1024} KiB"
        )
    return result


def judge(result: FabricResult, thresholds: Mapping[str, Any]) -> list[str]:
    """What the figures fall short of, one line each (empty: nothing). `thresholds`: min_busbw_gbs and
    max_small_latency_us, each with the GPU count it applies to (`gpus`) and its `source`."""
    if result.status != "ok" or result.world_size != int(thresholds.get("gpus", result.world_size)):
        return []
    short = []
    source = thresholds.get("source", "")
    floor = thresholds.get("min_busbw_gbs")
    if floor is not None and result.large_busbw_gbs is not None and result.large_busbw_gbs < float(floor):
        short.append(f"bus bandwidth {result.large_busbw_gbs} GB/s is below {floor} GB/s ({source})")
    ceiling = thresholds.get("max_small_latency_us")
    if ceiling is not None and result.small_latency_us is not None and result.small_latency_us > float(ceiling):
        short.append(f"small all-reduce {result.small_latency_us} us is above {ceiling} us ({source})")
    return short


def worker(backend: str, sizes: Sequence[int], iters: int, warmup: int, init_timeout: float) -> dict[str, Any]:
    """One rank (run in the release venv): init, warm up, time each size; the report of this rank."""
    import datetime

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=init_timeout))
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    timings = []
    for size in sizes:
        tensor = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(tensor)
        sync()
        samples = []
        for _ in range(iters):
            start = time.perf_counter()
            dist.all_reduce(tensor)
            sync()
            samples.append(time.perf_counter() - start)
        timings.append({"bytes": size, "median_s": statistics.median(samples)})
    report = {
        "rank": rank,
        "world_size": world,
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "sizes": timings,
    }
    dist.destroy_process_group()
    return report


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help="run one rank (RANK, WORLD_SIZE, MASTER_* from the environment)")
    parser.add_argument("--python", default=sys.executable, help="the release venv's Python the ranks run with")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for the whole check")
    parser.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES), help="bytes, comma-separated")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--init-timeout", type=float, default=150.0)
    parser.add_argument("--absent-ranks", default="", help="ranks not started (a GPU that never joins), comma-separated")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for every rank (the plan's NCCL environment)")
    parser.add_argument("--out", help="write the result JSON here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.worker:
        print(json.dumps(worker(args.backend, sizes, args.iters, args.warmup, args.init_timeout)), flush=True)
        return 0
    env = dict(item.split("=", 1) for item in args.env)
    absent = [int(r) for r in args.absent_ranks.split(",") if r]
    try:
        result = run_check(args.python, args.gpus, args.timeout, env, sizes, args.iters, args.warmup, args.backend, absent)
    except FabricError as exc:
        print(f"fabric check: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result.as_dict(), indent=2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(text)
    print(result.message, file=sys.stderr)
    return 0 if result.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
