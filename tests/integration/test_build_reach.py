"""Before any build starts (plugins/module_utils/sglang_sm120/build/reach.py): the Debian packages a planned source build
needs, and whether the host reaches what the builds fetch - probed for real, with git against a local repository
and pip against a package index served on 127.0.0.1."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from sglang_sm120.build.parallel import build_plan_lines
from sglang_sm120.build.reach import ReachError, check_reach, missing_packages, project, subprocess_runner

GIT = shutil.which("git")
RUN = subprocess_runner(30)


def item(name: str, source: dict[str, Any], prebuilt: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "source": source}
    if prebuilt:
        spec["prebuilt"] = prebuilt
    return {"name": name, "kind": next(iter(source)), "spec": spec}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A git repository with the tag v1.0, as a file:// URL."""
    if GIT is None:
        pytest.fail("git is not installed on this machine")
    path = tmp_path_factory.mktemp("repo")
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    for argv in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "one"], ["tag", "v1.0"]):
        subprocess.run([GIT, *argv], cwd=path, env=env, check=True)
    return f"file://{path}"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A package index (a directory listing per project, as pip reads one) served on 127.0.0.1."""
    root = tmp_path_factory.mktemp("index")
    (root / "tinypkg").mkdir()
    (root / "tinypkg" / "tinypkg-1.0.tar.gz").write_bytes(b"not really an sdist")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def test_a_git_source_whose_ref_answers_passes(repo: str) -> None:
    reach, warnings = check_reach([item("torch", {"git": repo, "ref": "v1.0"})], ["torch"], sys.executable, RUN, GIT)
    assert reach[0].probes[0].ok is True and not reach[0].refused and warnings == []
    assert "ls-remote --exit-code" in reach[0].probes[0].how


def test_an_unknown_ref_or_repository_refuses_before_any_build_naming_both(repo: str, tmp_path: Path) -> None:
    items = [item("torch", {"git": repo, "ref": "v9.9"}), item("sgl_kernel", {"git": f"file://{tmp_path}/none", "ref": "v1"})]
    with pytest.raises(ReachError) as refused:
        check_reach(items, ["torch", "sgl_kernel"], sys.executable, RUN, GIT)
    text = str(refused.value)
    assert text.startswith("the host cannot reach what these builds fetch, so nothing was built: ")
    assert f"torch: source {repo} at v9.9: the repository answers but has no such ref" in text
    assert f"sgl_kernel: source file://{tmp_path}/none at v1: " in text
    assert "a mirror: git's url.<base>.insteadOf, pip's index-url" in text
    assert [r["refused"] for r in refused.value.result["reach"]] == [True, True]


def test_a_requirement_is_probed_with_pip_against_its_index(index: str) -> None:
    found = item("tinypkg", {"sdist": "tinypkg==1.0", "index": index})
    reach, _ = check_reach([found], ["tinypkg"], sys.executable, RUN, GIT)
    assert reach[0].probes[0].ok is True, reach[0].probes[0].said
    with pytest.raises(ReachError, match=r"nosuchpkg: source nosuchpkg==1.0 \(index http://127\.0\.0\.1:\d+/\): "):
        check_reach([item("nosuchpkg", {"sdist": "nosuchpkg==1.0", "index": index})], ["nosuchpkg"], sys.executable, RUN, GIT)


def test_a_prebuilt_that_answers_beside_a_source_that_does_not_is_a_warning(index: str, tmp_path: Path) -> None:
    both = item("tinypkg", {"git": f"file://{tmp_path}/none", "ref": "v1"}, {"wheel": "tinypkg==1.0", "index": index})
    reach, warnings = check_reach([both], ["tinypkg"], sys.executable, RUN, GIT)
    assert [p.what for p in reach[0].probes] == ["prebuilt", "source"]
    assert [p.ok for p in reach[0].probes] == [True, False]
    assert len(warnings) == 1 and warnings[0].startswith(f"tinypkg: source file://{tmp_path}/none at v1 does not answer (")


def test_without_git_yet_a_git_source_is_unknown_not_refused(repo: str) -> None:
    reach, warnings = check_reach([item("torch", {"git": repo, "ref": "v1.0"})], ["torch"], sys.executable, RUN, None)
    assert reach[0].probes[0].ok is None and not reach[0].refused and warnings == []


def test_only_the_missing_remote_builds_are_probed(repo: str) -> None:
    items = [item("torch", {"git": repo, "ref": "nope"}), item("standin", {"path": "/srv/tree"})]
    reach, _ = check_reach(items, ["standin"], sys.executable, RUN, GIT)
    assert [(r.name, r.probes) for r in reach] == [("standin", [])]


def test_the_packages_of_the_planned_source_builds_that_dpkg_lacks() -> None:
    items = [item("torch", {"git": "u", "ref": "r"}), item("sgl_kernel", {"git": "u", "ref": "r"}), item("probe", {"path": "/p"})]
    wanted = {"git": ["git", "build-essential", "python3-dev"], "path": []}
    absent, needed_by = missing_packages(items, ["torch", "sgl_kernel", "probe"], wanted, {"build-essential": "12.9"})
    assert absent == ["git", "python3-dev"]
    assert needed_by == {"git": ["torch", "sgl_kernel"], "python3-dev": ["torch", "sgl_kernel"]}
    assert missing_packages(items, ["probe"], wanted, {}) == ([], {})


def test_project_names_of_requirements() -> None:
    assert [project(r) for r in ("torch==2.9.1+cu130", "flashinfer-python>=0.6", "sglang")] == ["torch", "flashinfer-python", "sglang"]
    with pytest.raises(ReachError, match="cannot read a project name"):
        project("==1.0")


def test_the_build_role_refuses_an_unreachable_source_before_any_build(tmp_path: Path, repo: str) -> None:
    """The role's own tasks, in check mode on the controller: the reach step fails naming the artifact and
    its source; the group builds are never reached."""
    built = {"build": "true", "build_requires": [], "verify": {"cuda_arch": "12.0"}}
    specs = [
        {"name": "torch", "source": {"git": f"file://{tmp_path}/nothing-here", "ref": "v2.9.1"}, **built},
        {"name": "probe", "source": {"git": repo, "ref": "v1.0"}, **built},
    ]
    extra = {"sglang_build_specs": specs, "sglang_build_root": str(tmp_path / "build"), "sglang_build_source_packages": {}}
    extra["sglang_build_estimate_hours"] = {}  # no estimate: the plan says so
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_CACHE_PLUGIN="memory")
    env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
    playbook = ROOT / "tests/playbooks/build_reach.yml"
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", "--check", str(playbook)]
    run = subprocess.run([*cmd, "-e", json.dumps(extra)], capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    out = run.stdout
    assert run.returncode != 0, out[-3000:]
    assert "TASK [sm120.sglang.sglang_build : Ensure the host reaches what the planned builds fetch" in out
    assert f"torch: source file://{tmp_path}/nothing-here at v2.9.1: " in out
    assert "probe: source" not in out.split("the host cannot reach", 1)[1].split("Give the host")[0]
    assert "torch: source build (git), hours not estimated" in out  # the plan, printed before the probes
    assert "Build what is not cached" not in out
    assert not (tmp_path / "build").exists()  # check mode: not even the build root


def test_the_plan_says_where_each_missing_artifact_comes_from_and_the_hours() -> None:
    items = [
        item("torch", {"git": "https://example.invalid/pytorch", "ref": "v2.9.1"}),
        item(
            "sgl_kernel",
            {"git": "u", "ref": "r"},
            {"wheelhouse": "/c/w", "pattern": "k.whl", "origin": "the package index's own wheel, k.whl"},
        ),
        item("sglang", {"wheel": "sglang==0.5.9"}),
        item("done", {"git": "u", "ref": "r"}),
    ]
    items[1]["prebuilt_files"] = ["/c/w/k.whl"]
    lines, hours = build_plan_lines(items, ["torch", "sgl_kernel", "sglang"], {"torch": [3, 5], "sgl_kernel": [1, 2]})
    assert lines == [
        "torch: source build (git), 3-5 h (estimate)",
        "sgl_kernel: prebuilt wheel (the package index's own wheel, k.whl); if it fails verification: source build (git), 1-2 h (estimate)",
        "sglang: fetched (wheel source), verified as a build",
    ]
    assert hours == [3.0, 5.0]  # the prebuilt kernel counts nothing
    assert build_plan_lines(items, ["done"], {})[0] == ["done: source build (git), hours not estimated"]
    # issue 49: with no wheel on the shelf (index wheels off, an empty prebuilt folder) the kernel is a source build
    items[1]["prebuilt_files"] = []
    lines, hours = build_plan_lines(items, ["torch", "sgl_kernel"], {"torch": [3, 5], "sgl_kernel": [1, 2]})
    assert lines[1] == "sgl_kernel: no prebuilt wheel matches /c/w/k.whl on the controller, so source build (git), 1-2 h (estimate)"
    assert hours == [4.0, 7.0]
