#!/usr/bin/env python3
"""SGLang's failure points after its argument check, for every supported release (issue 48, item 1).

Reads each release's unpacked sources (make sglang-wheels: $SGLANG_TOOLKIT_CACHE/sglang/<version>/sglang, the releases
of tests/data/sglang-wheels.txt) with sglang_sm120_controller.failure_points and writes docs/failure-points.json: every
raise and assert in the files of its SCOPE, the condition that leads there and the class (before-load, canary,
not-decidable), one line per point with the line it stands on in each release that has it. A new release is a
re-run (add it to tests/data/sglang-wheels.txt); the points it gained are what to read for the start-failure catalogue.

    scripts/failure_points.py            write docs/failure-points.json
    scripts/failure_points.py --check    compare with it instead (exit 1 on a difference)
    scripts/failure_points.py --new 0.5.23 [--since 0.5.22]   the points a release gained, classed before-load first
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sglang_sm120_controller.failure_points import failure_points, merge, render

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "failure-points.json"


def releases() -> list[str]:
    lines = (ROOT / "tests/data/sglang-wheels.txt").read_text().splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.lstrip().startswith("#")]


def points_of(version: str, cache: Path) -> list:
    tree = cache / version / "sglang"
    if not (tree / "srt").is_dir():
        raise SystemExit(f"failure_points: no SGLang {version} sources at {tree} (make sglang-wheels)")
    return failure_points(tree)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/failure-points.json instead of writing it")
    parser.add_argument("--new", metavar="VERSION", help="print the points VERSION has and the release before it has not")
    parser.add_argument("--since", metavar="VERSION", help="with --new: the release to compare with")
    args = parser.parse_args(argv)
    cache = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache")) / "sglang"
    known = releases()
    if args.new:
        since = args.since or known[known.index(args.new) - 1]
        doc = merge({since: points_of(since, cache), args.new: points_of(args.new, cache)})
        gained = [p for p in doc["points"] if set(p[-1]) == {args.new}]
        for file, function, kind, exception, klass, condition, message, lines in sorted(
            gained, key=lambda p: (p[4] != "before-load", p[0])
        ):
            print(f"{klass:13} {file}:{lines[args.new]} {function}: {kind} {exception} when {condition or '-'}: {message or '-'}")
        print(f"{len(gained)} points in {args.new} that {since} has not")
        return 0
    text = render(merge({version: points_of(version, cache) for version in known}))
    if args.check:
        if not OUT.is_file() or OUT.read_text() != text:
            print(
                f"failure_points: {OUT.relative_to(ROOT)} differs from the sources (scripts/failure_points.py writes it)", file=sys.stderr
            )
            return 1
        return 0
    OUT.write_text(text)
    counts = json.loads(text)["counts"]
    for version in known:
        print(f"{version}: " + ", ".join(f"{n} {k}" for k, n in counts[version].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
