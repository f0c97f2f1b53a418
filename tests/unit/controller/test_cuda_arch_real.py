"""GPU code in REAL wheels from the package index, read by cuda-arch and the build pipeline,
with NVIDIA's cuobjdump 13.2 as the witness (`scripts/real-wheels.sh` fetches the wheels)."""

from __future__ import annotations

import copy
import re
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import BIN, CACHE, DATA, ROOT
from sglang_sm120.build.pipeline import (
    BuildError,
    BuildSpecError,
    SharedObject,
    check_objects,
    cuobjdump_code,
    gpu_code,
    plan,
    verify_wheel,
)

WHEELS = CACHE / "real-wheels"
SGL_KERNEL_SM120 = ["sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so"]
SGL_KERNEL_OTHER = {
    "sgl_kernel/flash_ops.abi3.so": {"sm_80", "sm_86", "sm_90a"},
    "sgl_kernel/flashmla_ops.abi3.so": {"sm_90a", "sm_100a"},
    "_mscclpp.cpython-310-x86_64-linux-gnu.so": {"sm_80", "sm_90"},
    "lib/mscclpp.so": {"sm_80", "sm_90"},
}


def real_wheel(requirement: str) -> tuple[Path, Path]:
    """(wheel, directory of its unpacked shared objects) of a requirement in tests/data/real-wheels.txt."""
    lines = [line.split() for line in (DATA / "real-wheels.txt").read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert requirement in [line[0] for line in lines], f"{requirement} is not in tests/data/real-wheels.txt"
    name, version = requirement.split("==")
    found = sorted(WHEELS.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    unpacked = found[0].with_name(found[0].name + ".d") if found else None
    if not found or not (unpacked / ".done").exists():
        pytest.fail(f"no unpacked {requirement} under {WHEELS}: run scripts/real-wheels.sh first")
    return found[0], unpacked


def objects(unpacked: Path) -> list[str]:
    return sorted(str(p.relative_to(unpacked)) for p in unpacked.rglob("*") if re.search(r"\.so(\.\d+)*$", p.name))


def cuda_arch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "cuda-arch"), *args], capture_output=True, text=True, check=False)


def listed(text: str) -> dict[str, set[str]]:
    out = {}
    for line in text.splitlines():
        path, _, targets = line.rpartition(": ")
        out[path] = set() if targets == "no GPU code" else set(targets.split(", "))
    return out


def list_elf(cuobjdump: Path, path: Path) -> set[str]:
    """The cubin targets `cuobjdump --list-elf` names, suffixes included."""
    proc = subprocess.run([cuobjdump, "--list-elf", path], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 or "does not contain device code" in proc.stdout + proc.stderr, proc.stderr
    return set(re.findall(r"\.(sm_\d+[af]?)\.cubin$", proc.stdout, re.MULTILINE))


@pytest.fixture(scope="session")
def sgl_kernel() -> tuple[Path, Path]:
    return real_wheel("sgl-kernel==0.3.21")


@pytest.fixture(scope="session")
def nvshmem() -> tuple[Path, Path]:
    return real_wheel("nvidia-nvshmem-cu13==3.8.0")


@pytest.fixture(scope="session")
def builtin_listing(sgl_kernel: tuple[Path, Path], nvshmem: tuple[Path, Path]) -> dict[str, set[str]]:
    """cuda-arch --builtin over every shared object of both wheels, in one run."""
    paths = [str(d / o) for _, d in (sgl_kernel, nvshmem) for o in objects(d)]
    proc = cuda_arch("--builtin", *paths)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("reader: built-in ELF/fatbin reader")
    return listed(proc.stdout)


def test_builtin_reader_lists_cubins_as_cuobjdump_does(
    cuobjdump: Path, sgl_kernel: tuple[Path, Path], nvshmem: tuple[Path, Path], builtin_listing: dict[str, set[str]]
) -> None:
    compared = 0
    for _, unpacked in (sgl_kernel, nvshmem):
        for rel in objects(unpacked):
            path = unpacked / rel
            mine = {t for t in builtin_listing[str(path)] if t.startswith("sm_")}
            assert mine == list_elf(cuobjdump, path), rel
            compared += 1
    assert compared >= 20
    # the suffixes are there: sm_120a, and sm_90a/sm_100a where no plain sm_90/sm_100 exists
    unpacked = sgl_kernel[1]
    assert builtin_listing[str(unpacked / "sgl_kernel/spatial_ops.abi3.so")] == {"sm_80", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120a"}
    assert builtin_listing[str(unpacked / "sgl_kernel/flashmla_ops.abi3.so")] == {"sm_90a", "sm_100a"}
    for rel, expected in SGL_KERNEL_OTHER.items():
        assert {t for t in builtin_listing[str(unpacked / rel)] if t.startswith("sm_")} == expected, rel


def test_builtin_ptx_matches_cuobjdump_list_ptx_all(
    cuobjdump: Path, nvshmem: tuple[Path, Path], builtin_listing: dict[str, set[str]]
) -> None:
    host = nvshmem[1] / "nvidia/nvshmem/lib/libnvshmem_host.so.3"
    assert set(cuobjdump_code(str(cuobjdump), host)) == set(gpu_code(host)) == builtin_listing[str(host)]
    assert "compute_120" in builtin_listing[str(host)] and "sm_120" in builtin_listing[str(host)]


def test_cuda_arch_uses_cuobjdump_when_there_is_one(cuobjdump: Path, sgl_kernel: tuple[Path, Path]) -> None:
    path = sgl_kernel[1] / "sgl_kernel/flashmla_ops.abi3.so"
    proc = cuda_arch("--cuobjdump", str(cuobjdump), str(path))
    assert proc.returncode == 0 and proc.stderr.startswith(f"reader: cuobjdump --list-elf ({cuobjdump})")
    assert listed(proc.stdout) == {str(path): {"sm_90a", "sm_100a"}}


def test_require_12_0_accepts_sm_120a_and_refuses_other_arch_only(sgl_kernel: tuple[Path, Path]) -> None:
    unpacked = sgl_kernel[1]
    ok = cuda_arch("--builtin", "--require", "12.0", *(str(unpacked / o) for o in SGL_KERNEL_SM120))
    assert ok.returncode == 0, ok.stderr
    assert all("sm_120a" in targets for targets in listed(ok.stdout).values()) and len(listed(ok.stdout)) == 3
    for rel in ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel/flashmla_ops.abi3.so"):
        bad = cuda_arch("--builtin", "--require", "12.0", str(unpacked / rel))
        assert bad.returncode == 1 and bad.stdout == ""
        assert "expected sm_120 or sm_120a or sm_120f machine code, found " in bad.stderr
    assert "found sm_100a, sm_90a" in cuda_arch("--builtin", "--require", "12.0", str(unpacked / "sgl_kernel/flashmla_ops.abi3.so")).stderr


def production_sgl_kernel_verify() -> dict[str, Any]:
    """The sgl_kernel spec's verify rules from the production inventory, for 12.0, without the
    cudart rule (the released 0.3.21 wheel is a CUDA 12.9 build: libcudart.so.12)."""
    specs = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/build.yml").read_text())["sglang_build_core_specs"]
    rules = dict(next(s for s in specs if s["name"] == "sgl_kernel")["verify"])
    assert rules.pop("cudart") == "13"
    rules["cuda_arch"] = "12.0"
    return rules


@pytest.fixture(scope="session")
def sgl_kernel_evidence(sgl_kernel: tuple[Path, Path]) -> dict[str, Any]:
    """The whole pipeline check (unpack, read, rules) once, end to end, on the real wheel."""
    return verify_wheel(sgl_kernel[0], production_sgl_kernel_verify())


@pytest.fixture(scope="session")
def sgl_kernel_objects(sgl_kernel_evidence: dict[str, Any]) -> list[SharedObject]:
    """What that read found, for checking other rules without unpacking 1.6 GB again."""
    return [SharedObject(**o) for o in sgl_kernel_evidence["shared_objects"]]


def check(objects: list[SharedObject], rules: dict[str, Any]) -> None:
    check_objects("sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl", objects, rules)


def test_production_rule_passes_the_real_sgl_kernel(sgl_kernel_evidence: dict[str, Any]) -> None:
    by_path = {o["path"]: o for o in sgl_kernel_evidence["shared_objects"]}
    assert sgl_kernel_evidence["witness"] == "built-in ELF/fatbin reader"
    for rel in SGL_KERNEL_SM120:
        assert "sm_120a" in by_path[rel]["targets"] and by_path[rel]["rule"] == "must carry the target"
    assert by_path["sgl_kernel/flash_ops.abi3.so"]["rule"].startswith("other architectures on purpose: FlashAttention 3")
    assert by_path["deep_gemm/deep_gemm_cpp.abi3.so"]["targets"] == []


def test_production_rule_without_the_exceptions_fails_naming_them(sgl_kernel_objects: list[SharedObject]) -> None:
    rules = production_sgl_kernel_verify()
    del rules["other_arch_objects"]
    with pytest.raises(BuildError) as failure:
        check(sgl_kernel_objects, rules)
    message = str(failure.value)
    for rel in (
        "sgl_kernel/flash_ops.abi3.so",
        "sgl_kernel/flashmla_ops.abi3.so",
        "lib/mscclpp.so",
        "_mscclpp.cpython-310-x86_64-linux-gnu.so",
    ):
        assert f"{rel}: expected sm_120 or sm_120a or sm_120f, found" in message
    assert "common_ops" not in message and "spatial_ops" not in message


def test_production_rule_with_cudart_13_refuses_the_cuda_12_build(sgl_kernel_objects: list[SharedObject]) -> None:
    rules = {**production_sgl_kernel_verify(), "cudart": "13"}
    with pytest.raises(BuildError, match=r"common_ops\.abi3\.so: links libcudart\.so\.12, expected libcudart\.so\.13"):
        check(sgl_kernel_objects, rules)


def test_object_that_must_carry_sm120_but_does_not_fails_naming_it(sgl_kernel_objects: list[SharedObject]) -> None:
    rules = production_sgl_kernel_verify()
    rules["arch_objects"] = [*rules["arch_objects"], "sgl_kernel/flashmla_ops.*.so"]
    rules["other_arch_objects"] = {k: v for k, v in rules["other_arch_objects"].items() if "flashmla" not in k}
    with pytest.raises(
        BuildError, match=r"sgl_kernel/flashmla_ops\.abi3\.so: expected sm_120 or sm_120a or sm_120f, found sm_100a, sm_90a"
    ):
        check(sgl_kernel_objects, rules)
    rules = {**production_sgl_kernel_verify(), "arch_objects": ["sgl_kernel/sm120/common_ops.*.so"]}
    with pytest.raises(BuildError, match=r"verify.arch_objects 'sgl_kernel/sm120/common_ops.\*.so' matches no shared object"):
        check(sgl_kernel_objects, rules)


def test_a_wheel_without_sm120_code_fails(nvshmem: tuple[Path, Path], tmp_path: Path) -> None:
    """The real nvshmem wheel carries sm_120 (passes); the same objects without it do not: a wheel
    of only sgl-kernel's Hopper/Blackwell-only objects fails, even with arch exceptions elsewhere."""
    assert verify_wheel(nvshmem[0], {"cuda_arch": "12.0", "cudart": "13", "device_code": "required"})["shared_objects"]

    wheel = tmp_path / "hopper_only-1.0-py3-none-any.whl"
    _, unpacked = real_wheel("sgl-kernel==0.3.21")
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(unpacked / "sgl_kernel/flashmla_ops.abi3.so", "hopper_only/flashmla_ops.abi3.so")
        archive.write(unpacked / "_mscclpp.cpython-310-x86_64-linux-gnu.so", "hopper_only/_mscclpp.so")
    with pytest.raises(
        BuildError, match=r"hopper_only/flashmla_ops\.abi3\.so: expected sm_120 or sm_120a or sm_120f, found sm_100a, sm_90a"
    ):
        verify_wheel(wheel, {"cuda_arch": "12.0", "device_code": "required"})
    with pytest.raises(BuildError, match=r"verify.arch_objects 'hopper_only/kernels\*.so' matches no shared object"):
        verify_wheel(
            wheel,
            {
                "cuda_arch": "12.0",
                "device_code": "required",
                "arch_objects": ["hopper_only/kernels*.so"],
                "other_arch_objects": {"*": "all"},
            },
        )


def test_production_specs_validate_and_bad_exceptions_are_named() -> None:
    specs = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/build.yml").read_text())["sglang_build_core_specs"]
    kernel = copy.deepcopy(next(s for s in specs if s["name"] == "sgl_kernel"))
    kernel["depends_on"] = []
    kernel["verify"]["cuda_arch"] = "12.0"
    assert plan([kernel], {"arch": "12.0"})[0].spec["verify"]["other_arch_objects"]
    kernel["verify"]["other_arch_objects"]["sgl_kernel/flash_ops.*.so"] = ""
    with pytest.raises(
        BuildSpecError, match=r"build spec 'sgl_kernel': verify.other_arch_objects\['sgl_kernel/flash_ops.\*.so'\] needs a reason"
    ):
        plan([kernel], {"arch": "12.0"})
    kernel["verify"]["other_arch_objects"] = ["sgl_kernel/flash_ops.*.so"]
    with pytest.raises(BuildSpecError, match=r"build spec 'sgl_kernel': verify.other_arch_objects must map wheel path patterns"):
        plan([kernel], {"arch": "12.0"})
    kernel["verify"]["other_arch_objects"] = {}
    kernel["verify"]["arch_objects"] = "sgl_kernel/*.so"
    with pytest.raises(BuildSpecError, match=r"build spec 'sgl_kernel': verify.arch_objects must be a list of wheel path patterns"):
        plan([kernel], {"arch": "12.0"})
