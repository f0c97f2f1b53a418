"""Published figures for this hardware, shown in a report beside the host's own as OTHERS' measurements (issue 47,
item 5): roles/sglang_benchmark/files/reference-figures.yml, read and checked here.

Each entry names its source, the engine and model, the conditions its figures depend on and its cells
(concurrency, context as the source labels it, tok/s without and with speculation); the report prints every
cell with the EAGLE-3 ratio where both figures exist, so a reader sees where speculation paid on someone
else's server and under which conditions. Nothing here judges the host: the gate never reads these.
Standard library only (the report is built on the host).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional

from ..errors import ToolkitError

TEXT_FIELDS = ("id", "source", "engine", "model", "metric")


class ReferenceFiguresError(ToolkitError):
    """A reference entry that cannot be read; the message names the entry and the field."""


@dataclass(frozen=True)
class ReferenceCell:
    concurrency: int
    context: str
    baseline: Optional[float]
    eagle3: Optional[float]

    @property
    def ratio(self) -> Optional[float]:
        """eagle3 / baseline, rounded to 2 places, where both were measured."""
        if self.baseline is None or self.eagle3 is None:
            return None
        return round(self.eagle3 / self.baseline, 2)


@dataclass(frozen=True)
class Reference:
    id: str
    source: str
    engine: str
    model: str
    metric: str
    conditions: dict[str, str]
    cells: tuple[ReferenceCell, ...]
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cells"] = [{**asdict(c), "ratio": c.ratio} for c in self.cells]
        return data


def _figure(value: Any, where: str, name: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ReferenceFiguresError(f"{where}: {name} must be a positive number of tok/s, found {value!r}")
    return float(value)


def _cell(raw: Any, where: str) -> ReferenceCell:
    if not isinstance(raw, Mapping):
        raise ReferenceFiguresError(f"{where}: expected a mapping {{concurrency, context, baseline, eagle3}}, found {raw!r}")
    unknown = sorted(set(raw) - {"concurrency", "context", "baseline", "eagle3"})
    if unknown:
        raise ReferenceFiguresError(
            f"{where}: unknown field(s) {', '.join(map(str, unknown))} (expected concurrency, context, baseline, eagle3)"
        )
    concurrency = raw.get("concurrency")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ReferenceFiguresError(f"{where}: concurrency must be a whole number from 1, found {concurrency!r}")
    context = raw.get("context")
    if context is None or str(context).strip() == "":
        raise ReferenceFiguresError(
            f"{where}: context must say the context as the source labels it (e.g. short, 0, 16k), found {context!r}"
        )
    baseline, eagle3 = _figure(raw.get("baseline"), where, "baseline"), _figure(raw.get("eagle3"), where, "eagle3")
    if baseline is None and eagle3 is None:
        raise ReferenceFiguresError(f"{where}: gives neither baseline nor eagle3 tok/s")
    return ReferenceCell(concurrency, str(context), baseline, eagle3)


def read_references(data: Any, source: str = "reference figures") -> list[Reference]:
    """The entries of a reference-figures document (a list of mappings; None or [] for none); ReferenceFiguresError naming
    `source`, the entry and the field for anything it cannot read, or an id given twice."""
    if data is None:
        return []
    if not isinstance(data, Sequence) or isinstance(data, (str, bytes)):
        raise ReferenceFiguresError(f"{source}: expected a list of entries, found {type(data).__name__}")
    out: list[Reference] = []
    for index, raw in enumerate(data):
        where = f"{source}, entry {index + 1}"
        if not isinstance(raw, Mapping):
            raise ReferenceFiguresError(f"{where}: expected a mapping, found {raw!r}")
        where = f"{source}, entry {raw.get('id') or index + 1}"
        for name in TEXT_FIELDS:
            if not isinstance(raw.get(name), str) or not raw[name].strip():
                raise ReferenceFiguresError(f"{where}: {name} must be a non-empty text, found {raw.get(name)!r}")
        conditions = raw.get("conditions") or {}
        if not isinstance(conditions, Mapping):
            raise ReferenceFiguresError(f"{where}: conditions must be a mapping of name: text, found {conditions!r}")
        cells = raw.get("cells")
        if not isinstance(cells, Sequence) or isinstance(cells, (str, bytes)) or not cells:
            raise ReferenceFiguresError(f"{where}: cells must be a non-empty list, found {cells!r}")
        if any(r.id == raw["id"] for r in out):
            raise ReferenceFiguresError(f"{where}: the id {raw['id']!r} is given twice")
        out.append(
            Reference(
                raw["id"],
                raw["source"],
                raw["engine"],
                raw["model"],
                raw["metric"],
                {str(k): str(v) for k, v in conditions.items()},
                tuple(_cell(c, f"{where}, cell {i + 1}") for i, c in enumerate(cells)),
                str(raw.get("note") or ""),
            )
        )
    return out


def reference_lines(references: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's section of others' measurements (each entry as Reference.to_dict gives it), in markdown."""
    lines = ["", "## Others' measurements on this hardware (not this host)", ""]
    if not references:
        return [*lines, "- none given (sglang_benchmark_reference_file)"]
    lines.append(
        "Published figures, shown to place this host's numbers; their engine, checkpoint and conditions differ from this "
        "release's, and nothing here is judged."
    )
    for ref in references:
        conditions = "; ".join(f"{k}: {v}" for k, v in (ref.get("conditions") or {}).items())
        lines += [
            "",
            f"**{ref['engine']}, {ref['model']}** ({ref['metric']}; {conditions}). Source: {ref['source']}."
            + (f" {ref['note']}." if ref.get("note") else ""),
            "",
            "| concurrency | context | baseline tok/s | EAGLE-3 tok/s | EAGLE-3 ratio |",
            "|---|---|---|---|---|",
        ]
        for cell in ref["cells"]:
            figures = " | ".join("-" if v is None else f"{v:g}" for v in (cell.get("baseline"), cell.get("eagle3"), cell.get("ratio")))
            lines.append(f"| {cell['concurrency']} | {cell['context']} | {figures} |")
    return lines
