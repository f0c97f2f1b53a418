"""Find the problems a patch adds to a Python file: pyflakes on the pristine and on the patched source.

A patched file that compiles can still fail at import (an undefined name is a NameError only when
the line runs). Upstream files carry their own pyflakes warnings, so only messages the patched file
has and the pristine one has not count: compared by kind and text, line numbers left out, counted
(a second occurrence of an existing message is new too).

pyflakes is imported only when linting: this file is also shipped to hosts without it.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections import Counter
from dataclasses import dataclass

from ..errors import ToolkitError


class LintUnavailable(ToolkitError):
    """pyflakes is not installed in this interpreter."""


@dataclass(frozen=True)
class LintMessage:
    kind: str
    text: str
    line: int

    @property
    def key(self) -> tuple[str, str]:
        # "redefinition of unused 'x' from line 12": the line moves when a patch adds lines above it.
        return self.kind, re.sub(r"\bline \d+", "line N", self.text)


def available() -> bool:
    try:
        import pyflakes.checker  # noqa: F401
    except ImportError:
        return False
    return True


def lint(source: bytes, filename: str) -> list[LintMessage]:
    """pyflakes' messages for the source; a syntax error is one message of kind SyntaxError."""
    try:
        from pyflakes.checker import Checker
    except ImportError as exc:
        raise LintUnavailable(f"pyflakes is not installed in this Python ({exc})") from exc
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        return [LintMessage("SyntaxError", str(exc.msg), exc.lineno or 0)]
    checker = Checker(tree, filename=filename)
    messages = [LintMessage(type(m).__name__, m.message % m.message_args, m.lineno) for m in checker.messages]
    return sorted(messages, key=lambda m: (m.line, m.kind, m.text))


def new_problems(pristine: bytes, patched: bytes, filename: str) -> list[LintMessage]:
    """Messages of the patched source beyond those of the pristine one (the changed lines' ones first)."""
    before = Counter(m.key for m in lint(pristine, filename))
    after = lint(patched, filename)
    changed = _changed_lines(pristine, patched)
    extra: list[LintMessage] = []
    by_key: dict[tuple[str, str], list[LintMessage]] = {}
    for message in after:
        by_key.setdefault(message.key, []).append(message)
    for key, found in by_key.items():
        surplus = len(found) - before.get(key, 0)
        if surplus > 0:
            found.sort(key=lambda m: (m.line not in changed, m.line))
            extra.extend(found[:surplus])
    return sorted(extra, key=lambda m: m.line)


def _changed_lines(old: bytes, new: bytes) -> set[int]:
    """1-based line numbers of the new text that the change inserted or replaced."""
    matcher = difflib.SequenceMatcher(None, old.decode("utf-8").splitlines(), new.decode("utf-8").splitlines(), autojunk=False)
    lines: set[int] = set()
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            lines.update(range(j1 + 1, j2 + 1))
    return lines
