"""make rehearsal's checks fail, naming the cause, when a defect of issue 13 (or 23) is put back.

Each test puts one defect back on a COPY (of the rendered production specs, or of a repository
file in a temporary directory) and runs the rehearsal's own check on it. The rendered specs come
from Ansible once per session (scripts/rehearsal.py render); the real sgl-kernel wheel and
cuobjdump from `make wheelhouse`.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import BIN, CACHE, ROOT, by_name, rehearsal_script, upstream_reference
from sglang_sm120.build.pipeline import plan
from sglang_sm120_controller.rehearsal import build as rb

FACTS, _, REFERENCE = upstream_reference()
PROBE = ROOT / "tests/fixtures/sm120-probe/probe.cu"
BACKEND = ROOT / "tests/fixtures/rehearsal-standins/standin_backend.py"


def run_reduced(rendered: dict[str, Any], specs_json: Path) -> subprocess.CompletedProcess[str]:
    """`scripts/rehearsal.py --reduced` on `rendered` specs (written to `specs_json`)."""
    specs_json.write_text(json.dumps(rendered))
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts/rehearsal.py"), "--reduced", "--specs-json", str(specs_json)],
        capture_output=True,
        text=True,
        check=False,
    )


def fails(check: Any, *args: Any) -> str:
    outcome = rb.run_check("x", check, *args)
    assert not outcome.ok, outcome.line()
    return outcome.detail


def test_production_specs_pass_every_facts_check(specs: list[dict[str, Any]], rendered: dict[str, Any]) -> None:
    assert plan(specs, {"arch": "12.0"})
    stack = rendered["stack"]
    for check, args in [
        (rb.check_facts_agree, (FACTS, REFERENCE)),
        (rb.check_build_requires, (specs, FACTS, REFERENCE, "flashinfer")),
        (rb.check_build_requires, (specs, FACTS, REFERENCE, "flashinfer_jit_cache")),
        (rb.check_source_identity, (specs, FACTS, REFERENCE, stack, "flashinfer")),
        (rb.check_source_identity, (specs, FACTS, REFERENCE, stack, "flashinfer_jit_cache")),
        (rb.check_arch_lists, (specs, FACTS, stack["stack_cuda_arch"], stack["stack_cuda_version"])),
        (rb.check_cmake_options, (specs, FACTS)),
        (rb.check_triton_pin, (specs, FACTS)),
        (rb.check_flashinfer_arch, (specs, FACTS, stack["stack_cuda_version"])),
        (rb.check_local_versions, (specs, FACTS)),
    ]:
        outcome = rb.run_check(check.__name__, check, *args)
        assert outcome.ok, outcome.line()


@pytest.mark.parametrize("name", ["torch", "sgl_kernel"])
def test_specs_whose_upstream_files_were_not_read_are_unchecked_not_passed(
    specs: list[dict[str, Any]], rendered: dict[str, Any], name: str
) -> None:
    """torch v2.9.1 and sgl-kernel at sglang v0.5.9 are recorded unchecked: never a pass, never a failure."""
    for check, args in [
        (rb.check_build_requires, (specs, FACTS, REFERENCE, name)),
        (rb.check_source_identity, (specs, FACTS, REFERENCE, rendered["stack"], name)),
    ]:
        outcome = rb.run_check(check.__name__, check, *args)
        assert outcome.unchecked and not outcome.ok and not outcome.failed, outcome.line()
        assert outcome.line().startswith(f"UNCHECKED {check.__name__}: {name}: ") and "was not read at the tag" in outcome.detail


def test_every_fact_names_its_source() -> None:
    for artifact, entries in FACTS.items():
        if artifact == "local_version":
            entries = {"value": entries}
        for key, entry in entries.items():
            if key == "tag":
                continue
            assert {"repo", "ref", "path"} <= set(entry["source"]), (artifact, key)
            assert entry["verified"] in ("package-metadata", "upstream-file", "domain-notes", False), (artifact, key)
            if entry["verified"] == "upstream-file":
                source = entry["source"]
                upstream = REFERENCE.get(source["repo"], source["ref"], source["path"].split(" ")[0])
                assert upstream is not None and upstream.status == "recorded", (artifact, key, source)


# ---------------------------------------------------------------- the defects under "Why", put back


@pytest.mark.parametrize(
    ("name", "drop", "named"),
    [
        (
            "flashinfer",
            "apache-tvm-ffi>=0.1.6,!=0.1.8,!=0.1.8.post0,<0.2",
            "flashinfer: build_requires lacks apache-tvm-ffi>=0.1.6,!=0.1.8,!=0.1.8.post0,<0.2 "
            "(required by flashinfer-ai/flashinfer v0.6.3 pyproject.toml [build-system] requires",
        ),
        (
            "flashinfer_jit_cache",
            "nvidia-ml-py",
            "flashinfer_jit_cache: build_requires lacks nvidia-ml-py (required by flashinfer-ai/flashinfer v0.6.3 "
            "flashinfer-jit-cache/pyproject.toml [build-system] requires",
        ),
        ("sgl_kernel", "scikit-build-core>=0.10", "sgl_kernel: build_requires lacks scikit-build-core>=0.10"),
        ("sgl_kernel", "cmake>=3.26", "sgl_kernel: build_requires lacks cmake>=3.26"),
        ("sgl_kernel", "ninja", "sgl_kernel: build_requires lacks ninja"),
    ],
)
def test_missing_build_requirement_fails_naming_it(specs: list[dict[str, Any]], name: str, drop: str, named: str) -> None:
    spec = by_name(specs, name)
    assert drop in spec["build_requires"]
    spec["build_requires"] = [r for r in spec["build_requires"] if r != drop]
    detail = fails(rb.check_build_requires, specs, FACTS, REFERENCE, name)
    assert named in detail and "pyproject.toml" in detail


def test_flashinfer_without_any_build_requirement_fails(specs: list[dict[str, Any]]) -> None:
    by_name(specs, "flashinfer")["build_requires"] = []
    detail = fails(rb.check_build_requires, specs, FACTS, REFERENCE, "flashinfer")
    assert "flashinfer: build_requires lacks setuptools>=77 " in detail and "flashinfer: build_requires lacks packaging>=24 " in detail


def test_sgl_kernel_compile_threads_as_environment_variable_fails(specs: list[dict[str, Any]]) -> None:
    kernel = by_name(specs, "sgl_kernel")
    kernel["env"] = {"SGL_KERNEL_COMPILE_THREADS": "4"}
    detail = fails(rb.check_cmake_options, specs, FACTS)
    assert "sgl_kernel: SGL_KERNEL_COMPILE_THREADS is a CMake cache variable" in detail
    assert 'expected CMAKE_ARGS="-DSGL_KERNEL_COMPILE_THREADS=..."' in detail


def test_torch_without_triton_pin_fails(specs: list[dict[str, Any]]) -> None:
    torch = by_name(specs, "torch")
    torch["pins"] = []
    del torch["env"]["PYTORCH_EXTRA_INSTALL_REQUIREMENTS"]
    detail = fails(rb.check_triton_pin, specs, FACTS)
    assert "torch: pins expected to hold triton==3.5.1, found []" in detail
    assert "PYTORCH_EXTRA_INSTALL_REQUIREMENTS expected to declare triton==3.5.1" in detail


def test_flashinfer_plain_arch_list_fails(specs: list[dict[str, Any]]) -> None:
    by_name(specs, "flashinfer_jit_cache")["env"]["FLASHINFER_CUDA_ARCH_LIST"] = "12.0"
    detail = fails(rb.check_flashinfer_arch, specs, FACTS, "13.0.1")
    assert "flashinfer_jit_cache: env FLASHINFER_CUDA_ARCH_LIST expected '12.0f' on CUDA 13.0.1" in detail and "found '12.0'" in detail


@pytest.mark.parametrize("name", ["torch", "flashinfer", "flashinfer_jit_cache", "sgl_kernel"])
def test_missing_local_version_fails(specs: list[dict[str, Any]], name: str) -> None:
    by_name(specs, name).pop("local_version", None)
    assert f"{name}: local_version expected 'cu130'" in fails(rb.check_local_versions, specs, FACTS)


def test_build_poll_that_includes_itself_fails(tmp_path: Path) -> None:
    poll = tmp_path / "wait.yml"
    shutil.copy(ROOT / "roles/sglang_build/tasks/wait.yml", poll)
    assert rb.run_check("poll", rb.check_poll_not_recursive, poll).ok
    tasks = yaml.safe_load(poll.read_text())
    tasks.append({"name": "Poll again", "when": "not done", "ansible.builtin.include_tasks": "wait.yml"})
    poll.write_text(yaml.safe_dump(tasks))
    detail = fails(rb.check_poll_not_recursive, poll)
    assert "includes wait.yml, the file itself" in detail and str(poll) in detail


def test_debian13_with_the_old_key_fails(tmp_path: Path) -> None:
    repos = tmp_path / "nvidia_repos"
    shutil.copytree(ROOT / "roles/cuda_toolkit/vars/nvidia_repos", repos)
    keys = {"debian13": "8793F200", "debian12": "3bf863cc"}
    assert rb.run_check("keys", rb.check_nvidia_keys, repos, keys).ok
    shutil.copy(repos / "debian12.yml", repos / "debian13.yml")
    detail = fails(rb.check_nvidia_keys, repos, keys)
    assert "debian13.yml: expected key 8793F200" in detail and "found 3bf863cc.pub" in detail


def test_cuda_pins_that_differ_from_nvidia_meta_wheel_fail(rendered: dict[str, Any]) -> None:
    meta = CACHE / "wheelhouse/cuda-toolkit-13.0.1/cuda_toolkit-13.0.1-py2.py3-none-any.whl"
    if not meta.exists():
        pytest.fail(f"no {meta}: run `make wheelhouse` first")
    components = dict(rendered["stack"]["stack_cuda_components"])
    assert rb.run_check("pins", rb.check_cuda_pins, meta, components).ok
    components["nvidia-cuda-runtime"] = "13.0.96"  # 13.0.2's runtime
    assert "nvidia-cuda-runtime: expected 13.0.88, found 13.0.96" in fails(rb.check_cuda_pins, meta, components)
    del components["nvidia-cublas"]
    assert "nvidia-cublas: expected 13.0.2.14, found missing" in fails(rb.check_cuda_pins, meta, components)


@pytest.fixture(scope="session")
def real_sgl_kernel() -> tuple[Path, Path]:
    found = sorted((CACHE / "real-wheels").glob("sgl_kernel-0.3.21-*.whl"))
    if not found or not (found[0].with_name(found[0].name + ".d") / ".done").exists():
        pytest.fail("no unpacked real sgl-kernel 0.3.21: run scripts/real-wheels.sh first")
    return found[0], found[0].with_name(found[0].name + ".d")


def test_cuda_arch_that_drops_suffixes_fails(
    tmp_path: Path, real_sgl_kernel: tuple[Path, Path], cuobjdump: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [real_sgl_kernel[1] / "sgl_kernel/spatial_ops.abi3.so", real_sgl_kernel[1] / "sgl_kernel/flashmla_ops.abi3.so"]
    assert rb.run_check("arch", rb.check_cuda_arch_matches_cuobjdump, BIN / "cuda-arch", str(cuobjdump), files, sys.executable).ok
    copy_root = tmp_path / "repo"
    for root in ("module_utils", "plugin_utils"):
        shutil.copytree(ROOT / "plugins" / root, copy_root / root, ignore=shutil.ignore_patterns("__pycache__"))
    reader = copy_root / "module_utils/sglang_sm120/build/pipeline.py"
    text = reader.read_text()
    dropped = re.sub(r'found\.append\(f"sm_\{arch\}" \+ \([^\n]*\)\)', 'found.append(f"sm_{arch}")', text)
    assert dropped != text, "the suffix code of the fatbin reader moved: update this test"
    reader.write_text(dropped)
    # The copy's packages first: PYTHONPATH comes before the venv's editable install of the checkout.
    monkeypatch.setenv("PYTHONPATH", f"{copy_root / 'module_utils'}:{copy_root / 'plugin_utils'}")
    cli = copy_root / "plugin_utils/sglang_sm120_controller/cli/cuda_arch.py"
    detail = fails(rb.check_cuda_arch_matches_cuobjdump, cli, str(cuobjdump), files, sys.executable)
    assert "spatial_ops.abi3.so: expected sm_100a, sm_120a, sm_80, sm_89, sm_90, sm_90a (cuobjdump), found" in detail
    assert "flashmla_ops.abi3.so: expected sm_100a, sm_90a (cuobjdump), found sm_100, sm_90" in detail


def test_every_cuda_object_rule_rejects_the_real_sgl_kernel(specs: list[dict[str, Any]], real_sgl_kernel: tuple[Path, Path]) -> None:
    kernel = by_name(specs, "sgl_kernel")
    objects = rb.objects_of_dir(real_sgl_kernel[1], kernel["verify"])
    ok = rb.run_check("upstream", rb.check_upstream_rejected, real_sgl_kernel[0], kernel, objects)
    assert ok.ok and "rejected as expected" in ok.detail and "libcudart.so.12" in ok.detail and "has version 0.3.21" in ok.detail
    kernel["verify"].pop("other_arch_objects")
    strict = rb.objects_of_dir(real_sgl_kernel[1], kernel["verify"])
    detail = fails(rb.check_upstream_rejected, real_sgl_kernel[0], kernel, strict)
    assert "sgl_kernel/flash_ops.abi3.so: expected sm_120 or sm_120a or sm_120f, found" in detail


# ---------------------------------------------------------------- stand-ins, shadowing, dependency installs


@pytest.fixture(scope="session")
def standins(
    rendered: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, cuda_home: Path, real_sgl_kernel: tuple[Path, Path]
) -> dict[str, Any]:
    """Stand-in trees for torch and sgl_kernel from the rendered specs (objects cached under .cache/rehearsal)."""
    root = tmp_path_factory.mktemp("standins")
    names = [p.relative_to(real_sgl_kernel[1]).as_posix() for p in real_sgl_kernel[1].rglob("*") if p.is_file()]
    specs = {s["name"]: s for s in rendered["specs"]}
    cuda = rendered["stack"]["stack_cuda_version"]
    objects = {n: rb.standin_objects(specs[n], FACTS, names, cuda) for n in ("torch", "sgl_kernel")}
    compiled = {t: rb.compile_object(cuda_home, PROBE, t, CACHE / "rehearsal/objects") for o in objects.values() for t in o.values()}
    trees = {
        n: rb.write_standin_tree(specs[n], FACTS, rendered["stack"], root / "src" / n, BACKEND, compiled, objects[n], "cp311", REFERENCE)
        for n in objects
    }
    return {"root": root, "trees": trees, "specs": specs, "names": names, "stack": rendered["stack"]}


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def test_standin_carries_what_the_real_build_does(standins: dict[str, Any], tmp_path: Path) -> None:
    spec = standins["specs"]["sgl_kernel"]
    wheel = rb.build_in_process(copy_tree(standins["trees"]["sgl_kernel"], tmp_path / "src"), spec, FACTS, tmp_path / "out")
    assert wheel.name == "sgl_kernel-0.3.21+cu130-cp310-abi3-linux_x86_64.whl"
    assert "sm_120a" in rb.verify_standin(wheel, spec, "cp310-abi3-linux_x86_64")
    torch = standins["specs"]["torch"]
    wheel = rb.build_in_process(copy_tree(standins["trees"]["torch"], tmp_path / "torch"), torch, FACTS, tmp_path / "out")
    import zipfile

    metadata = zipfile.ZipFile(wheel).read("torch-2.9.1+cu130.dist-info/METADATA").decode()
    assert "Requires-Dist: triton==3.5.1; platform_system == 'Linux'" in metadata and "Requires-Dist: sympy>=1.13.3" in metadata
    assert "Summary: STAND-IN for torch" in metadata


def test_sgl_kernel_standin_without_sm120_fails_verification_naming_the_option(
    standins: dict[str, Any], tmp_path: Path, cuda_home: Path
) -> None:
    """The stand-in's objects follow the spec's CMAKE_ARGS (and the CUDA version) by sgl-kernel's CMake rule: where
    they give no SM120 code (below CUDA 12.8 without SGL_KERNEL_ENABLE_SM100A) production's verification refuses it."""
    spec = copy.deepcopy(standins["specs"]["sgl_kernel"])

    def build(cuda: str, name: str) -> tuple[Path, str]:
        objects = rb.standin_objects(spec, FACTS, standins["names"], cuda)
        compiled = {t: rb.compile_object(cuda_home, PROBE, t, CACHE / "rehearsal/objects") for t in set(objects.values())}
        src = tmp_path / name / "src"
        tree = rb.write_standin_tree(spec, FACTS, standins["stack"], src, BACKEND, compiled, objects, "cp311", REFERENCE)
        wheel = rb.build_in_process(tree, spec, FACTS, tmp_path / name / "out")
        return wheel, rb.arch_origin(spec, FACTS, cuda)

    wheel, origin = build("12.6.3", "off")  # the defect: CMAKE_ARGS that give no SM120 code on this CUDA
    detail = fails(rb.verify_standin, wheel, spec, "cp310-abi3-linux_x86_64", origin)
    assert detail.startswith("sgl_kernel: ") and "expected sm_120 or sm_120a or sm_120f" in detail and "sm_90a" in detail
    assert (
        "(its objects' code: env CMAKE_ARGS='-DSGL_KERNEL_COMPILE_THREADS=4 -DENABLE_BELOW_SM90=OFF' on CUDA 12.6.3 gives sm_90, sm_90a "
        "(sgl-kernel/CMakeLists.txt at 00390b86, verified: false))" in detail
    )
    spec["env"]["CMAKE_ARGS"] += " -DSGL_KERNEL_ENABLE_SM100A=ON"  # the option the rule reads
    wheel, origin = build("12.6.3", "on")
    assert "sm_120a" in rb.verify_standin(wheel, spec, "cp310-abi3-linux_x86_64", origin)


def test_unlabelled_kernel_is_shadowed_by_the_upstream_wheel(
    standins: dict[str, Any], tmp_path: Path, real_sgl_kernel: tuple[Path, Path]
) -> None:
    spec = copy.deepcopy(standins["specs"]["sgl_kernel"])
    ours = rb.build_in_process(copy_tree(standins["trees"]["sgl_kernel"], tmp_path / "a"), spec, FACTS, tmp_path / "ours")
    links = [ours.parent, real_sgl_kernel[0].parent]
    assert rb.run_check("shadow", rb.check_ours_wins, sys.executable, spec, "0.3.21", ours, real_sgl_kernel[0], links).ok
    spec.pop("local_version")  # the defect: same version as upstream's, no +cu130
    plain = rb.build_in_process(copy_tree(standins["trees"]["sgl_kernel"], tmp_path / "b"), spec, FACTS, tmp_path / "plain")
    assert plain.name == "sgl_kernel-0.3.21-cp310-abi3-linux_x86_64.whl"
    detail = fails(rb.check_ours_wins, sys.executable, spec, "0.3.21", plain, real_sgl_kernel[0], [plain.parent, real_sgl_kernel[0].parent])
    assert "expected pip to take ours, found it takes sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl" in detail


def torch_artifact(standins: dict[str, Any], root: Path, tmp_path: Path) -> dict[str, Any]:
    """A cached torch artifact (the stand-in wheel and its record) as the pipeline leaves it."""
    torch = rb.rehearsal_spec(standins["specs"]["torch"], standins["trees"]["torch"])
    item = plan([torch], {"arch": "12.0"})[0].to_dict()
    directory = root / "wheelhouse" / "torch" / item["key"]
    wheel = rb.build_in_process(copy_tree(standins["trees"]["torch"], tmp_path / "torch-src"), torch, FACTS, directory)
    record = {
        "name": "torch",
        "package": "torch",
        "key": item["key"],
        "kind": "path",
        "wheels": [{"wheel": wheel.name}],
        "pins": torch["pins"],
        "installs": [wheel.name],
    }
    (directory / "artifact.json").write_text(json.dumps(record))
    return item


def test_dependency_install_without_no_deps_fails_the_build(
    standins: dict[str, Any], tmp_path: Path, cuda_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defect: the built torch installed with --no-index but without --no-deps stops at its own requirements."""
    from sglang_sm120.build import pipeline as build_pipeline

    root = tmp_path / "host"
    torch_item = torch_artifact(standins, root, tmp_path)

    def old_dependency_install(venv_pip: str, dep_dirs: Any, pip_args: Any, constraints: str) -> list[str]:
        files, _ = build_pipeline._dependency_wheels(dep_dirs)
        return [" ".join([f"{venv_pip} install --quiet --no-index", *files])] if files else []

    monkeypatch.setattr(build_pipeline, "dependency_install", old_dependency_install)
    kernel = rb.rehearsal_spec(standins["specs"]["sgl_kernel"], standins["trees"]["sgl_kernel"])
    torch = rb.rehearsal_spec(standins["specs"]["torch"], standins["trees"]["torch"])
    item = next(p.to_dict() for p in plan([torch, kernel], {"arch": "12.0"}) if p.name == "sgl_kernel")
    assert item["depends_on"] == ["torch"]
    results = rb.run_builds(
        [item], root, {"sgl_kernel": str(standins["trees"]["sgl_kernel"])}, str(cuda_home), records={"torch": {"key": torch_item["key"]}}
    )
    outcome = results["sgl_kernel"]
    assert not outcome.ok, outcome.line()
    assert "sgl_kernel: build failed" in outcome.detail
    assert re.search(
        r"No matching distribution found for (filelock|typing-extensions|sympy|networkx|jinja2|fsspec|triton)", outcome.detail
    ), outcome.detail


def test_reduced_rehearsal_with_the_defects_of_issue_23_put_back_fails_naming_each(rendered: dict[str, Any], tmp_path: Path) -> None:
    """`scripts/rehearsal.py --reduced` on specs with the defects under issue 23's "Why" put back: torch's setuptools
    unbounded (its pyproject is unread: the stated bound decides), flashinfer-jit-cache with nvshmem-cu13 only, the
    FlashInfer specs at v0.6.2, and sgl-kernel CMAKE_ARGS without SM120 (by the recorded CMake rule sm_120a comes with
    CUDA >= 12.8, so on the CUDA 13.0.1 stack that means CMAKE_ARGS pointing CMake at an older toolkit's nvcc)."""
    broken = copy.deepcopy(rendered)
    torch = by_name(broken["specs"], "torch")
    torch["build_requires"] = [("setuptools>=70.1.0" if r.startswith("setuptools") else r) for r in torch["build_requires"]]
    jit = by_name(broken["specs"], "flashinfer_jit_cache")
    jit["build_requires"] = [r for r in jit["build_requires"] if r != "nvidia-nvshmem-cu12"]
    for name in ("flashinfer", "flashinfer_jit_cache"):
        by_name(broken["specs"], name)["source"]["ref"] = "v0.6.2"
    kernel = by_name(broken["specs"], "sgl_kernel")
    kernel["env"]["CMAKE_ARGS"] += " -DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.6/bin/nvcc"
    proc = run_reduced(broken, tmp_path / "broken.json")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = {line.split(":")[0]: line for line in lines if line.startswith("FAIL ")}
    assert set(failed) == {
        "FAIL upstream build-requires torch",
        "FAIL upstream build-requires flashinfer_jit_cache",
        "FAIL upstream version flashinfer",
        "FAIL upstream version flashinfer_jit_cache",
        "FAIL arch lists",
        "FAIL stand-in sgl_kernel",
    }, "\n".join(failed.values())
    assert (
        "torch: build_requires setuptools>=70.1.0 admits setuptools 80.0, which the upstream bound setuptools>=70.1.0,<80.0 of "
        "pytorch/pytorch v2.9.1 pyproject.toml" in failed["FAIL upstream build-requires torch"]
    )
    jit_line = failed["FAIL upstream build-requires flashinfer_jit_cache"]
    assert "flashinfer_jit_cache: build_requires lacks nvidia-nvshmem-cu12 (required by flashinfer-ai/flashinfer v0.6.2 " in jit_line
    for name in ("flashinfer", "flashinfer_jit_cache"):
        assert (
            f"{name}: source ref v0.6.2 builds version 0.6.2 (flashinfer-ai/flashinfer v0.6.2 version.txt), the stack needs 0.6.3"
            in failed[f"FAIL upstream version {name}"]
        )
    cmake = "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.6/bin/nvcc"
    assert (
        f"sm_120a when CUDA_VERSION >= 12.8 (found 12.6, {cmake}) or SGL_KERNEL_ENABLE_SM100A is ON (found unset, option() default OFF)"
        in failed["FAIL arch lists"]
    )
    assert "sgl_kernel/spatial_ops.abi3.so: expected sm_120 or sm_120a or sm_120f, found sm_90a" in failed["FAIL stand-in sgl_kernel"]
    assert f"{cmake}' on CUDA 12.6 gives sm_90, sm_90a" in failed["FAIL stand-in sgl_kernel"]
    # torch's build requirements FAIL instead of UNCHECKED: one unchecked fewer than the production run
    assert re.fullmatch(r"\d+ passed, 6 failed, 9 unchecked", lines[-1]), lines[-1]


def test_release_evidence_copied_from_build_records_fails(tmp_path: Path) -> None:
    result = {
        "installed": [{"distribution": "sgl-kernel", "version": "0.3.21+cu130", "files_checked": 3}],
        "sm120_verification": [{"distribution": "sgl-kernel", "read_from": "build record artifact.json"}],
    }
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    with pytest.raises(
        rb.RehearsalError, match=r"sgl-kernel: expected sm_120 evidence read from the installed files, found 'build record artifact.json'"
    ):
        rb.check_release(result, venv, {"sgl-kernel": "0.3.21+cu130"}, [])
    result["installed"][0]["version"] = "0.3.21"  # PyPI's won
    with pytest.raises(rb.RehearsalError, match=r"sgl-kernel: expected 0\.3\.21\+cu130 \(ours\), found 0\.3\.21"):
        rb.check_release(result, venv, {"sgl-kernel": "0.3.21+cu130"}, [])
    with pytest.raises(rb.RehearsalError, match=r"triton: expected 3\.5\.1 \(pinned with torch\), found not installed"):
        rb.check_release(result, venv, {}, ["triton==3.5.1"])


def test_reduced_rehearsal_passes_and_counts(rendered: dict[str, Any], tmp_path: Path) -> None:
    proc = run_reduced(rendered, tmp_path / "rendered.json")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.fullmatch(r"\d+ passed, 0 failed, 10 unchecked", lines[-1]), lines[-1]
    assert all(re.match(r"(PASS|FAIL|UNCHECKED) [^:]+: ", line) for line in lines[:-2])
    # what could not be checked is listed as such: the files of torch, sgl-kernel and the companions
    # (torchvision, torchaudio, torch_memory_saver) were not recorded at their refs
    unchecked = sorted(line.split(":")[0] for line in lines if line.startswith("UNCHECKED "))
    assert unchecked == sorted(
        f"UNCHECKED upstream {what} {name}"
        for name in ("sgl_kernel", "torch", "torch_memory_saver", "torchaudio", "torchvision")
        for what in ("build-requires", "version")
    )
    # the companions' stand-ins are built and verified like the others
    for name in ("torchvision", "torchaudio", "torch_memory_saver"):
        assert any(line.startswith(f"PASS stand-in {name}: ") for line in lines), name
    broken = copy.deepcopy(rendered)
    by_name(broken["specs"], "torch")["pins"] = []
    proc = run_reduced(broken, tmp_path / "rendered.json")
    assert proc.returncode == 1 and proc.stdout.splitlines()[-1].endswith(" passed, 1 failed, 10 unchecked")
    assert "FAIL facts triton-pin: torch: pins expected to hold triton==3.5.1, found []" in proc.stdout


# ---------------------------------------------------------------- a release of the package index's own wheels (issue 32)

INDEX_ARTIFACTS = ("torch", "flashinfer", "sgl_kernel", "torchvision", "torchaudio")


@pytest.fixture(scope="module")
def rendered_0_5_13() -> dict[str, Any]:
    """SGLang 0.5.13 as the deploy renders it: the lookup sglang_artifact_choices judges the index's wheels."""
    return rehearsal_script().render(ROOT / "inventory/example-site", "0.5.13")  # type: ignore[attr-defined]


def test_reduced_rehearsal_of_0_5_13_makes_every_cuda_artifact_from_the_index_with_no_stand_in(
    rendered_0_5_13: dict[str, Any], tmp_path: Path
) -> None:
    """`make rehearsal SGLANG_VERSION=0.5.13`, reduced: each CUDA artifact is the index's wheel, fetched and verified by
    the pipeline's own prebuilt phase; nothing is stood in for and no source-build check runs (nothing is built)."""
    proc = run_reduced(rendered_0_5_13, tmp_path / "rendered.json")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.fullmatch(r"\d+ passed, 0 failed", lines[-1]), lines[-1]
    assert lines[0].endswith("; the package index's own wheels for " + ", ".join(INDEX_ARTIFACTS)), lines[0]
    for name in INDEX_ARTIFACTS:
        assert any(line.startswith(f"PASS build {name}: prebuilt wheel verified in ") for line in lines), name
        assert any(
            line.startswith(f"PASS index {name}: ") and "from the index, verified on the host as a build is" in line for line in lines
        ), name
    kernel = next(line for line in lines if line.startswith("PASS index sgl_kernel: "))
    assert "sglang_kernel-0.4.3-cp310-abi3-" in kernel and "sm_120a" in kernel
    assert any(line.startswith("PASS index pins torch: torch-2.11.0-") and "requires triton==3.6.0" in line for line in lines)
    assert not [line for line in lines if "stand-in" in line or line.split(":")[0].endswith(("build-requires", "version", "local-version"))]
    # sglang 0.5.13's closure for this Python: pip takes each of them from the index, at the version taken
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    closure = next(line for line in lines if line.startswith(f"PASS closure python{python}: "))
    taken = "torch 2.11.0, flashinfer_python 0.6.12, sglang_kernel 0.4.3, torchvision 0.26.0, torchaudio 2.11.0"
    assert re.search(rf": \d+ packages resolve for Python \S+, the index's own: {re.escape(taken)} \(", closure), closure


def test_an_index_wheel_the_host_refuses_fails_the_rehearsal_naming_why_and_builds_nothing(
    rendered_0_5_13: dict[str, Any], tmp_path: Path
) -> None:
    """torch's rule asking for CUDA 12 (the index's 2.11.0 links libcudart.so.13) and a triton pin the wheel does not
    require: the prebuilt phase refuses the wheel, the source build behind it is not rehearsed (it fails at once),
    every artifact that needs torch is not built, and the pin is named."""
    broken = copy.deepcopy(rendered_0_5_13)
    torch = by_name(broken["specs"], "torch")
    torch["verify"]["cudart"] = "12"
    torch["pins"] = ["triton==3.5.1"]
    proc = run_reduced(broken, tmp_path / "rendered.json")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    pins = next(line for line in lines if line.startswith("FAIL index pins torch: "))
    assert "triton==3.5.1: expected torch-2.11.0-" in pins and "found it requires 3.6.0" in pins
    build = next(line for line in lines if line.startswith("FAIL build torch: "))
    assert "prebuilt wheel not used" in build and "libcudart.so.12" in build, build
    assert "the package index wheel of this artifact was refused" in build, build
    for name in INDEX_ARTIFACTS[1:]:
        assert f"FAIL build {name}: not built: dependency torch failed" in lines, name
    assert not any(line.startswith("PASS index torch") for line in lines)
