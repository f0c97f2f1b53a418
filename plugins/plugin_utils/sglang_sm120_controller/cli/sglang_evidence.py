"""Say, from what an SGLang server printed (and answered on /server_info), whether each optimisation
its launch flags ask for is in effect: yes (the server shows it working), no (the server shows it off
or refused), unknown (nothing shows either; the note says what was looked for).

    sglang-evidence --journal FILE [--server-info FILE] --sglang-version V [--json] [--tail N] -- FLAG...

--journal: the server's log of one run (`journalctl -u sglang -o cat --since ...`, or its stderr).
--server-info: a saved `GET /server_info` (or `/get_server_info`) answer, JSON.
The lines and fields read are SGLang's own for that version (plugins/module_utils/sglang_sm120/serve/evidence.py, each
checked against the release's wheel by tests/unit/host/test_server_evidence.py). API keys are never printed.
Exit 0 with the verdicts, 2 bad usage or input that is not what SGLang writes.
"""

from __future__ import annotations

import argparse
import json
import sys

from sglang_sm120.serve.evidence import (
    TRAFFIC_TAIL,
    VERSION_MAX,
    VERSION_MIN,
    EvidenceError,
    judge,
    parse_version,
    read_journal,
    read_server_info,
    select_lines,
)
from sglang_sm120_controller.cli import Parser, Usage, split_flags


def main(argv: list[str]) -> int:
    own, flags = split_flags(argv)
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("--journal", required=True, help="the server's log of one run")
    parser.add_argument("--server-info", help="a saved /server_info answer (JSON)")
    parser.add_argument("--sglang-version", required=True, help="the SGLang version the server ran, e.g. 0.5.9")
    parser.add_argument("--tail", type=int, default=TRAFFIC_TAIL, help=f"Decode batch lines read from the end (default {TRAFFIC_TAIL})")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    try:
        args = parser.parse_args(own)
        if flags is None:
            raise Usage("give the server's launch flags after -- (an empty list after -- judges the defaults)")
        if parse_version(args.sglang_version) is None:
            raise Usage(f"--sglang-version takes a release like 0.5.9 (MAJOR.MINOR.PATCH), found {args.sglang_version!r}")
        journal = read_journal(args.journal)
        info = read_server_info(args.server_info) if args.server_info else None
        stated = info.get("version") if info else None
        if isinstance(stated, str) and parse_version(stated) not in (None, parse_version(args.sglang_version)):
            raise EvidenceError(
                f"server info {args.server_info} is from SGLang {stated}, --sglang-version says {args.sglang_version}: "
                "give the version the server ran"
            )
    except (Usage, EvidenceError) as exc:
        hint = "; the launch flags go after --" if flags is None and "unrecognized arguments" in str(exc) else ""
        print(f"sglang-evidence: {exc}{hint}", file=sys.stderr)
        return 2
    lines = select_lines(journal, args.sglang_version, max(args.tail, 1))
    results = judge(flags, lines, info, args.sglang_version)
    if args.json:
        keys = ("name", "flag", "value", "verdict", "evidence", "note")
        print(json.dumps({"sglang_version": args.sglang_version, "optimisations": [{k: r[k] for k in keys} for r in results]}, indent=2))
        return 0
    print(
        f"sglang {args.sglang_version}: {args.journal} ({len(journal)} lines, {len(lines)} read as evidence), "
        f"server info {args.server_info or 'not given'}"
    )
    for result in results:
        asked = result["flag"] + (f" {result['value']}" if result["value"] else "") if result["flag"] else "on by default"
        print(f"{result['name']} ({asked}): {result['verdict']}")
        for item in result["evidence"]:
            print(f"  {item}")
        if result["note"]:
            print(f"  note: {result['note']}")
    if not any(r["evidence"] for r in results) and results and "outside the versions" in results[0]["note"]:
        print(f"(the evidence table covers SGLang {VERSION_MIN} to {VERSION_MAX})")
    return 0


def run() -> int:
    """The console script's entry point."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(run())
