"""The command-line tools in bin/ share module_utils' logic and say so in exit codes."""

from __future__ import annotations

import subprocess
import sys

from conftest import BIN, DATA

SMI = DATA / "nvidia-smi"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], input=stdin, capture_output=True, text=True, check=False)


def test_gpu_check_passes_eight_gpus_from_stdin():
    proc = run(str(BIN / "gpu-check"), "-", stdin=(SMI / "eight-rtx-pro-6000.txt").read_text())
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[-1] == "ok"


def test_gpu_check_fails_seven_gpus_with_the_reason():
    proc = run(str(BIN / "gpu-check"), str(SMI / "seven-gpus.txt"))
    assert proc.returncode == 1
    assert "PROBLEM: found 7 GPUs, expected 8" in proc.stdout


def test_cuda_arch_requires_sm_120(cuda_home, tmp_path):
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(int *x) { *x = 1; }\n")
    for arch in ("90", "120"):
        subprocess.run(
            [cuda_home / "bin/nvcc", "-gencode", f"arch=compute_{arch},code=sm_{arch}", "-c", "-o", tmp_path / f"k{arch}.o", source],
            check=True,
        )
    ok = run(str(BIN / "cuda-arch"), "--require", "12.0", str(tmp_path / "k120.o"))
    assert ok.returncode == 0 and ok.stdout.strip().endswith(": sm_120")
    bad = run(str(BIN / "cuda-arch"), "--require", "12.0", str(tmp_path / "k90.o"))
    assert bad.returncode == 1 and "expected sm_120 or sm_120a or sm_120f machine code, found sm_90" in bad.stderr


def test_cuda_arch_names_suffixed_cubins_as_cuobjdump_and_requires_12_0_family(cuda_home, cuobjdump, tmp_path):
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(int *x) { *x = 1; }\n")
    codes = {"120": "sm_120", "120a": "sm_120a", "120f": "sm_120", "121a": "sm_121a", "100a": "sm_100a", "90a": "sm_90a"}
    for arch in codes:
        subprocess.run(
            [cuda_home / "bin/nvcc", "-gencode", f"arch=compute_{arch},code=sm_{arch}", "-c", "-o", tmp_path / f"k{arch}.o", source],
            check=True,
        )
    objects = [str(tmp_path / f"k{arch}.o") for arch in codes]
    for reader in (["--builtin"], ["--cuobjdump", str(cuobjdump)]):
        listing = run(str(BIN / "cuda-arch"), *reader, *objects)
        assert listing.returncode == 0, listing.stderr
        assert listing.stdout.splitlines() == [f"{tmp_path}/k{arch}.o: {name}" for arch, name in codes.items()]
        required = run(str(BIN / "cuda-arch"), *reader, "--require", "12.0", *objects)
        assert required.returncode == 1
        assert [line.rsplit("/", 1)[1] for line in required.stdout.splitlines()] == [
            "k120.o: sm_120",
            "k120a.o: sm_120a",
            "k120f.o: sm_120",
        ]
        for refused in ("121a", "100a", "90a"):
            assert f"k{refused}.o: expected sm_120 or sm_120a or sm_120f machine code, found sm_{refused}" in required.stderr
