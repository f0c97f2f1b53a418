"""CUDA toolkit facts, with the real nvcc 13.0.88 from NVIDIA's wheels."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from cuda_toolkit import (
    CudaToolkitError,
    gpu_targets,
    installed_version,
    parse_nvcc_version,
    require_target,
    version_series,
)

KERNEL = "__global__ void probe(float *x) { x[threadIdx.x] += 1.0f; }\n"


def compile_kernel(cuda_home: Path, tmp_path: Path, gencode: list[str], flag: str = "-c") -> Path:
    source = tmp_path / "k.cu"
    source.write_text(KERNEL)
    out = tmp_path / ("k.cubin" if flag == "-cubin" else "k.o")
    cmd = [str(cuda_home / "bin/nvcc"), *gencode, flag, "-o", str(out), str(source)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def test_real_nvcc_reports_release_13_0_build_v13_0_88(cuda_home):
    out = subprocess.run([cuda_home / "bin/nvcc", "--version"], capture_output=True, text=True, check=True).stdout
    assert parse_nvcc_version(out) == parse_nvcc_version("Cuda compilation tools, release 13.0, V13.0.88")
    assert parse_nvcc_version(out).build == "V13.0.88"


def test_unrecognised_nvcc_output_is_an_error():
    with pytest.raises(CudaToolkitError, match="nvcc --version should print"):
        parse_nvcc_version("bash: nvcc: command not found")


def test_sm_120_object_carries_sm_120(cuda_home, tmp_path):
    obj = compile_kernel(cuda_home, tmp_path, ["-gencode", "arch=compute_120,code=sm_120"])
    assert gpu_targets(str(obj)) == ["sm_120"]
    assert require_target(str(obj), "12.0") == ["sm_120"]


def test_cubin_is_read_from_its_elf_header(cuda_home, tmp_path):
    cubin = compile_kernel(cuda_home, tmp_path, ["-gencode", "arch=compute_120,code=sm_120"], "-cubin")
    assert gpu_targets(str(cubin)) == ["sm_120"]


def test_fat_object_lists_every_target(cuda_home, tmp_path):
    obj = compile_kernel(
        cuda_home,
        tmp_path,
        ["-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_120,code=[sm_120,compute_120]"],
    )
    assert gpu_targets(str(obj)) == ["compute_120", "sm_120", "sm_90"]


def test_object_without_sm_120_fails_naming_what_it_has(cuda_home, tmp_path):
    obj = compile_kernel(cuda_home, tmp_path, ["-gencode", "arch=compute_90,code=sm_90"])
    with pytest.raises(CudaToolkitError, match="expected sm_120 machine code, found sm_90"):
        require_target(str(obj), "12.0")


def test_ptx_only_object_is_not_machine_code(cuda_home, tmp_path):
    obj = compile_kernel(cuda_home, tmp_path, ["-gencode", "arch=compute_120,code=compute_120"])
    assert gpu_targets(str(obj)) == ["compute_120"]
    with pytest.raises(CudaToolkitError, match="found compute_120"):
        require_target(str(obj), "12.0")


def test_host_binary_without_gpu_code_has_no_targets(tmp_path):
    plain = tmp_path / "plain"
    plain.write_bytes(Path("/bin/true").read_bytes())
    assert gpu_targets(str(plain)) == []
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert gpu_targets(str(empty)) == []


def test_installed_version_reads_the_toolkit_record(cuda_home, tmp_path):
    assert installed_version(str(cuda_home)) == "13.0.1"
    assert installed_version(str(tmp_path)) is None
    (tmp_path / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK"}}))
    with pytest.raises(CudaToolkitError, match=r"cannot read cuda\.version"):
        installed_version(str(tmp_path))


def test_version_series_is_major_minor():
    assert version_series("13.0.1") == "13.0"
    with pytest.raises(CudaToolkitError, match=r"should look like '13\.0\.1', found '13\.x'"):
        version_series("13.x")


def test_targets_agree_with_nvidias_cuobjdump(cuda_home, cuobjdump, tmp_path):
    obj = compile_kernel(
        cuda_home,
        tmp_path,
        ["-gencode", "arch=compute_89,code=sm_89", "-gencode", "arch=compute_120,code=[sm_120,compute_120]"],
    )
    elf = subprocess.run([cuobjdump, "--list-elf", obj], capture_output=True, text=True, check=True).stdout
    ptx = subprocess.run([cuobjdump, "--list-ptx", obj], capture_output=True, text=True, check=True).stdout
    witnessed = sorted(set(re.findall(r"\.(sm_\d+)\.cubin", elf)) | {f"compute_{n}" for n in re.findall(r"\.sm_(\d+)\.ptx", ptx)})
    assert witnessed == ["compute_120", "sm_120", "sm_89"]
    assert gpu_targets(str(obj)) == witnessed
