#!/usr/bin/env python3
"""Benchmark: whole-tree EAGLE-3 audit and a full patch apply/revert on the real SGLang trees.

Goal (issue "SGLang patch engine and EAGLE-3 interface audit"): an audit under 2 s on one core.
Run through `make bench`, which pins it to one core with taskset when available.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "module_utils"))

from sglang_audit import audit  # noqa: E402
from sglang_patches import apply, load_manifest, revert  # noqa: E402

CACHE = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache")) / "sglang"
GOAL_S = 2.0
RUNS = 3


def timed(func) -> list[float]:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return times


def report(label: str, times: list[float], goal: float | None = None) -> bool:
    median, worst = statistics.median(times), max(times)
    verdict = "" if goal is None else f"  goal < {goal:.1f} s: {'met' if worst < goal else 'MISSED'}"
    print(f"{label:<48} median {median * 1000:7.1f} ms  worst {worst * 1000:7.1f} ms{verdict}")
    return goal is None or worst < goal


def main() -> int:
    ok = True
    for version in ("0.5.9", "0.5.10", "0.5.15", "0.5.21", "0.5.23"):
        tree = CACHE / version / "sglang"
        wheels = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
        ok &= report(f"audit {version} KimiK25 (unpacked tree)", timed(lambda t=tree: audit(t, "KimiK25ForConditionalGeneration")), GOAL_S)
        if wheels:
            ok &= report(
                f"audit {version} KimiK25 (wheel file)", timed(lambda w=wheels[0]: audit(w, "KimiK25ForConditionalGeneration")), GOAL_S
            )
    manifest = load_manifest(yaml.safe_load((ROOT / "files/patches/manifest.yml").read_text()), ROOT / "files/patches")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "sglang"
        shutil.copytree(CACHE / "0.5.9" / "sglang", copy)

        def cycle() -> None:
            apply(manifest, copy)
            revert(manifest, copy)

        report("patch apply + revert 0.5.9 (default set)", timed(cycle))
    print(f"cpu affinity: {sorted(os.sched_getaffinity(0))}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
