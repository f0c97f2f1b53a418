#!/usr/bin/env python3
"""The deploy's fabric check (plugins/module_utils/sglang_sm120/host/fabric_check.py, module sglang_fabric_check) on a
GPU machine, with the host facts the preflight gatherer reads there.

Not part of `make test` (CI has no GPU): this is how tests/data/real-gpu/fabric-check-<gpu>/ is made (its README says
when and where). From the repository root of a machine with NVIDIA GPUs and torch:

    PYTHONPATH=plugins/module_utils python3 scripts/real_fabric_proof.py --python /opt/torch/.venv/bin/python --out DIR

It does what the deploy does before the canary, with the same functions:
  1. the host facts (host/facts.py's gather, plus the GPUs nvidia-smi lists), saved as DIR/host-facts.json;
  2. "plan": a launch plan on every GPU here (--tp-size N): the record, with the facts beside the figures;
  3. "again": the same request: the record is reused, nothing runs;
  4. "too-many": a plan that asks one GPU more than the host facts list: refused before any rank starts;
  5. "bound": the same plan with no host facts to count against: the ranks start, the one without a GPU never
     joins, the bound kills them all and the check refuses (policy refuse), the record kept.
Writes DIR/<run>/fabric.json and DIR/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from sglang_sm120.host import fabric_check
from sglang_sm120.host import facts as host_facts

THRESHOLDS = [{"gpus": 8, "min_busbw_gbs": 30, "max_small_latency_us": 40, "source": "voipmonitor/rtx6kpro optimization/nccl-tuning.md"}]


def gather_facts() -> dict[str, Any]:
    def run(argv: list[str]) -> tuple[int, str, str]:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr

    def read(path: str) -> str:
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    data = host_facts.gather(run, read, which=shutil.which).as_dict()
    listed = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True
    ).stdout
    data["gpus"] = [
        {"index": int(i), "name": n.strip(), "memory_mib": int(m)} for i, n, m in (line.split(",") for line in listed.strip().splitlines())
    ]
    return data


def check(name: str, out: Path, python: str, facts_file: Path | None, gpus: int, boot_id: str) -> dict[str, Any]:
    (out / name).mkdir(parents=True, exist_ok=True)
    req = fabric_check.CheckRequest(
        python=python,
        argv=["--model-path", "/data/model", "--tp-size", str(gpus)],
        env={"NCCL_DEBUG": "WARN"},
        record=str(out / name / "fabric.json"),
        env_file=str(out / name / "fabric.env"),
        host_facts=str(facts_file) if facts_file else None,
        thresholds=THRESHOLDS,
        timeout=90,
        boot_id=boot_id,
    )
    try:
        record = fabric_check.run(req)
        outcome = {"refused": False}
    except fabric_check.FabricCheckError as exc:
        record, outcome = exc.result["fabric"], {"refused": True, "message": str(exc)}
    print(f"{name}: {record['status']} (reused {record['reused']}): {record.get('message')}", file=sys.stderr)
    return {**outcome, "record": record}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="the Python with torch the ranks run with")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    facts = gather_facts()
    facts_file = out / "host-facts.json"
    facts_file.write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    gpus = len(facts["gpus"])
    summary = {
        "gpus": gpus,
        "plan": check("plan", out, args.python, facts_file, gpus, boot_id),
        "again": check("plan", out, args.python, facts_file, gpus, boot_id),
        "too-many": check("too-many", out, args.python, facts_file, gpus + 1, boot_id),
        "bound": check("bound", out, args.python, None, gpus + 1, boot_id),
        "python": args.python,
        "cwd": os.getcwd(),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    ok = summary["plan"]["record"]["status"] == "ok" and summary["again"]["record"]["reused"]
    ok = ok and summary["too-many"]["refused"] and summary["bound"]["refused"] and summary["bound"]["record"]["status"] == "timeout"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
