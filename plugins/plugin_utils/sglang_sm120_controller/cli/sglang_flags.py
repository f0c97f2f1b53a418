"""Check SGLang launch flags before a deploy, the way that SGLang release itself will take them:
its own ServerArgs built from the flags on a faked device of this hardware, then what that release
accepts but fails on, or silently mis-runs on, this hardware (compute capability 12, PCIe, MLA
targets), read from the values SGLang resolved.

    sglang-flags --sglang DIR|WHEEL --model-class CLASS [--gpu-cc 12.0] [--json] [--python PY]
                     [--planned-patch ID]... [--allow-topk-tree-on-mla]
                     [--model DIR] [--draft-model DIR] [--host-facts FILE] [--env KEY=VALUE]... -- FLAG...

--sglang is an sglang package directory, the directory holding it (an unpacked wheel), or a wheel; a
wheel that is not SGLang is refused (exit 2) before anything is unpacked.

SGLang's own check (plugins/plugin_utils/sglang_sm120_controller/flag_gate.py,
plugins/module_utils/sglang_sm120/launch/server_args.py): under --python,
else the runtime `make sglang-runtime` builds for that release (.cache/sglang-runtime/<version>/venv/
bin/python; the output says which and why), SGLang's prepare_server_args + check_server_args run on
the flags with the device faked from --host-facts (capability, the smallest GPU's memory, GPU count)
or --gpu-cc (default 12.0, on the target host's 8 x 97887 MiB) and FlashInfer at the version the
release pins. It needs the model's config files: --model DIR (a copy of them; it replaces
--model-path's value for SGLang), or --model-path naming such a directory on this machine. What SGLang
refuses is refused with its own message and location; every value it silently rewrites is a warning
(the flag, the value given, the value SGLang uses); an abbreviated flag is refused. Where that check
cannot run (no runtime for the release, SGLang does not import, the model's config is not here), the
flags get SGLang's argparse (--python, else the 0.5.9 runtime) or the static flag table read from its
sources, and the output says the verdict is partial and why. SGLang's accepted verdicts are kept in
.cache/flag-gate/verdicts, keyed by every input (the runtime, the release's server_args.py, the flags,
environment, device and the model's config files); the same check again reads its verdict back
instead of importing SGLang, and says so. With --warm SECONDS the check goes to a checker process
that keeps that runtime's SGLang imported (started by the first such check, one per runtime and
release tree, on a unix socket under .cache/flag-gate/warm/, mode 0700) and exits once SECONDS pass
without a check: new flags are then checked in well under a second instead of an import's 10-25 s.

The catalogue of known start failures (roles/sglang_launch/files/start-failures.yml, docs/start-failures.md) is evaluated
on the values SGLang resolved (or, in the partial case with --model, --draft-model, --host-facts or
--env, on the flags as typed) and every entry's verdict is printed with its evidence (ok, refused,
warning, unknown: a fact it needs is absent, n/a: another SGLang version). --host-facts is the JSON
the preflight module returns (gpus: index, name, compute_cap, driver_version, memory_mib; optionally
pcie_only, nvidia_kernel_module, deep_gemm_importable); its capability is used when --gpu-cc is not
given. --json prints all of it: the flag verdict, SGLang's (server_args: refusal or changes) and
every catalogue entry (start_failures).
Exit 0 accepted (warnings may be printed), 1 refused (one problem a line, with the fix and the
upstream reference or SGLang's location), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from sglang_sm120.launch.flags import FlagError, read_server_args
from sglang_sm120.launch.start_failures import CatalogueError, FactsError, HostFacts, parse_env, read_host_facts
from sglang_sm120_controller.cli import Parser, Usage, split_flags
from sglang_sm120_controller.flag_gate import FlagSet, check_flag_sets
from sglang_sm120_controller.paths import CACHE


def main(argv: list[str]) -> int:
    own, flags = split_flags(argv)
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("--sglang", required=True, type=Path, help="sglang package directory, unpacked wheel, or wheel")
    parser.add_argument("--model-class", required=True, help='the target model class (config.json "architectures")')
    parser.add_argument("--gpu-cc", help="compute capability of the GPUs (default: --host-facts' GPUs, else 12.0)")
    parser.add_argument(
        "--python",
        help="Python whose environment imports that SGLang (default: the runtime `make sglang-runtime` builds for the release)",
    )
    parser.add_argument("--pythonpath", action="append", default=[], help="more PYTHONPATH entries for the argparse-only check")
    parser.add_argument("--planned-patch", action="append", default=[], help="a toolkit patch id the release will carry")
    parser.add_argument(
        "--allow-topk-tree-on-mla",
        "--ack-topk-mla",
        action="store_true",
        help="acknowledge speculative-eagle-topk > 1 with flashinfer on an MLA target (known to mis-draft)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--model", type=Path, help="the target model's config files (config.json, quantization config, index)")
    parser.add_argument("--draft-model", type=Path, help="the draft model's config files")
    parser.add_argument("--host-facts", type=Path, help="the host's facts as the preflight module returns them (JSON)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="the server's environment (repeatable)")
    parser.add_argument(
        "--warm",
        type=float,
        default=0,
        metavar="SECONDS",
        help="keep SGLang imported in a checker process that answers the next checks until SECONDS pass without one",
    )
    try:
        args = parser.parse_args(own)
        if flags is None:
            raise Usage("give the launch flags after --")
        if not flags:
            raise Usage("no launch flags after --")
        if args.gpu_cc and not re.fullmatch(r"(\d+)(?:\.\d+)?", args.gpu_cc):
            raise Usage(f"--gpu-cc takes MAJOR.MINOR, e.g. 12.0; found {args.gpu_cc!r}")
        if args.warm < 0:
            raise Usage(f"--warm takes seconds, 0 or more (0: no warm checker); found {args.warm}")
        if not args.sglang.exists():
            raise Usage(f"--sglang {args.sglang}: no such file or directory")
        try:  # not SGLang: refused here, before a wheel is unpacked
            read_server_args(args.sglang)
        except FlagError as exc:
            raise Usage(f"--sglang {args.sglang} is not SGLang, refused before anything was unpacked: {exc}") from exc
        env = parse_env(args.env)
        host = read_facts(args)
        report = check_flag_sets(
            args.sglang,
            [FlagSet(argv=flags, env=env, model=args.model, draft_model=args.draft_model)],
            model_class=args.model_class,
            gpu_cc=args.gpu_cc,
            host=host,
            planned_patches=args.planned_patch,
            allow_topk_tree_on_mla=args.allow_topk_tree_on_mla,
            python=args.python,
            pythonpath=args.pythonpath,
            catalogue_when_partial=bool(args.model or args.draft_model or args.host_facts or args.env),
            cache=CACHE,
            warm=args.warm,
        )[0]
    except (Usage, ValueError, FlagError) as exc:
        hint = "; the launch flags go after --" if flags is None and "unrecognized arguments" in str(exc) else ""
        print(f"sglang-flags: {exc}{hint}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print("\n".join(report.lines()))
    return 0 if report.ok else 1


def read_facts(args: argparse.Namespace) -> HostFacts | None:
    """The host facts file, its capability checked against --gpu-cc; ValueError (a usage error) naming the file."""
    if not args.host_facts:
        return None
    try:
        host = read_host_facts(args.host_facts)
    except (CatalogueError, FactsError) as exc:
        raise ValueError(str(exc)) from exc
    if host.gpus and host.capability is None:
        raise ValueError(f"--host-facts {args.host_facts}: the GPUs report different compute capabilities")
    if host.capability and args.gpu_cc and float(args.gpu_cc) != float(host.capability):
        raise ValueError(
            f"--gpu-cc {args.gpu_cc} differs from the GPUs in --host-facts {args.host_facts} "
            f"(compute capability {host.capability}); leave --gpu-cc out or give the host's"
        )
    return host


def run() -> int:
    """The console script's entry point."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(run())
