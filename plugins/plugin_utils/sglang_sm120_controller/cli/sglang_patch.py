"""Apply, revert or report the toolkit's SGLang source patches (roles/sglang_patches/files/patches/manifest.yml).

    sglang-patch status --sglang SITE/sglang
    sglang-patch apply  --sglang SITE/sglang [--only ID]... [--set NAME=LITERAL]... [--check] [--diff]
    sglang-patch revert --sglang SITE/sglang [--only ID]... [--check] [--diff]

--sglang is the installed package directory (the one holding version.py). State defaults to
<sglang>/../.sglang-patches. `apply` without --only applies the patches that are on by default.
--set values are Python literals, e.g. --set 'sm120_all_reduce_max_mib={2: 32, 4: 64}'.
`apply` runs pyflakes on each pristine and patched target and refuses a patch that adds a message
(e.g. an undefined name: the file compiles but fails on import), naming patch, file and line;
--no-lint skips that (for a Python without pyflakes).
Outcomes per patch: applied / already-applied / would-apply, fixed-upstream (the release has the fix),
not-applicable (the release has no such file); neither of the last two fails the run.
Exit 0 ok, 1 refused or failed (one-line reason on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sglang_sm120.patches.engine import apply, revert, status
from sglang_sm120.patches.errors import SglangPatchError, UsageError
from sglang_sm120.patches.manifest import load_manifest
from sglang_sm120_controller.paths import MANIFEST


def parse_sets(pairs: list[str]) -> dict[str, str]:
    values = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set expects NAME=VALUE, found {pair!r}")
        values[name.strip()] = value
    return values


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("action", choices=("apply", "revert", "status"))
    parser.add_argument("--sglang", required=True, type=Path, help="installed sglang package directory")
    parser.add_argument("--state-dir", type=Path, help="state directory (default: <sglang>/../.sglang-patches)")
    parser.add_argument("--only", action="append", default=[], metavar="ID", help="patch id (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="sets", help="template variable (repeatable)")
    parser.add_argument("--check", action="store_true", help="change nothing, report what would happen")
    parser.add_argument("--diff", action="store_true", help="print the unified diff of each change")
    parser.add_argument("--no-lint", action="store_true", help="apply without the pyflakes check (not recommended)")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    args = parser.parse_args(argv)
    try:
        import yaml

        manifest = load_manifest(yaml.safe_load(args.manifest.read_text(encoding="utf-8")), args.manifest.parent)
        if args.action == "apply":
            results = apply(
                manifest, args.sglang, args.state_dir, args.only or None, parse_sets(args.sets), check=args.check, lint=not args.no_lint
            )
        elif args.sets:
            raise UsageError(f"--set applies to `apply` only, not `{args.action}`")
        elif args.action == "revert":
            results = revert(manifest, args.sglang, args.state_dir, args.only or None, check=args.check)
        else:
            results = status(manifest, args.sglang, args.state_dir, args.only or None)
    except UsageError as exc:
        print(f"sglang-patch: {exc}", file=sys.stderr)
        return 2
    except (SglangPatchError, OSError, ImportError) as exc:
        print(f"sglang-patch: {exc}", file=sys.stderr)
        return 1
    if not results and args.action == "revert":
        state = args.state_dir or args.sglang.resolve().parent / ".sglang-patches"
        print(f"sglang-patch: nothing to revert: no patch is recorded in {state}")
    for result in results:
        found = f" sha256={result.found_sha256}" if result.found_sha256 else ""
        if result.status in ("applied", "reverted") and result.before_sha256 and result.after_sha256:
            was = result.before_sha256 if result.status == "applied" else result.after_sha256
            found += f" (was {was})"
        print(f"{result.id}: {result.status} ({result.target}){found}")
        if args.diff and result.diff:
            sys.stdout.write(result.diff)
    return 0


def run() -> int:
    """The console script's entry point."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(run())
