"""The version ranges of the start-failure catalogue (files/start-failures.yml), proven on SGLang's
own sources: for an entry listed in PROBES, a probe reads the code that makes the failure (or its
guard) in each unpacked release of tests/data/sglang-wheels.txt (every release from 0.5.9 to 0.5.23,
post releases included) and says whether that release is affected; the entry's range must hold
exactly those releases. A probe reads the code, it does not grep for a version number: when a new
release moves the code, the probe fails loudly (ProbeError) instead of guessing.

An entry whose range cannot be read from source (a kernel's behaviour on a GPU, a driver) is named in
NOT_FROM_SOURCE with the reason; every ranged entry is in one of the two (test_every_ranged_entry_is_proven_or_says_why).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CACHE, DATA
from sglang_sm120.launch.start_failures import load_catalogue, version_tuple

ENTRIES = {e.id: e for e in load_catalogue()}
RELEASES = [line.split()[0] for line in (DATA / "sglang-wheels.txt").read_text().splitlines() if line.strip() and not line.startswith("#")]


class ProbeError(AssertionError):
    """The code a probe reads is not where, or not what, the probe expects: read the release again."""


def source(version: str, relative: str) -> str:
    path = CACHE / "sglang" / version / "sglang" / relative
    if not (CACHE / "sglang" / version / "sglang").is_dir():
        pytest.fail(f"no unpacked SGLang {version} under {CACHE / 'sglang'}: run `make sglang-wheels` first")
    if not path.is_file():
        raise ProbeError(f"SGLang {version}: {relative} is not there")
    return path.read_text(encoding="utf-8")


def method(text: str, cls: str, name: str, where: str) -> str:
    """The source of method `name` of class `cls` in `text` (ProbeError when either is missing)."""
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return ast.get_source_segment(text, item) or ""
            raise ProbeError(f"{where}: class {cls} has no method {name}")
    raise ProbeError(f"{where}: no class {cls}")


def nvfp4_moe_auto_is_trtllm(version: str) -> bool:
    """Affected: ModelOptNvFp4FusedMoEMethod.create_moe_runner turns an auto MoE runner into
    FLASHINFER_TRTLLM (off SM80-SM90) and apply() has no cutlass_moe_fp4 fallback left for it."""
    where = f"SGLang {version} srt/layers/quantization/modelopt_quant.py"
    text = source(version, "srt/layers/quantization/modelopt_quant.py")
    create = method(text, "ModelOptNvFp4FusedMoEMethod", "create_moe_runner", where)
    apply = method(text, "ModelOptNvFp4FusedMoEMethod", "apply", where)
    auto_to_trtllm = "is_auto()" in create and "moe_runner_backend = MoeRunnerBackend.FLASHINFER_TRTLLM" in create
    falls_back = "cutlass_moe_fp4(" in apply
    return auto_to_trtllm and not falls_back


def deepgemm_on_for_sm120(version: str) -> bool:
    """Affected: deep_gemm_wrapper/configurer.py enables the DeepGEMM JIT on SM120 whenever it is
    importable (no guard for sm_version 120; from 0.5.21 the guard keeps it off unless the installed
    deep_gemm has the SM120 entry points, which is upstream's own SM120 support)."""
    text = source(version, "srt/layers/deep_gemm_wrapper/configurer.py")
    if "SGLANG_ENABLE_JIT_DEEPGEMM" not in text:
        raise ProbeError(f"SGLang {version} configurer.py no longer reads SGLANG_ENABLE_JIT_DEEPGEMM")
    return "sm_version == 120" not in text and "sm_version in (120, 121)" not in text


# entry id -> probe(version) -> affected
PROBES: dict[str, Callable[[str], bool]] = {
    "nvfp4-moe-runner-auto-is-trtllm-on-sm120": nvfp4_moe_auto_is_trtllm,
    "deepgemm-on-sm120": deepgemm_on_for_sm120,
}

# entry id -> why its range is not read from SGLang's source
NOT_FROM_SOURCE: dict[str, str] = {}


def in_range(entry_id: str, version: str) -> bool:
    entry = ENTRIES[entry_id]
    low, high = entry.versions
    found = version_tuple(version)
    return version_tuple(low) <= found and (high is None or found <= version_tuple(high))


@pytest.mark.parametrize("entry_id", sorted(PROBES))
def test_range_is_what_the_source_says(entry_id: str) -> None:
    """Every release from 0.5.9 to 0.5.23: affected by the source exactly when inside the entry's range."""
    wrong = []
    for version in RELEASES:
        affected = PROBES[entry_id](version)
        if affected != in_range(entry_id, version):
            wrong.append(f"{version}: source says {'affected' if affected else 'not affected'}, range {ENTRIES[entry_id].range_text}")
    assert not wrong, f"{entry_id}: " + "; ".join(wrong)


@pytest.mark.parametrize("entry_id", sorted(PROBES))
def test_range_edges_are_releases_read_here(entry_id: str) -> None:
    """The first and last affected release and the releases just outside are among those read."""
    affected = [v for v in RELEASES if PROBES[entry_id](v)]
    assert affected, f"{entry_id}: no release from {RELEASES[0]} to {RELEASES[-1]} is affected by its source"
    first, last = RELEASES.index(affected[0]), RELEASES.index(affected[-1])
    low, high = ENTRIES[entry_id].versions
    assert version_tuple(affected[0]) == version_tuple(low) or first == 0, (entry_id, affected[0], low)
    assert (high is None and last == len(RELEASES) - 1) or version_tuple(affected[-1]) == version_tuple(high), (
        entry_id,
        affected[-1],
        high,
    )


def test_every_ranged_entry_is_proven_or_says_why() -> None:
    ranged = sorted(i for i, e in ENTRIES.items() if e.versions != ("0.0.0", None))
    unexplained = [i for i in ranged if i not in PROBES and i not in NOT_FROM_SOURCE]
    assert not set(PROBES) & set(NOT_FROM_SOURCE)
    assert not unexplained, f"ranged catalogue entries with neither a source probe nor a reason in NOT_FROM_SOURCE: {unexplained}"


def test_a_probe_fails_loudly_when_the_code_moved(tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match="no class ModelOptNvFp4FusedMoEMethod"):
        method("class Other:\n    pass\n", "ModelOptNvFp4FusedMoEMethod", "apply", "here")
    with pytest.raises(ProbeError, match="has no method apply"):
        method("class ModelOptNvFp4FusedMoEMethod:\n    def other(self): pass\n", "ModelOptNvFp4FusedMoEMethod", "apply", "here")
