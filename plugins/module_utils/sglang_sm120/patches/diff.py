"""Single-file unified diffs: parse one, apply it exactly (no offset, no fuzz), produce one.

Every hunk must match, context and removed lines byte for byte, at exactly the line its header
states; a failure raises HunkError naming the hunk.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from .errors import HunkError


@dataclass
class Hunk:
    number: int
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class FileDiff:
    old_path: str
    new_path: str
    hunks: list[Hunk]


_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_unified_diff(text: str) -> FileDiff:
    """Parse a single-file unified diff (`--- a/x`, `+++ b/x`, hunks). Header counts are checked against the body."""
    lines = text.splitlines(keepends=True)
    index = 0
    while index < len(lines) and not lines[index].startswith("--- "):
        index += 1
    if index + 1 >= len(lines) or not lines[index + 1].startswith("+++ "):
        raise HunkError("diff has no `--- ` / `+++ ` header")
    old_path = _diff_path(lines[index][4:])
    new_path = _diff_path(lines[index + 1][4:])
    hunks: list[Hunk] = []
    for line in lines[index + 2 :]:
        header = _HUNK_HEADER.match(line)
        if header:
            old_start, old_len, new_start, new_len = (int(g) if g is not None else 1 for g in header.groups())
            hunks.append(Hunk(len(hunks) + 1, old_start, old_len, new_start, new_len))
        elif not hunks:
            raise HunkError(f"unexpected line before the first hunk: {line!r}")
        elif line.startswith("\\"):
            tag, body = hunks[-1].lines[-1]
            hunks[-1].lines[-1] = (tag, body.rstrip("\n"))
        elif line[:1] in (" ", "-", "+"):
            hunks[-1].lines.append((line[0], line[1:]))
        elif line in ("\n", ""):
            hunks[-1].lines.append((" ", line))
        else:
            raise HunkError(f"hunk {hunks[-1].number}: unexpected line {line!r}")
    if not hunks:
        raise HunkError(f"diff for {new_path} has no hunks")
    for hunk in hunks:
        old = sum(1 for tag, _ in hunk.lines if tag != "+")
        new = sum(1 for tag, _ in hunk.lines if tag != "-")
        if (old, new) != (hunk.old_len, hunk.new_len):
            raise HunkError(f"hunk {hunk.number}: header says -{hunk.old_len} +{hunk.new_len} lines, body has -{old} +{new}")
    return FileDiff(old_path, new_path, hunks)


def _diff_path(raw: str) -> str:
    path = raw.rstrip("\n").split("\t")[0].strip()
    return path[2:] if path.startswith(("a/", "b/")) else path


def apply_diff(source: bytes, diff: FileDiff) -> bytes:
    """Apply hunks at exactly their stated lines (no offset, no fuzz); HunkError names the failing hunk."""
    original = source.decode("utf-8").splitlines(keepends=True)
    out: list[str] = []
    cursor = 0
    for hunk in diff.hunks:
        position = hunk.old_start if hunk.old_len == 0 else hunk.old_start - 1
        if position < cursor or position > len(original):
            raise HunkError(f"hunk {hunk.number}: starts at line {hunk.old_start}, file has {len(original)} lines (or hunks overlap)")
        out.extend(original[cursor:position])
        new_position = hunk.new_start if hunk.new_len == 0 else hunk.new_start - 1
        if new_position != len(out):
            raise HunkError(
                f"hunk {hunk.number}: header puts the new text at line {hunk.new_start}, the patched file has it at {len(out) + 1}"
            )
        expected = [body for tag, body in hunk.lines if tag != "+"]
        found = original[position : position + len(expected)]
        if found != expected:
            bad = next((i for i, (e, f) in enumerate(zip(expected, found)) if e != f), min(len(expected), len(found)))
            wanted = expected[bad] if bad < len(expected) else "<end>"
            got = found[bad] if bad < len(found) else "<end of file>"
            raise HunkError(f"hunk {hunk.number}: line {position + bad + 1} expected {wanted!r}, found {got!r}")
        out.extend(body for tag, body in hunk.lines if tag != "-")
        cursor = position + len(expected)
    out.extend(original[cursor:])
    return "".join(out).encode("utf-8")


def unified_diff(old: bytes, new: bytes, target: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.decode("utf-8").splitlines(keepends=True),
            new.decode("utf-8").splitlines(keepends=True),
            fromfile=f"a/{target}",
            tofile=f"b/{target}",
        )
    )
