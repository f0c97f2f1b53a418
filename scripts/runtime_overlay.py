#!/usr/bin/env python3
"""Write the CPU runtime of one more SGLang release as an overlay on a full one (issue 48: the catalogue's triggering
flags through the real ServerArgs of the first and last release of each range).

    .venv/bin/python scripts/runtime_overlay.py 0.5.14 0.5.17
    .venv/bin/python scripts/runtime_overlay.py --lock-from 0.5.23 0.5.24

A full runtime (tests/runtime/sglang-0.5.9.txt, sglang-0.5.23.txt) is about 6 GB, nearly all of it torch and its
CUDA libraries, which every release from 0.5.9 to 0.5.23 imports the same way on a CPU. An overlay
(tests/runtime/sglang-VERSION.txt with a `# runtime-base: B` line) holds only the distributions of the full runtime
B whose version the release's own lock (roles/toolkit_defaults/files/locks/sglang-VERSION.txt, its Python 3.11 pins)
says otherwise; scripts/sglang-runtime.sh installs them into a small venv that reaches B's site-packages after its
own (a .pth file), so the release's versions are the ones imported. The base is the full runtime with the fewest
such differences. Never overlaid: torch and what is built with it (torch*, triton, nvidia-*, cuda-*), the same
wheels in every runtime here (the full runtime's header says why).

A release without a lock (a new one, before scripts/lock_release.py has run for it) borrows the lock of --lock-from,
and every distribution the release itself pins exactly (its METADATA's Requires-Dist name==version) is taken at the
release's pin instead; the header says so.

Exits 1 when the release's tree or a lock is missing, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Optional

from packaging.markers import Marker

from sglang_sm120.build.closure_lock import exact_pins, normalize_name, parse_lock
from sglang_sm120.files import atomic_write

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = ROOT / "tests" / "runtime"
LOCKS = ROOT / "roles" / "toolkit_defaults" / "files" / "locks"
CACHE = ROOT / ".cache" / "sglang"
PYTHON = "3.11"  # the runtimes' Python (this machine kind's)
NEVER = re.compile(r"^(torch.*|triton|nvidia-.*|cuda-.*)$")
BASE_LINE = re.compile(r"^# runtime-base: (\S+)\s*$", re.M)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s*$")


def read_pins(path: Path) -> dict[str, str]:
    """name -> version of a runtime requirements file's `name==version` lines."""
    out = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line.strip())
        if match:
            out[normalize_name(match[1])] = match[2]
    return out


def full_runtimes() -> dict[str, dict[str, str]]:
    """version -> pins of every full runtime (a requirements file without a runtime-base line)."""
    out = {}
    for path in sorted(RUNTIMES.glob("sglang-*.txt")):
        if not BASE_LINE.search(path.read_text()):
            out[path.stem.removeprefix("sglang-")] = read_pins(path)
    return out


def lock_pins(version: str) -> dict[str, str]:
    """name -> version the release's lock holds for Python 3.11."""
    path = LOCKS / f"sglang-{version}.txt"
    lock = parse_lock(path.read_text(), str(path))
    env = {"python_version": PYTHON, "python_full_version": PYTHON + ".0", "sys_platform": "linux", "platform_machine": "x86_64"}
    return {p.name: p.version for p in lock.pins if not p.marker or Marker(p.marker).evaluate(env)}


def release_pins(version: str) -> dict[str, str]:
    """The release's own exact pins (Requires-Dist name==version, any extra-free marker)."""
    infos = sorted((CACHE / version).glob("sglang-*.dist-info/METADATA"))
    if not infos:
        raise SystemExit(f"runtime_overlay: no unpacked SGLang {version} under {CACHE} (run `make sglang-wheels`)")
    return exact_pins(infos[0].read_text())


def overlay(version: str, lock_from: Optional[str]) -> tuple[str, dict[str, str], str]:
    """(base version, name -> version to overlay, where the versions come from)."""
    source = lock_from or version
    if not (LOCKS / f"sglang-{source}.txt").is_file():
        raise SystemExit(
            f"runtime_overlay: no lock {LOCKS / f'sglang-{source}.txt'} for SGLang {version}; "
            "give --lock-from VERSION (the nearest locked release) or write the lock (scripts/lock_release.py)"
        )
    wanted = lock_pins(source)
    said = f"the lock {LOCKS.relative_to(ROOT)}/sglang-{source}.txt (its Python {PYTHON} pins)"
    if lock_from:
        own = release_pins(version)
        wanted.update({n: v for n, v in own.items() if n in wanted})
        said += f", SGLang {version}'s own exact pins (its Requires-Dist) over it"
    bases = full_runtimes()
    if not bases:
        raise SystemExit(f"runtime_overlay: no full runtime requirements file in {RUNTIMES}")

    def differences(pins: dict[str, str]) -> dict[str, str]:
        return {n: wanted[n] for n in sorted(pins) if n in wanted and wanted[n] != pins[n] and not NEVER.match(n)}

    base = min(bases, key=lambda b: (len(differences(bases[b])), b))
    return base, differences(bases[base]), said


def text(version: str, base: str, pins: dict[str, str], said: str) -> str:
    lines = [
        f"# Runtime environment of the real SGLang {version} on a CPU, as an overlay on the full runtime of {base}:",
        f"# the distributions of tests/runtime/sglang-{base}.txt whose version SGLang {version} resolves otherwise, from",
        f"# {said}. Written by scripts/runtime_overlay.py; do not edit by hand.",
        "# scripts/sglang-runtime.sh installs them (--no-deps) into a venv that reaches the base's site-packages after its",
        "# own; torch and what is built with it are the base's (the same wheels in every runtime here).",
        f"# runtime-base: {base}",
    ]
    return "\n".join(lines + [f"{n}=={v}" for n, v in pins.items()]) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="+")
    parser.add_argument("--lock-from", help="the locked release whose lock a release without one borrows")
    args = parser.parse_args(argv)
    for version in args.versions:
        base, pins, said = overlay(version, args.lock_from)
        path = RUNTIMES / f"sglang-{version}.txt"
        atomic_write(path, text(version, base, pins, said).encode())
        print(
            f"runtime_overlay: {path.relative_to(ROOT)}: base {base}, {len(pins)} distribution(s) overlaid: "
            + ", ".join(f"{n}=={v}" for n, v in pins.items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
