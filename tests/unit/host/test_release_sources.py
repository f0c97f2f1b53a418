"""What the start gate reads from a release's sources, kept by their identity (launch/release_sources.py): read back
only for the same wheel bytes or the same tree (every file's path, size and time) and the same reader, equal to a
fresh read, and read again when a file changes, the reader changes or the record is damaged. On the real SGLang
0.5.9 and 0.5.23 (`make sglang-wheels`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import CACHE, unpacked_sglang
from sglang_sm120.launch import release_sources


def fresh(path: Path) -> release_sources.ReleaseSources:
    return release_sources.read(path)


def same(a: release_sources.ReleaseSources, b: release_sources.ReleaseSources) -> None:
    assert a.registry == b.registry and a.aliases == b.aliases
    assert a.release is not None and b.release is not None
    for field in ("eagle3_classes", "compatible_quantization", "quant_config_files", "context_length_keys", "backend_lines"):
        assert getattr(a.release, field) == getattr(b.release, field), field


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_a_wheel_is_read_back_equal_to_a_fresh_read(version: str, tmp_path: Path) -> None:
    (wheel,) = (CACHE / "sglang").glob(f"sglang-{version}-*.whl")
    first = release_sources.read(wheel, tmp_path)
    assert not first.cached and len(list(tmp_path.glob("release-sources-*.json"))) == 1
    again = release_sources.read(wheel, tmp_path)
    assert again.cached and again.release is not None and again.release.source == str(wheel)
    same(again, fresh(wheel))
    assert again.release.eagle3_classes and "LlamaForCausalLMEagle3" in again.release.eagle3_classes
    assert "speculative-algorithm" in again.aliases.values()


def test_a_tree_changed_in_place_is_read_again(tmp_path: Path) -> None:
    tree = tmp_path / "release"
    shutil.copytree(unpacked_sglang("0.5.9") / "sglang", tree / "sglang")
    cache = tmp_path / "cache"
    first = release_sources.read(tree, cache)
    assert not first.cached and release_sources.read(tree, cache).cached
    # a patch or an edit: the registry gains a class the gate must see
    model = tree / "sglang" / "srt" / "models" / "llama.py"
    model.write_text(model.read_text(encoding="utf-8") + "\nEntryClass = [LlamaForCausalLM, PatchedForCausalLM]\n", encoding="utf-8")
    changed = release_sources.read(tree, cache)
    assert not changed.cached and changed.registry is not None and "PatchedForCausalLM" in changed.registry
    assert first.registry is not None and "PatchedForCausalLM" not in first.registry
    assert release_sources.read(tree, cache).cached
    # the same bytes at another time count as changed too (size and time, never trusted by name alone)
    stamp = model.stat()
    os.utime(model, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))
    assert not release_sources.read(tree, cache).cached


def test_another_reader_or_a_damaged_record_reads_the_sources_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = CACHE / "sglang" / "sglang-0.5.9-py3-none-any.whl"
    release_sources.read(wheel, tmp_path)
    (record,) = tmp_path.glob("release-sources-*.json")
    record.write_text('{"release": null}', encoding="utf-8")  # partial: no registry, no aliases
    repaired = release_sources.read(wheel, tmp_path)
    assert not repaired.cached
    same(release_sources.read(wheel, tmp_path), fresh(wheel))
    monkeypatch.setattr(release_sources, "_reader_source", lambda: "another reader")
    assert not release_sources.read(wheel, tmp_path).cached
    monkeypatch.setattr(release_sources, "_reader_source", lambda: "")  # no source to key on: nothing read back
    assert not release_sources.read(wheel, tmp_path).cached and not release_sources.read(wheel, tmp_path).cached


def test_the_store_keeps_the_newest_records_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = CACHE / "sglang" / "sglang-0.5.9-py3-none-any.whl"
    monkeypatch.setattr(release_sources, "KEEP", 2)
    for reader in ("a", "b", "c"):
        monkeypatch.setattr(release_sources, "_reader_source", lambda reader=reader: reader)
        release_sources.read(wheel, tmp_path)
    assert len(list(tmp_path.glob("release-sources-*.json"))) == 2
    assert release_sources.read(wheel, tmp_path).cached  # the newest ("c") is kept
