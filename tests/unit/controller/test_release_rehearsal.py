"""make rehearsal, the release further (plugins/plugin_utils/sglang_sm120_controller/rehearsal/release.py, issue 23 items 3
and 4): the imports a
CPU host allows in the release venv, sglang's closure for every host Python, and the CUDA-12 torchvision put back.

pip's own output is read from recordings under tests/data/release-rehearsal (a real --report of the closure for
Python 3.12 with our re-tagged wheels, and a real resolution failure); the slow pip runs are mocked."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from conftest import ROOT
from sglang_sm120_controller.rehearsal.build import RehearsalError, check_release
from sglang_sm120_controller.rehearsal.release import (
    IMPORTS,
    check_imports,
    check_python_closure,
    classify_import,
    closures_for_pythons,
    installed_distributions,
    python_closure,
    refused_pythons,
    report_choices,
    retag_wheel,
    supported_pythons,
    unresolved,
)

DATA = ROOT / "tests" / "data" / "release-rehearsal"
PREFLIGHT = yaml.safe_load((ROOT / "roles" / "preflight" / "defaults" / "main.yml").read_text())
REPORT = json.loads((DATA / "pip-report-cp312.json").read_text())
CONFLICT = (DATA / "pip-unresolved-torch-cp312.txt").read_text()
OURS_312 = {
    "torch": "torch-2.9.1+cu130-cp312-cp312-linux_x86_64.whl",
    "flashinfer-python": "flashinfer_python-0.6.3+cu130-py3-none-any.whl",
    "flashinfer-jit-cache": "flashinfer_jit_cache-0.6.3+cu130-cp39-abi3-manylinux_2_28_x86_64.whl",
    "sgl-kernel": "sgl_kernel-0.3.21+cu130-cp310-abi3-linux_x86_64.whl",
    "torchvision": "torchvision-0.24.1+cu130-cp312-cp312-linux_x86_64.whl",
    "torchaudio": "torchaudio-2.9.1+cu130-cp312-cp312-linux_x86_64.whl",
    "torch_memory_saver": "torch_memory_saver-0.0.9+cu130-cp312-cp312-linux_x86_64.whl",
}


# ---------------------------------------------------------------- the host Pythons


def test_the_host_pythons_are_those_preflight_allows() -> None:
    assert supported_pythons(PREFLIGHT) == ["3.10", "3.11", "3.12", "3.13"]
    assert supported_pythons({**PREFLIGHT, "preflight_min_python": "3.11"}) == ["3.11", "3.12", "3.13"]
    assert supported_pythons({**PREFLIGHT, "preflight_supported_distributions": {"Debian": ["12"]}}) == ["3.11"]


def test_production_bounds_the_host_python_and_the_refused_one_is_listed() -> None:
    production = yaml.safe_load((ROOT / "roles" / "toolkit_defaults" / "defaults" / "main" / "roles.yml").read_text())
    settings = {**PREFLIGHT, "preflight_max_python": production["preflight_max_python"]}
    assert supported_pythons(settings) == ["3.10", "3.11", "3.12"]
    assert refused_pythons(settings) == ["3.13"]
    assert refused_pythons(PREFLIGHT) == []


def test_a_python_the_preflight_refuses_is_unchecked_naming_the_variable(tmp_path: Path) -> None:
    settings = {**PREFLIGHT, "preflight_max_python": "3.12", "preflight_supported_distributions": {"Debian": ["13"]}}
    defaults = tmp_path / "defaults.yml"
    defaults.write_text(yaml.safe_dump(settings))
    outcomes = closures_for_pythons(sys.executable, defaults, "sglang==0.5.9", {}, [], tmp_path / "work")
    assert [(o.name, o.failed, o.unchecked) for o in outcomes] == [("closure python3.13", False, True)]
    assert "preflight refuses Python 3.13" in outcomes[0].detail and "preflight_max_python 3.12" in outcomes[0].detail


def test_a_distribution_whose_python_is_unknown_fails_naming_it() -> None:
    with pytest.raises(ValueError, match=r"preflight supports Rocky 9, whose Python the rehearsal does not know"):
        supported_pythons({**PREFLIGHT, "preflight_supported_distributions": {"Debian": ["12"], "Rocky": ["9"]}})


def _wheel(directory: Path, dist: str, version: str, tag: str) -> Path:
    stem = dist.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    files = {
        f"{stem}/__init__.py": b"",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    }
    from sglang_sm120_controller.rehearsal.release import _record_line

    files[f"{info}/RECORD"] = ("".join(_record_line(n, d) + "\n" for n, d in files.items()) + f"{info}/RECORD,,\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def _pip_takes(wheels: Path, requirement: str, version: str, tmp: Path) -> str:
    """The file pip takes for `requirement` from `wheels` alone, for Python `version` (pip's own tag logic)."""
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps", "--ignore-installed", "--quiet"]
    argv += ["--report", "-", "--python-version", version, "--only-binary=:all:", "--target", str(tmp / "t"), "--find-links", str(wheels)]
    proc = subprocess.run([*argv, requirement], capture_output=True, text=True, check=False)
    if proc.returncode:
        return ""
    return json.loads(proc.stdout)["install"][0]["download_info"]["url"].rsplit("/", 1)[-1]


def test_a_retagged_wheel_is_taken_for_its_python_and_stays_a_valid_wheel(tmp_path: Path) -> None:
    built = _wheel(tmp_path / "built", "torch", "2.9.1+cu130", "cp311-cp311-linux_x86_64")
    assert _pip_takes(tmp_path / "built", "torch", "3.13", tmp_path) == ""  # the cp311 wheel is not for 3.13
    retagged = retag_wheel(built, tmp_path / "cp313", "3.13")
    assert retagged.name == "torch-2.9.1+cu130-cp313-cp313-linux_x86_64.whl"
    assert _pip_takes(tmp_path / "cp313", "torch", "3.13", tmp_path) == "torch-2.9.1%2Bcu130-cp313-cp313-linux_x86_64.whl"
    with zipfile.ZipFile(retagged) as archive:
        assert "Tag: cp313-cp313-linux_x86_64" in archive.read("torch-2.9.1+cu130.dist-info/WHEEL").decode()
        record = archive.read("torch-2.9.1+cu130.dist-info/RECORD").decode()
        from sglang_sm120_controller.rehearsal.release import _record_line

        assert _record_line("torch-2.9.1+cu130.dist-info/WHEEL", archive.read("torch-2.9.1+cu130.dist-info/WHEEL")) in record
    # a wheel for any CPython (abi3) is taken as it is
    abi3 = _wheel(tmp_path / "built", "sgl-kernel", "0.3.21+cu130", "cp310-abi3-linux_x86_64")
    assert retag_wheel(abi3, tmp_path / "abi3", "3.13").name == abi3.name


# ---------------------------------------------------------------- pip's report and errors, judged


def _ours(names: dict[str, str]) -> dict[str, Path]:
    return {dist: Path("/wheels") / dist / name for dist, name in names.items()}


def test_the_recorded_report_shows_ours_chosen_for_python_3_12() -> None:
    choices = report_choices(REPORT)
    assert choices["torch"] == ("2.9.1+cu130", OURS_312["torch"]) and choices["sglang"][0] == "0.5.9"
    said = check_python_closure("3.12", choices, "", _ours(OURS_312), lambda name: True)
    assert said.startswith(f"{len(REPORT['install'])} packages resolve for Python 3.12, ours chosen: torch 2.9.1+cu130, ")
    assert "torchvision 0.24.1+cu130" in said and "torch_memory_saver 0.0.9+cu130" in said


def test_an_upstream_wheel_chosen_instead_of_ours_fails_naming_python_and_package() -> None:
    report = json.loads(json.dumps(REPORT))
    item = next(i for i in report["install"] if i["metadata"]["name"] == "torchvision")
    item["metadata"]["version"] = "0.24.1"
    item["download_info"]["url"] = "https://files.example/torchvision-0.24.1-cp312-cp312-manylinux_2_28_x86_64.whl"
    with pytest.raises(RehearsalError, match=r"for Python 3\.12: torchvision: expected ours \(torchvision-0\.24\.1\+cu130-cp312"):
        check_python_closure("3.12", report_choices(report), "", _ours(OURS_312), lambda name: True)
    report["install"] = [i for i in report["install"] if i["metadata"]["name"] != "torchvision"]
    with pytest.raises(RehearsalError, match=r"torchvision: expected ours .* found it not in the closure"):
        check_python_closure("3.12", report_choices(report), "", _ours(OURS_312), lambda name: True)


def test_an_index_artifact_must_be_taken_from_the_index_at_its_version() -> None:
    """A release of the index's own wheels (make rehearsal SGLANG_VERSION=0.5.13): pip must take each at the
    version taken, from the index; ours re-tagged (none here) and the index's own are named apart."""
    report = json.loads(json.dumps(REPORT))
    item = next(i for i in report["install"] if i["metadata"]["name"] == "torchvision")
    item["metadata"]["version"] = "0.24.1"
    item["download_info"]["url"] = "https://files.example/torchvision-0.24.1-cp312-cp312-manylinux_2_28_x86_64.whl"
    said = check_python_closure("3.12", report_choices(report), "", {}, lambda name: True, {"torchvision": "0.24.1"})
    assert said == f"{len(REPORT['install'])} packages resolve for Python 3.12, the index's own: torchvision 0.24.1"
    # another version, or a local build of it, is not the index's wheel
    with pytest.raises(RehearsalError, match=r"3\.12: torchvision: expected the index.s 0\.24\.0, found pip takes torchvision-0\.24\.1-"):
        check_python_closure("3.12", report_choices(report), "", {}, lambda name: True, {"torchvision": "0.24.0"})
    with pytest.raises(RehearsalError, match=r"torch: expected the index's 2\.9\.1, found pip takes torch-2\.9\.1\+cu130-cp312"):
        check_python_closure("3.12", report_choices(REPORT), "", {}, lambda name: True, {"torch": "2.9.1"})
    report["install"] = [i for i in report["install"] if i["metadata"]["name"] != "torchvision"]
    with pytest.raises(RehearsalError, match=r"torchvision: expected the index's 0\.24\.1, found it not in the closure"):
        check_python_closure("3.12", report_choices(report), "", {}, lambda name: True, {"torchvision": "0.24.1"})


def test_the_recorded_conflict_fails_naming_python_and_torch() -> None:
    assert unresolved(CONFLICT) == (
        "conflict: sglang 0.5.9 depends on torch==2.9.1; The user requested (constraint) torch<=2.14.1,==2.9.1+cu130"
    )
    with pytest.raises(RehearsalError, match=r"pip cannot resolve conflict: sglang 0\.5\.9 depends on torch==2\.9\.1; .* for Python 3\.12"):
        check_python_closure("3.12", None, CONFLICT, _ours(OURS_312), lambda name: False)


MISSING = (
    "ERROR: Could not find a version that satisfies the requirement outlines_core==0.1.26 (from outlines) "
    "(from versions: 0.1.17, 0.2.9)\nERROR: No matching distribution found for outlines_core==0.1.26\n"
)


def test_a_requirement_without_a_wheel_for_the_python_fails_unless_the_index_has_none_of_it() -> None:
    from sglang_sm120_controller.rehearsal.build import Unchecked

    assert unresolved(MISSING) == "outlines_core==0.1.26 (from outlines)"
    with pytest.raises(RehearsalError, match=r"pip cannot resolve outlines_core==0\.1\.26 \(from outlines\) for Python 3\.13"):
        check_python_closure("3.13", None, MISSING, _ours(OURS_312), lambda name: True)  # other versions have 3.13 wheels
    with pytest.raises(Unchecked, match=r"the package index here has no Python 3\.13 wheel of outlines-core at any version"):
        check_python_closure("3.13", None, MISSING, _ours(OURS_312), lambda name: False)
    # one of ours missing is our specs' fault, whatever the index holds
    ours_missing = MISSING.replace("outlines_core==0.1.26 (from outlines)", "torchvision==0.24.1+cu130").replace(
        "outlines_core==0.1.26", "torchvision==0.24.1+cu130"
    )
    with pytest.raises(RehearsalError, match=r"pip cannot resolve torchvision==0\.24\.1\+cu130 for Python 3\.13"):
        check_python_closure("3.13", None, ours_missing, _ours(OURS_312), lambda name: False)


def test_a_python_the_index_holds_no_wheels_for_is_unchecked_not_passed(tmp_path: Path) -> None:
    ours = {"torch": _wheel(tmp_path / "built", "torch", "2.9.1+cu130", "cp311-cp311-linux_x86_64")}
    calls: list[list[str]] = []

    def runner(argv: list[str], **kwargs: Any) -> SimpleNamespace:
        calls.append(argv)
        if argv[1] == "-c":
            return SimpleNamespace(returncode=1, stdout="", stderr="")  # no Python 3.9 interpreter here
        return SimpleNamespace(returncode=1, stdout="", stderr="ERROR: No matching distribution found for numpy")

    outcome = python_closure(sys.executable, "3.9", ["sglang==0.5.9", "torch"], ours, [], tmp_path / "work", runner=runner)
    assert outcome.unchecked and "the package index here holds no Python 3.9 wheels (probe: numpy has none)" in outcome.line()
    probe = calls[-1]
    assert probe[probe.index("--python-version") + 1] == "3.9" and "--no-deps" in probe and probe[-1] == "numpy"
    assert (tmp_path / "work" / "cp39" / "wheels" / "torch" / "torch-2.9.1+cu130-cp39-cp39-linux_x86_64.whl").is_file()


def test_the_closure_is_resolved_as_the_brief_says_and_ours_judged(tmp_path: Path) -> None:
    ours = {"torch": _wheel(tmp_path / "built", "torch", "2.9.1+cu130", "cp311-cp311-linux_x86_64")}
    seen: dict[str, list[str]] = {}

    def runner(argv: list[str], **kwargs: Any) -> SimpleNamespace:
        if argv[1] == "-c":  # find_interpreter: no Python 3.12 here, the running one reads the markers
            return SimpleNamespace(returncode=1, stdout="", stderr="")
        if argv[-1] == "numpy":
            return SimpleNamespace(returncode=0, stdout="", stderr="")
        seen["argv"] = argv
        url = "file:///w/torch-2.9.1%2Bcu130-cp312-cp312-linux_x86_64.whl"
        report = {"install": [{"metadata": {"name": "torch", "version": "2.9.1+cu130"}, "download_info": {"url": url}}]}
        Path(argv[argv.index("--report") + 1]).write_text(json.dumps(report))
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    outcome = python_closure(sys.executable, "3.12", ["sglang==0.5.9", "torch"], ours, ["triton==3.5.1"], tmp_path / "w", runner=runner)
    assert outcome.ok, outcome.line()
    assert outcome.line().startswith("PASS closure python3.12: 1 packages resolve for Python 3.12, ours chosen: torch 2.9.1+cu130")
    argv = seen["argv"]
    for flag in ("--dry-run", "--ignore-installed", "--only-binary=:all:", "--target", "--report"):
        assert flag in argv
    assert argv[argv.index("--python-version") + 1] == "3.12" and argv[-2:] == ["sglang==0.5.9", "torch"]
    constraints = Path(argv[argv.index("-c") + 1]).read_text()
    assert constraints == "torch==2.9.1+cu130\ntriton==3.5.1\n"


# ---------------------------------------------------------------- imports in the release venv


def _dist(site: Path, name: str, files: dict[str, str], summary: str = "real") -> None:
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nSummary: {summary}\n\nbody: x\n")
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files) + f"{info.name}/RECORD,,\n")


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("release-imports") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    standin = "STAND-IN for torch 2.9.1+cu130 (make rehearsal; not a real build: no usable code)"
    _dist(site, "torch", {"torch/__init__.py": "STANDIN = True\n"}, standin)
    _dist(site, "needs-torch", {"needs_torch/__init__.py": "import torch.distributed\n"})
    _dist(site, "wants-tensor", {"wants_tensor/__init__.py": "import torch\nTensor = torch.Tensor\n"})
    _dist(site, "plain", {"plain/__init__.py": "VALUE = 1\n"})
    _dist(site, "new-kernel", {"kernel_mod/__init__.py": "VALUE = 2\n"})
    _dist(site, "broken", {"broken/__init__.py": "raise RuntimeError('boom: the config is wrong')\n"})
    driver = "raise OSError('libcuda.so.1: cannot open shared object file: No such file or directory')\n"
    _dist(site, "driver", {"driver/__init__.py": driver})
    _dist(site, "hangs", {"hangs/__init__.py": "import time\ntime.sleep(60)\n"})
    _dist(site, "quits", {"quits/__init__.py": "import os\nos._exit(3)\n"})
    return root, site


def test_each_import_says_imported_unchecked_and_why_or_fails_naming_the_error(venv: tuple[Path, Path]) -> None:
    root, site = venv
    imports = [
        ("torch", "torch"),
        ("needs_torch", "needs-torch"),
        ("wants_tensor", "wants-tensor"),
        ("plain", "plain"),
        ("broken", "broken"),
        ("driver", "driver"),
        ("hangs", "hangs"),
        ("quits", "quits"),
        ("absent", "absent"),
        ("kernel_mod", "old-kernel or new-kernel"),  # a renamed distribution: whichever of the names is installed
        ("missing", "one or other"),
    ]
    lines = {o.name: o.line() for o in check_imports(root, [site], imports, timeout=5)}
    assert lines["import kernel_mod"].startswith("PASS import kernel_mod: imported in the release venv (")
    assert lines["import missing"].startswith("FAIL import missing: missing: one or other, which provides it, is not installed")
    assert lines["import torch"].startswith("UNCHECKED import torch: not importable on a CPU here: torch 1.0 in the release is the")
    assert "stand-in" in lines["import torch"] and "importing it would prove nothing" in lines["import torch"]
    assert lines["import needs_torch"] == (
        "UNCHECKED import needs_torch: not importable on a CPU here: needs_torch needs the real torch (ModuleNotFoundError: "
        "No module named 'torch.distributed'); the release's torch 1.0 is the rehearsal's stand-in (no compiled code)"
    )
    assert "needs the real torch (AttributeError: module 'torch' has no attribute 'Tensor')" in lines["import wants_tensor"]
    assert lines["import plain"].startswith("PASS import plain: imported in the release venv (") and str(site) in lines["import plain"]
    assert lines["import broken"] == "FAIL import broken: broken: RuntimeError: boom: the config is wrong"
    assert lines["import driver"].startswith(
        "UNCHECKED import driver: not importable on a CPU here: driver needs the NVIDIA driver (libcuda.so.1)"
    )
    assert lines["import hangs"] == "FAIL import hangs: hangs: the import did not finish in 5 s"
    assert lines["import quits"].startswith("FAIL import quits: quits: the process ended (3)")
    assert lines["import absent"].startswith("FAIL import absent: absent: absent, which provides it, is not installed")


def test_a_failure_in_a_real_package_is_not_excused_by_a_stand_in_elsewhere(venv: tuple[Path, Path]) -> None:
    _, site = venv
    installed = installed_distributions([site])
    assert installed["torch"].standin and installed["torch"].tops == ("torch",) and not installed["plain"].standin
    result = {"ok": False, "type": "ModuleNotFoundError", "subject": "plainx", "last_line": "ModuleNotFoundError: No module named 'plainx'"}
    assert classify_import("plain", "plain", result, installed).failed
    result = {"ok": False, "type": "ImportError", "subject": None, "last_line": "ImportError: cannot import name 'nn' from 'torch' (/x)"}
    assert classify_import("m", "m", result, installed).unchecked


def test_the_rehearsal_imports_torch_torchvision_sgl_kernel_flashinfer_and_the_server_modules() -> None:
    modules = [m for m, _ in IMPORTS]
    for module in ("torch", "torchvision", "sgl_kernel", "flashinfer", "sglang.srt.server_args", "sglang.launch_server"):
        assert module in modules
    assert dict(IMPORTS)["flashinfer"] == "flashinfer-python" and dict(IMPORTS)["sgl_kernel"] == "sgl-kernel or sglang-kernel"


# ---------------------------------------------------------------- the CUDA-12 torchvision put back


def _real_torchvision() -> Path:
    for directory in (ROOT / ".cache" / "real-wheels" / "closure-0.5.9", ROOT / ".cache" / "real-wheels"):
        found = sorted(directory.glob("torchvision-0.24.1-cp*-manylinux*.whl"))
        if found:
            return found[0]
    pytest.skip("no PyPI torchvision 0.24.1 wheel under .cache/real-wheels (make wheelhouse fetches it: tests/data/real-wheels.txt)")


def test_the_index_cuda12_torchvision_in_the_release_fails_the_release_check_naming_it(tmp_path: Path) -> None:
    """stack_cuda_companions without torchvision: the index's 0.24.1 lands in the release; check_release, as the
    rehearsal runs it, fails naming torchvision and libcudart.so.12 (on a host without CUDA 12's runtime)."""
    from sglang_sm120.build.elf_closure import read_ld_cache

    if any(name.startswith("libcudart.so.12") for name in read_ld_cache()):
        pytest.skip("this host's ld.so cache has libcudart.so.12: the CUDA-12 torchvision loads here")
    wheel = _real_torchvision()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    # our torch beside it, as in the release: the rehearsal's stand-in (torch/lib with libcudart.so.13), where built
    ours = sorted((ROOT / ".cache" / "rehearsal").glob("*wheel*/torch/**/torch-2.9.1+cu130-*.whl"))
    for standin in ours[:1]:
        with zipfile.ZipFile(standin) as archive:
            archive.extractall(site)
    result = {"installed": [], "sm120_verification": [{"distribution": "torch", "read_from": "installed files of torch"}]}
    with pytest.raises(RehearsalError) as failed:
        check_release(result, venv, {}, [])
    message = str(failed.value)
    assert "torchvision 0.24.1: torchvision/_C.so needs " in message, message[:2000]
    needs = message.split("torchvision/_C.so needs ", 1)[1].split(", which", 1)[0]
    assert "libcudart.so.12" in needs.split(", "), message[:2000]
    if ours:  # with torch's libraries there, libcudart.so.12 is all that is missing
        assert "torchvision 0.24.1: torchvision/_C.so needs libcudart.so.12, which nothing on this host provides" in message
        assert "torchvision/image.so" not in message
