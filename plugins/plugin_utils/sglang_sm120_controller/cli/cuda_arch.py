"""List the GPU code in compiled files, named as NVIDIA's cuobjdump names it.

    cuda-arch FILE...                 print each file's targets (sm_90a, sm_120a, compute_120, ...)
    cuda-arch --require 12.0 FILE...  exit 1 unless every file carries 12.0 machine code
                                          (an sm_120, sm_120a or sm_120f cubin; not sm_121a, not PTX)

Cubins are `sm_NNN` or, for architecture-specific targets, `sm_NNNa` (cuobjdump lists family
`sm_NNNf` cubins as `sm_NNN`); PTX is `compute_NNN[a|f]`. The targets are read with cuobjdump
(--cuobjdump, else $CUDA_HOME/bin/cuobjdump, else cuobjdump on PATH) or, without one or with
--builtin, by the built-in reader of cubins (ELF for EM_CUDA) and of the fat binaries embedded in
objects and shared libraries. The first line on stderr says which was used.
"""

from __future__ import annotations

import argparse
import sys

from sglang_sm120.build.pipeline import BuildError, BuildSpecError, arch_targets, carries, find_cuobjdump, read_gpu_code, witness_name


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--require", metavar="ARCH", help="compute capability that must have machine code, e.g. 12.0")
    parser.add_argument("--cuobjdump", metavar="PATH", help="cuobjdump to read with (default: $CUDA_HOME/bin, then PATH)")
    parser.add_argument("--builtin", action="store_true", help="use the built-in reader even when cuobjdump exists")
    args = parser.parse_args(argv)
    cuobjdump = None if args.builtin else (args.cuobjdump or find_cuobjdump())
    try:
        wanted = arch_targets(args.require) if args.require else []
    except BuildSpecError as exc:
        parser.error(str(exc))
    print(f"reader: {witness_name(cuobjdump)}", file=sys.stderr)
    failed = False
    for name in args.files:
        try:
            targets = read_gpu_code(name, cuobjdump)
        except (OSError, BuildError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            failed = True
            continue
        found = ", ".join(targets) or "no GPU code"
        if args.require and not carries(targets, args.require):
            print(f"{name}: expected {' or '.join(wanted)} machine code, found {found}", file=sys.stderr)
            failed = True
            continue
        print(f"{name}: {found}")
    return 1 if failed else 0


def run() -> int:
    """The console script's entry point."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(run())
