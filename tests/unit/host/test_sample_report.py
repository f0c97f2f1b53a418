"""docs/sample/ (make sample-report): what a deploy's report and chart look like, from the lab - marked as the
stand-in server's, whole (the sections a real report has, both profiles compared), its chart a real PNG, and no key."""

from __future__ import annotations

import json
import re

from conftest import ROOT

SAMPLE = ROOT / "docs" / "sample"


def test_the_sample_says_it_is_the_stand_ins_and_which_report_it_is() -> None:
    text = (SAMPLE / "report.md").read_text(encoding="utf-8")
    assert text.startswith("> **A sample, from the lab's stand-in server** (TEST FIXTURE `tests/fixtures/sglang-standin`")
    release = re.search(r"from `([0-9]{4}-[0-9a-f]{8})`", text)
    assert release, text[:400]
    report = json.loads((SAMPLE / "report.json").read_text(encoding="utf-8"))
    assert report["release"] == release.group(1)
    assert f"# SGLang release {release.group(1)} on sglang-lab" in text


def test_the_sample_compares_both_profiles_with_a_chart() -> None:
    text = (SAMPLE / "report.md").read_text(encoding="utf-8")
    for section in ("## Verdict", "## Benchmark", "## What runs", "## Patches", "## Service"):
        assert section in text
    rows = re.findall(r"^\| (baseline|eagle3) \| \d+ \|", text, re.M)
    assert {"baseline", "eagle3"} <= set(rows), rows
    assert "not-compared" not in text.split("## Verdict", 1)[1].split("##", 1)[0]
    assert "](chart.png)" in text
    assert (SAMPLE / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_sample_holds_no_key() -> None:
    for name in ("report.md", "report.json"):
        text = (SAMPLE / name).read_text(encoding="utf-8")
        assert not re.search(r"(?i)bearer\s+\S{16,}|api[_-]?key['\"]?\s*[:=]\s*['\"]?[0-9a-f]{16,}", text), name
