"""Disk and memory checks."""

from __future__ import annotations

from sglang_sm120.host.resources import DiskNeed, check_disk, check_memory, nearest_existing, parse_meminfo

MEMINFO = "MemTotal:       24608116 kB\nMemFree:        23000000 kB\nHugePages_Total:       0\n"


def test_missing_path_is_measured_on_its_nearest_existing_parent(tmp_path):
    assert nearest_existing(str(tmp_path / "releases" / "a" / "b")) == str(tmp_path)


def test_disk_need_beyond_free_space_says_found_and_expected(tmp_path):
    states, problems = check_disk([DiskNeed("releases", str(tmp_path / "x"), 10**9)])
    assert not states[0].ok
    assert problems[0].startswith(f"releases: found {states[0].free_gib} GiB free at {tmp_path / 'x'}")
    assert problems[0].endswith("expected at least 1000000000 GiB")


def test_disk_need_within_free_space_passes(tmp_path):
    states, problems = check_disk([DiskNeed("toolkit", str(tmp_path), 0.0001)])
    assert problems == [] and states[0].measured_at == str(tmp_path)


def test_meminfo_is_read_in_kibibytes():
    assert parse_meminfo(MEMINFO)["MemTotal"] == 24608116
    assert check_memory(MEMINFO, 16) == (23.5, [])


def test_too_little_memory_is_reported():
    _total, problems = check_memory(MEMINFO, 256)
    assert problems == ["found 23.5 GiB of memory, expected at least 256 GiB"]


def test_unreadable_meminfo_is_a_problem_not_a_crash():
    assert check_memory("garbage", 1) == (0.0, ["cannot read MemTotal from /proc/meminfo"])
