#!/usr/bin/env python3
"""Write the lock of each SGLang release's Python closure (issue 50): what `pip` resolves for sglang==VERSION on
every host the toolkit supports, one version per distribution, with the sha256 of each file it took.

    .venv/bin/python scripts/lock_release.py 0.5.9 0.5.23
    .venv/bin/python scripts/lock_release.py --python 3.11 --out /tmp/locks 0.5.13

Each lock goes to roles/toolkit_defaults/files/locks/sglang-VERSION.txt (--out DIR elsewhere), in pip's
hash-checking requirements format; the sglang build spec reads it (sglang_build_lock_file) and the deploy
downloads the closure under its pins, refusing any wheel it does not allow
(plugins/module_utils/sglang_sm120/build/closure_lock.py).

Hosts: the system Python of each distribution preflight supports (roles/preflight/defaults/main.yml), with that
distribution's glibc; those preflight allows (preflight_min_python up to preflight_max_python) must resolve, the
ones it refuses (Debian 13's 3.13) are tried and left out of the lock, with the reason, when they do not. A host
whose Python the release has no wheel for (SGLang ships cp311 wheels only from 0.5.11) cannot install that release
at all: it is left out too, said in the header. Each is resolved by a real interpreter of that Python (pip evaluates
markers with the Python that runs it; `pyenv install` one that is missing) as a host's pip would:

    pythonX.Y -m pip install --dry-run --ignore-installed --quiet --report REPORT --only-binary :all:
        --platform manylinux_2_5_x86_64 ... --platform manylinux_2_<glibc>_x86_64 (and the manylinux1, 2010, 2014
        aliases, linux_x86_64) --python-version X.Y --implementation cp --abi cpXY --abi abi3 --abi none
        --target TMPDIR sglang==VERSION

without this machine's pip configuration files or PIP_* variables (a controller's local mirror or constraints are
not what a host sees; --pip-config keeps them, e.g. for a site's own index mirror). About 1-2 minutes a Python.
--constraint 'fastapi<X' holds the resolution below a version known to break the release (written in the header).
--artifacts DIR puts the wheels in DIR (the toolkit's own +cu130 builds, a prebuilt wheelhouse) in place of the
index's, pinned, so the lock also holds what THEIR requirements pull in (SGLang 0.5.9's prebuilt torch+cu130
requires CUDA-13 wheels the index's CUDA-12 torch does not).

Prints progress; exits 1 when a release could not be locked (its lock is left as it was), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from sglang_sm120.build.closure_lock import canonical_version, normalize_name, parse_lock
from sglang_sm120.files import atomic_write, file_sha256
from sglang_sm120_controller.rehearsal.release import DISTRIBUTION_PYTHONS, find_interpreter, unresolved

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "roles" / "toolkit_defaults" / "files" / "locks"
PREFLIGHT_DEFAULTS = ROOT / "roles" / "preflight" / "defaults" / "main.yml"
TOOLKIT_ROLES = ROOT / "roles" / "toolkit_defaults" / "defaults" / "main" / "roles.yml"
# glibc of each supported distribution (major version as preflight names it): the newest manylinux tag its pip takes
DISTRIBUTION_GLIBC: dict[str, dict[str, str]] = {
    "Debian": {"11": "2.31", "12": "2.36", "13": "2.41"},
    "Ubuntu": {"20": "2.31", "22": "2.35", "24": "2.39"},
}
DISTRIBUTION_NAMES = {"Debian": "Debian {}", "Ubuntu": "Ubuntu {}.04"}


class LockRunError(Exception):
    """One Python's resolution failed; the text says why."""


@dataclass(frozen=True)
class Host:
    """One kind of host a lock covers: its Python, its distribution, its glibc; `required`: preflight allows it."""

    python: str
    distribution: str
    glibc: str
    required: bool = True

    def label(self) -> str:
        return f"Python {self.python} ({self.distribution}, glibc {self.glibc})"


@dataclass(frozen=True)
class Chosen:
    """What pip took for one distribution on one host: its version, the file and the file's sha256."""

    name: str
    version: str
    wheel: str
    sha256: str


@dataclass
class Resolution:
    """One host's resolution: what pip took (normalized name -> Chosen), or why it could not."""

    host: Host
    chosen: dict[str, Chosen] = field(default_factory=dict)
    error: str = ""
    unresolved: str = ""  # the requirement pip could not resolve, when it failed so
    seconds: float = 0.0
    pip: str = "?"


def _vt(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def toolkit_hosts(preflight: Mapping[str, Any], max_python: str) -> list[Host]:
    """The hosts of preflight's supported distributions from preflight_min_python on, oldest Python first; those
    above `max_python` (preflight_max_python, '' for none) are not required."""
    hosts = []
    for distribution, majors in dict(preflight["preflight_supported_distributions"]).items():
        for major in majors:
            python = DISTRIBUTION_PYTHONS.get(distribution, {}).get(str(major))
            glibc = DISTRIBUTION_GLIBC.get(distribution, {}).get(str(major))
            if python is None or glibc is None:
                raise LockRunError(f"preflight supports {distribution} {major}, whose Python or glibc this script does not know: add it")
            if _vt(python) < _vt(str(preflight["preflight_min_python"])):
                continue
            required = not max_python or _vt(python) <= _vt(max_python)
            hosts.append(Host(python, DISTRIBUTION_NAMES.get(distribution, "{}").format(major), glibc, required))
    return sorted(hosts, key=lambda h: (_vt(h.python), _vt(h.glibc)))


def read_hosts() -> list[Host]:
    preflight = yaml.safe_load(PREFLIGHT_DEFAULTS.read_text(encoding="utf-8"))
    max_python = str(yaml.safe_load(TOOLKIT_ROLES.read_text(encoding="utf-8")).get("preflight_max_python") or "")
    return toolkit_hosts(preflight, max_python)


def platforms(glibc: str) -> list[str]:
    """The platform tags a pip on x86_64 Linux with this glibc takes: manylinux_2_5 ... manylinux_2_<minor>, the
    legacy aliases, linux_x86_64."""
    major, minor = _vt(glibc)[:2]
    if major != 2:
        raise LockRunError(f"glibc {glibc}: expected 2.x")
    tags = [f"manylinux_2_{m}_x86_64" for m in range(5, minor + 1)]
    return [*tags, "manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64", "linux_x86_64"]


def resolve_argv(
    python: str, host: Host, requirement: str, report: Path, target: Path, links: Sequence[Path], constraints: Optional[Path]
) -> list[str]:
    tag = "cp" + host.python.replace(".", "")
    argv = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), "--only-binary", ":all:"]
    for platform in platforms(host.glibc):
        argv += ["--platform", platform]
    argv += ["--python-version", host.python, "--implementation", "cp", "--abi", tag, "--abi", "abi3", "--abi", "none"]
    argv += ["--target", str(target)]
    for link in links:
        argv += ["--find-links", str(link)]
    if constraints is not None:
        argv += ["-c", str(constraints)]
    return [*argv, requirement]


def pip_environment(keep_config: bool) -> dict[str, str]:
    """The environment pip runs in: without pip's configuration files and PIP_* variables unless `keep_config`."""
    if keep_config:
        return dict(os.environ)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _file_of(url: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])


def report_chosen(report: Mapping[str, Any]) -> dict[str, Chosen]:
    """pip's --report: normalized name -> what it took. A file without a sha256 is refused (a lock needs every hash);
    a local file's is read from the file."""
    out: dict[str, Chosen] = {}
    for item in report.get("install", []):
        meta, info = item.get("metadata", {}), item.get("download_info", {})
        url = str(info.get("url", ""))
        archive = info.get("archive_info") or {}
        digest = (archive.get("hashes") or {}).get("sha256")
        if not digest and str(archive.get("hash", "")).startswith("sha256="):
            digest = str(archive["hash"]).split("=", 1)[1]
        if not digest and url.startswith("file:"):
            digest = file_sha256(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
        name = normalize_name(str(meta.get("name", "")))
        wheel = _file_of(url)
        if not digest or not re.fullmatch(r"[0-9a-f]{64}", digest):
            what = f"{name} {meta.get('version')} ({wheel})"
            raise LockRunError(f"pip's report gives no sha256 for {what}: a lock needs the hash of every file")
        if not wheel.endswith(".whl"):
            raise LockRunError(f"pip's report takes {wheel} for {name}, not a wheel (--only-binary :all: was asked)")
        out[name] = Chosen(name, str(meta.get("version", "")), wheel, digest)
    if not out:
        raise LockRunError("pip's report installs nothing")
    return out


def resolve(
    host: Host,
    requirement: str,
    work: Path,
    links: Sequence[Path] = (),
    pins: Sequence[str] = (),
    keep_config: bool = False,
    timeout: float = 1800,
    runner: Callable[..., Any] = subprocess.run,
) -> Resolution:
    """Resolve `requirement` for one host with a real interpreter of its Python; the error, not an exception, when it fails."""
    result = Resolution(host)
    python = find_interpreter(host.python, runner)
    if python is None:
        result.error = f"no Python {host.python} with pip here (pip reads markers as the Python running it): pyenv install {host.python}"
        return result
    result.pip = pip_version(python, runner)
    base = work / f"cp{host.python.replace('.', '')}-glibc{host.glibc}"
    base.mkdir(parents=True, exist_ok=True)
    constraints = None
    if pins:
        constraints = base / "artifacts.txt"
        constraints.write_text("".join(f"{p}\n" for p in pins), encoding="utf-8")
    report = base / "report.json"
    started = time.monotonic()
    try:
        proc = runner(
            resolve_argv(python, host, requirement, report, base / "target", links, constraints),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=pip_environment(keep_config),
        )
    except subprocess.TimeoutExpired:
        result.error = f"pip did not resolve in {timeout:.0f} s"
        return result
    result.seconds = time.monotonic() - started
    if proc.returncode != 0 or not report.is_file():
        result.unresolved = unresolved(proc.stderr or proc.stdout or "")
        result.error = f"pip cannot resolve {result.unresolved}"
        return result
    try:
        result.chosen = report_chosen(json.loads(report.read_text(encoding="utf-8")))
    except (LockRunError, ValueError) as exc:
        result.error = str(exc)
    return result


def own_requirement(text: str) -> tuple[str, str]:
    """(normalized name, canonical version) of an exact requirement pip names (`sglang==0.5.23`), ('', '') otherwise."""
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)\s*", text)
    return (normalize_name(match.group(1)), canonical_version(match.group(2))) if match else ("", "")


def python_marker(pythons: Sequence[str]) -> str:
    return " or ".join(f'python_version == "{p}"' for p in sorted(set(pythons), key=_vt))


def lock_lines(resolutions: Sequence[Resolution]) -> list[str]:
    """The lock's requirement lines from the hosts' resolutions: a distribution at one version on every host that takes it
    is one line with every sha256 seen; one whose version differs between Pythons is one line per version, each under
    a python_version marker naming the Pythons that take it (a Python is one version: its hosts differ only in files).
    A distribution that some resolved Python does not take at all (a backport for older Pythons) carries the marker of
    those that do, so the lock never pins it for a Python that would not install it."""
    names = sorted({name for r in resolutions for name in r.chosen})
    every_python = {r.host.python for r in resolutions}
    lines: list[str] = []
    for name in names:
        taken = [(r.host, r.chosen[name]) for r in resolutions if name in r.chosen]
        by_version: dict[str, list[tuple[Host, Chosen]]] = {}
        for host, chosen in taken:
            by_version.setdefault(canonical_version(chosen.version), []).append((host, chosen))
        for python in {h.python for h, _ in taken}:
            if len({v for v, group in by_version.items() if any(h.python == python for h, _ in group)}) > 1:
                raise LockRunError(f"{name}: Python {python} resolves two versions on two distributions; lock them one host at a time")
        for group in sorted(by_version.values(), key=lambda g: min(_vt(h.python) for h, _ in g)):
            hashes = sorted({c.sha256 for _, c in group})
            everywhere = len(by_version) == 1 and {h.python for h, _ in taken} == every_python
            marker = "" if everywhere else f" ; {python_marker([h.python for h, _ in group])}"
            head = f"{name}=={group[0][1].version}{marker}"
            lines.append(" \\\n".join([head, *(f"    --hash=sha256:{h}" for h in hashes)]))
    return lines


def lock_text(
    version: str,
    resolutions: Sequence[Resolution],
    skipped: Sequence[Resolution],
    today: str,
    pip_versions: Sequence[str],
    artifacts: Sequence[str] = (),
    keep_config: bool = False,
    held: Sequence[str] = (),
    notes: Sequence[str] = (),
    unhashed: Sequence[str] = (),
) -> str:
    covered = "; ".join(r.host.label() for r in resolutions)
    header = [
        f"# The Python closure of SGLang {version}, locked (issue 50): each distribution pip resolves for sglang=={version}",
        "# on the hosts below, at one version, with the sha256 of every file those hosts take.",
        f"# Written by scripts/lock_release.py on {today} (pip {', '.join(sorted(set(pip_versions)))}); do not edit by hand.",
        f"# Resolved for: {covered}.",
        *(f"# Not covered: {r.host.label()}: {r.error}" for r in skipped),
        "# Command, for each of those Pythons (its own interpreter, no pip configuration file, pip's default index):",
        "#   pythonX.Y -m pip install --dry-run --ignore-installed --quiet --report REPORT --only-binary :all:",
        "#     --platform manylinux_2_5_x86_64 ... --platform manylinux_2_<glibc minor>_x86_64 --platform manylinux1_x86_64",
        "#     --platform manylinux2010_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64",
        f"#     --python-version X.Y --implementation cp --abi cpXY --abi abi3 --abi none --target TMPDIR sglang=={version}",
    ]
    if keep_config:
        header.append("#   (with the pip configuration of the machine that wrote it: --pip-config)")
    if artifacts:
        header.append(f"#   with these wheels in place of the index's (--artifacts): {', '.join(artifacts)}")
    if held:
        header.append(f"#   with these versions held back on purpose (--constraint): {', '.join(held)}")
    if unhashed:
        header += [
            f"#   with a stand-in that requires nothing in place of each of these (--unhashed): {', '.join(unhashed)};",
            "#   pinned without hashes below: any file of that version is allowed, and what its real wheel requires was",
            "#   not resolved here (a requirement it brings that the lock does not hold stops the download, named)",
            *(f"# unhashed: {r}" for r in unhashed),
        ]
    for note in notes:
        header += [f"# {line}" for line in textwrap.wrap(f"Why: {note}", 112, subsequent_indent="  ")]
    options = ", ".join(o for o, on in (("--constraint", held), ("--unhashed", unhashed)) if on)
    header += [
        "# The build (the sglang spec, roles/toolkit_defaults/defaults/main/build.yml) downloads sglang's closure with",
        "# these pins as pip constraints and refuses to cache it when a downloaded wheel is not allowed here (its name,",
        "# version or sha256). Exempt: the distributions of the artifacts the spec depends on (torch, FlashInfer, the",
        "# kernel package, torchvision, torchaudio, torch_memory_saver as the release needs them), which come from the",
        "# build's own wheelhouses under their own exact pins: their lines here are the index's builds, information only",
        "# (for SGLang 0.5.9 CUDA-12 builds, replaced by the toolkit's +cu130 ones; requirements only the index's builds",
        "# have, such as nvidia-*-cu12, are then never downloaded). Markers name the Pythons a version holds for.",
        f"# Update deliberately: scripts/lock_release.py {version}"
        + (f" with the {options} and --why above while they hold" if options else "")
        + ",",
        "# review the diff, then the canary and the drain against a real server on the GPU machine",
        '# (docs/operations.md, "Locked Python closures").',
    ]
    return "\n".join([*header, "", *lock_lines(resolutions)]) + "\n"


def pip_version(python: str, runner: Callable[..., Any] = subprocess.run) -> str:
    proc = runner([python, "-m", "pip", "--version"], capture_output=True, text=True, timeout=120)
    return proc.stdout.split()[1] if proc.returncode == 0 and len(proc.stdout.split()) > 1 else "?"


def artifact_pins(dirs: Sequence[Path]) -> tuple[list[str], list[str]]:
    """(name==version pins, wheel file names) of the wheels in the --artifacts directories."""
    wheels = sorted(w for d in dirs for w in Path(d).glob("*.whl"))
    pins = sorted({f"{normalize_name(w.name.split('-')[0])}=={w.name.split('-')[1].replace('_', '-')}" for w in wheels})
    return pins, [w.name for w in wheels]


def standin_wheel(directory: Path, requirement: str) -> Path:
    """A resolution-only stand-in for name==version (--unhashed): a wheel of that name and version that requires
    nothing, so pip can resolve the rest of the closure; the lock never lists it (its line is `# unhashed:`)."""
    name, version = requirement.split("==")
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: lock_release.py resolution-only stand-in\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: lock_release.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = (
        "".join(f"{path},sha256={urlsafe_digest(text.encode())},{len(text.encode())}\n" for path, text in files.items())
        + f"{info}/RECORD,,\n"
    )
    wheel = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(path, text)
    return wheel


def urlsafe_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def lock_release(
    version: str,
    hosts: Sequence[Host],
    out: Path,
    artifacts: Sequence[Path] = (),
    keep_config: bool = False,
    today: Optional[str] = None,
    say: Callable[[str], None] = print,
    runner: Callable[..., Any] = subprocess.run,
    held: Sequence[str] = (),
    notes: Sequence[str] = (),
    unhashed: Sequence[str] = (),
) -> Path:
    """Resolve sglang==`version` for every host and write its lock. A host whose Python the release has no wheel for
    (SGLang ships cp311 wheels only from 0.5.11) cannot install it at all and is left out, said in the header, as is a
    host preflight refuses that does not resolve; LockRunError when any other host fails, or none resolves. `held`:
    requirements the resolution is held to on purpose (fastapi<X), written in the header. `unhashed`: name==version
    of distributions whose wheels cannot be reached here: a stand-in requiring nothing takes their place in the
    resolution, and the lock pins them in a `# unhashed:` header line instead of a hashed one."""
    pins, wheels = artifact_pins(artifacts)
    pins = [*pins, *held, *unhashed]
    left_out = {normalize_name(r.split("==")[0]) for r in unhashed}
    resolutions: list[Resolution] = []
    skipped: list[Resolution] = []
    versions: list[str] = []
    with tempfile.TemporaryDirectory(prefix=f"lock-{version}-") as tmp:
        links = list(artifacts)
        if unhashed:
            standins = Path(tmp) / "standins"
            standins.mkdir()
            for requirement in unhashed:
                standin_wheel(standins, requirement)
            links.append(standins)
        for number, host in enumerate(hosts, 1):
            say(f"   [{number}/{len(hosts)}] {host.label()}{'' if host.required else ' (preflight refuses it: tried, optional)'} ...")
            found = resolve(host, f"sglang=={version}", Path(tmp), links, pins, keep_config, runner=runner)
            found.chosen = {n: c for n, c in found.chosen.items() if n not in left_out}
            if found.error:
                if own_requirement(found.unresolved) == ("sglang", canonical_version(version)):
                    found.error = f"SGLang {version} has no wheel for Python {host.python} (the release cannot install there)"
                elif host.required:
                    say(f"         FAILED: {found.error}")
                    raise LockRunError(f"{host.label()}: {found.error}")
                else:
                    found.error = f"preflight refuses it, and {found.error}"
                say(f"         not covered: {found.error}")
                skipped.append(found)
                continue
            own = found.chosen.get("sglang")
            if own is None or canonical_version(own.version) != canonical_version(version):
                raise LockRunError(f"{host.label()}: pip resolved {own.version if own else 'no'} sglang for sglang=={version}")
            versions.append(found.pip)
            say(f"         {len(found.chosen)} distributions in {found.seconds:.0f} s")
            resolutions.append(found)
    if not resolutions:
        raise LockRunError(f"no host resolves sglang=={version}: " + "; ".join(f"{r.host.label()}: {r.error}" for r in skipped))
    today = today or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    text = lock_text(version, resolutions, skipped, today, versions, wheels, keep_config, held, notes, unhashed)
    target = out / f"sglang-{version}.txt"
    parse_lock(text, str(target))  # what the build will read
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(target, text.encode("utf-8"))
    return target


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("versions", nargs="+", metavar="VERSION", help="SGLang versions, e.g. 0.5.9 0.5.23")
    parser.add_argument("--out", type=Path, default=LOCKS, help=f"where the locks go (default {LOCKS.relative_to(ROOT)})")
    parser.add_argument("--python", action="append", default=[], help="only the hosts of this Python (X.Y), repeatable")
    parser.add_argument("--artifacts", action="append", type=Path, default=[], help="a directory of wheels taken in place of the index's")
    parser.add_argument("--pip-config", action="store_true", help="keep this machine's pip configuration and PIP_* variables")
    parser.add_argument(
        "--constraint",
        action="append",
        default=[],
        metavar="REQ",
        help="hold the resolution to this requirement on purpose (fastapi<0.137), repeatable; written in the lock's header",
    )
    parser.add_argument(
        "--unhashed",
        action="append",
        default=[],
        metavar="NAME==VERSION",
        help="a distribution whose wheels cannot be reached from here: a stand-in takes its place in the resolution and "
        "the lock pins it without hashes (# unhashed:), repeatable; needs --why",
    )
    parser.add_argument("--why", action="append", default=[], metavar="TEXT", help="why (a line of the header), repeatable")
    args = parser.parse_args(argv)
    bad = [v for v in args.versions if not re.fullmatch(r"\d+(\.\d+)+(\.post\d+|rc\d+)?", v)]
    if bad:
        parser.error(f"expected SGLang versions like 0.5.9, found {', '.join(bad)}")
    loose = [
        c
        for c in args.constraint
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*\s*(==|!=|<=|>=|<|>|~=)\s*[\w.*+!-]+(\s*,\s*(==|!=|<=|>=|<|>|~=)\s*[\w.*+!-]+)*", c)
    ]
    if loose:
        parser.error(f"--constraint takes a requirement like 'fastapi<0.137', found {', '.join(loose)}")
    if args.constraint and not args.why:
        parser.error("--constraint needs --why: the lock's header says why a version is held back")
    bad_unhashed = [u for u in args.unhashed if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[\w.+!-]+", u)]
    if bad_unhashed:
        parser.error(f"--unhashed takes NAME==VERSION, found {', '.join(bad_unhashed)}")
    if args.unhashed and not args.why:
        parser.error("--unhashed needs --why: the lock's header says why a distribution is pinned without hashes")
    hosts = read_hosts()
    if args.python:
        unknown = sorted(set(args.python) - {h.python for h in hosts})
        if unknown:
            parser.error(f"--python {', '.join(unknown)}: no supported host has it (known: {', '.join(h.python for h in hosts)})")
        hosts = [h for h in hosts if h.python in args.python]
    failed = []
    for number, version in enumerate(args.versions, 1):
        print(f"== [{number}/{len(args.versions)}] SGLang {version}: resolving its closure for {len(hosts)} hosts", flush=True)
        started = time.monotonic()
        try:
            path = lock_release(
                version,
                hosts,
                args.out,
                args.artifacts,
                args.pip_config,
                say=lambda line: print(line, flush=True),
                held=args.constraint,
                notes=args.why,
                unhashed=args.unhashed,
            )
        except LockRunError as exc:
            print(f"== SGLang {version}: NOT LOCKED ({exc}); its lock file is unchanged", flush=True)
            failed.append(version)
            continue
        pins = parse_lock(path.read_text(encoding="utf-8"), str(path)).pins
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        took = time.monotonic() - started
        print(f"== SGLang {version}: {len(pins)} pins written to {shown} (sha256 {digest}) in {took:.0f} s", flush=True)
    if failed:
        print(f"not locked: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
