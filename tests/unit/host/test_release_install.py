"""Releases install the verified wheel files and read back what is installed (dist-info RECORD, sha256)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_build_pipeline import build_probe, tiny_wheel

from conftest import CACHE
from sglang_sm120.files import file_sha256
from sglang_sm120.release.install import InstallError, constraints_text, install_argv, read_back, release_wheels

SGLANG_WHEEL = CACHE / "sglang" / "sglang-0.5.9-py3-none-any.whl"


def venv(path: Path) -> Path:
    subprocess.run(["python3", "-m", "venv", str(path)], check=True)
    return path


def install(env: Path, *wheels: Path) -> None:
    subprocess.run(
        [
            str(env / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--disable-pip-version-check",
            *map(str, wheels),
        ],
        check=True,
    )


def expected(wheel: Path, artifact: str, rules: dict | None = None) -> dict:
    name, version = wheel.name.split("-")[:2]
    return {
        "artifact": artifact,
        "distribution": name,
        "version": version,
        "wheel": str(wheel),
        "sha256": file_sha256(wheel),
        "rules": rules or {"device_code": "none"},
    }


def cache_artifact(root: Path, name: str, key: str, wheels: list[Path], **record: object) -> dict:
    directory = root / "wheelhouse" / name / key
    directory.mkdir(parents=True)
    entries = []
    for wheel in wheels:
        target = directory / wheel.name
        target.write_bytes(wheel.read_bytes())
        entries.append({"wheel": wheel.name, "sha256": file_sha256(target)})
    return {"name": name, "package": name, "key": key, "kind": "git", "wheels": entries, **record}


# ---------------------------------------------------------------- which files, which command


def test_release_wheels_are_the_verified_files_with_their_pins(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    torch = tiny_wheel(shelf, "torch", "2.9.1+cu130")
    sglang = tiny_wheel(shelf, "sglang", "0.5.9", requires=["torch==2.9.1"])
    closure = tiny_wheel(shelf, "requests", "2.32.0")
    artifacts = {
        "torch": cache_artifact(tmp_path, "torch", "a" * 64, [torch], pins=["triton==3.5.1"]),
        # a with_deps wheel source: only its own distribution is the artifact, the rest is its closure
        "sglang": {**cache_artifact(tmp_path, "sglang", "b" * 64, [sglang, closure]), "kind": "wheel"},
    }
    wheels = release_wheels(str(tmp_path), artifacts, {"torch": {"verify": {"device_code": "none"}}})
    assert [(w["artifact"], w["distribution"], w["version"]) for w in wheels] == [
        ("torch", "torch", "2.9.1+cu130"),
        ("sglang", "sglang", "0.5.9"),
    ]
    assert wheels[0]["wheel"] == str(tmp_path / "wheelhouse" / "torch" / ("a" * 64) / torch.name)
    assert constraints_text(wheels) == "triton==3.5.1\n"
    argv = install_argv("/r/venv/bin/python", wheels, True, ["/w/torch", "/w/sglang"], "/tmp/c.txt")
    assert argv[:6] == ["/r/venv/bin/python", "-m", "pip", "install", "--no-index", "--disable-pip-version-check"]
    assert argv[-2:] == [w["wheel"] for w in wheels]  # paths, never names
    assert argv[8:10] == ["--find-links", "/w/sglang"] and argv[10:12] == ["-c", "/tmp/c.txt"] and "--no-deps" not in argv
    assert "--no-deps" in install_argv("/r/venv/bin/python", wheels, False, ["/w"], None)


def test_a_wheel_changed_in_the_wheelhouse_is_not_installed(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    record = cache_artifact(tmp_path, "probe", "c" * 64, [tiny_wheel(shelf, "probe", "1.0+cu130")])
    (tmp_path / "wheelhouse" / "probe" / ("c" * 64) / "probe-1.0+cu130-py3-none-any.whl").write_bytes(b"tampered")
    with pytest.raises(InstallError, match=r"probe: .*probe-1\.0\+cu130-py3-none-any\.whl has sha256 .*, the build recorded"):
        release_wheels(str(tmp_path), {"probe": record}, {})


# ---------------------------------------------------------------- read-back in real venvs


def test_the_real_sglang_wheel_reads_back_by_record(tmp_path: Path) -> None:
    if not SGLANG_WHEEL.exists():
        pytest.fail(f"no {SGLANG_WHEEL}: run `make sglang-wheels` first")
    env = venv(tmp_path / "venv")
    install(env, SGLANG_WHEEL)
    found = read_back(str(env), [expected(SGLANG_WHEEL, "sglang")])
    [entry] = found["installed"]
    assert entry["distribution"] == "sglang" and entry["version"] == "0.5.9" and entry["files_checked"] > 500
    assert found["sm120_verification"] == []  # pure Python: no GPU evidence claimed


def test_a_different_version_is_refused_naming_expected_and_found(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    upstream = tiny_wheel(shelf, "sgl_kernel", "0.3.21")  # what pip would have preferred
    ours = tiny_wheel(shelf, "sgl_kernel", "0.3.21+cu130")
    env = venv(tmp_path / "venv")
    install(env, upstream)
    with pytest.raises(
        InstallError,
        match=r"sgl_kernel \(sgl_kernel\): expected version 0\.3\.21\+cu130 "
        r"\(sgl_kernel-0\.3\.21\+cu130-py3-none-any\.whl\), found 0\.3\.21",
    ):
        read_back(str(env), [expected(ours, "sgl_kernel")])
    with pytest.raises(InstallError, match=r"other \(other\): expected 1\.0 from other-1\.0-py3-none-any\.whl, found it not installed"):
        read_back(str(env), [expected(tiny_wheel(shelf, "other", "1.0"), "other")])


def test_same_version_other_files_and_a_changed_file_are_refused(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    installed = tiny_wheel(first, "base", "1.0+cu130", payload=b"X = 1\n")
    rebuilt = tiny_wheel(second, "base", "1.0+cu130", payload=b"X = 2\n")
    env = venv(tmp_path / "venv")
    install(env, installed)
    assert read_back(str(env), [expected(installed, "base")])["installed"][0]["files_checked"] == 3  # __init__.py, METADATA, WHEEL
    with pytest.raises(
        InstallError, match=r"base \(base\): expected the files of base-1\.0\+cu130-py3-none-any\.whl .*base/__init__\.py: RECORD sha256="
    ):
        read_back(str(env), [expected(rebuilt, "base")])
    site = next((env / "lib").glob("python3*/site-packages"))
    (site / "base" / "__init__.py").write_text("X = 3\n")
    with pytest.raises(InstallError, match=r"base/__init__\.py: file on disk sha256=.*, verified wheel sha256="):
        read_back(str(env), [expected(installed, "base")])


def test_sm120_evidence_is_read_from_the_installed_library(cuda_home: Path, cuobjdump: Path, tmp_path: Path) -> None:
    wheel = build_probe(cuda_home, tmp_path / "out", name="probe")
    env = venv(tmp_path / "venv")
    install(env, wheel)
    rules = {"cuda_arch": "12.0", "cudart": "13", "device_code": "required", "arch_objects": ["probe/*.so"]}
    found = read_back(str(env), [expected(wheel, "probe", rules)], str(cuobjdump))
    [evidence] = found["sm120_verification"]
    assert evidence["read_from"].startswith("installed files (probe-1.0.dist-info/RECORD)")
    assert evidence["shared_objects"] == [
        {"path": "probe/libprobe.so", "targets": ["sm_120"], "cudart": ["13"], "rule": "must carry the target"}
    ]
    site = next((env / "lib").glob("python3*/site-packages"))
    os.remove(site / "probe" / "libprobe.so")  # a library lost after the install: no evidence, a refusal
    with pytest.raises(InstallError, match=r"probe/libprobe\.so: file on disk missing"):
        read_back(str(env), [expected(wheel, "probe", rules)])


def test_the_verified_file_wins_over_an_upstream_wheel_of_the_same_version(tmp_path: Path) -> None:
    """An upstream wheel of the same version sits in a find-links directory: the file itself is installed."""
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    record = cache_artifact(tmp_path / "build", "probe", "d" * 64, [tiny_wheel(shelf, "probe", "1.0+cu130")])
    tiny_wheel(shelf, "probe", "1.0", payload=b"UPSTREAM = True\n")
    env = venv(tmp_path / "venv")
    wheels = release_wheels(str(tmp_path / "build"), {"probe": record}, {})
    subprocess.run(install_argv(str(env / "bin" / "python"), wheels, True, [str(shelf)], None), check=True, capture_output=True)
    assert read_back(str(env), wheels)["installed"][0]["version"] == "1.0+cu130"


def _wheel_with(directory: Path, name: str, files: dict[str, bytes]) -> Path:
    """A wheel of `name` 1.0 holding `files` (path -> bytes) and its dist-info, RECORD with sha256s."""
    import base64
    import hashlib
    import zipfile

    info = f"{name}-1.0.dist-info"
    members = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}" for p, b in members.items()
    ]
    path = directory / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return path


def test_a_file_two_wheels_both_ship_reads_back_as_the_last_installed(tmp_path: Path) -> None:
    """flashinfer-python and torch-c-dlpack-ext both ship a top-level build_backend.py (SGLang 0.5.13's
    closure, read back on the real GPU machine: tests/data/real-server/0.5.13-h200-index-release)."""
    first = _wheel_with(tmp_path, "dlpackext", {"dlpackext/__init__.py": b"", "build_backend.py": b"A = 1\n"})
    second = _wheel_with(tmp_path, "flashinferish", {"flashinferish/__init__.py": b"", "build_backend.py": b"B = 2\n"})
    env = venv(tmp_path / "venv")
    install(env, first)
    install(env, second)
    found = read_back(str(env), [expected(first, "a"), expected(second, "b")])
    assert [i["distribution"] for i in found["installed"]] == ["dlpackext", "flashinferish"]
    assert found["shared_files"] == [
        "build_backend.py: dlpackext and flashinferish both ship it; on disk is flashinferish's, installed after"
    ]
    # a file changed on disk that matches neither wheel is still refused
    site = next((env / "lib").glob("python3*/site-packages"))
    (site / "build_backend.py").write_text("C = 3\n")
    with pytest.raises(InstallError, match=r"build_backend\.py: file on disk sha256="):
        read_back(str(env), [expected(first, "a"), expected(second, "b")])
