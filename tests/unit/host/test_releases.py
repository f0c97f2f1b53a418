"""The release record: states, the atomic current symlink, reuse by key, pruning."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sglang_sm120.release.records import ReleaseError, Releases


def make_ready(rel: Releases, key: str) -> str:
    release_id = rel.create(key, {"k": key})
    rel.set_state(release_id, "ready")
    return release_id


def test_create_is_building_and_cannot_become_current(tmp_path: Path) -> None:
    rel = Releases(tmp_path)
    release_id = rel.create("a" * 64, {"why": "test"})
    assert release_id == "0001-aaaaaaaa"
    assert json.loads((tmp_path / "releases" / release_id / "manifest.json").read_text())["state"] == "building"
    with pytest.raises(ReleaseError, match="is building; only a ready or good release can become current"):
        rel.switch(release_id)
    assert not (tmp_path / "current").exists()


def test_switch_is_atomic_and_recorded(tmp_path: Path) -> None:
    rel = Releases(tmp_path)
    first, second = make_ready(rel, "a" * 64), make_ready(rel, "b" * 64)
    assert rel.switch(first) is True and rel.switch(first) is False
    assert rel.switch(second, check=True) is True and os.readlink(tmp_path / "current") == f"releases/{first}"
    rel.switch(second)
    assert os.readlink(tmp_path / "current") == f"releases/{second}"
    assert rel.load()["current"] == second
    assert (tmp_path / "releases" / first / "manifest.json").exists()


def test_find_reuses_only_usable_releases(tmp_path: Path) -> None:
    rel = Releases(tmp_path)
    key = "c" * 64
    building = rel.create(key, {})
    assert rel.find(key) is None
    rel.discard(building, "install failed")
    assert not (tmp_path / "releases" / building).exists()
    assert rel.load()["releases"][building]["state"] == "bad"
    ready = make_ready(rel, key)
    assert rel.find(key) == ready


def test_good_sets_last_good_and_bad_clears_it(tmp_path: Path) -> None:
    rel = Releases(tmp_path)
    release_id = make_ready(rel, "d" * 64)
    rel.set_state(release_id, "good", manifest={"health": {"status": 200}})
    assert rel.load()["last_good"] == release_id
    assert json.loads((tmp_path / "releases" / release_id / "manifest.json").read_text())["health"] == {"status": 200}
    rel.set_state(release_id, "bad", reason="never healthy")
    assert rel.load()["last_good"] is None
    with pytest.raises(ReleaseError, match="is bad; it cannot become ready"):
        rel.set_state(release_id, "ready")


def test_prune_keeps_current_and_last_good(tmp_path: Path) -> None:
    rel = Releases(tmp_path)
    ids = [make_ready(rel, f"{i}" * 64) for i in range(1, 6)]
    rel.set_state(ids[0], "good")
    rel.switch(ids[1])
    assert rel.prune(2, check=True) == [ids[2]]
    assert rel.prune(2) == [ids[2]]
    remaining = sorted(p.name for p in (tmp_path / "releases").iterdir())
    assert remaining == sorted([ids[0], ids[1], ids[3], ids[4]])
    assert rel.prune(2) == []
    with pytest.raises(ReleaseError, match="at least 1"):
        rel.prune(0)


def test_a_broken_record_is_refused(tmp_path: Path) -> None:
    (tmp_path / "releases.json").write_text('{"schema": 9}')
    with pytest.raises(ReleaseError, match="expected schema 1"):
        Releases(tmp_path).load()


def test_release_key_is_the_sha256_of_canonical_json() -> None:
    import hashlib

    from sglang_sm120.release.records import release_key

    inputs = {"b": [1, 2], "a": {"y": "é", "x": None}}
    expected = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    assert release_key(inputs) == expected
    assert release_key({"a": {"x": None, "y": "é"}, "b": [1, 2]}) == expected
    assert release_key({**inputs, "b": [2, 1]}) != expected


def test_rollback_target_is_the_newest_good_release_before_current(tmp_path: Path) -> None:
    rel = Releases(tmp_path)
    with pytest.raises(ReleaseError, match="nothing to roll back to: no other good release"):
        rel.rollback_target()
    first, second, third = (make_ready(rel, key) for key in ("k1", "k2", "k3"))
    for release_id in (first, second):
        rel.set_state(release_id, "good")
    rel.set_state(third, "bad", "never healthy")
    rel.switch(second)
    assert rel.rollback_target() == (second, first)
    assert rel.rollback_target(first) == (second, first)
    with pytest.raises(ReleaseError, match=f"nothing to roll back to: {third} is bad"):
        rel.rollback_target(third)
    with pytest.raises(ReleaseError, match=f"{second} is already current"):
        rel.rollback_target(second)
    with pytest.raises(ReleaseError, match=r"0099-nothere is unknown.*releases: .*=good"):
        rel.rollback_target("0099-nothere")
