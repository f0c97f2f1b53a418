"""Which SGLang releases this toolkit can deploy, checked in seconds and before anything is built.

    sglang-compat RELEASE... [--model-class NAME] [--algorithm EAGLE3] [--profile NAME] [--no-wheels] [--json]

RELEASE is a version (read from .cache/sglang/<version>, else fetched there with
`pip download --no-deps sglang==VERSION`), an SGLang wheel, or an unpacked tree (sglang/ or its parent).
Per release: the default patch set (applies / fixed upstream / not applicable / REFUSED, checked in
memory), the EAGLE-3 audit of the model class with those patches laid over the sources, the launch
profile's flags through flag_rules.check_launch (SGLang's own ServerArgs where a Python imports that
release: --python, else the release's runtime environment in .cache/sglang-runtime/<version> when
`make sglang-runtime` made one; else the static table; the report says which parser), and the stack
its wheel pins (torch, flashinfer_python, sgl-kernel/sglang-kernel from METADATA Requires-Dist; a tree
without dist-info says unknown).
Then, per release and CUDA-linked artifact (torch, the kernel package, FlashInfer and its JIT cache,
torchvision, torchaudio, torch_memory_saver), what it costs on the GPU host: the package index's own
wheel when it fits (downloaded once for the host's Python and platform into
.cache/index-wheels/, read with the artifact's build-spec verify rules: the CUDA major of its
requirements and linked libraries, the GPU code of every shared object), else a vetted +cu130
wheel in the controller's prebuilt wheelhouse, else a source build with its estimate
(sglang_build_estimate_hours in .../build.yml), and the first deploy's build hours.
--no-wheels skips that (nothing downloaded).
Defaults: stack_model_class / stack_speculative_algorithm from roles/toolkit_defaults/defaults/main/stack.yml,
sglang_profile from .../service.yml.
Exit 0 when every release is usable, 1 otherwise, 2 bad usage or a release that cannot be found.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sglang_sm120.build.pipeline import find_cuobjdump
from sglang_sm120.patches.errors import SglangPatchError
from sglang_sm120.patches.manifest import load_manifest
from sglang_sm120.release.venv import sglang_version
from sglang_sm120_controller.cli import Parser, Usage
from sglang_sm120_controller.compat import CompatError, check_release, format_table, render_profile, resolve
from sglang_sm120_controller.index_wheels import IndexWheelError, release_costs, soname_majors
from sglang_sm120_controller.paths import CACHE, DEFAULTS, MANIFEST
from sglang_sm120_controller.pinned_stack import ReleaseStackError


def runtime_python(cache_root: Path, version: str) -> str | None:
    """The Python of `make sglang-runtime`'s environment for this SGLang release (its dependencies; the
    release's own tree goes first on PYTHONPATH), when one was made; None otherwise."""
    runtime = cache_root / "sglang-runtime" / version
    python = runtime / "venv" / "bin" / "python"
    return str(python) if (runtime / ".stamp").exists() and python.exists() else None


def add_costs(rows: list, releases: list, stack: dict, cache_root: Path) -> None:
    """What each artifact of each release costs on the GPU host (index wheel, wheelhouse, source build)."""
    import yaml

    build = yaml.safe_load((DEFAULTS / "build.yml").read_text())
    specs = [*build["sglang_build_core_specs"], *build["sglang_build_companion_specs"]]
    rules = {spec["name"]: render_profile(spec.get("verify", {}), stack) for spec in specs}
    cuobjdump = find_cuobjdump() or next((str(p) for p in (cache_root / "test-tools").glob("nvidia/cu*/bin/cuobjdump")), None)
    for row, release in zip(rows, releases):
        if release.metadata is None:
            continue
        choices, hours = release_costs(
            release.metadata,
            rules,
            build["sglang_build_estimate_hours"],
            stack["stack_torch_torchvision_versions"],
            cache_root / "index-wheels",
            cache_root / "prebuilt",
            cuobjdump,
            sonames=soname_majors(stack["stack_cuda_components"]),
        )
        row.artifacts = [c.to_dict() for c in choices]
        row.source_build_hours = list(hours)


def main(argv: list[str]) -> int:
    import yaml

    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("releases", nargs="+", metavar="RELEASE")
    parser.add_argument("--model-class", help="target model class (default: stack_model_class)")
    parser.add_argument("--algorithm", type=str.upper, help="speculative algorithm (default: stack_speculative_algorithm)")
    parser.add_argument("--profile", help="launch profile of sglang_profiles (default: sglang_profile)")
    parser.add_argument(
        "--python",
        help="a Python that imports the release, for SGLang's own parser (default: the release's runtime "
        "environment in .cache/sglang-runtime/<version> where there is one, else the static table)",
    )
    parser.add_argument("--cache", type=Path, help="where versions are unpacked (default: .cache/sglang)")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--no-wheels", action="store_true", help="do not judge the index's wheels (nothing downloaded)")
    parser.add_argument("--json", action="store_true")
    try:
        args = parser.parse_args(argv)
    except Usage as exc:
        print(f"sglang-compat: {exc}", file=sys.stderr)
        return 2
    stack = yaml.safe_load((DEFAULTS / "stack.yml").read_text())
    service = yaml.safe_load((DEFAULTS / "service.yml").read_text())
    model_class = args.model_class or stack["stack_model_class"]
    algorithm = args.algorithm or stack["stack_speculative_algorithm"]
    profile_name = args.profile or service["sglang_profile"]
    profiles = service.get("sglang_profiles") or {}
    if profile_name not in profiles:
        print(f"sglang-compat: no profile {profile_name!r}; sglang_profiles has {', '.join(profiles)}", file=sys.stderr)
        return 2
    cache = args.cache or CACHE / "sglang"
    try:
        manifest = load_manifest(yaml.safe_load(args.manifest.read_text(encoding="utf-8")), args.manifest.parent)
        releases = [resolve(spec, cache) for spec in args.releases]
        # The profile as Ansible renders it for each release (stack_sglang_version: that release).
        rows = [
            check_release(
                r,
                manifest,
                model_class,
                algorithm,
                profile_name,
                render_profile(profiles[profile_name], {**stack, "stack_sglang_version": sglang_version(r.sglang_dir)}),
                args.python or runtime_python(cache.parent, sglang_version(r.sglang_dir)),
            )
            for r in releases
        ]
        if not args.no_wheels:
            add_costs(rows, releases, stack, cache.parent)
    except (CompatError, SglangPatchError, IndexWheelError, ReleaseStackError, OSError) as exc:
        print(f"sglang-compat: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # an audit or flag-table failure on a release: name it
        print(f"sglang-compat: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(
            json.dumps(
                {"model_class": model_class, "algorithm": algorithm, "profile": profile_name, "releases": [r.to_dict() for r in rows]},
                indent=2,
            )
        )
    else:
        print(format_table(rows))
    return 0 if all(r.usable for r in rows) else 1


def run() -> int:
    """The console script's entry point."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(run())
