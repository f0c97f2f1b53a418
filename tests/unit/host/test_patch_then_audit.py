"""The patch engine and the audit together, on a copy of the real SGLang 0.5.9 package."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from sglang_sm120.patches.audit import audit
from sglang_sm120.patches.engine import apply, revert
from sglang_sm120.patches.manifest import load_manifest

KIMI = "KimiK25ForConditionalGeneration"


@pytest.fixture
def sglang_copy(tmp_path: Path) -> Path:
    import os

    wheel_tree = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache")) / "sglang" / "0.5.9" / "sglang"
    if not wheel_tree.is_dir():
        pytest.fail(f"no SGLang 0.5.9 at {wheel_tree}: run scripts/sglang-wheels.sh")
    shutil.copytree(wheel_tree, tmp_path / "sglang")
    return tmp_path / "sglang"


def test_default_patches_close_the_eagle3_gap_and_revert_reopens_it(sglang_copy: Path):
    manifest = load_manifest(
        yaml.safe_load((ROOT / "roles/sglang_patches/files/patches/manifest.yml").read_text()), ROOT / "roles/sglang_patches/files/patches"
    )
    before = audit(sglang_copy, KIMI)
    assert sorted(before.missing_required) == ["get_embed_and_head", "set_eagle3_layers_to_capture"]

    apply(manifest, sglang_copy)
    after = audit(sglang_copy, KIMI)
    assert after.ok and list(after.missing_required) == []

    revert(manifest, sglang_copy)
    assert audit(sglang_copy, KIMI).to_dict() == before.to_dict()
