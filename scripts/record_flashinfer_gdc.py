#!/usr/bin/env python3
"""Record, for every FlashInfer release an SGLang release pins (tests/data/sglang-wheels.txt, the pins read from the
cached SGLang wheels' METADATA), whether FlashInfer's JIT spec of the SM120 CUTLASS FP4 GEMM
(flashinfer/jit/gemm/core.py gen_gemm_sm120_module_cutlass_fp4) passes -DCUTLASS_ENABLE_GDC_FOR_SM100=1. Without it
CUTLASS's griddepcontrol barriers compile to nothing while the kernels still launch with PDL, and output tiles come
back unwritten (NaN / garbage) under concurrent load (flashinfer-ai/flashinfer #2708, fixed by #2716).

Not part of `make test`: it downloads each flashinfer_python wheel (pure Python, ~14 MB, no dependencies) into
.cache/flashinfer-wheels/ and writes tests/data/flashinfer-sm120-fp4-gdc.txt, which the catalogue test reads:

    .venv/bin/python scripts/record_flashinfer_gdc.py
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"
OUT = ROOT / "tests" / "data" / "flashinfer-sm120-fp4-gdc.txt"
FUNCTION = "gen_gemm_sm120_module_cutlass_fp4"
FLAG = "CUTLASS_ENABLE_GDC_FOR_SM100"


def pins() -> list[str]:
    found = set()
    for metadata in sorted((CACHE / "sglang").glob("*/sglang-*.dist-info/METADATA")):
        match = re.search(r"^Requires-Dist: flashinfer[_-]python(?:\[[^\]]*\])?==(\S+)", metadata.read_text(), re.M)
        if match:
            found.add(match.group(1))
    return sorted(found, key=lambda v: [int(p) if p.isdigit() else p for p in re.split(r"[.]", v.replace("post", ""))])


def reading(version: str) -> str:
    target = CACHE / "flashinfer-wheels"
    wheels = list(target.glob(f"flashinfer_python-{version}-*.whl"))
    if not wheels:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(target), f"flashinfer_python=={version}"]
        subprocess.run(argv, check=True)
        wheels = list(target.glob(f"flashinfer_python-{version}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        text = wheel.read("flashinfer/jit/gemm/core.py").decode()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == FUNCTION:
            return "gdc" if FLAG in ast.unparse(node) else "no-gdc"
    return "no-sm120-fp4"


def main() -> int:
    lines = [
        "# FlashInfer release (pinned by an SGLang release here) -> whether flashinfer/jit/gemm/core.py",
        f"# {FUNCTION} passes -D{FLAG}=1 (gdc), does not (no-gdc: PDL barriers compiled out, flashinfer #2708),",
        "# or has no SM120 FP4 GEMM. Made by scripts/record_flashinfer_gdc.py from the released wheels.",
    ]
    for version in pins():
        lines.append(f"{version} {reading(version)}")
        print(lines[-1])
    OUT.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
