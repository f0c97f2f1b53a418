"""sglang-compat on the real releases in .cache/sglang (scripts/sglang-wheels.sh)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import BIN, CACHE
from sglang_sm120_controller.compat import stack_from_metadata

CLI = BIN / "sglang-compat"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The tool without the index-wheel judgement (tests/integration/test_index_wheels.py has it)."""
    return subprocess.run([sys.executable, str(CLI), "--no-wheels", *args], capture_output=True, text=True, timeout=120)


def test_two_releases_json_and_table() -> None:
    done = run("0.5.9", "0.5.23", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["model_class"] == "KimiK25ForConditionalGeneration" and report["algorithm"] == "EAGLE3"
    old, new = report["releases"]
    assert old["patches"] == {"kimi_k25_eagle3_delegation": "would-apply", "torch_symm_mem_sm120": "would-apply"}
    assert old["audit_missing_pristine"] == ["get_embed_and_head", "set_eagle3_layers_to_capture"] and old["audit_missing"] == []
    assert old["stack"] == {"torch": "==2.9.1", "flashinfer_python": "==0.6.3", "kernel": "sgl-kernel==0.3.21"}
    assert new["patches"] == {"kimi_k25_eagle3_delegation": "fixed-upstream", "torch_symm_mem_sm120": "fixed-upstream"}
    assert new["stack"]["torch"] == "==2.14.1" and new["stack"]["kernel"] == "sglang-kernel==0.4.10"
    # SGLang's own ServerArgs decide the flags where `make sglang-runtime` made that release's environment (both here)
    assert old["flags_parser"] == new["flags_parser"] == "parser: sglang (imported)", (old["flags_parser"], new["flags_parser"])
    assert all(r["usable"] for r in report["releases"])
    table = run("0.5.9")  # the table's words; one release (each parses its flags with SGLang's own ServerArgs again)
    assert table.returncode == 0 and "OK with patches" in table.stdout and "usable" in table.stdout


def test_a_tree_has_an_unknown_stack(tmp_path: Path) -> None:
    """A tree without its dist-info (an installed package copied elsewhere): the stack is unknown."""
    import shutil

    shutil.copytree(CACHE / "sglang" / "0.5.15" / "sglang", tmp_path / "sglang")
    done = run(str(tmp_path / "sglang"), "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)["releases"][0]
    assert row["stack"]["torch"].startswith("unknown")
    assert row["patches"]["torch_symm_mem_sm120"] == "fixed-upstream"
    assert "static table" in row["flags_parser"]  # no runtime environment of 0.5.15 here: the static table, said so


def test_unusable_release_exits_1() -> None:
    # a release with no runtime environment here: its flags go through the static table (seconds, not an SGLang import);
    # the verdict comes from the audit either way
    done = run("0.5.22", "--model-class", "KimiVLForConditionalGeneration", "--json")
    assert done.returncode == 1
    row = json.loads(done.stdout)["releases"][0]
    assert row["audit_missing"] == ["get_embed_and_head", "set_eagle3_layers_to_capture"] and not row["usable"]


def test_bad_input_is_named(tmp_path: Path) -> None:
    missing = run("0.5.999", "--cache", str(tmp_path))
    assert missing.returncode == 2 and "0.5.999" in missing.stderr
    wheel = tmp_path / "notsglang-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("notsglang/__init__.py", "")
    bad = run(str(wheel))
    assert bad.returncode == 2 and f"{wheel} is not an SGLang wheel" in bad.stderr
    assert run("--frob").returncode == 2
    assert "neither an SGLang version" in run("not-a-version").stderr


def test_metadata_pins() -> None:
    text = (
        "Requires-Dist: torch==2.9.1\nRequires-Dist: flashinfer_python[cu13]==0.7.2\n"
        "Requires-Dist: sglang-kernel==0.4.10\nRequires-Dist: torch==1.0; extra == 'x'\n"
    )
    assert stack_from_metadata(text) == {"torch": "==2.9.1", "flashinfer_python": "==0.7.2", "kernel": "sglang-kernel==0.4.10"}
