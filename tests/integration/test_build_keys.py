"""Build keys hash what the controller holds, never where it holds it: the same checkout under
another path (make deploy vs plain ansible-playbook, a second clone) keeps every key."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import ROOT
from sglang_sm120.build.pipeline import plan

FIXTURE = ROOT / "tests" / "fixtures" / "sm120-probe"
CONTEXT = {"cuda_version": "13.0.1", "nvcc_build": "V13.0.88", "cuda_home": "/usr/local/cuda-13.0", "arch": "12.0"}


def specs(tree: Path, wheels: Path) -> list[dict]:
    return [
        {
            "name": "probe",
            "source": {"path": str(tree)},
            "prebuilt": {"wheelhouse": str(wheels), "pattern": "probe-*.whl"},
            "build": "python3 build_wheel.py --out $WHEEL_DIR",
            "build_requires": [],
            "local_version": "cu130",
            "verify": {"device_code": "none"},
        },
        {"name": "sglang", "source": {"wheelhouse": str(wheels), "pattern": "sglang-*.whl"}, "verify": {"device_code": "none"}},
    ]


def keys(tree: Path, wheels: Path) -> dict[str, str]:
    return {p.name: p.key for p in plan(specs(tree, wheels), CONTEXT)}


def checkout(base: Path) -> tuple[Path, Path]:
    tree = base / "src"
    shutil.copytree(FIXTURE, tree)
    wheels = base / "wheels"
    wheels.mkdir()
    (wheels / "sglang-0.5.9-py3-none-any.whl").write_bytes(b"the same wheel")
    (wheels / "probe-1.0+cu130-py3-none-any.whl").write_bytes(b"a prebuilt probe")
    return tree, wheels


def test_same_files_under_another_path_keep_the_keys(tmp_path: Path) -> None:
    first = keys(*checkout(tmp_path / "clone-a"))
    second = keys(*checkout(tmp_path / "elsewhere" / "clone-b"))
    assert first == second


def test_changed_content_changes_the_key_of_what_it_feeds(tmp_path: Path) -> None:
    tree, wheels = checkout(tmp_path / "clone")
    before = keys(tree, wheels)
    (tree / "build_wheel.py").write_text((tree / "build_wheel.py").read_text() + "\n# changed\n")
    after_tree = keys(tree, wheels)
    assert after_tree["probe"] != before["probe"] and after_tree["sglang"] == before["sglang"]
    (wheels / "sglang-0.5.9-py3-none-any.whl").write_bytes(b"another wheel")
    after_wheel = keys(tree, wheels)
    assert after_wheel["sglang"] != after_tree["sglang"]
    (wheels / "probe-1.0+cu130-py3-none-any.whl").write_bytes(b"another prebuilt probe")
    assert keys(tree, wheels)["probe"] != after_wheel["probe"]
