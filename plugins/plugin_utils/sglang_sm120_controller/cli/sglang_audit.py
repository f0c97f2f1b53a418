"""Check that a model class has what SGLang's speculative decoding calls on the target model.

    sglang-audit --sglang PATH --model-class NAME [--algorithm EAGLE3] [--json]
    sglang-audit --sglang PATH --model-dir DIR    (the class is config.json's "architectures")

PATH is an installed sglang/ package directory or an SGLang wheel; nothing is imported.
Exit 0 when nothing required is missing, 1 when something is, 2 when the input is unusable.
"""

from __future__ import annotations

import argparse
import json
import sys

from sglang_sm120.patches.audit import ALGORITHMS, SglangAuditError, audit, format_table


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("--sglang", required=True, metavar="PATH", help="sglang/ package directory or .whl file")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--model-class", metavar="NAME", help="target model class, e.g. KimiK25ForConditionalGeneration")
    target.add_argument("--model-dir", metavar="DIR", help="model directory whose config.json names the class")
    parser.add_argument("--algorithm", default="EAGLE3", type=str.upper, choices=ALGORITHMS)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        result = audit(args.sglang, args.model_class, args.algorithm, model_dir=args.model_dir)
    except (OSError, SglangAuditError) as exc:
        print(f"sglang-audit: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_table(result))
    return 0 if result.ok else 1


def run() -> int:
    """The console script's entry point."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(run())
