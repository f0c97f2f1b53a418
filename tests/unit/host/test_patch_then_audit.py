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


def test_a_release_patched_and_audited_reads_as_made_until_the_host_changes_it(sglang_copy: Path, tmp_path: Path):
    """patches.intact: the one look a no-op converge takes at a release found by its key."""
    from sglang_sm120.patches import intact
    from sglang_sm120.patches.audit import audit_key, write_audit_proof

    manifest = load_manifest(
        yaml.safe_load((ROOT / "roles/sglang_patches/files/patches/manifest.yml").read_text()), ROOT / "roles/sglang_patches/files/patches"
    )
    apply(manifest, sglang_copy)
    stamp = tmp_path / "audit.json"
    question = {"stamp": str(stamp), "model_class": KIMI, "algorithm": "EAGLE3", "model_dir": None}

    def look() -> intact.Intact:
        return intact.check(sglang_copy, manifest, "/nonexistent/python", audit=question)

    assert look().reasons == ["the audit's proof does not hold for the package as it is"], "no audit recorded yet"
    write_audit_proof(stamp, audit_key(sglang_copy, KIMI, "EAGLE3"), audit(sglang_copy, KIMI).to_dict())
    made = look()
    assert made.ok and made.reasons == [] and made.audit["ok"]
    assert made.patches == {"kimi_k25_eagle3_delegation": "already-applied", "torch_symm_mem_sm120": "already-applied"}

    cache = sglang_copy / "srt" / "models" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "kimi_k25.cpython-312.pyc").write_bytes(b"\0")  # an import writes bytecode: not what the audit read
    assert look().ok

    kimi = sglang_copy / "srt" / "models" / "kimi_k25.py"
    kept = kimi.read_bytes()
    kimi.write_bytes(kept + b"# edited by hand\n")
    edited = look()
    assert not edited.ok and "kimi_k25_eagle3_delegation" not in edited.patches
    assert edited.reasons[0].startswith(f"patch kimi_k25_eagle3_delegation: {kimi} is no longer the patched file (sha256 ")
    assert edited.reasons[1:] == ["the audit's proof does not hold for the package as it is"]

    kimi.write_bytes(kept)
    (sglang_copy / "srt" / "new_module.py").write_text("X = 1\n")  # a file of the package added: audited again
    assert look().reasons == ["the audit's proof does not hold for the package as it is"]

    revert(manifest, sglang_copy)  # reverted: the state records nothing applied
    assert look().reasons == ["no patch is recorded as applied"]
