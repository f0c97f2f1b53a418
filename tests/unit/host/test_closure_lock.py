"""The lock of a release's Python closure (plugins/module_utils/sglang_sm120/build/closure_lock.py) and the build
pipeline's use of it: the plan reads and keys it, the download takes its pins as constraints, and a downloaded
wheel it does not allow fails the build before anything is cached. The downloads here are real `pip download`s
from a package index made of tiny wheels in tmp_path (file:// URLs, no network)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_build_pipeline import CONTEXT, fake_dep, tiny_wheel

from sglang_sm120.build.closure_lock import (
    ClosureLockError,
    LockFileError,
    canonical_version,
    check_wheels,
    constraints_text,
    departures,
    exact_pins,
    parse_lock,
)
from sglang_sm120.build.parallel import build_plan_lines
from sglang_sm120.build.pipeline import BuildError, BuildSpecError, Workspace, build_script, cached, plan, start, wait, work_dir


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pin(wheel: Path, name: str, version: str, marker: str = "") -> str:
    return f"{name}=={version}{f' ; {marker}' if marker else ''} \\\n    --hash=sha256:{sha(wheel)}\n"


# ---------------------------------------------------------------- the lock file


LOCK = """# The Python closure of a release, locked
fastapi==0.115.6 \\
    --hash=sha256:{a} \\
    --hash=sha256:{b}

# numpy moves with the Python
numpy==2.2.6 ; python_version == "3.10" \\
    --hash=sha256:{c}
numpy==2.3.5 ; python_version == "3.11" or python_version == "3.12" --hash=sha256:{d}  # one line
Typing_Extensions==4.15.0 --hash=sha256:{e}
""".format(a="a" * 64, b="b" * 64, c="c" * 64, d="d" * 64, e="e" * 64)


def test_a_lock_reads_continuations_markers_comments_and_every_hash() -> None:
    lock = parse_lock(LOCK, "locks/sglang-1.0.txt")
    assert [(p.name, p.version, p.marker) for p in lock.pins] == [
        ("fastapi", "0.115.6", ""),
        ("numpy", "2.2.6", 'python_version == "3.10"'),
        ("numpy", "2.3.5", 'python_version == "3.11" or python_version == "3.12"'),
        ("typing-extensions", "4.15.0", ""),
    ]
    assert lock.pins[0].hashes == ("a" * 64, "b" * 64)
    assert [p.version for p in lock.pins_of("NumPy")] == ["2.2.6", "2.3.5"]


def test_the_constraints_keep_the_markers_and_leave_out_the_exempt_names() -> None:
    lock = parse_lock(LOCK, "l.txt")
    assert constraints_text(lock, exempt=["typing_extensions", "torch"]) == (
        'fastapi==0.115.6\nnumpy==2.2.6 ; python_version == "3.10"\nnumpy==2.3.5 ; python_version == "3.11" or python_version == "3.12"\n'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "fastapi==0.115.6\n",
            r"l\.txt:1: fastapi==0\.115\.6 needs one or more --hash=sha256:<64 hex digits> and nothing else, found no hash",
        ),
        ("fastapi>=0.115 --hash=sha256:" + "a" * 64 + "\n", r"l\.txt:1: expected name==version"),
        ("# c\n\nfastapi==1 \\\n  --hash=md5:abc\n", r"l\.txt:3: fastapi==1 needs one or more --hash=sha256.*found --hash=md5:abc"),
        ("fastapi==1 --hash=sha256:abc\n", r"l\.txt:1: .*found --hash=sha256:abc"),
        (
            f"fastapi==1 --hash=sha256:{'a' * 64}\nFastAPI==2 --hash=sha256:{'b' * 64}\n",
            r"l\.txt:2: fastapi is pinned twice \(first at line 1\)",
        ),
        ("# only comments\n", r"l\.txt: no pins"),
    ],
    ids=["no-hash", "not-exact", "md5", "short-hash", "twice", "empty"],
)
def test_a_lock_that_does_not_parse_is_refused_naming_file_and_line(text: str, message: str) -> None:
    with pytest.raises(LockFileError, match=message):
        parse_lock(text, "l.txt")


def test_versions_compare_as_pip_compares_them() -> None:
    assert canonical_version("1.0-RC1") == canonical_version("1.0rc1")
    assert canonical_version("2.0-1") == canonical_version("2.0.post1")
    assert canonical_version("0!2.9.1+CU130") == "2.9.1+cu130"
    assert canonical_version("0.115.6") != canonical_version("0.115.60")


# ---------------------------------------------------------------- the check of downloaded wheels


@pytest.fixture()
def wheels(tmp_path: Path) -> dict[str, Path]:
    out = tmp_path / "wheels"
    out.mkdir()
    return {
        "app": tiny_wheel(out, "app", "1.0", requires=["dep"]),
        "dep1": tiny_wheel(out, "dep", "1.0"),
        "dep2": tiny_wheel(out, "dep", "2.0"),
        "torch": tiny_wheel(out, "torch", "2.9.1+cu130"),
    }


def test_locked_wheels_pass_and_exempt_ones_are_not_looked_at(wheels: dict[str, Path]) -> None:
    lock = parse_lock(pin(wheels["app"], "app", "1.0") + pin(wheels["dep1"], "dep", "1.0"), "lock.txt")
    check_wheels(lock, [wheels["app"], wheels["dep1"], wheels["torch"]], exempt=["torch"])
    assert departures(lock, [wheels["torch"]], exempt=[]) != []  # not exempt: torch is not in the lock


def test_a_wheel_at_a_version_the_lock_does_not_name_is_refused_naming_it(wheels: dict[str, Path]) -> None:
    lock = parse_lock(pin(wheels["app"], "app", "1.0") + pin(wheels["dep1"], "dep", "1.0"), "locks/sglang-1.0.txt")
    with pytest.raises(ClosureLockError) as caught:
        check_wheels(lock, [wheels["app"], wheels["dep2"]], what="app==1.0 with its dependencies")
    message = str(caught.value)
    assert message.startswith("1 of 2 downloaded wheels of app==1.0 with its dependencies depart from the lock locks/sglang-1.0.txt: ")
    assert "dep-2.0-py3-none-any.whl: the lock says dep==1.0, found dep==2.0" in message
    assert "scripts/lock_release.py VERSION" in message and "app-1.0" not in message
    assert caught.value.result["departures"] == [
        {"wheel": "dep-2.0-py3-none-any.whl", "locked": "dep==1.0", "found": "dep==2.0"},
    ]


def test_a_wheel_whose_sha256_the_lock_does_not_list_is_refused(wheels: dict[str, Path]) -> None:
    lock = parse_lock(pin(wheels["app"], "app", "1.0") + f"dep==1.0 --hash=sha256:{'0' * 64}\n", "lock.txt")
    with pytest.raises(
        ClosureLockError,
        match=rf"dep-1\.0-py3-none-any\.whl: the lock says dep==1\.0 with sha256 0{{64}}, found sha256 {sha(wheels['dep1'])}",
    ):
        check_wheels(lock, [wheels["app"], wheels["dep1"]])


def test_a_wheel_the_lock_does_not_name_at_all_is_refused(wheels: dict[str, Path]) -> None:
    lock = parse_lock(pin(wheels["app"], "app", "1.0"), "lock.txt")
    with pytest.raises(
        ClosureLockError, match=r"dep-1\.0-py3-none-any\.whl: the lock says nothing of dep \(not in the lock\), found dep==1\.0"
    ):
        check_wheels(lock, [wheels["app"], wheels["dep1"]])


def test_any_pin_of_the_name_at_that_version_allows_the_file(wheels: dict[str, Path]) -> None:
    """Markers are the constraints' business: a file any pin allows is a locked file."""
    text = pin(wheels["app"], "app", "1.0") + pin(wheels["dep1"], "dep", "1.0", 'python_version == "3.10"')
    text += pin(wheels["dep2"], "dep", "2.0", 'python_version == "3.11"')
    lock = parse_lock(text, "lock.txt")
    check_wheels(lock, [wheels["app"], wheels["dep1"], wheels["dep2"]])


def test_an_unhashed_pin_holds_the_version_and_allows_any_file_of_it(wheels: dict[str, Path]) -> None:
    """A header line `# unhashed: name==version` (a distribution whose wheels the lock's writer could not reach):
    a constraint like any pin, keyed, and any sha256 of that version passes; another version does not."""
    text = "# unhashed: dep==1.0\n" + pin(wheels["app"], "app", "1.0")
    lock = parse_lock(text, "lock.txt")
    assert [(p.name, p.version, p.hashes) for p in lock.unhashed] == [("dep", "1.0", ())]
    assert [p.version for p in lock.pins_of("dep")] == ["1.0"]
    assert constraints_text(lock) == "app==1.0\ndep==1.0\n"
    assert lock.digest() != parse_lock(pin(wheels["app"], "app", "1.0"), "lock.txt").digest()
    check_wheels(lock, [wheels["app"], wheels["dep1"]])
    with pytest.raises(ClosureLockError, match=r"dep-2\.0-py3-none-any\.whl: the lock says dep==1\.0, found dep==2\.0"):
        check_wheels(lock, [wheels["app"], wheels["dep2"]])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# unhashed: dep>=1.0\n", r"lock\.txt:1: expected '# unhashed: name==version'"),
        ("# unhashed: app==1.0\n", r"lock\.txt:1: app is pinned twice"),
    ],
)
def test_a_bad_unhashed_line_is_refused_naming_file_and_line(wheels: dict[str, Path], text: str, message: str) -> None:
    with pytest.raises(LockFileError, match=message):
        parse_lock(text + pin(wheels["app"], "app", "1.0"), "lock.txt")


# ---------------------------------------------------------------- the pipeline: plan, key, script


def locked_spec(lock: Path, **source: Any) -> dict[str, Any]:
    return {
        "name": "app",
        "source": {"wheel": "app==1.0", "with_deps": True, **source},
        "lock": str(lock),
        "verify": {"device_code": "none"},
        "timeout_minutes": 5,
    }


def test_the_plan_reads_the_lock_and_keys_its_pins_not_its_comments_or_place(wheels: dict[str, Path], tmp_path: Path) -> None:
    lock = tmp_path / "sglang-1.0.txt"
    lock.write_text("# written today\n" + pin(wheels["app"], "app", "1.0") + pin(wheels["dep1"], "dep", "1.0"))
    item = plan([locked_spec(lock)], CONTEXT)[0]
    assert item.lock is not None and item.lock["file"] == str(lock) and item.lock["text"] == lock.read_text()
    first = item.key
    lock.write_text("# written another day\n" + pin(wheels["app"], "app", "1.0") + pin(wheels["dep1"], "dep", "1.0"))
    assert plan([locked_spec(lock)], CONTEXT)[0].key == first
    moved = tmp_path / "elsewhere.txt"
    moved.write_text(lock.read_text())
    assert plan([locked_spec(moved)], CONTEXT)[0].key == first  # the same lock in another checkout
    lock.write_text(pin(wheels["app"], "app", "1.0") + pin(wheels["dep2"], "dep", "2.0"))
    assert plan([locked_spec(lock)], CONTEXT)[0].key != first  # a lock update downloads the closure again
    unlocked = {k: v for k, v in locked_spec(lock).items() if k != "lock"}
    assert plan([unlocked], CONTEXT)[0].key not in (first, plan([locked_spec(lock)], CONTEXT)[0].key)
    assert plan([unlocked], CONTEXT)[0].key == plan([{**unlocked, "lock": None}], CONTEXT)[0].key


def test_a_missing_lock_file_is_refused_naming_it_and_the_command_that_writes_it(tmp_path: Path) -> None:
    missing = tmp_path / "locks" / "sglang-1.0.txt"
    with pytest.raises(BuildSpecError) as caught:
        plan([locked_spec(missing)], CONTEXT)
    message = str(caught.value)
    assert message.startswith(f"build spec 'app': its lock file {missing} does not exist on the controller")
    assert "`scripts/lock_release.py 1.0`" in message and "sglang_build_require_lock: false" in message


def test_a_lock_of_another_release_or_one_that_does_not_parse_stops_the_plan(wheels: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "other.txt"
    other.write_text(f"app==0.9 --hash=sha256:{'a' * 64}\n")
    with pytest.raises(BuildSpecError, match=r"build spec 'app': its lock file .*other\.txt pins app==0\.9, the spec downloads app==1\.0"):
        plan([locked_spec(other)], CONTEXT)
    broken = tmp_path / "broken.txt"
    broken.write_text("app==1.0\n")
    with pytest.raises(BuildSpecError, match=r"build spec 'app': .*broken\.txt:1: app==1\.0 needs one or more --hash"):
        plan([locked_spec(broken)], CONTEXT)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"source": {"wheel": "app==1.0"}},
            "`lock` locks the dependency closure of a `wheel` source with with_deps: true, found a wheel source without",
        ),
        ({"source": {"path": "/src"}, "build": "true", "build_requires": []}, "found a path source"),
        ({"lock": ""}, "`lock` must be a lock file's path on the controller, found ''"),
    ],
    ids=["no-deps", "built-source", "empty"],
)
def test_a_lock_only_fits_a_wheel_source_with_its_dependencies(spec: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(BuildSpecError, match=f"build spec 'app': .*{message}"):
        plan([{**locked_spec(tmp_path / "l.txt"), **spec}], CONTEXT)


def test_the_download_takes_the_lock_as_constraints_less_the_dependencies_own_wheels(wheels: dict[str, Path], tmp_path: Path) -> None:
    lock = tmp_path / "sglang-1.0.txt"
    lock.write_text(pin(wheels["app"], "app", "1.0") + pin(wheels["dep1"], "dep", "1.0") + pin(wheels["torch"], "torch", "2.9.1"))
    torch_dir = fake_dep(tmp_path / "root", "torch", "2.9.1+cu130", ["triton==3.5.1"])
    specs = [
        {"name": "torch", "source": {"wheelhouse": str(tmp_path / "wheels"), "pattern": "torch-*.whl"}, "verify": {"device_code": "none"}},
        {**locked_spec(lock), "depends_on": ["torch"]},
    ]
    item = plan(specs, CONTEXT)[1].to_dict()
    script = build_script(item, Workspace(str(tmp_path / "root"), "python3", "/cuda", 1, {"torch": torch_dir}))
    work = work_dir(tmp_path / "root", "app", item["key"])
    assert f"printf '%s' 'app==1.0\ndep==1.0\n' > {work}/lock-constraints.txt" in script  # torch: its own pin, 2.9.1+cu130
    download = next(line for line in script.splitlines() if "pip download" in line)
    assert f"-c {work}/constraints.txt -c {work}/lock-constraints.txt --only-binary :all:" in download


def test_the_plan_says_whether_the_closure_is_held_to_a_lock(wheels: dict[str, Path], tmp_path: Path) -> None:
    lock = tmp_path / "sglang-1.0.txt"
    lock.write_text(pin(wheels["app"], "app", "1.0"))
    locked = plan([locked_spec(lock)], CONTEXT)[0].to_dict()
    unlocked = plan([{k: v for k, v in locked_spec(lock).items() if k != "lock"}], CONTEXT)[0].to_dict()
    assert build_plan_lines([locked], ["app"], {})[0] == [
        "app: fetched (wheel source, its closure held to the lock sglang-1.0.txt), verified as a build"
    ]
    assert build_plan_lines([unlocked], ["app"], {})[0] == [
        "app: fetched (wheel source, its closure NOT locked: no lock file), verified as a build"
    ]


# ---------------------------------------------------------------- the pipeline: a real download under the lock


def simple_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 package index of `wheels` under root/simple (file:// URLs, each link with its sha256)."""
    by_name: dict[str, list[Path]] = {}
    for wheel in wheels:
        by_name.setdefault(wheel.name.split("-")[0].replace("_", "-").lower(), []).append(wheel)
    for name, files in by_name.items():
        page = root / "simple" / name
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="{w.as_uri()}#sha256={sha(w)}">{w.name}</a>\n' for w in files)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return (root / "simple").as_uri()


@pytest.fixture()
def offline_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip as a host without configuration runs it: no config file, no PIP_* variable of this machine."""
    for name in list(os.environ):
        if name.startswith("PIP_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")


def build(item: dict[str, Any], root: Path, dep_dirs: dict[str, str] | None = None) -> dict[str, Any]:
    started = start(item, Workspace(str(root), "python3", "/nonexistent-cuda", 1, dep_dirs or {}))
    assert started["status"] == "started", started
    while not (result := wait(item, str(root), 5))["done"]:
        pass
    return result


def test_a_locked_download_takes_the_locked_version_and_is_cached(offline_pip: None, wheels: dict[str, Path], tmp_path: Path) -> None:
    index = simple_index(tmp_path / "index", [wheels["app"], wheels["dep1"], wheels["dep2"]])
    lock = tmp_path / "sglang-1.0.txt"
    lock.write_text(pin(wheels["app"], "app", "1.0") + pin(wheels["dep1"], "dep", "1.0"))
    item = plan([locked_spec(lock, index=index)], CONTEXT)[0].to_dict()
    record = build(item, tmp_path / "root")["artifact"]
    assert sorted(w["wheel"] for w in record["wheels"]) == [
        "app-1.0-py3-none-any.whl",
        "dep-1.0-py3-none-any.whl",
    ]  # not dep 2.0, the newest
    assert record["lock"] == {"file": str(lock), "digest": item["lock"]["digest"], "exempt": [], "held": {}}
    assert cached(tmp_path / "root", "app", item["key"]) == record


def test_a_host_python_the_lock_does_not_cover_downloads_a_version_outside_it_and_fails(
    offline_pip: None, wheels: dict[str, Path], tmp_path: Path
) -> None:
    """The lock holds dep at 1.0 only for another Python: on this one the constraint does not apply, pip takes the
    newest dep (the fastapi of issue 50), and the check refuses the download before anything is cached."""
    index = simple_index(tmp_path / "index", [wheels["app"], wheels["dep1"], wheels["dep2"]])
    lock = tmp_path / "sglang-1.0.txt"
    lock.write_text(pin(wheels["app"], "app", "1.0") + pin(wheels["dep1"], "dep", "1.0", 'python_version == "2.7"'))
    item = plan([locked_spec(lock, index=index)], CONTEXT)[0].to_dict()
    with pytest.raises(BuildError) as caught:
        build(item, tmp_path / "root")
    message = str(caught.value)
    assert message.startswith(f"app: 1 of 2 downloaded wheels of app==1.0 with its dependencies depart from the lock {lock}: ")
    assert 'dep-2.0-py3-none-any.whl: the lock says dep==1.0 ; python_version == "2.7", found dep==2.0' in message
    assert message.endswith("; nothing cached")
    assert cached(tmp_path / "root", "app", item["key"]) is None and not work_dir(tmp_path / "root", "app", item["key"]).exists()


def test_a_downloaded_wheel_the_lock_does_not_name_or_whose_hash_differs_fails_the_build(
    offline_pip: None, wheels: dict[str, Path], tmp_path: Path
) -> None:
    extra = tiny_wheel(tmp_path / "wheels", "extra", "1.0")
    (tmp_path / "more").mkdir()
    needs = tiny_wheel(tmp_path / "more", "app", "1.0", requires=["dep", "extra"])
    index = simple_index(tmp_path / "index", [needs, wheels["dep1"], extra])
    lock = tmp_path / "sglang-1.0.txt"
    lock.write_text(pin(needs, "app", "1.0") + f"dep==1.0 --hash=sha256:{'0' * 64}\n")
    item = plan([locked_spec(lock, index=index)], CONTEXT)[0].to_dict()
    with pytest.raises(BuildError) as caught:
        build(item, tmp_path / "root")
    message = str(caught.value)
    assert "2 of 3 downloaded wheels" in message
    assert f"dep-1.0-py3-none-any.whl: the lock says dep==1.0 with sha256 {'0' * 64}, found sha256 {sha(wheels['dep1'])}" in message
    assert "extra-1.0-py3-none-any.whl: the lock says nothing of extra (not in the lock), found extra==1.0" in message
    assert cached(tmp_path / "root", "app", item["key"]) is None


def test_a_locked_download_takes_an_unhashed_pins_version_from_the_index(
    offline_pip: None, wheels: dict[str, Path], tmp_path: Path
) -> None:
    """The real pip download, the lock naming dep only by an unhashed line: dep 1.0 (not the newest) is taken and
    passes the check whatever its sha256."""
    index = simple_index(tmp_path / "index", [wheels["app"], wheels["dep1"], wheels["dep2"]])
    lock = tmp_path / "sglang-1.0.txt"
    lock.write_text("# unhashed: dep==1.0\n" + pin(wheels["app"], "app", "1.0"))
    item = plan([locked_spec(lock, index=index)], CONTEXT)[0].to_dict()
    record = build(item, tmp_path / "root")["artifact"]
    assert sorted(w["wheel"] for w in record["wheels"]) == ["app-1.0-py3-none-any.whl", "dep-1.0-py3-none-any.whl"]


def test_the_dependencies_own_wheels_are_exempt_from_the_lock(offline_pip: None, wheels: dict[str, Path], tmp_path: Path) -> None:
    """torch 2.9.1+cu130 from its wheelhouse: not in the lock (whose torch line is the index's), pinned by its own record."""
    (tmp_path / "more").mkdir()
    needs = tiny_wheel(tmp_path / "more", "app", "1.0", requires=["dep", "torch"])
    torch_dir = tmp_path / "root" / "wheelhouse" / "torch" / ("k" * 64)  # the torch artifact as the cache holds it
    torch_dir.mkdir(parents=True)
    (torch_dir / wheels["torch"].name).write_bytes(wheels["torch"].read_bytes())
    record = {
        "name": "torch",
        "package": "torch",
        "kind": "git",
        "wheels": [{"wheel": wheels["torch"].name}],
        "installs": [wheels["torch"].name],
    }
    (torch_dir / "artifact.json").write_text(json.dumps(record))
    index = simple_index(tmp_path / "index", [needs, wheels["dep1"]])
    lock = tmp_path / "sglang-1.0.txt"
    lock.write_text(pin(needs, "app", "1.0") + pin(wheels["dep1"], "dep", "1.0") + f"torch==2.9.1 --hash=sha256:{'f' * 64}\n")
    specs = [
        {"name": "torch", "source": {"wheelhouse": str(tmp_path / "wheels"), "pattern": "torch-*.whl"}, "verify": {"device_code": "none"}},
        {**locked_spec(lock, index=index), "depends_on": ["torch"]},
    ]
    item = plan(specs, CONTEXT)[1].to_dict()
    record = build(item, tmp_path / "root", {"torch": str(torch_dir)})["artifact"]
    assert sorted(w["wheel"] for w in record["wheels"]) == [needs.name, "dep-1.0-py3-none-any.whl", wheels["torch"].name]
    assert record["lock"]["exempt"] == ["torch"]


def test_an_artifacts_exact_pins_are_read_from_its_metadata_leaving_out_extras_and_ranges() -> None:
    metadata = (
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.1+cu130\n"
        'Requires-Dist: nvidia-cublas==13.0.0.19; platform_system == "Linux"\n'
        "Requires-Dist: triton (==3.5.1)\n"
        "Requires-Dist: Typing_Extensions>=4.10.0\n"
        'Requires-Dist: opt-einsum==3.3; extra == "opt-einsum"\n'
    )
    assert exact_pins(metadata) == {"nvidia-cublas": "13.0.0.19", "triton": "3.5.1"}


def test_what_an_exempt_artifact_pins_exactly_is_held_by_its_pin_not_the_locks(wheels: dict[str, Path], tmp_path: Path) -> None:
    """torch 2.9.1+cu130 from the vetted wheelhouse requires CUDA-13 packages the index's (CUDA-12) closure never had:
    at the version torch pins they pass; at another version they are the lock's to refuse."""
    cuda13 = tiny_wheel(tmp_path / "wheels", "cudalib", "13.0")
    lock = parse_lock(pin(wheels["app"], "app", "1.0"), "lock.txt")
    check_wheels(lock, [wheels["app"], cuda13], exempt=["torch"], held={"cudalib": "13.0"})
    with pytest.raises(ClosureLockError, match=r"cudalib-13\.0-py3-none-any\.whl: the lock says nothing of cudalib"):
        check_wheels(lock, [wheels["app"], cuda13], exempt=["torch"], held={"cudalib": "12.8"})


def test_a_locked_download_takes_what_the_dependencys_own_wheel_pins(offline_pip: None, tmp_path: Path) -> None:
    """The real download: the torch artifact's wheel pins cudalib==13.0 (not in the lock); pip takes it with torch's
    requirements and the check lets it through as held by torch's pin, recorded in the artifact."""
    (tmp_path / "wheels").mkdir()
    torch = tiny_wheel(tmp_path / "wheels", "torch", "2.9.1+cu130", requires=["cudalib==13.0"])
    cudalib = tiny_wheel(tmp_path / "wheels", "cudalib", "13.0")
    app = tiny_wheel(tmp_path / "wheels", "app", "1.0", requires=["torch"])
    torch_dir = tmp_path / "root" / "wheelhouse" / "torch" / ("k" * 64)
    torch_dir.mkdir(parents=True)
    (torch_dir / torch.name).write_bytes(torch.read_bytes())
    record = {"name": "torch", "package": "torch", "kind": "git", "wheels": [{"wheel": torch.name}], "installs": [torch.name]}
    (torch_dir / "artifact.json").write_text(json.dumps(record))
    index = simple_index(tmp_path / "index", [app, cudalib])
    lock = tmp_path / "sglang-1.0.txt"
    lock.write_text(pin(app, "app", "1.0") + f"torch==2.9.1 --hash=sha256:{'f' * 64}\n")
    specs = [
        {"name": "torch", "source": {"wheelhouse": str(tmp_path / "wheels"), "pattern": "torch-*.whl"}, "verify": {"device_code": "none"}},
        {**locked_spec(lock, index=index), "depends_on": ["torch"]},
    ]
    item = plan(specs, CONTEXT)[1].to_dict()
    done = build(item, tmp_path / "root", {"torch": str(torch_dir)})["artifact"]
    assert sorted(w["wheel"] for w in done["wheels"]) == sorted([app.name, cudalib.name, torch.name])
    assert done["lock"]["exempt"] == ["torch"] and done["lock"]["held"] == {"cudalib": "13.0"}
