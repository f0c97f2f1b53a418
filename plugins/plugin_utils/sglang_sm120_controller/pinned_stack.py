"""The Python stack an SGLang release pins: torch, FlashInfer and the kernel package, read from its wheel.

Every SGLang release states in its wheel's METADATA (``Requires-Dist``) the exact torch,
``flashinfer_python`` and kernel package it was released with. The kernel package is ``sgl-kernel``
up to SGLang 0.5.9 and ``sglang-kernel`` from 0.5.10 on (its import name stays ``sgl_kernel``; its
wheels are ``sglang_kernel-<version>-*.whl``). This module is the one parser of those pins: the
inventory's lookup ``sglang_release_stack`` (plugins/lookup/) derives ``stack_torch_version``
and the rest from ``stack_sglang_version`` with it, and ``sglang-compat`` shows them.

Plain Python on the controller (the standard library and ``packaging``, which pip and ansible-core
bring); nothing is imported from the wheel.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, Optional

from packaging.markers import Marker, default_environment
from packaging.requirements import InvalidRequirement, Requirement

from sglang_sm120.errors import ToolkitError
from sglang_sm120.files import directory_lock

# The environment a release is installed into: the GPU host (Debian 12, CPython 3.11, x86_64).
# Requirements whose markers exclude it (another platform, an extra) are not the release's stack.
HOST_ENVIRONMENT = {
    **default_environment(),
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "platform_machine": "x86_64",
    "platform_system": "Linux",
    "sys_platform": "linux",
    "os_name": "posix",
    "python_version": "3.11",
    "python_full_version": "3.11.2",
    "extra": "",
}
# What `pip download` asks for when it fetches an SGLang wheel: a wheel the GPU host could install,
# whatever the controller's own Python (from 0.5.11 on SGLang ships cp311 manylinux wheels only).
HOST_PIP_TARGET = [
    "--implementation",
    "cp",
    "--python-version",
    "3.11",
    "--abi",
    "cp311",
    *("--platform", "manylinux_2_34_x86_64"),
    *("--platform", "manylinux_2_28_x86_64"),
    *("--platform", "manylinux_2_17_x86_64"),
    *("--platform", "manylinux2014_x86_64"),
]
VERSION = re.compile(r"^\d+(\.\d+)+((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
FLASHINFER = "flashinfer-python"
KERNEL_PACKAGES = ("sglang-kernel", "sgl-kernel")  # the name from SGLang 0.5.10 on, and before
STACK_KEYS = ("sglang", "torch", "flashinfer", "kernel_package", "kernel_version")


class ReleaseStackError(ToolkitError):
    """The release, its wheel or one of its pins cannot be had; the text names the release."""


@dataclass(frozen=True)
class Pin:
    """One ``Requires-Dist`` line: the name as written, its extras and its version specifier."""

    name: str
    key: str  # the normalised name (PEP 503): flashinfer_python -> flashinfer-python
    extras: tuple[str, ...]
    specifier: str  # e.g. "==2.9.1", "" when any version will do
    marker: str

    @property
    def exact(self) -> Optional[str]:
        """The version of an exact pin (``==V`` or ``===V``), else None."""
        match = re.fullmatch(r"===?\s*([^,*\s]+)", self.specifier)
        return match.group(1) if match else None

    def text(self) -> str:
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.name}{extras}{self.specifier}"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _headers(metadata: str):
    return HeaderParser().parsestr(metadata, headersonly=True)


def metadata_header(metadata: str, field: str) -> Optional[str]:
    value = _headers(metadata).get(field)
    return str(value).strip() if value is not None else None


def requirements(metadata: str) -> list[Pin]:
    """The release's own requirements: ``Requires-Dist`` entries whose marker holds on the GPU host
    (none for an extra such as ``sglang[dev]``). Entries packaging cannot parse are skipped."""
    pins: list[Pin] = []
    for line in _headers(metadata).get_all("Requires-Dist") or []:
        try:
            req = Requirement(str(line).strip())
        except InvalidRequirement:
            continue
        if req.marker is not None and not _holds(req.marker):
            continue
        pins.append(Pin(req.name, canonical(req.name), tuple(sorted(req.extras)), str(req.specifier), str(req.marker or "")))
    return pins


def _holds(marker: Marker) -> bool:
    try:
        return marker.evaluate(HOST_ENVIRONMENT)
    except Exception:  # an unknown marker variable: not for this host
        return False


def stack_from_metadata(metadata: str, source: str = "the SGLang METADATA") -> dict[str, Any]:
    """{sglang, torch, flashinfer, kernel_package, kernel_version, pins} from an SGLang wheel's METADATA;
    ``pins``: every requirement pinned to one exact version (normalised name -> version), which the
    build specs of the CUDA-linked companions (torchaudio, torch_memory_saver) follow.

    ``ReleaseStackError`` when it is not SGLang's METADATA or a pin is missing or not exact."""
    name = metadata_header(metadata, "Name")
    version = metadata_header(metadata, "Version")
    if name is None or canonical(name) != "sglang" or not version:
        raise ReleaseStackError(f"{source} is not SGLang's: its METADATA names {name or 'no package'} {version or ''}".rstrip())
    pins: dict[str, Pin] = {}
    for pin in requirements(metadata):
        pins.setdefault(pin.key, pin)  # the first, as pip reads them
    kernel = next((pins[key] for key in KERNEL_PACKAGES if key in pins), None)
    stack = {
        "sglang": version,
        "torch": _exact(pins.get("torch"), "torch", version, source),
        "flashinfer": _exact(pins.get(FLASHINFER), "flashinfer_python", version, source),
        "kernel_package": kernel.key if kernel else "",
        "kernel_version": _exact(kernel, " or ".join(KERNEL_PACKAGES), version, source),
        "pins": {key: pin.exact for key, pin in sorted(pins.items()) if pin.exact is not None},
    }
    return stack


def _exact(pin: Optional[Pin], what: str, version: str, source: str) -> str:
    if pin is None:
        raise ReleaseStackError(
            f"SGLang {version} ({source}) does not require {what}: its stack cannot be derived; set that version by hand"
        )
    if pin.exact is None:
        raise ReleaseStackError(f"SGLang {version} ({source}) requires {pin.text()}, not one exact version: set that version by hand")
    return pin.exact


# ------------------------------------------------------------------ wheels


def wheel_metadata(wheel: Path) -> str:
    """The METADATA of an SGLang wheel; ``ReleaseStackError`` for a file that is not one."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ReleaseStackError(f"{wheel} is not a wheel: {exc}") from exc
    with archive:
        names = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        ours = [n for n in names if canonical(n.split("-", 1)[0]) == "sglang"]
        if not ours:
            found = f"its METADATA is {names[0]}" if names else "no *.dist-info/METADATA in it"
            raise ReleaseStackError(f"{wheel} is not an SGLang wheel ({found})")
        return archive.read(ours[0]).decode("utf-8", errors="replace")


def stack_from_wheel(wheel: Path) -> dict[str, Any]:
    return stack_from_metadata(wheel_metadata(wheel), source=str(wheel))


def wheel_version(wheel: Path) -> Optional[str]:
    match = re.fullmatch(r"sglang-([^-]+)-[^-]+-[^-]+-[^-]+\.whl", wheel.name)
    return match.group(1) if match else None


def find_wheel(version: str, dirs: Iterable[Path]) -> Optional[Path]:
    """The first ``sglang-<version>-*.whl`` in ``dirs``, each searched as is and in ``<dir>/<version>/``."""
    for directory in dirs:
        for place in (Path(directory), Path(directory) / version):
            found = sorted(p for p in place.glob(f"sglang-{version}-*.whl") if wheel_version(p) == version)
            if found:
                return found[0]
    return None


def download_wheel(version: str, download_dir: Path, python: str = sys.executable, timeout: int = 600) -> Path:
    """``pip download --no-deps sglang==<version>`` (a wheel the GPU host could install) into
    ``<download_dir>/<version>/``, once: an existing download is reused."""
    target = Path(download_dir) / version
    target.parent.mkdir(parents=True, exist_ok=True)
    with directory_lock(target.parent):  # Ansible's forks may look up the same release at once
        found = find_wheel(version, [target])
        if found:
            return found
        scratch = Path(tempfile.mkdtemp(prefix=f".sglang-{version}.", dir=target.parent))
        try:
            command = [
                python,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--only-binary=:all:",
                *HOST_PIP_TARGET,
                "-d",
                str(scratch),
                f"sglang=={version}",
            ]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ReleaseStackError(f"SGLang {version}: pip download --no-deps sglang=={version} did not finish: {exc}") from exc
            wheel = find_wheel(version, [scratch]) if done.returncode == 0 else None
            if wheel is None:
                errors = [_short_versions(line) for line in done.stderr.splitlines() if line.startswith("ERROR")]
                reason = "; ".join(errors) or done.stderr.strip()[-300:] or f"exit {done.returncode}, no sglang-{version}-*.whl"
                raise ReleaseStackError(
                    f"SGLang {version}: no such release could be downloaded (pip download --no-deps sglang=={version}: {reason})"
                )
            target.mkdir(parents=True, exist_ok=True)
            final = target / wheel.name
            os.replace(wheel, final)
            return final
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _short_versions(line: str) -> str:
    """pip's "(from versions: <every release>)" with only the newest few."""

    def newest(match: re.Match[str]) -> str:
        versions = [v.strip() for v in match.group(1).split(",")]
        return f"(from versions: {'..., ' if len(versions) > 5 else ''}{', '.join(versions[-5:])})"

    return re.sub(r"\(from versions: ([^)]*)\)", newest, line)


_MEMO: dict[tuple[str, tuple[str, ...], Optional[str]], dict[str, Any]] = {}


def release_stack(
    version: str,
    dirs: Sequence[Path],
    download_dir: Optional[Path] = None,
    python: str = sys.executable,
) -> dict[str, Any]:
    """The stack of SGLang ``version``: its wheel from ``dirs`` (each as is and ``<dir>/<version>/``),
    else downloaded once into ``download_dir`` (None: never downloaded). Memoised per process.

    Returns {sglang, torch, flashinfer, kernel_package, kernel_version, pins, wheel}."""
    version = str(version).strip()
    if not VERSION.match(version):
        raise ReleaseStackError(f"{version!r} is not an SGLang version (e.g. 0.5.9)")
    key = (version, tuple(str(d) for d in dirs), str(download_dir) if download_dir else None)
    if key in _MEMO:
        return copy.deepcopy(_MEMO[key])
    wheel = find_wheel(version, [*dirs, *([download_dir] if download_dir else [])])
    if wheel is None:
        if download_dir is None:
            searched = ", ".join(str(d) for d in dirs) or "no directory"
            raise ReleaseStackError(f"SGLang {version}: no sglang-{version}-*.whl in {searched}, and downloading is off")
        wheel = download_wheel(version, Path(download_dir), python=python)
    stack = stack_from_wheel(wheel)
    if stack["sglang"] != version:
        raise ReleaseStackError(f"{wheel} is SGLang {stack['sglang']}, not {version}")
    stack["wheel"] = str(wheel)
    _MEMO[key] = stack
    return copy.deepcopy(stack)
