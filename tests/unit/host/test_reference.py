"""Others' published figures for this hardware (roles/sglang_benchmark/files/reference-figures.yml): the shipped file
reads, its cells are the sources' figures (the EAGLE-3 ratios the operators' notes quote follow from them), an entry
that cannot be read is refused naming it and the field, and the report's section marks them as not this host's."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from conftest import ROOT
from sglang_sm120.serve.reference import ReferenceFiguresError, read_references, reference_lines

SHIPPED = ROOT / "roles/sglang_benchmark/files/reference-figures.yml"


def shipped() -> Any:
    return yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))


def test_the_shipped_figures_read_and_give_the_ratios_the_notes_quote() -> None:
    refs = {r.id: r for r in read_references(shipped(), str(SHIPPED))}
    assert set(refs) == {"kimi-k25-nvfp4-sglang", "kimi-k26-int4-vllm-grid"}
    sglang = refs["kimi-k25-nvfp4-sglang"]
    assert sglang.engine == "SGLang" and [(c.concurrency, c.baseline, c.eagle3) for c in sglang.cells] == [(1, 53.0, None)]
    grid = refs["kimi-k26-int4-vllm-grid"]
    short = {c.concurrency: c.ratio for c in grid.cells if c.context == "0"}
    # ../shared/docs/domain-notes.md, "Speed anchors": 1.23x at concurrency 1, 1.30x at 8, 1.29x at 32, 0.94x at 128
    assert short == {1: 1.23, 8: 1.3, 32: 1.29, 128: 0.94}
    # speculation loses at high concurrency in every context the grid gives, and earlier as the context grows
    assert all(c.ratio is not None and c.ratio < 1 for c in grid.cells if c.concurrency == 128)
    assert next(c.ratio for c in grid.cells if (c.context, c.concurrency) == ("32k", 32)) < 1
    assert all(r.source.startswith("voipmonitor/rtx6kpro models/") for r in refs.values())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e.pop("source"), "entry kimi-k25-nvfp4-sglang: source must be a non-empty text, found None"),
        (lambda e: e["cells"][0].update(concurrency=0), "cell 1: concurrency must be a whole number from 1, found 0"),
        (lambda e: e["cells"][0].update(baseline=None), "cell 1: gives neither baseline nor eagle3 tok/s"),
        (lambda e: e["cells"][0].update(baseline="fast"), "cell 1: baseline must be a positive number of tok/s, found 'fast'"),
        (lambda e: e["cells"][0].update(tok_s=1), "cell 1: unknown field(s) tok_s"),
        (lambda e: e.update(cells=[]), "cells must be a non-empty list, found []"),
        (lambda e: e.update(conditions=["TP 8"]), "conditions must be a mapping of name: text"),
    ],
)
def test_an_entry_that_cannot_be_read_is_refused_naming_it_and_the_field(change: Any, message: str) -> None:
    data = shipped()
    change(data[0])
    with pytest.raises(ReferenceFiguresError) as caught:
        read_references(data, "reference-figures.yml")
    assert str(caught.value).startswith("reference-figures.yml, entry ") and message in str(caught.value), str(caught.value)


def test_an_id_given_twice_or_a_document_that_is_no_list_is_refused() -> None:
    data = shipped()
    with pytest.raises(ReferenceFiguresError, match="the id 'kimi-k25-nvfp4-sglang' is given twice"):
        read_references([data[0], data[0]], "f")
    with pytest.raises(ReferenceFiguresError, match="f: expected a list of entries, found dict"):
        read_references(data[0], "f")
    assert read_references(None) == [] and read_references([]) == []


def test_the_report_section_marks_them_as_others_and_prints_every_cell_with_its_ratio() -> None:
    refs = [r.to_dict() for r in read_references(shipped())]
    text = "\n".join(reference_lines(refs))
    assert "## Others' measurements on this hardware (not this host)" in text and "nothing here is judged" in text
    assert "**SGLang, nvidia/Kimi-K2.5-NVFP4** (decode tok/s of one request; parallel: TP 8;" in text
    assert "| 1 | short | 53 | - | - |" in text and "| 128 | 0 | 2164.7 | 2044.3 | 0.94 |" in text
    assert "Source: voipmonitor/rtx6kpro models/kimi-k26.md" in text
    assert reference_lines([])[-1] == "- none given (sglang_benchmark_reference_file)"
