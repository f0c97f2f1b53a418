#!/usr/bin/env python3
"""Benchmark: how long sglang-flags takes to check a flag set with SGLang's own ServerArgs.

Goal (issue 20, item 2): a warm check takes at most 10 s. Three ways of checking, each on the real
SGLang 0.5.9 and 0.5.23 with their runtimes (`make sglang-runtime`), the eagle3 profile as shipped (with the
environment every deploy sets) and the Kimi-shaped config files, new flags each time unless said otherwise (wall clock of the whole
command, median of RUNS):

- new process: a runtime process imports SGLang for the check (the bytecode and page cache warm
  from the run before);
- same inputs again: SGLang's accepted verdict read back (.cache/flag-gate/verdicts);
- warm checker (--warm): a checker process that keeps SGLang imported answers new flags.

The goal is judged on the warm checker, the one way of checking new flags warm; the other two are
printed beside it. Exit 1 when it is missed, 2 when a runtime or tree is missing.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from sglang_sm120_controller.compat import render_profile
from sglang_sm120_controller.pinned_stack import stack_from_metadata

ROOT = Path(__file__).resolve().parent.parent
# The toolkit's command-line tools: console scripts in the venv whose Python runs this script (make venv).
BIN = Path(sys.executable).parent
CACHE = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache"))
GOAL_S = 10.0
RUNS = int(os.environ.get("BENCH_GATE_RUNS", "3"))
RELEASES = ("0.5.9", "0.5.23")
MODELS = ROOT / "tests" / "data" / "lab-models" / "kimi-k2.5-nvfp4"  # config files, the index and the remote-code stand-in
DRAFT = ROOT / "tests" / "data" / "models" / "kimi-k2.5-eagle3"
SERVICE = ROOT / "roles/toolkit_defaults/defaults/main/service.yml"
STACK = ROOT / "roles/toolkit_defaults/defaults/main/stack.yml"
LAUNCH_DEFAULTS = ROOT / "roles/sglang_launch/defaults/main.yml"


def shipped_env() -> list[str]:
    """The server environment every deploy sets (sglang_launch_base_env), as --env arguments: the gate reads it
    (SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN lets the Kimi draft take the target's context length)."""
    base = yaml.safe_load(LAUNCH_DEFAULTS.read_text(encoding="utf-8"))["sglang_launch_base_env"]
    return [arg for key, value in base.items() for arg in ("--env", f"{key}={value}")]


def shipped_profile(version: str) -> list[str]:
    """The eagle3 profile as the toolkit ships it (service.yml), rendered for `version` as the deploy renders it (the
    stack's variables, the FlashInfer pin read from that release's wheel METADATA), less its draft-token count, which
    each check sets to a new value: the flags a deploy checks, not a recipe written here."""
    stack = yaml.safe_load(STACK.read_text(encoding="utf-8"))
    metadata = next((CACHE / "sglang" / version).glob("sglang-*.dist-info/METADATA")).read_text(encoding="utf-8")
    variables = {**stack, "stack_sglang_version": version, "stack_flashinfer_version": stack_from_metadata(metadata)["flashinfer"]}
    variables.update(stack_model_path="/data/Kimi-K2.5-NVFP4", stack_draft_model_path="/data/eagle3")
    profile = render_profile(yaml.safe_load(SERVICE.read_text(encoding="utf-8"))["sglang_profiles"]["eagle3"], variables)
    profile.pop("speculative-num-draft-tokens", None)
    argv: list[str] = []
    for name, value in profile.items():
        if name.startswith("_") or value in (None, False):
            continue
        argv += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return argv


def check(version: str, cache: Path, tokens: int, warm: float = 0) -> tuple[float, str]:
    argv = [
        str(BIN / "sglang-flags"), "--sglang", str(CACHE / "sglang" / version),
        "--python", str(CACHE / "sglang-runtime" / version / "venv" / "bin" / "python"),
        "--model-class", "KimiK25ForConditionalGeneration", "--model", str(MODELS), "--draft-model", str(DRAFT),
        "--warm", str(warm), *shipped_env(), "--", *shipped_profile(version), "--speculative-num-draft-tokens", str(tokens),
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "SGLANG_TOOLKIT_CACHE": str(cache)}, check=False)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"bench_gate: sglang-flags exited {proc.returncode} on SGLang {version}:\n{proc.stdout}{proc.stderr}")
    line = next((x for x in proc.stdout.splitlines() if x.startswith("server args:")), "")
    if not line:
        sys.exit(f"bench_gate: SGLang's ServerArgs did not run on {version}:\n{proc.stdout}")
    return wall, line


def main() -> int:
    for version in RELEASES:
        if not (CACHE / "sglang-runtime" / version / ".stamp").is_file() or not (CACHE / "sglang" / version / "sglang").is_dir():
            print(f"bench_gate: no runtime or tree for SGLang {version} under {CACHE}: run make sglang-runtime", file=sys.stderr)
            return 2
    missed = []
    print(f"sglang-flags, SGLang's ServerArgs on the shipped eagle3 profile (median of {RUNS}, wall clock; goal: warm <= {GOAL_S:.0f} s)")
    for version in RELEASES:
        with tempfile.TemporaryDirectory(prefix="bench-gate-") as scratch:
            cache = Path(scratch)
            check(version, cache, 4)  # page cache and bytecode warm; its verdict is kept
            fresh = [check(version, cache, 5 + run)[0] for run in range(RUNS)]
            again = [check(version, cache, 5)[0] for _ in range(RUNS)]
            _, started = check(version, cache, 20, warm=120)  # starts the warm checker
            warm = [check(version, cache, 21 + run, warm=120)[0] for run in range(RUNS)]
            pid = re.search(r"warm checker pid (\d+)", started)
            if pid:
                os.kill(int(pid.group(1)), signal.SIGTERM)
        median = statistics.median(warm)
        ok = median <= GOAL_S
        missed += [] if ok else [version]
        print(f"  SGLang {version}")
        print(f"    new flags, new process           {statistics.median(fresh):6.2f} s   (worst {max(fresh):.2f} s)")
        print(f"    same inputs again (verdict kept) {statistics.median(again):6.2f} s")
        print(f"    new flags, warm checker          {median:6.2f} s   goal <= {GOAL_S:.0f} s: {'met' if ok else 'NOT met'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
