#!/usr/bin/env python3
"""Record upstream build-metadata files in tests/data/upstream/index.yml from a git mirror.

    scripts/record_upstream.py --mirror flashinfer-ai/flashinfer=/path/to/repo.git

For every entry of the index whose repository has a mirror, reads `git show <tag>:<path>`, and
writes the entry as recorded: the commit the tag names, the file's sha256 and size, and what
plugins/plugin_utils/sglang_sm120_controller/rehearsal/upstream.py extracts from it. An entry that cannot be read at its tag stays
(or becomes) unchecked with the reason. The verbatim files go to
$SGLANG_TOOLKIT_CACHE/upstream/<repo>/<tag>/<path> (.cache, not committed), where
tests/unit/controller/test_upstream_reference.py checks them against the index when they are there.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

import yaml  # noqa: E402

from sglang_sm120_controller.rehearsal.upstream import extract, sha256_of  # noqa: E402

INDEX = ROOT / "tests" / "data" / "upstream" / "index.yml"
CACHE = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache")) / "upstream"


def git(gitdir: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", f"--git-dir={gitdir}", *args], capture_output=True, check=False)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mirror", action="append", default=[], help="owner/name=GIT_DIR")
    args = parser.parse_args(argv)
    mirrors = dict(m.split("=", 1) for m in args.mirror)
    text = INDEX.read_text(encoding="utf-8")
    head = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))  # the comment block, kept
    data = yaml.safe_load(text)
    for entry in data["files"]:
        gitdir = mirrors.get(entry["repo"])
        if not gitdir:
            continue
        commit = git(gitdir, "rev-parse", f"{entry['tag']}^{{commit}}")
        shown = git(gitdir, "show", f"{entry['tag']}:{entry['path']}")
        for key in ("commit", "sha256", "size", "extract", "reason", "read_with"):
            entry.pop(key, None)
        if commit.returncode != 0 or shown.returncode != 0:
            entry["status"] = "unchecked"
            entry["reason"] = f"git show {entry['tag']}:{entry['path']} failed: {(shown.stderr or commit.stderr).decode().strip()}"
            continue
        body = shown.stdout
        entry.update(
            status="recorded",
            commit=commit.stdout.decode().strip(),
            sha256=sha256_of(body),
            size=len(body),
            read_with=f"git show {entry['tag']}:{entry['path']} in a mirror of github:{entry['repo']}",
            extract=extract(entry["path"], body),
        )
        copy = CACHE / entry["repo"] / entry["tag"] / entry["path"]
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(body)
        print(f"recorded {entry['repo']} {entry['tag']} {entry['path']} ({len(body)} bytes, sha256 {entry['sha256'][:12]})")
    INDEX.write_text(head + "---\n" + yaml.dump(data, Dumper=_Indented, sort_keys=False, width=140, allow_unicode=True), encoding="utf-8")
    return 0


class _Indented(yaml.SafeDumper):
    """Lists indented under their key, as yamllint (the project's lint) reads YAML."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
