"""What a release venv gets, and what it really holds: the verified wheel files, read back.

Plain Python, standard library and the sibling ``build_pipeline`` only; plugins/modules/sglang_release_install.py
wraps it. A release installs the FILES of the artifacts' verified wheels from the host wheelhouse
(paths, not names resolved against a mixed wheelhouse, where a manylinux wheel of the same
version would win), then reads back each distribution from its dist-info: the version in
METADATA, and for every file of the verified wheel the sha256 that RECORD lists and the sha256
of the file on disk. Any difference is refused, naming the distribution, expected and found. The
sm_120 evidence of the release is read from the INSTALLED shared objects (the RECORD's .so
paths), with the same reader and rules as the build's verification.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import re
import subprocess
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from ..build.elf_closure import dist_metadata
from ..build.pipeline import (
    BuildError,
    SharedObject,
    check_objects,
    normalize,
    own_wheels,
    read_gpu_code,
    wheel_name_version,
    witness_name,
)
from ..errors import ToolkitError
from ..files import file_sha256
from ..host.cuda_toolkit import cudart_major, elf_needed

_SO = re.compile(r"\.so(\.\d+)*$")
# files pip writes itself into a dist-info (not in the wheel)
_PIP_WRITES = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")


class InstallError(ToolkitError):
    """The release venv does not hold exactly the verified wheels; the message names each difference."""


def release_wheels(
    build_root: str, artifacts: Mapping[str, Mapping[str, Any]], specs: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The verified wheel files a release installs, in build order, each checked against its record's sha256."""
    out: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for name, record in artifacts.items():
        directory = Path(build_root) / "wheelhouse" / name / record["key"]
        by_name = {w["wheel"]: w for w in record.get("wheels", [])}
        for wheel in own_wheels(record):
            path = directory / wheel
            if not path.is_file():
                raise InstallError(f"{name}: the verified wheel {path} is missing from the host wheelhouse")
            expected = by_name.get(wheel, {}).get("sha256")
            found = file_sha256(path)
            if expected and found != expected:
                raise InstallError(f"{name}: {path} has sha256 {found}, the build recorded {expected}; refusing to install it")
            dist, version = wheel_name_version(wheel)
            if normalize(dist) in seen:
                raise InstallError(f"{name}: {wheel} is a second wheel of {dist} (also {seen[normalize(dist)]})")
            seen[normalize(dist)] = wheel
            out.append(
                {
                    "artifact": name,
                    "distribution": dist,
                    "version": version,
                    "wheel": str(path),
                    "sha256": found,
                    "rules": dict((specs.get(name) or {}).get("verify", {"device_code": "none"})),
                    "pins": list(record.get("pins", [])),
                }
            )
    return out


def install_argv(
    python: str, wheels: Sequence[Mapping[str, Any]], install_deps: bool, find_links: Sequence[str], constraints: Optional[str]
) -> list[str]:
    """pip install of the wheel FILES, from the host only (--no-index); their requirements from `find_links` when install_deps."""
    argv = [python, "-m", "pip", "install", "--no-index", "--disable-pip-version-check"]
    if install_deps:
        for link in find_links:
            argv += ["--find-links", link]
        if constraints:
            argv += ["-c", constraints]
    else:
        argv.append("--no-deps")
    return argv + [w["wheel"] for w in wheels]


def site_packages(venv: str) -> list[Path]:
    """The venv's purelib and platlib, as its own Python reports them; InstallError when it cannot say."""
    try:
        proc = subprocess.run(
            [
                str(Path(venv) / "bin" / "python"),
                "-c",
                "import json, sysconfig; p = sysconfig.get_paths(); print(json.dumps([p['purelib'], p['platlib']]))",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        raise InstallError(str(exc)) from exc
    return list(dict.fromkeys(Path(p) for p in json.loads(proc.stdout)))


def _metadata(dist_info: Path) -> tuple[str, str]:
    if not (dist_info / "METADATA").is_file():
        raise FileNotFoundError(str(dist_info / "METADATA"))
    return dist_metadata(dist_info)


def find_dist(sites: Sequence[Path], distribution: str) -> list[tuple[Path, Path, str]]:
    """(site-packages, dist-info, version) of every installed copy of `distribution`."""
    found = []
    for site in sites:
        for dist_info in sorted(site.glob("*.dist-info")):
            if (dist_info / "METADATA").is_file():
                name, version = _metadata(dist_info)
                if normalize(name) == normalize(distribution):
                    found.append((site, dist_info, version))
    return found


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def wheel_files(wheel: str | Path) -> dict[str, str]:
    """Path (relative to site-packages) -> urlsafe-b64 sha256 of every file the wheel puts in site-packages.

    Computed from the wheel's bytes, not from its RECORD. Scripts (.data/scripts, rewritten by pip)
    and data/headers (outside site-packages) are left out."""
    out: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.endswith("/"):
                continue
            parts = member.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                rel = "/".join(parts[2:])
            else:
                rel = member
            if parts[0].endswith(".dist-info") and parts[-1] in _PIP_WRITES:
                continue
            out[rel] = _b64(hashlib.sha256(archive.read(member)).digest())
    return out


def read_record(dist_info: Path) -> dict[str, str]:
    """Path -> hash (urlsafe b64, without the sha256= prefix) of each RECORD entry that has one."""
    out = {}
    for line in (dist_info / "RECORD").read_text(encoding="utf-8").splitlines():
        fields = line.rsplit(",", 2)
        if len(fields) == 3 and fields[1].startswith("sha256="):
            out[fields[0].strip('"')] = fields[1][len("sha256=") :]
    return out


def _disk_hash(path: Path) -> Optional[str]:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return _b64(digest.digest())


def read_back(venv: str, wheels: Sequence[Mapping[str, Any]], cuobjdump: Optional[str] = None) -> dict[str, Any]:
    """Check the venv holds exactly each verified wheel; return what was found and the sm_120 evidence of the installed files.

    Raises InstallError naming every distribution that differs: missing, installed twice, another
    version, or a file whose RECORD hash or bytes on disk differ from the verified wheel's."""
    sites = site_packages(venv)
    installed: list[dict[str, Any]] = []
    evidence: list[dict[str, Any]] = []
    problems: list[str] = []
    shared: list[str] = []
    files_of = {i: wheel_files(w["wheel"]) for i, w in enumerate(wheels)}
    # A path two wheels of the release both ship (flashinfer-python and torch-c-dlpack-ext each put a
    # top-level build_backend.py): on disk is the last one pip installed, which is right for that one.
    owners: dict[str, list[tuple[str, str]]] = {}
    for i, files in files_of.items():
        for rel, digest in files.items():
            owners.setdefault(rel, []).append((wheels[i]["distribution"], digest))
    for index, wheel in enumerate(wheels):
        dist, expected_version = wheel["distribution"], wheel["version"]
        label = f"{dist} ({wheel['artifact']})"
        copies = find_dist(sites, dist)
        if not copies:
            problems.append(f"{label}: expected {expected_version} from {Path(wheel['wheel']).name}, found it not installed")
            continue
        if len(copies) > 1:
            problems.append(f"{label}: expected one copy, found {', '.join(f'{v} ({d.name})' for _, d, v in copies)}")
            continue
        site, dist_info, version = copies[0]
        if version != expected_version:
            problems.append(
                f"{label}: expected version {expected_version} ({Path(wheel['wheel']).name}), found {version} ({dist_info.name})"
            )
            continue
        record = read_record(dist_info)
        differ: list[str] = []
        files = files_of[index]
        for rel, digest in files.items():
            if rel not in record:
                differ.append(f"{rel} not in RECORD")
            elif record[rel] != digest:
                differ.append(f"{rel}: RECORD sha256={record[rel]}, verified wheel sha256={digest}")
            else:
                on_disk = _disk_hash(site / rel)
                other = [d for d, h in owners.get(rel, []) if d != dist and h == on_disk]
                if on_disk != digest and other:
                    shared.append(f"{rel}: {dist} and {other[0]} both ship it; on disk is {other[0]}'s, installed after")
                elif on_disk != digest:
                    differ.append(f"{rel}: file on disk {'sha256=' + on_disk if on_disk else 'missing'}, verified wheel sha256={digest}")
        if differ:
            more = f" (and {len(differ) - 5} more)" if len(differ) > 5 else ""
            problems.append(
                f"{label}: expected the files of {Path(wheel['wheel']).name} (sha256 {wheel['sha256'][:16]}...), found "
                f"{len(differ)} differing: {'; '.join(differ[:5])}{more}"
            )
            continue
        installed.append(
            {
                "artifact": wheel["artifact"],
                "distribution": dist,
                "version": version,
                "wheel": Path(wheel["wheel"]).name,
                "wheel_sha256": wheel["sha256"],
                "dist_info": str(dist_info),
                "files_checked": len(files),
            }
        )
        rules = wheel.get("rules") or {}
        if rules.get("device_code", "required") == "none":
            continue
        exempt = dict(rules.get("other_arch_objects", {}))
        objects = []
        for rel in sorted(p for p in record if _SO.search(p) and not p.startswith("..")):
            path = site / rel
            reasons = [exempt[p] for p in exempt if fnmatch.fnmatchcase(rel, p)]
            rule = f"other architectures on purpose: {reasons[0]}" if reasons else "must carry the target"
            objects.append(SharedObject(rel, read_gpu_code(path, cuobjdump), cudart_major(elf_needed(str(path)) or []), rule))
        try:
            check_objects(f"{label} as installed in {venv}", objects, rules)
        except BuildError as exc:
            problems.append(str(exc))
            continue
        evidence.append(
            {
                "artifact": wheel["artifact"],
                "distribution": dist,
                "version": version,
                "read_from": f"installed files ({dist_info.name}/RECORD) in {site}",
                "witness": witness_name(cuobjdump),
                "shared_objects": [asdict(o) for o in objects],
            }
        )
    if problems:
        raise InstallError("the release venv does not hold the verified wheels: " + " | ".join(problems))
    return {"installed": installed, "sm120_verification": evidence, "shared_files": shared}


def constraints_text(wheels: Sequence[Mapping[str, Any]]) -> str:
    """The pins of the installed artifacts (triton==3.5.1 with torch), one a line."""
    pins = sorted({pin for w in wheels for pin in w.get("pins", [])})
    return "".join(f"{p}\n" for p in pins)
