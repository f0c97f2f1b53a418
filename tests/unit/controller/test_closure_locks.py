"""The locks of the supported SGLang releases' Python closures (roles/toolkit_defaults/files/locks/) and the
script that writes them (scripts/lock_release.py): each lock kept in the repository parses, pins SGLang itself
and agrees with every exact pin of the release's own wheel; the script resolves each supported host as its pip
would and merges them into one lock (pip itself is stood in for by a runner that writes pip's --report)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from conftest import DATA, ROOT, stack_value, unpacked_sglang
from sglang_sm120.build.closure_lock import parse_lock
from sglang_sm120_controller.paths import LOCKS, named
from sglang_sm120_controller.pinned_stack import requirements

LOCK_FILES = sorted(LOCKS.glob("sglang-*.txt"))


def lock_script() -> Any:
    """scripts/lock_release.py as a module (it is a script, not on the import path)."""
    spec = importlib.util.spec_from_file_location("lock_release_script", ROOT / "scripts" / "lock_release.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SCRIPT = lock_script()


def release_of(lock: Path) -> str:
    return re.fullmatch(r"sglang-(.+)\.txt", lock.name).group(1)  # type: ignore[union-attr]


# ---------------------------------------------------------------- the locks kept in the repository


# Supported releases that pin a distribution the package index carries only as a source stub (cuda-tile
# 1.6.0rc5's sdist fetches its wheel from NVIDIA's own index when built): locked with --unhashed, the
# distribution pinned in a `# unhashed:` header line (resolved here through a stand-in that requires nothing).
UNHASHED = {version: "cuda-tile==1.6.0rc5" for version in ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22")}


def supported_releases() -> list[str]:
    """The SGLang releases the toolkit is tested against (tests/data/sglang-wheels.txt)."""
    lines = (DATA / "sglang-wheels.txt").read_text(encoding="utf-8").splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_every_supported_release_is_locked() -> None:
    assert named()["locks"] == LOCKS
    released = {release_of(p) for p in LOCK_FILES}
    supported = supported_releases()
    assert str(stack_value("stack_sglang_version")) in released
    assert released == set(supported), sorted(set(supported) ^ released)


@pytest.mark.parametrize("lock", LOCK_FILES, ids=[p.name for p in LOCK_FILES])
def test_only_a_distribution_the_index_has_no_wheel_of_is_pinned_without_hashes(lock: Path) -> None:
    """An unhashed pin is the exception, named here with its release: the release's own wheel pins it exactly, and
    the header says why."""
    version = release_of(lock)
    text = lock.read_text(encoding="utf-8")
    parsed = parse_lock(text, str(lock))
    assert [f"{p.name}=={p.version}" for p in parsed.unhashed] == ([UNHASHED[version]] if version in UNHASHED else [])
    if version in UNHASHED:
        metadata = (unpacked_sglang(version) / f"sglang-{version}.dist-info" / "METADATA").read_text(encoding="utf-8")
        assert f"Requires-Dist: {UNHASHED[version]}" in metadata.splitlines(), version
        assert "# Why: issue 50: SGLang 0.5.18-0.5.22 require cuda-tile==1.6.0rc5" in text


@pytest.mark.parametrize("lock", LOCK_FILES, ids=[p.name for p in LOCK_FILES])
def test_each_lock_parses_and_pins_sglang_at_its_release(lock: Path) -> None:
    version = release_of(lock)
    pins = parse_lock(lock.read_text(encoding="utf-8"), str(lock))
    assert [(p.version, p.marker) for p in pins.pins_of("sglang")] == [(version, "")]
    header = [line for line in lock.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    assert header[0].startswith(f"# The Python closure of SGLang {version}, locked")
    assert any(f"scripts/lock_release.py {version}" in line for line in header)


@pytest.mark.parametrize("lock", LOCK_FILES, ids=[p.name for p in LOCK_FILES])
def test_each_lock_covers_every_python_preflight_allows_that_the_release_can_install_on(lock: Path) -> None:
    """Every host preflight allows is resolved, or named as one the release has no wheel for (cp311 only from 0.5.11);
    Debian 12's Python 3.11, the production host's, always is."""
    version = release_of(lock)
    header = [line for line in lock.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    covered = next(line for line in header if line.startswith("# Resolved for: "))
    assert "Python 3.11 (Debian 12, glibc 2.36)" in covered
    for host in SCRIPT.read_hosts():
        no_wheel = f"# Not covered: {host.label()}: SGLang {version} has no wheel for Python {host.python}"
        assert not host.required or host.label() in covered or any(line.startswith(no_wheel) for line in header), (host, header)


@pytest.mark.parametrize("lock", LOCK_FILES, ids=[p.name for p in LOCK_FILES])
def test_each_lock_agrees_with_every_exact_pin_of_the_releases_own_wheel(lock: Path) -> None:
    """SGLang's own `==` requirements (Requires-Dist of its wheel, markers read for the GPU host) are the lock's versions."""
    version = release_of(lock)
    metadata = (unpacked_sglang(version) / f"sglang-{version}.dist-info" / "METADATA").read_text(encoding="utf-8")
    pins = parse_lock(lock.read_text(encoding="utf-8"), str(lock))
    exact = {r.key: r.exact for r in requirements(metadata) if r.exact is not None}
    assert len(exact) >= 10, exact  # the release pins torch, its kernel, FlashInfer, transformers, ...
    disagree = {
        name: (wanted, [p.version for p in pins.pins_of(name)])
        for name, wanted in exact.items()
        if not any(Version(p.version) == Version(wanted) for p in pins.pins_of(name))
    }
    assert disagree == {}


# ---------------------------------------------------------------- the script


def test_the_hosts_are_preflights_distributions_with_their_python_and_glibc() -> None:
    hosts = [(h.python, h.distribution, h.glibc, h.required) for h in SCRIPT.read_hosts()]
    assert hosts == [
        ("3.10", "Ubuntu 22.04", "2.35", True),
        ("3.11", "Debian 12", "2.36", True),
        ("3.12", "Ubuntu 24.04", "2.39", True),
        ("3.13", "Debian 13", "2.41", False),  # preflight_max_python 3.12: tried, left out when it does not resolve
    ]


def test_a_host_takes_every_manylinux_tag_up_to_its_glibc_and_no_newer() -> None:
    tags = SCRIPT.platforms("2.36")
    assert tags[0] == "manylinux_2_5_x86_64" and "manylinux_2_36_x86_64" in tags and "manylinux_2_37_x86_64" not in tags
    assert tags[-4:] == ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64", "linux_x86_64"]


def install(name: str, version: str, wheel: str, digest: str | None) -> dict[str, Any]:
    archive = {"hashes": {"sha256": digest}} if digest else {}
    return {
        "metadata": {"name": name, "version": version},
        "download_info": {"url": f"https://files.example/p/{wheel}", "archive_info": archive},
    }


def test_a_report_without_a_files_sha256_is_refused() -> None:
    report = {"install": [install("fastapi", "0.115.6", "fastapi-0.115.6-py3-none-any.whl", None)]}
    with pytest.raises(SCRIPT.LockRunError, match=r"no sha256 for fastapi 0\.115\.6 \(fastapi-0\.115\.6-py3-none-any\.whl\)"):
        SCRIPT.report_chosen(report)


def test_a_local_files_sha256_is_read_from_the_file(tmp_path: Path) -> None:
    wheel = tmp_path / "dep-1.0-py3-none-any.whl"
    wheel.write_bytes(b"x")
    report = {"install": [{"metadata": {"name": "Dep", "version": "1.0"}, "download_info": {"url": wheel.as_uri(), "archive_info": {}}}]}
    assert SCRIPT.report_chosen(report)["dep"].sha256 == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"


class FakePip:
    """pip for the script's runner: each Python's `--report` from `closures` (python -> name -> (version, sha256));
    a Python missing from it fails to resolve as pip does."""

    def __init__(self, closures: dict[str, dict[str, tuple[str, str]]], no_wheel: tuple[str, ...] = ()) -> None:
        self.closures = closures
        self.no_wheel = no_wheel  # Pythons the release itself has no wheel for
        self.constraints: list[str] = []  # the -c file of each resolution
        self.argvs: list[list[str]] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> Any:
        from subprocess import CompletedProcess

        if argv[1] == "-c":  # find_interpreter: which Python is this
            version = re.search(r"python(\d\.\d+)$", argv[0])
            return CompletedProcess(argv, 0, f"{version.group(1) if version else '?'}\n", "")
        if argv[-1] == "--version":
            return CompletedProcess(argv, 0, "pip 23.2.1 from /x (python 3.11)\n", "")
        self.argvs.append(argv)
        self.constraints.append(Path(argv[argv.index("-c") + 1]).read_text() if "-c" in argv else "")
        assert kwargs["env"]["PIP_CONFIG_FILE"] == os.devnull and "PIP_FIND_LINKS" not in kwargs["env"]  # no pip configuration here
        python = argv[argv.index("--python-version") + 1]
        if python in self.no_wheel:
            wanted = argv[-1]
            return CompletedProcess(
                argv, 1, "", f"ERROR: Could not find a version that satisfies the requirement {wanted} (from versions: none)\n"
            )
        if python not in self.closures:
            return CompletedProcess(argv, 1, "", "ERROR: No matching distribution found for outlines-core==0.1.26\n")
        report = {"install": [install(n, v, f"{n}-{v}-py3-none-any.whl", d) for n, (v, d) in self.closures[python].items()]}
        Path(argv[argv.index("--report") + 1]).write_text(json.dumps(report))
        return CompletedProcess(argv, 0, "", "")


def test_the_script_merges_the_hosts_into_one_lock_with_markers_where_versions_or_takers_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c, d = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)
    same = {"sglang": ("0.5.23", a), "fastapi": ("0.115.6", b)}
    pip = FakePip(
        {
            "3.10": {**same, "numpy": ("2.2.6", c), "exceptiongroup": ("1.3.0", d)},
            "3.11": {**same, "numpy": ("2.3.5", d)},
            "3.12": {**same, "fastapi": ("0.115.6", c), "numpy": ("2.3.5", a)},
        }
    )
    monkeypatch.setattr(SCRIPT, "find_interpreter", lambda version, runner=None: f"/usr/bin/python{version}")
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")  # this machine's: never passed to the resolution
    lines: list[str] = []
    path = SCRIPT.lock_release("0.5.23", SCRIPT.read_hosts(), tmp_path, today="2026-12-07", say=lines.append, runner=pip)
    text = path.read_text()
    assert path == tmp_path / "sglang-0.5.23.txt"
    body = text.split("\n\n", 1)[1]
    assert body == (
        f'exceptiongroup==1.3.0 ; python_version == "3.10" \\\n    --hash=sha256:{d}\n'
        f"fastapi==0.115.6 \\\n    --hash=sha256:{b} \\\n    --hash=sha256:{c}\n"
        f'numpy==2.2.6 ; python_version == "3.10" \\\n    --hash=sha256:{c}\n'
        f'numpy==2.3.5 ; python_version == "3.11" or python_version == "3.12" \\\n    --hash=sha256:{a} \\\n    --hash=sha256:{d}\n'
        f"sglang==0.5.23 \\\n    --hash=sha256:{a}\n"
    )
    assert "# Resolved for: Python 3.10 (Ubuntu 22.04, glibc 2.35); Python 3.11 (Debian 12, glibc 2.36); Python 3.12" in text
    assert "# Not covered: Python 3.13 (Debian 13, glibc 2.41): preflight refuses it, and pip cannot resolve outlines-core==0.1.26" in text
    assert "Written by scripts/lock_release.py on 2026-12-07 (pip 23.2.1)" in text and "://" not in text
    assert [len(parse_lock(text, "x").pins_of(n)) for n in ("numpy", "fastapi")] == [2, 1]
    argv = pip.argvs[1]  # Python 3.11, Debian 12
    assert argv[:8] == ["/usr/bin/python3.11", "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report"]
    assert argv[9:12] == ["--only-binary", ":all:", "--platform"]
    assert argv[argv.index("--abi") + 1] == "cp311" and argv[-1] == "sglang==0.5.23" and "manylinux_2_37_x86_64" not in argv
    assert any("[4/4] Python 3.13 (Debian 13, glibc 2.41) (preflight refuses it: tried, optional)" in line for line in lines)


def test_a_required_host_that_does_not_resolve_leaves_the_lock_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sglang-0.5.23.txt").write_text("kept\n")
    pip = FakePip({"3.11": {"sglang": ("0.5.23", "a" * 64)}})
    monkeypatch.setattr(SCRIPT, "find_interpreter", lambda version, runner=None: f"/usr/bin/python{version}")
    with pytest.raises(
        SCRIPT.LockRunError, match=r"Python 3\.10 \(Ubuntu 22\.04, glibc 2\.35\): pip cannot resolve outlines-core==0\.1\.26"
    ):
        SCRIPT.lock_release("0.5.23", SCRIPT.read_hosts(), tmp_path, say=lambda line: None, runner=pip)
    assert (tmp_path / "sglang-0.5.23.txt").read_text() == "kept\n"


def test_a_host_whose_python_the_release_has_no_wheel_for_is_left_out_not_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang 0.5.23 ships cp311 wheels only: a Python 3.10 or 3.12 host cannot install it at all, which is no gap of the lock."""
    pip = FakePip({"3.11": {"sglang": ("0.5.23", "a" * 64)}}, no_wheel=("3.10", "3.12", "3.13"))
    monkeypatch.setattr(SCRIPT, "find_interpreter", lambda version, runner=None: f"/usr/bin/python{version}")
    text = SCRIPT.lock_release("0.5.23", SCRIPT.read_hosts(), tmp_path, say=lambda line: None, runner=pip).read_text()
    assert "# Resolved for: Python 3.11 (Debian 12, glibc 2.36)." in text
    no_wheel = "SGLang 0.5.23 has no wheel for Python 3.10 (the release cannot install there)"
    assert f"# Not covered: Python 3.10 (Ubuntu 22.04, glibc 2.35): {no_wheel}" in text
    assert "# Not covered: Python 3.12 (Ubuntu 24.04, glibc 2.39): SGLang 0.5.23 has no wheel for Python 3.12" in text
    with pytest.raises(SCRIPT.LockRunError, match=r"no host resolves sglang==0\.5\.23"):
        SCRIPT.lock_release(
            "0.5.23", SCRIPT.read_hosts(), tmp_path, say=lambda line: None, runner=FakePip({}, no_wheel=("3.10", "3.11", "3.12", "3.13"))
        )


def test_a_version_held_back_on_purpose_is_a_constraint_of_every_resolution_and_said_in_the_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pip = FakePip({"3.11": {"sglang": ("0.5.9", "a" * 64), "fastapi": ("0.136.3", "b" * 64)}}, no_wheel=("3.10", "3.12", "3.13"))
    monkeypatch.setattr(SCRIPT, "find_interpreter", lambda version, runner=None: f"/usr/bin/python{version}")
    why = "issue 50: from fastapi 0.137.0 /v1/loads answers 500 under --enable-metrics " + "and more words " * 8
    path = SCRIPT.lock_release(
        "0.5.9", SCRIPT.read_hosts(), tmp_path, say=lambda line: None, runner=pip, held=["fastapi<0.137"], notes=[why]
    )
    assert pip.constraints == ["fastapi<0.137\n"] * 4
    header = [line for line in path.read_text().splitlines() if line.startswith("#")]
    assert "#   with these versions held back on purpose (--constraint): fastapi<0.137" in header
    assert header[header.index("#   with these versions held back on purpose (--constraint): fastapi<0.137") + 1].startswith(
        "# Why: issue 50: "
    )
    assert all(len(line) <= 120 for line in header if line.startswith(("# Why", "#   ")))
    assert any("scripts/lock_release.py 0.5.9 with the --constraint and --why above while they hold," in line for line in header)
    with pytest.raises(SystemExit):  # a constraint without its reason
        SCRIPT.main(["--constraint", "fastapi<0.137", "0.5.9"])


def test_an_unreachable_distribution_is_resolved_through_a_stand_in_and_pinned_without_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--unhashed cuda-tile==1.6.0rc5 (SGLang 0.5.18-0.5.22; its wheels only on NVIDIA's index): the resolution gets a
    --find-links directory holding a stand-in wheel of that name and version that requires nothing, and the
    constraint; the lock leaves the stand-in's hashed line out and pins it in a `# unhashed:` header line."""
    seen: dict[str, Any] = {}

    class Pip(FakePip):
        def __call__(self, argv: list[str], **kwargs: Any) -> Any:
            if "--find-links" in argv:
                links = [Path(argv[i + 1]) for i, a in enumerate(argv) if a == "--find-links"]
                seen["wheels"] = sorted(w.name for d in links for w in d.glob("*.whl"))
                with zipfile.ZipFile(next(w for d in links for w in d.glob("*.whl"))) as archive:
                    seen["metadata"] = archive.read("cuda_tile-1.6.0rc5.dist-info/METADATA").decode()
                    seen["record"] = archive.read("cuda_tile-1.6.0rc5.dist-info/RECORD").decode()
            return super().__call__(argv, **kwargs)

    closure = {"sglang": ("0.5.18", "a" * 64), "cuda-tile": ("1.6.0rc5", "b" * 64), "fastapi": ("0.136.3", "c" * 64)}
    pip = Pip({"3.11": closure}, no_wheel=("3.10", "3.12", "3.13"))
    monkeypatch.setattr(SCRIPT, "find_interpreter", lambda version, runner=None: f"/usr/bin/python{version}")
    path = SCRIPT.lock_release(
        "0.5.18", SCRIPT.read_hosts(), tmp_path, say=lambda line: None, runner=pip, unhashed=["cuda-tile==1.6.0rc5"], notes=["why"]
    )
    assert seen["wheels"] == ["cuda_tile-1.6.0rc5-py3-none-any.whl"]
    assert "Name: cuda-tile\nVersion: 1.6.0rc5\n" in seen["metadata"] and "Requires-Dist" not in seen["metadata"]
    assert "cuda_tile-1.6.0rc5.dist-info/METADATA,sha256=" in seen["record"]
    assert pip.constraints[1] == "cuda-tile==1.6.0rc5\n"
    text = path.read_text()
    lock = parse_lock(text, str(path))
    assert [p.name for p in lock.pins] == ["fastapi", "sglang"]
    assert [(p.name, p.version, p.hashes) for p in lock.unhashed] == [("cuda-tile", "1.6.0rc5", ())]
    assert "b" * 64 not in text
    assert any("scripts/lock_release.py 0.5.18 with the --unhashed and --why above while they hold," in line for line in text.splitlines())
    with pytest.raises(SystemExit):  # pinned without hashes needs its reason
        SCRIPT.main(["--unhashed", "cuda-tile==1.6.0rc5", "0.5.18"])
    with pytest.raises(SystemExit):
        SCRIPT.main(["--unhashed", "cuda-tile>=1.6", "--why", "x", "0.5.18"])
