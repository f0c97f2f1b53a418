"""The rehearsal's upstream reference (issue 23): each check fails, naming its cause, with a defect of
the issue's "Why" put back on a COPY of the rendered production specs, the facts or the reference.

Fast and offline: the rendered specs come from tests/unit/controller/test_rehearsal.py's way of rendering (Ansible,
once per session), the reference from tests/data/upstream/index.yml.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conftest import CACHE, UPSTREAM_INDEX, by_name, upstream_reference
from sglang_sm120_controller.rehearsal.build import (
    Outcome,
    RehearsalError,
    arch_target,
    check_arch_lists,
    check_build_requires,
    check_cmake_options,
    check_facts_agree,
    check_source_identity,
    cmake_defines,
    cmake_true,
    run_check,
    summary,
)
from sglang_sm120_controller.rehearsal.upstream import (
    ArchListError,
    ReferenceError,
    admitted_outside,
    extract,
    load_reference,
    parse_flashinfer_arch_list,
    parse_torch_arch_list,
    sha256_of,
    verify_copy,
)

FACTS, INDEX_DATA, REFERENCE = upstream_reference()


def fails(check: Any, *args: Any) -> str:
    outcome = run_check("x", check, *args)
    assert outcome.failed and not outcome.unchecked, outcome.line()
    return outcome.detail


def with_entry(entry: dict[str, Any]) -> Any:
    """The reference with one more entry (a file as a test states it, not as recorded from upstream)."""
    data = copy.deepcopy(INDEX_DATA)
    data["files"] = [f for f in data["files"] if (f["repo"], f["tag"], f["path"]) != (entry["repo"], entry["tag"], entry["path"])]
    data["files"].append(entry)
    return load_reference(UPSTREAM_INDEX, data)


# ---------------------------------------------------------------- build requirements with their bounds


def test_jit_cache_without_nvshmem_cu12_fails_naming_upstream_file(specs: list[dict[str, Any]]) -> None:
    jit = by_name(specs, "flashinfer_jit_cache")
    assert run_check("ok", check_build_requires, specs, FACTS, REFERENCE, "flashinfer_jit_cache").ok
    jit["build_requires"] = [r for r in jit["build_requires"] if r != "nvidia-nvshmem-cu12"]  # the defect: only -cu13
    detail = fails(check_build_requires, specs, FACTS, REFERENCE, "flashinfer_jit_cache")
    assert (
        "flashinfer_jit_cache: build_requires lacks nvidia-nvshmem-cu12 (required by flashinfer-ai/flashinfer v0.6.3 "
        "flashinfer-jit-cache/pyproject.toml [build-system] requires" in detail
    )
    assert "nvidia-nvshmem-cu13==3.8.0" in detail  # what was found


def test_flashinfer_tvm_ffi_without_upstream_bound_fails(specs: list[dict[str, Any]]) -> None:
    flashinfer = by_name(specs, "flashinfer")
    flashinfer["build_requires"] = [("apache-tvm-ffi<0.2" if r.startswith("apache-tvm-ffi") else r) for r in flashinfer["build_requires"]]
    detail = fails(check_build_requires, specs, FACTS, REFERENCE, "flashinfer")
    assert "flashinfer: build_requires apache-tvm-ffi<0.2 admits apache-tvm-ffi 0.1.8, which the upstream bound " in detail
    assert "apache-tvm-ffi>=0.1.6,!=0.1.8,!=0.1.8.post0,<0.2 of flashinfer-ai/flashinfer v0.6.3 pyproject.toml" in detail


TORCH_PYPROJECT = {
    # torch v2.9.1's [build-system] requires as issue 23 states them (the real file is recorded unchecked:
    # see the index); the check's verdict on this entry is what it would say on the recorded file
    "repo": "pytorch/pytorch",
    "tag": "v2.9.1",
    "path": "pyproject.toml",
    "status": "recorded",
    "sha256": "0" * 64,
    "extract": {
        "build_system_requires": [
            "setuptools>=70.1.0,<80.0",
            "cmake>=3.27",
            "ninja",
            "numpy",
            "packaging",
            "pyyaml",
            "requests",
            "six",
            "typing-extensions>=4.10.0",
        ]
    },
}


def with_setuptools(specs: list[dict[str, Any]], requirement: str) -> dict[str, Any]:
    """The torch spec with its setuptools build requirement replaced by `requirement`."""
    torch = by_name(specs, "torch")
    assert sum(r.startswith("setuptools") for r in torch["build_requires"]) == 1, torch["build_requires"]
    torch["build_requires"] = [(requirement if r.startswith("setuptools") else r) for r in torch["build_requires"]]
    return torch


def test_setuptools_without_upper_bound_fails_naming_spec_requirement_bound_and_file(specs: list[dict[str, Any]]) -> None:
    reference = with_entry(TORCH_PYPROJECT)
    torch = with_setuptools(specs, "setuptools>=70.1.0")  # the defect of issue 23, put back
    detail = fails(check_build_requires, specs, FACTS, reference, "torch")
    assert (
        "torch: build_requires setuptools>=70.1.0 admits setuptools 80.0, which the upstream bound setuptools>=70.1.0,<80.0 "
        "of pytorch/pytorch v2.9.1 pyproject.toml [build-system] requires excludes" in detail
    )
    torch["build_requires"] = [("setuptools>=70.1.0,<80" if r == "setuptools>=70.1.0" else r) for r in torch["build_requires"]]
    assert run_check("bounded", check_build_requires, specs, FACTS, reference, "torch").ok


def test_setuptools_bound_put_back_fails_on_the_stated_bound_while_the_file_is_unread(specs: list[dict[str, Any]]) -> None:
    """torch v2.9.1's pyproject.toml is recorded unchecked: the bounds the facts state for it
    (stated_build_system_requires, verified: false) still make a spec admitting what they exclude FAIL."""
    assert REFERENCE.get("pytorch/pytorch", "v2.9.1", "pyproject.toml").status == "unchecked"
    production = run_check("ok", check_build_requires, specs, FACTS, REFERENCE, "torch")
    assert production.unchecked and not production.ok and not production.failed, production.line()  # agreement: never a pass
    assert "setuptools<80,>=77" in production.detail and "no pass while the file is not read" in production.detail
    with_setuptools(specs, "setuptools>=70.1.0")  # the defect: pip takes 84.x
    detail = fails(check_build_requires, specs, FACTS, REFERENCE, "torch")
    assert (
        "torch: build_requires setuptools>=70.1.0 admits setuptools 80.0, which the upstream bound setuptools>=70.1.0,<80.0 of "
        "pytorch/pytorch v2.9.1 pyproject.toml [build-system] requires as issue 23 states it (not read here), "
        "tests/data/upstream-build-facts.yml torch.stated_build_system_requires (verified: false) excludes" in detail
    )
    # within v2.9.1's stated bound but not the stored copy's (another commit): refused too, naming that copy
    with_setuptools(specs, "setuptools>=70.1.0,<80")
    detail = fails(check_build_requires, specs, FACTS, REFERENCE, "torch")
    assert "admits setuptools 70.1.0, which the upstream bound setuptools>=77.0.0,<82 of pytorch/pytorch pyproject.toml" in detail
    assert "at commit 0034f545" in detail and "setuptools>=70.1.0,<80.0" not in detail


def test_unread_torch_pyproject_is_unchecked_and_counted(specs: list[dict[str, Any]]) -> None:
    outcome = run_check("upstream build-requires torch", check_build_requires, specs, FACTS, REFERENCE, "torch")
    assert outcome.unchecked and not outcome.ok, outcome.line()
    assert outcome.line().startswith("UNCHECKED upstream build-requires torch: torch: pytorch/pytorch v2.9.1 pyproject.toml was not read")
    assert summary([Outcome("a", True, ""), outcome, Outcome("b", False, "x")]) == "1 passed, 1 failed, 1 unchecked"
    assert summary([Outcome("a", True, "")]) == "1 passed, 0 failed"


@pytest.mark.parametrize(
    ("ours", "theirs", "witness"),
    [
        (">=70.1.0", ">=70.1.0,<80.0", "80.0"),
        (">=70.1.0,<80", ">=70.1.0,<80.0", None),
        ("<0.2", ">=0.1.6,!=0.1.8,!=0.1.8.post0,<0.2", "0.1.8"),
        (">=0.1.6,!=0.1.8,!=0.1.8.post0,<0.2", ">=0.1,<0.2", None),
        ("", ">=77", "0"),
        ("==3.8.0", "", None),
        (">=78,<79", ">=77", None),
        (">77", ">=77", None),
        (">=77", ">77", "77"),
        ("<=80", "<80", "80"),
    ],
)
def test_bounds_compared_as_sets(ours: str, theirs: str, witness: str | None) -> None:
    found = admitted_outside(SpecifierSet(ours), SpecifierSet(theirs), "test")
    assert found == (Version(witness) if witness else None)


def test_wildcard_bound_is_refused_not_passed() -> None:
    with pytest.raises(ReferenceError, match=r"cannot compare the bound ==1\.\*"):
        admitted_outside(SpecifierSet("==1.*"), SpecifierSet(">=1"), "test")


# ---------------------------------------------------------------- source identity


def test_flashinfer_at_v062_fails_naming_spec_ref_and_both_versions(specs: list[dict[str, Any]], rendered: dict[str, Any]) -> None:
    stack = rendered["stack"]
    assert run_check("ok", check_source_identity, specs, FACTS, REFERENCE, stack, "flashinfer").ok
    for name in ("flashinfer", "flashinfer_jit_cache"):
        by_name(specs, name)["source"]["ref"] = "v0.6.2"  # the defect
        detail = fails(check_source_identity, specs, FACTS, REFERENCE, stack, name)
        assert (
            f"{name}: source ref v0.6.2 builds version 0.6.2 (flashinfer-ai/flashinfer v0.6.2 version.txt), "
            "the stack needs 0.6.3 (stack_flashinfer_version)" in detail
        )


def test_ref_without_recorded_tag_is_refused(specs: list[dict[str, Any]], rendered: dict[str, Any]) -> None:
    by_name(specs, "flashinfer")["source"]["ref"] = "main"
    detail = fails(check_source_identity, specs, FACTS, REFERENCE, rendered["stack"], "flashinfer")
    assert "flashinfer: source ref main of flashinfer-ai/flashinfer has no recorded version.txt" in detail
    assert "records v0.6.2, v0.6.3 of flashinfer-ai/flashinfer" in detail and "refused" in detail
    assert "main" in fails(check_build_requires, specs, FACTS, REFERENCE, "flashinfer")


def test_unread_version_file_is_unchecked(specs: list[dict[str, Any]], rendered: dict[str, Any]) -> None:
    outcome = run_check("v", check_source_identity, specs, FACTS, REFERENCE, rendered["stack"], "sgl_kernel")
    assert outcome.unchecked and "sgl-project/sglang v0.5.9 sgl-kernel/pyproject.toml was not read at the tag" in outcome.detail
    entry = {"repo": "sgl-project/sglang", "tag": "v0.5.9", "path": "sgl-kernel/pyproject.toml", "status": "recorded"}
    reference = with_entry({**entry, "sha256": "0" * 64, "extract": {"project_version": "0.3.20"}})
    detail = fails(check_source_identity, specs, FACTS, reference, rendered["stack"], "sgl_kernel")
    assert "sgl_kernel: source ref v0.5.9 builds version 0.3.20 (sgl-project/sglang v0.5.9 sgl-kernel/pyproject.toml)" in detail
    assert "the stack needs 0.3.21 (stack_kernel_version)" in detail


# ---------------------------------------------------------------- facts against the recorded files


def test_facts_with_the_old_jit_cache_wheel_tag_fail() -> None:
    assert run_check("ok", check_facts_agree, FACTS, REFERENCE).ok
    facts = copy.deepcopy(FACTS)
    facts["flashinfer_jit_cache"]["wheel_tag"]["value"] = "cp39-abi3-linux_x86_64"  # the defect
    detail = fails(check_facts_agree, facts, REFERENCE)
    assert "flashinfer_jit_cache.wheel_tag: wheel tag 'cp39-abi3-linux_x86_64' has linux_x86_64, which flashinfer-ai/flashinfer" in detail
    assert "manylinux_2_28_x86_64" in detail


def test_facts_naming_a_variable_upstream_does_not_read_fail() -> None:
    facts = copy.deepcopy(FACTS)
    facts["flashinfer"]["local_version_env"]["value"] = "FLASHINFER_LOCAL_VERSION_SUFFIX"
    detail = fails(check_facts_agree, facts, REFERENCE)
    assert (
        "flashinfer.local_version_env: expected flashinfer-ai/flashinfer v0.6.3 build_backend.py to read FLASHINFER_LOCAL_VERSION_SUFFIX"
        in detail
    )


def test_jit_cache_upstream_facts_confirmed_in_recorded_files() -> None:
    """The two facts issue 23 corrected, as the recorded v0.6.3 files say them."""
    pyproject = REFERENCE.get("flashinfer-ai/flashinfer", "v0.6.3", "flashinfer-jit-cache/pyproject.toml")
    backend = REFERENCE.get("flashinfer-ai/flashinfer", "v0.6.3", "flashinfer-jit-cache/build_backend.py")
    assert pyproject is not None and backend is not None
    assert "nvidia-nvshmem-cu12" in pyproject.extract["build_system_requires"]
    assert {"cp39", "abi3", "manylinux_2_28_x86_64"} <= set(backend.extract["get_tag_strings"])


# ---------------------------------------------------------------- arch lists as torch and FlashInfer read them


@pytest.mark.parametrize(
    ("value", "codes"),
    [
        ("12.0", ["sm_120"]),
        ("9.0;12.0", ["sm_90", "sm_120"]),
        ("8.0 9.0 12.0", ["sm_80", "sm_90", "sm_120"]),
        ("12.0+PTX", ["sm_120+PTX"]),
        ("9.0a;12.0a", ["sm_90a", "sm_120a"]),
        ("Hopper;12.0", ["sm_90+PTX", "sm_120"]),
    ],
)
def test_torch_arch_list_forms(value: str, codes: list[str]) -> None:
    assert [e.sm + ("+PTX" if e.ptx else "") for e in parse_torch_arch_list(value)] == codes


@pytest.mark.parametrize("value", ["12.0f", "12.0;", "9.0  12.0", "sm_120", "12", ""])
def test_torch_arch_list_torch_refuses(value: str) -> None:
    with pytest.raises(ArchListError, match="is not an arch torch accepts"):
        parse_torch_arch_list(value)


def test_flashinfer_arch_list_forms() -> None:
    assert [e.sm for e in parse_flashinfer_arch_list("12.0f")] == ["sm_120f"]
    assert [e.sm for e in parse_flashinfer_arch_list("9.0a 12.0f")] == ["sm_90a", "sm_120f"]
    with pytest.raises(ArchListError, match="is not an arch FlashInfer accepts"):
        parse_flashinfer_arch_list("9.0a;12.0f")


@pytest.mark.parametrize("value", ["9.0;12.0", "8.0 9.0 12.0", "12.0+PTX"])
def test_torch_arch_list_forms_reach_sm120(specs: list[dict[str, Any]], value: str) -> None:
    torch = by_name(specs, "torch")
    torch["env"]["TORCH_CUDA_ARCH_LIST"] = value
    assert arch_target(torch, FACTS) == "sm_120"  # the old shortcut read "9.0;12.0" as sm_90 and raised on the others
    assert run_check("arch", check_arch_lists, specs, FACTS, "12.0", "13.0.1").ok


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("9.0", "torch: env TORCH_CUDA_ARCH_LIST='9.0' reads as sm_90: expected 12.0 (stack_cuda_arch) among them"),
        ("8.0 9.0+PTX", "torch: env TORCH_CUDA_ARCH_LIST='8.0 9.0+PTX' reads as sm_80, sm_90+PTX: expected 12.0"),
        ("12.0f", "torch: env TORCH_CUDA_ARCH_LIST='12.0f': '12.0f' is not an arch torch accepts"),
    ],
)
def test_torch_arch_list_without_sm120_fails(specs: list[dict[str, Any]], value: str, named: str) -> None:
    by_name(specs, "torch")["env"]["TORCH_CUDA_ARCH_LIST"] = value
    assert named in fails(check_arch_lists, specs, FACTS, "12.0", "13.0.1")


def test_torch_without_sm120_gives_a_standin_target_verification_refuses(specs: list[dict[str, Any]]) -> None:
    torch = by_name(specs, "torch")
    torch["env"]["TORCH_CUDA_ARCH_LIST"] = "8.0;9.0"
    assert arch_target(torch, FACTS) == "sm_80"
    torch["env"]["TORCH_CUDA_ARCH_LIST"] = "8.0;;12.0"
    with pytest.raises(RehearsalError, match=r"torch: env TORCH_CUDA_ARCH_LIST='8\.0;;12\.0': '' is not an arch torch accepts"):
        arch_target(torch, FACTS)


# ---------------------------------------------------------------- sgl-kernel's CMake: its arch options


PRODUCTION_CMAKE_ARGS = "-DSGL_KERNEL_COMPILE_THREADS=4 -DENABLE_BELOW_SM90=OFF"


def test_sgl_kernel_cmake_rule_reproduces_the_real_wheel() -> None:
    """The recorded rule, on the CUDA the real 0.3.21 wheel was built with (12.9, default options), gives the
    cubins cuobjdump lists for its spatial_ops (tests/unit/controller/test_rehearsal.py)."""
    kernel = {"name": "sgl_kernel", "env": {}}
    assert run_check("arch", check_arch_lists, [kernel], FACTS, "12.0", "12.9").ok
    from sglang_sm120_controller.rehearsal.build import cmake_gencodes

    assert sorted(cmake_gencodes(kernel, FACTS, "12.9")) == ["sm_100a", "sm_120a", "sm_80", "sm_89", "sm_90", "sm_90a"]


@pytest.mark.parametrize(
    ("args", "found"),
    [
        (PRODUCTION_CMAKE_ARGS, "SGL_KERNEL_ENABLE_SM100A is ON (found unset, option() default OFF)"),
        (
            PRODUCTION_CMAKE_ARGS + " -DSGL_KERNEL_ENABLE_SM100A=OFF",
            "SGL_KERNEL_ENABLE_SM100A is ON (found -DSGL_KERNEL_ENABLE_SM100A=OFF)",
        ),
        ("-DSGL_KERNEL_ENABLE_SM100A=ON -USGL_KERNEL_ENABLE_*", "SGL_KERNEL_ENABLE_SM100A is ON (found unset, option() default OFF)"),
        ("-D SGL_KERNEL_ENABLE_SM100A:BOOL=no", "SGL_KERNEL_ENABLE_SM100A is ON (found -DSGL_KERNEL_ENABLE_SM100A=no)"),
    ],
)
def test_sgl_kernel_cmake_args_without_sm120_fail_naming_the_option(specs: list[dict[str, Any]], args: str, found: str) -> None:
    """The defect of issue 23: sgl-kernel CMAKE_ARGS without SM120. By the recorded CMakeLists rule sm_120a comes
    with CUDA >= 12.8 or SGL_KERNEL_ENABLE_SM100A, so below 12.8 the options decide it."""
    kernel = by_name(specs, "sgl_kernel")
    assert kernel["env"]["CMAKE_ARGS"] == PRODUCTION_CMAKE_ARGS
    kernel["env"]["CMAKE_ARGS"] = args
    detail = fails(check_arch_lists, specs, FACTS, "12.0", "12.6.3")
    assert f"sgl_kernel: env CMAKE_ARGS={args!r} on CUDA 12.6.3 gives " in detail
    assert "(sgl-kernel/CMakeLists.txt at 00390b86, verified: false): expected code for 12.0 (stack_cuda_arch): " in detail
    assert f"sm_120a when CUDA_VERSION >= 12.8 (found 12.6.3) or {found}" in detail
    assert arch_target(kernel, FACTS, cuda_version="12.6.3") == "sm_90a"  # what the stand-in then carries
    kernel["env"]["CMAKE_ARGS"] = args + " -DSGL_KERNEL_ENABLE_SM100A=ON"  # the option the rule reads turns SM120 on
    assert run_check("on", check_arch_lists, specs, FACTS, "12.0", "12.6.3").ok
    assert arch_target(kernel, FACTS, cuda_version="12.6.3") == "sm_120a"


def test_sgl_kernel_options_cannot_turn_sm120_off_on_cuda13(specs: list[dict[str, Any]]) -> None:
    """By the recorded rule, on CUDA >= 12.8 no option of sgl-kernel's CMake removes sm_120a: the stack's 13.0.1 passes."""
    kernel = by_name(specs, "sgl_kernel")
    outcome = run_check("arch", check_arch_lists, specs, FACTS, "12.0", "13.0.1")
    assert outcome.ok, outcome.line()
    assert f"sgl_kernel CMAKE_ARGS={PRODUCTION_CMAKE_ARGS!r} on CUDA 13.0.1 -> sm_90, sm_100a, sm_120a, sm_103a, sm_90a" in outcome.detail
    kernel["env"]["CMAKE_ARGS"] = "-DSGL_KERNEL_ENABLE_SM100A=OFF -DENABLE_BELOW_SM90=ON"
    assert arch_target(kernel, FACTS, cuda_version="13.0.1") == "sm_120a"
    with pytest.raises(RehearsalError, match=r"sgl_kernel: its CMake arch rule \(cmake_arch_rule\) needs the stack's CUDA version"):
        arch_target(kernel, FACTS)
    assert "sgl_kernel: its CMake arch rule needs the stack's CUDA version" in fails(check_arch_lists, specs, FACTS, "12.0")


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (
            PRODUCTION_CMAKE_ARGS + " -DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.6/bin/nvcc",
            "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.6/bin/nvcc",
        ),
        ("-DCUDAToolkit_ROOT:PATH=/opt/cuda-12.4 -DENABLE_BELOW_SM90=OFF", "-DCUDAToolkit_ROOT=/opt/cuda-12.4"),
    ],
)
def test_sgl_kernel_cmake_args_naming_an_older_toolkit_fail_on_the_cuda13_stack(specs: list[dict[str, Any]], args: str, where: str) -> None:
    """The defect of issue 23 on the real stack: CMAKE_ARGS that point sgl-kernel's CMake at a CUDA below 12.8
    (and do not turn SGL_KERNEL_ENABLE_SM100A on) give no SM120 code even though the stack is CUDA 13.0.1."""
    kernel = by_name(specs, "sgl_kernel")
    kernel["env"]["CMAKE_ARGS"] = args
    detail = fails(check_arch_lists, specs, FACTS, "12.0", "13.0.1")
    version = where.rsplit("cuda-", 1)[1].split("/")[0]
    assert f"sgl_kernel: env CMAKE_ARGS={args!r} on CUDA {version} gives " in detail
    assert f"sm_120a when CUDA_VERSION >= 12.8 (found {version}, {where})" in detail
    assert arch_target(kernel, FACTS, cuda_version="13.0.1") != "sm_120a"
    kernel["env"]["CMAKE_ARGS"] = "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-13.0/bin/nvcc"
    assert run_check("13", check_arch_lists, specs, FACTS, "12.0", "13.0.1").ok
    kernel["env"]["CMAKE_ARGS"] = "-DCMAKE_CUDA_COMPILER=/opt/nvcc"
    assert "points the build at a CUDA toolkit whose version cannot be read from its path" in fails(
        check_arch_lists, specs, FACTS, "12.0", "13.0.1"
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ("-DSGL_KERNEL_COMPILE_THREADS=4 '-DENABLE_BELOW_SM90=OFF", "cannot be split as the build splits it (shlex): No closing quotation"),
        ("-DSGL_KERNEL_ENABLE_SM100A", "-D'SGL_KERNEL_ENABLE_SM100A' is not -DNAME=VALUE or -DNAME:TYPE=VALUE"),
        ("-DENABLE_BELOW_SM90=OFF -D", "ends with -D and no variable"),
    ],
)
def test_sgl_kernel_cmake_args_cmake_refuses_fail(specs: list[dict[str, Any]], args: str, named: str) -> None:
    by_name(specs, "sgl_kernel")["env"]["CMAKE_ARGS"] = args
    assert named in fails(check_arch_lists, specs, FACTS, "12.0", "13.0.1")
    assert named in fails(check_cmake_options, specs, FACTS)


def test_cmake_args_read_as_cmake_reads_them() -> None:
    spec = {"name": "x", "env": {"CMAKE_ARGS": "-G Ninja -DA=1 -D B:BOOL=OFF '-DC=two words' -DA=2 -UB --log-level=VERBOSE"}}
    assert cmake_defines(spec) == {"A": "2", "C": "two words"}
    assert [cmake_true(v) for v in ("ON", "yes", "1", "0.0", "foo", "OFF", "no", "0", "", "x-NOTFOUND", "ignore")] == [
        True, True, True, True, True, False, False, False, False, False, False,
    ]  # fmt: skip
    assert cmake_true(None) is False


# ---------------------------------------------------------------- the index itself


def test_index_covers_each_production_spec_at_its_ref(specs: list[dict[str, Any]]) -> None:
    for spec in specs:
        if "git" not in spec.get("source", {}):
            continue
        repo = spec["source"]["git"].removeprefix("https://github.com/")
        for key in ("build_system_file", "version_file"):
            value = FACTS[spec["name"]][key]["value"]
            path = value["path"] if isinstance(value, dict) else value
            entry = REFERENCE.get(repo, spec["source"]["ref"], path)
            assert entry is not None, (spec["name"], key, path)
            assert (entry.status == "recorded" and len(entry.sha256) == 64) or entry.reason, entry


def test_index_entries_are_refused_when_malformed() -> None:
    bad = {"files": [{"repo": "a/b", "tag": "v1", "path": "pyproject.toml", "status": "recorded"}]}
    with pytest.raises(ReferenceError, match=r"a/b v1 pyproject.toml: recorded without a sha256"):
        load_reference(UPSTREAM_INDEX, bad)
    bad = {"files": [{"repo": "a/b", "tag": "v1", "path": "pyproject.toml", "status": "unchecked"}]}
    with pytest.raises(ReferenceError, match="unchecked without a reason"):
        load_reference(UPSTREAM_INDEX, bad)


def test_a_copy_that_differs_from_its_entry_is_named() -> None:
    body = b'[build-system]\nrequires = ["setuptools>=77", "packaging>=24"]\nbuild-backend = "x"\n'
    entry = load_reference(
        UPSTREAM_INDEX,
        {"files": [{"repo": "a/b", "tag": "v1", "path": "pyproject.toml", "status": "recorded", "sha256": sha256_of(body),
                    "extract": extract("pyproject.toml", body)}]},
    ).files[0]  # fmt: skip
    assert verify_copy(entry, body) == []
    problems = verify_copy(entry, body.replace(b"setuptools>=77", b"setuptools>=77,<80"))
    assert any("a/b v1 pyproject.toml: sha256 expected" in p for p in problems)
    assert any("build_system_requires recorded ['setuptools>=77', 'packaging>=24'], the file says" in p for p in problems)


def test_cached_verbatim_copies_match_the_index() -> None:
    """The files scripts/record_upstream.py kept in .cache/upstream say what the index records."""
    recorded = [f for f in REFERENCE.files if f.status == "recorded"]
    copies = [(f, CACHE / "upstream" / f.repo / f.tag / f.path) for f in recorded]
    present = [(f, p) for f, p in copies if p.is_file()]
    if not present:
        pytest.skip("no verbatim copies in .cache/upstream (scripts/record_upstream.py --mirror ... writes them)")
    assert len(present) == len(recorded), [str(p) for _, p in copies if not p.is_file()]
    for entry, path in present:
        assert verify_copy(entry, Path(path).read_bytes()) == [], entry.where()
