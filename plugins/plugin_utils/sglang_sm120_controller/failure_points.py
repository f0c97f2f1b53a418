"""SGLang's own failure points after its argument check, read from a release's sources (issue 48, item 1).

Between ``ServerArgs.check_server_args`` and a server answering, SGLang stops on its own raises and
asserts: in the model config and loader, the quantization method's choice, the attention and MoE
backend constructors, the speculative workers, the model runner and its CUDA-graph runners, the
scheduler and its TP worker, the distributed set-up. This module lists every ``raise`` and ``assert``
in those files (``SCOPE``) with the condition that leads to it (an assert's test; for a raise, the
``if`` tests it sits under, innermost last), the exception and the message's literal text, and
classifies each by the names its condition and message read:

- ``before-load``: only launch flags, model configuration and host facts (``server_args``,
  ``model_config`` / ``hf_config``, the device capability, sizes of the parallel groups): the start
  gate can decide it before the ~10-minute load, with SGLang's own functions where they exist;
- ``canary``: tensors, memory, weights, files, kernels and imports: only a run shows it (the start
  canary on tiny models, or the real start);
- ``not-decidable``: no condition the toolkit can read (a bare raise in an abstract method, an
  internal invariant).

The classification is a rule over names, not a judgement of each point: it says where to look first.
``scripts/failure_points.py`` writes every supported release's points to docs/failure-points.json (one
line per point, with the line it stands on in each release that has it); a new release is a re-run, and
the points that a release gained are the reading list for the catalogue.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

SCHEMA = 1
# Files of the path from the argument check to the first answer, relative to the sglang package.
SCOPE = (
    "srt/configs/model_config.py",
    "srt/model_loader/*.py",
    "srt/layers/quantization/__init__.py",
    "srt/layers/quantization/modelopt_quant.py",
    "srt/layers/quantization/fp8.py",
    "srt/layers/attention/attention_registry.py",
    "srt/layers/attention/*backend.py",
    "srt/layers/moe/utils.py",
    "srt/layers/moe/fused_moe_triton/layer.py",
    "srt/layers/moe/moe_runner/runner.py",
    "srt/layers/moe/token_dispatcher/*.py",
    "srt/speculative/*.py",
    "srt/model_executor/*.py",
    "srt/managers/scheduler.py",
    "srt/managers/tp_worker.py",
    "srt/distributed/parallel_state.py",
)
BEFORE_LOAD = re.compile(
    r"server_args|\bargs\.|model_config|hf_config|hf_text_config|quant_config|quantization|architectures|"
    r"kv_cache_dtype|attention_backend|\bdtype\b|context_len|num_attention_heads|num_key_value_heads|head_dim|"
    r"get_device_capability|is_sm\d+|is_blackwell|is_hopper|is_cuda|is_hip|is_npu|_is_\w+|device_capability|"
    r"tp_size|pp_size|dp_size|ep_size|world_size|speculative_\w+|page_size|moe_runner|enable_\w+|disable_\w+|"
    # MoeRunner's constructor: the runner and all-to-all backends (flags), the fused function their pair registers
    # (read from the release's sources), the capability major it was given
    r"runner_backend|a2a_backend|fused_func\b|\bmajor\b"
)
RUNTIME = re.compile(
    r"torch\.|\.shape\b|\.numel|\.size\(|memory|mem_|avail|cuda_graph|capture|weight|\.load|load_|file|path|exists|"
    r"import|Import|kernel|tensor|\.data_ptr|nccl|handle|\.item\(|buffer|token|req\b|batch"
)


@dataclass
class FailurePoint:
    file: str
    line: int
    function: str
    kind: str  # raise | assert
    exception: str
    message: str
    condition: str
    klass: str


def scope_files(sglang_dir: Path) -> list[str]:
    """The files of SCOPE that this release has, sorted, relative to the sglang package."""
    found: set[str] = set()
    for path in sglang_dir.rglob("*.py"):
        rel = path.relative_to(sglang_dir).as_posix()
        if any(fnmatch.fnmatchcase(rel, pattern) for pattern in SCOPE):
            found.add(rel)
    return sorted(found)


def _text(node: Optional[ast.AST], limit: int = 240) -> str:
    if node is None:
        return ""
    try:
        text = ast.unparse(node)
    except (ValueError, AttributeError):  # pragma: no cover - unparse handles every expression of a parsed file
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


MESSAGE_LIMIT = 120


def _message(node: Optional[ast.AST]) -> str:
    """The literal text of a message: string constants and f-strings' literal parts, joined."""
    if node is None:
        return ""
    parts = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return " ".join(" ".join(p.split()) for p in parts)[:MESSAGE_LIMIT]


def _exception(node: Optional[ast.AST]) -> str:
    if node is None:
        return "(re-raise)"
    target = node.func if isinstance(node, ast.Call) else node
    return _text(target, 80)


def classify(condition: str, message: str, kind: str, exception: str) -> str:
    # a bare raise (an abstract method's NotImplementedError among them) has nothing to decide it by; a
    # NotImplementedError under a condition is a refusal like any other (MoeRunner: no fused function for the pair)
    if exception == "(re-raise)" or (not condition and kind == "raise"):
        return "not-decidable"
    text = f"{condition} {message}"
    runtime = RUNTIME.search(condition) is not None or exception in ("ImportError", "ModuleNotFoundError", "FileNotFoundError", "OSError")
    if BEFORE_LOAD.search(text) and not runtime:
        return "before-load"
    if runtime:
        return "canary"
    return "not-decidable"


class _Walker(ast.NodeVisitor):
    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.scope: list[str] = []
        self.tests: list[str] = []
        self.points: list[FailurePoint] = []

    def _named(self, node: ast.AST) -> None:
        self.scope.append(node.name)  # type: ignore[attr-defined]
        saved, self.tests = self.tests, []
        self.generic_visit(node)
        self.tests = saved
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _named

    def visit_If(self, node: ast.If) -> None:
        self.tests.append(_text(node.test, 120))
        for child in node.body:
            self.visit(child)
        self.tests[-1] = "not (" + self.tests[-1] + ")"
        for child in node.orelse:
            self.visit(child)
        self.tests.pop()

    def _add(self, node: ast.stmt, kind: str, exception: str, message: str, condition: str) -> None:
        self.points.append(
            FailurePoint(
                file=self.rel,
                line=node.lineno,
                function=".".join(self.scope) or "<module>",
                kind=kind,
                exception=exception,
                message=message,
                condition=condition,
                klass=classify(condition, message, kind, exception),
            )
        )

    def visit_Assert(self, node: ast.Assert) -> None:
        condition = " and ".join([*self.tests[-2:], _text(node.test, 160)])
        self._add(node, "assert", "AssertionError", _message(node.msg), condition)

    def visit_Raise(self, node: ast.Raise) -> None:
        self._add(node, "raise", _exception(node.exc), _message(node.exc), " and ".join(self.tests[-3:]))


def points_of_source(rel: str, source: str) -> list[FailurePoint]:
    walker = _Walker(rel)
    walker.visit(ast.parse(source, filename=rel))
    return walker.points


def failure_points(sglang_dir: str | Path) -> list[FailurePoint]:
    root = Path(sglang_dir)
    out: list[FailurePoint] = []
    for rel in scope_files(root):
        out.extend(points_of_source(rel, (root / rel).read_text(encoding="utf-8")))
    return out


COLUMNS = ("file", "function", "kind", "exception", "class", "condition", "message", "lines")


def merge(by_release: dict[str, Iterable[FailurePoint]]) -> dict[str, Any]:
    """Every release's points in one list: a point is (file, function, kind, exception, class, condition,
    message), kept once with where it stands in each release that has it ({release: line}). Most points
    live on from release to release, so this is the compact form kept in the repository, and a point's
    releases say when it appeared and when it went."""
    rows: dict[tuple, dict[str, int]] = {}
    counts: dict[str, dict[str, int]] = {}
    for release, points in by_release.items():
        tally = counts.setdefault(release, {})
        seen: dict[tuple, int] = {}
        for p in points:
            key = (p.file, p.function, p.kind, p.exception, p.klass, p.condition, p.message)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:  # the same raise twice in one function (two branches alike): told apart by its order
                key = (p.file, f"{p.function}#{seen[key]}", *key[2:])
            rows.setdefault(key, {})[release] = p.line
            tally[p.klass] = tally.get(p.klass, 0) + 1
    return {
        "schema": SCHEMA,
        "scope": list(SCOPE),
        "columns": list(COLUMNS),
        "releases": list(by_release),
        "counts": {r: dict(sorted(c.items())) for r, c in counts.items()},
        "points": [[*key, lines] for key, lines in sorted(rows.items(), key=lambda kv: (kv[0][0], min(kv[1].values()), kv[0]))],
    }


def select(doc: dict[str, Any], releases: Iterable[str]) -> dict[str, Any]:
    """The part of a merged list that concerns these releases (what a re-run on them alone gives)."""
    wanted = list(releases)
    points = []
    for *key, lines in doc["points"]:
        kept = {r: n for r, n in lines.items() if r in wanted}
        if kept:
            points.append([*key, kept])
    return {**doc, "releases": wanted, "counts": {r: doc["counts"][r] for r in wanted}, "points": points}


def render(doc: dict[str, Any]) -> str:
    """The list as kept: its header, then one line per point."""
    head = {k: v for k, v in doc.items() if k != "points"}
    rows = [json.dumps(row) for row in doc["points"]]
    return json.dumps(head)[:-1] + ', "points": [\n' + ",\n".join(rows) + "\n]}\n"
