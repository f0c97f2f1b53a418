"""The default patch set and the audit on pristine copies of REAL SGLang releases 0.5.9-0.5.23.

Trees are unpacked once by scripts/sglang-wheels.sh (tests/data/sglang-wheels.txt) and copied once per
session; each release is patched once (by sglang-patch, so its exit code is what is tested) and
then imported once in the SGLang 0.5.9 runtime environment (tests/unit/host/test_patch_runtime.py's harness).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_patch_runtime import HARNESS

from conftest import BIN, CACHE
from sglang_sm120.patches.audit import SglangSource, audit

RELEASES = ("0.5.9", "0.5.10", "0.5.11", "0.5.13", "0.5.15", "0.5.19", "0.5.21", "0.5.23")
KIMI = "KimiK25ForConditionalGeneration"
HOOKS = ["get_embed_and_head", "set_eagle3_layers_to_capture"]
# What the default set does per release (read off the sources; see roles/sglang_patches/files/patches/manifest.yml).
EXPECTED = {
    "0.5.9": ("applied", "applied"),
    "0.5.10": ("fixed-upstream", "applied"),
    "0.5.11": ("fixed-upstream", "applied"),
    "0.5.13": ("fixed-upstream", "applied"),  # symm-mem: the SPDX-header variant template
}
# With SGLang 0.5.9's dependencies (torch 2.9.1, transformers 4.57.1): torch_symm_mem imports from the
# releases listed (not 0.5.21, 0.5.23: their sglang.srt needs the newer stack); kimi_k25 only up to
# 0.5.11 (0.5.12+ need transformers 5's PreTrainedConfig).
SYMM_IMPORTS_WITH_059_RUNTIME = ("0.5.9", "0.5.10", "0.5.11", "0.5.13", "0.5.15", "0.5.19")
KIMI_IMPORTS_WITH_059_RUNTIME = ("0.5.9", "0.5.10", "0.5.11")
SYMM_ONLY = HARNESS.split("from sglang.srt.models import kimi_k25")[0] + "print(json.dumps(out))\n"


@pytest.fixture(scope="session")
def patched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    out = {}
    base = tmp_path_factory.mktemp("releases")
    for version in RELEASES:
        pristine = CACHE / "sglang" / version / "sglang"
        if not pristine.is_dir():
            pytest.fail(f"no unpacked SGLang {version} at {pristine}: run scripts/sglang-wheels.sh")
        shutil.copytree(pristine, base / version / "sglang")
        done = subprocess.run(
            [str(BIN / "sglang-patch"), "apply", "--sglang", str(base / version / "sglang")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        out[version] = (base / version, done)
    return out


@pytest.mark.parametrize("version", RELEASES)
def test_default_set_exits_0_and_says_what_it_did(patched, version: str) -> None:
    _, done = patched[version]
    assert done.returncode == 0, done.stderr
    status = dict(line.split(": ")[0:2] for line in done.stdout.splitlines())
    statuses = tuple(s.split(" ")[0] for s in status.values())
    assert statuses == EXPECTED.get(version, ("fixed-upstream", "fixed-upstream")), done.stdout
    assert done.stderr == ""


_SOURCES: dict[str, SglangSource] = {}


def pristine(version: str) -> SglangSource:
    """One parsed source per release, shared by every audit of it (the path is walked once per algorithm)."""
    if version not in _SOURCES:
        _SOURCES[version] = SglangSource(CACHE / "sglang" / version / "sglang")
    return _SOURCES[version]


@pytest.mark.parametrize("version", RELEASES)
def test_audit_after_patching_finds_nothing_missing(patched, version: str) -> None:
    tree, _ = patched[version]
    assert audit(tree / "sglang", KIMI).missing_required == []


@pytest.mark.parametrize("version", RELEASES)
def test_audit_missing_equals_what_the_source_calls(version: str) -> None:
    """KimiVL defines neither hook in any release; the EAGLE-3 path calls both, wherever the release puts them."""
    tree = CACHE / "sglang" / version / "sglang"
    result = audit(pristine(version), "KimiVLForConditionalGeneration")
    assert result.missing_required == HOOKS
    for name in HOOKS:
        for site in result.call_sites[name]:
            file, line = site.rsplit(":", 1)
            assert name in (tree / file).read_text().splitlines()[int(line) - 1], site
    for model_class in ("DeepseekV3ForCausalLM", "LlamaForCausalLM", "Qwen2_5_VLForConditionalGeneration", KIMI):
        if model_class == KIMI and version == "0.5.9":
            continue
        assert audit(pristine(version), model_class).missing_required == [], (version, model_class)


def test_call_sites_follow_the_moved_path() -> None:
    sites = {v: audit(pristine(v), "KimiVLForConditionalGeneration").call_sites for v in ("0.5.19", "0.5.21", "0.5.23")}
    assert sites["0.5.19"]["set_eagle3_layers_to_capture"] == ["srt/model_executor/model_runner_components/attention_backend_setup.py:55"]
    assert sites["0.5.21"]["get_embed_and_head"] == ["srt/speculative/pp_draft_embedding.py:84"]
    assert sites["0.5.23"]["get_embed_and_head"] == ["srt/speculative/pp_draft_embedding.py:95"]


def test_loader_assigned_attribute_is_provided() -> None:
    result = audit(pristine("0.5.23"), "LlamaForCausalLM")
    assert "shared_experts_config" in result.required
    assert result.assigned_by_loader == {"shared_experts_config": "srt/model_loader/loader.py:311"}
    assert result.ok


# One runtime process for every tree (torch is imported once): each tree's sglang is imported afresh.
MULTI = r"""
import contextlib, io, json, sys
trees = json.loads(sys.argv[1])
codes = json.loads(sys.argv[2])
results = {}
for version, tree in trees.items():
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]
    sys.path.insert(0, tree)
    sys.argv = ["harness", json.dumps({"world_sizes": [2, 4, 8], "capability": 12})]
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            exec(codes[version], {"__name__": "__harness__"})
        results[version] = json.loads(buffer.getvalue().strip().splitlines()[-1])
    except Exception as exc:
        results[version] = {"harness_error": type(exc).__name__ + ": " + str(exc)}
    sys.path.remove(tree)
print(json.dumps(results))
"""


@pytest.fixture(scope="session")
def runtime_results(patched, sglang_runtime_python: Path) -> dict:
    trees = {v: str(patched[v][0]) for v in SYMM_IMPORTS_WITH_059_RUNTIME}
    codes = {v: HARNESS if v in KIMI_IMPORTS_WITH_059_RUNTIME else SYMM_ONLY for v in trees}
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(sglang_runtime_python), "-c", MULTI, json.dumps(trees), json.dumps(codes)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("version", SYMM_IMPORTS_WITH_059_RUNTIME)
def test_patched_modules_import_and_survive_capability_12(runtime_results, version: str) -> None:
    out = runtime_results[version]
    assert "harness_error" not in out, out
    for world_size in ("2", "4", "8"):
        assert "error" not in out[world_size], out[world_size]
        assert out[world_size]["disabled"] is True  # no multicast on PCIe: a clean disable, no KeyError: 12
    if version not in KIMI_IMPORTS_WITH_059_RUNTIME:
        return
    assert out["kimi_defines"] == ["get_embed_and_head", "set_eagle3_layers_to_capture", "set_embed_and_head"]
    if version == "0.5.9":  # our delegation: arguments and results passed through
        assert out["kimi_results_passed_back"] == [True, True, True, True]
