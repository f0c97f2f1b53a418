"""The lock of a release's Python closure: the exact versions and sha256s a `wheel` source with its
dependencies may download (issue 50), read from a file in pip's hash-checking requirements format:

    # comments
    fastapi==0.115.6 \\
        --hash=sha256:<hex> \\
        --hash=sha256:<hex>
    numpy==2.2.6 ; python_version == "3.10" \\
        --hash=sha256:<hex>

Plain Python, standard library only, no Ansible imports: the controller parses a lock when it plans the
build (a lock that does not parse stops the plan), the host turns it into pip constraints for the
download and checks the downloaded wheels against it before the artifact is cached.

Names the caller exempts (the toolkit's own artifacts, which come from their wheelhouses with their own
exact pins) are left out of both: their lines are the index's versions, kept as information. What those
artifacts pin exactly themselves (torch 2.9.1+cu130's `nvidia-cublas==13.0.0.19`, from its METADATA) is held
by that pin instead (`held`): a wheel of that name at that version is not the lock's to allow.

A distribution whose wheels the lock's writer could not reach (SGLang 0.5.18-0.5.22 require cuda-tile==1.6.0rc5,
whose only wheels are on NVIDIA's own index) is pinned by a header line without hashes:

    # unhashed: cuda-tile==1.6.0rc5

It is a constraint like any pin; a downloaded wheel of that name at that version is allowed whatever its sha256.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from ..errors import ToolkitError
from ..files import file_sha256

HOW_TO_UPDATE = (
    "update a lock deliberately: scripts/lock_release.py VERSION, then the canary and the drain against a real server "
    '(docs/operations.md, "Locked Python closures")'
)


class LockFileError(ToolkitError):
    """A lock file does not parse; the message names the file and the line."""


class ClosureLockError(ToolkitError):
    """Downloaded wheels depart from the lock; the message names each wheel, the lock's pin and the file."""


@dataclass(frozen=True)
class Pin:
    """One line of a lock: a distribution (normalized name) at one version, the sha256s its files may have,
    and the environment marker it holds under ('' for every environment)."""

    name: str
    version: str
    hashes: tuple[str, ...]
    marker: str = ""

    def requirement(self) -> str:
        """The pin as pip reads it in a constraints file: name==version[ ; marker]."""
        return f"{self.name}=={self.version}" + (f" ; {self.marker}" if self.marker else "")


@dataclass(frozen=True)
class ClosureLock:
    """A parsed lock: where it came from (for messages) and its pins in file order."""

    source: str
    pins: tuple[Pin, ...]
    unhashed: tuple[Pin, ...] = ()  # `# unhashed: name==version` header lines: pinned, any sha256 allowed

    def pins_of(self, name: str) -> list[Pin]:
        wanted = normalize_name(name)
        return [p for p in (*self.pins, *self.unhashed) if p.name == wanted]

    def digest(self) -> str:
        """sha256 of the pins alone (names, versions, markers, hashes; not comments or order): what a build's key takes,
        so a lock rewritten with the same pins keeps the key and a changed pin rebuilds."""
        canonical = sorted(f"{p.requirement()} {' '.join(sorted(p.hashes))}" for p in (*self.pins, *self.unhashed))
        return hashlib.sha256("\n".join(canonical).encode("utf-8")).hexdigest()


def normalize_name(name: str) -> str:
    """A distribution name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


_PEP440 = re.compile(
    r"v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre_l>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>\d+)?)?"
    r"(?P<post>-(?P<post_n1>\d+)|[-_.]?(?:post|rev|r)[-_.]?(?P<post_n2>\d+)?)?"
    r"(?P<dev>[-_.]?dev[-_.]?(?P<dev_n>\d+)?)?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?",
)
_PRE = {"alpha": "a", "beta": "b", "c": "rc", "pre": "rc", "preview": "rc"}


def canonical_version(version: str) -> str:
    """A version in PEP 440's normal form (1.0-RC1 -> 1.0rc1, 2.0-1 -> 2.0.post1, 0!1.0 -> 1.0), so a wheel file's
    version and the lock's compare as pip compares them; a string that is no PEP 440 version is only lowercased."""
    text = version.strip().lower()
    match = _PEP440.fullmatch(text)
    if match is None:
        return text
    out = "" if match["epoch"] in (None, "0") else f"{int(match['epoch'])}!"
    out += ".".join(str(int(part)) for part in match["release"].split("."))
    if match["pre_l"]:
        out += _PRE.get(match["pre_l"], match["pre_l"]) + str(int(match["pre_n"] or 0))
    if match["post"]:
        out += f".post{int(match['post_n1'] or match['post_n2'] or 0)}"
    if match["dev"]:
        out += f".dev{int(match['dev_n'] or 0)}"
    if match["local"]:
        out += "+" + re.sub(r"[-_]", ".", match["local"])
    return out


_LINE = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*==\s*(?P<version>[^\s;\\]+)"
    r"\s*(?:;\s*(?P<marker>[^-][^\n]*?))?\s*(?P<options>(?:--\S+\s*)*)"
)
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_UNHASHED = re.compile(r"^# unhashed: (?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==(?P<version>\S+)\s*$")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line number, text) of each requirement: comments dropped, `\\` continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()  # pip's comments: '#' at the start or after whitespace
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined = (pending + line).strip()
        pending = ""
        if joined:
            out.append((start, joined))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def parse_lock(text: str, source: str) -> ClosureLock:
    """The pins of a lock file's text; LockFileError naming `source` and the line when a line is not
    `name==version [; marker] --hash=sha256:HEX...` with at least one hash, or a name is pinned twice under one marker."""
    pins: list[Pin] = []
    seen: dict[tuple[str, str], int] = {}
    for number, line in _logical_lines(text):
        match = _LINE.fullmatch(line)
        if match is None:
            raise LockFileError(
                f"{source}:{number}: expected name==version [; marker] followed by --hash=sha256:HEX options, found {line[:160]!r}"
            )
        options = match["options"].split()
        hashes = [m.group(1) for m in map(_HASH.fullmatch, options) if m]
        bad = [o for o in options if not _HASH.fullmatch(o)]
        if bad or not hashes:
            raise LockFileError(
                f"{source}:{number}: {match['name']}=={match['version']} needs one or more --hash=sha256:<64 hex digits> and "
                f"nothing else, found {' '.join(bad) or 'no hash'}"
            )
        marker = " ".join((match["marker"] or "").split())
        pin = Pin(normalize_name(match["name"]), match["version"], tuple(dict.fromkeys(hashes)), marker)
        if (pin.name, marker) in seen:
            under = f" under {marker}" if marker else ""
            raise LockFileError(f"{source}:{number}: {pin.name} is pinned twice{under} (first at line {seen[(pin.name, marker)]})")
        seen[(pin.name, marker)] = number
        pins.append(pin)
    if not pins:
        raise LockFileError(f"{source}: no pins (expected name==version --hash=sha256:HEX lines)")
    unhashed: list[Pin] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.startswith("# unhashed:"):
            match = _UNHASHED.match(raw.rstrip())
            if match is None:
                raise LockFileError(f"{source}:{number}: expected '# unhashed: name==version', found {raw[:160]!r}")
            pin = Pin(normalize_name(match["name"]), match["version"], ())
            if any(p.name == pin.name for p in pins) or any(p.name == pin.name for p in unhashed):
                raise LockFileError(f"{source}:{number}: {pin.name} is pinned twice (an unhashed pin names a distribution once)")
            unhashed.append(pin)
    return ClosureLock(source, tuple(pins), tuple(unhashed))


def constraints_text(lock: ClosureLock, exempt: Iterable[str] = ()) -> str:
    """The lock as a pip constraints file (`-c`): one name==version[ ; marker] a line, without the `exempt` names."""
    skip = {normalize_name(n) for n in exempt}
    return "".join(f"{p.requirement()}\n" for p in (*lock.pins, *lock.unhashed) if p.name not in skip)


def wheel_name_version(wheel: str) -> tuple[str, str]:
    """(normalized name, version) from a wheel's file name (PEP 427; `_` in the version stands for `-`)."""
    parts = Path(wheel).name[: -len(".whl")].split("-")
    if not Path(wheel).name.endswith(".whl") or len(parts) < 5:
        raise ClosureLockError(f"{Path(wheel).name} is not a wheel file name (name-version-python-abi-platform.whl)")
    return normalize_name(parts[0]), parts[1].replace("_", "-")


@dataclass(frozen=True)
class Departure:
    """One downloaded wheel the lock does not allow: the file, what the lock says of its name, what was found."""

    wheel: str
    locked: str
    found: str


def _describe(pins: Sequence[Pin]) -> str:
    return " or ".join(p.requirement() for p in pins)


_REQUIRES = re.compile(r"^Requires-Dist:\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?\s*===?\s*([^\s;,)]+)\s*\)?\s*(;.*)?$")


def exact_pins(metadata: str) -> dict[str, str]:
    """name (normalized) -> version of each Requires-Dist a wheel's METADATA pins exactly (== or ===, one
    specifier), leaving out the requirements of its extras."""
    out: dict[str, str] = {}
    for line in metadata.splitlines():
        match = _REQUIRES.match(line.strip())
        if match and not re.search(r"\bextra\s*==", match.group(3) or ""):
            out[normalize_name(match.group(1))] = match.group(2)
    return out


def departures(
    lock: ClosureLock, wheels: Sequence[Path], exempt: Iterable[str] = (), held: Optional[dict[str, str]] = None
) -> list[Departure]:
    """Each wheel whose name is not exempt, that no exempt artifact pins exactly (`held`: name -> version) and
    that no pin allows: its name not in the lock, its version not the lock's, or its sha256 not one the lock
    lists for that version. Markers are not evaluated: a file any pin allows is a locked file (the constraints
    already chose among the markers)."""
    skip = {normalize_name(n) for n in exempt}
    pinned = {normalize_name(n): canonical_version(v) for n, v in (held or {}).items()}
    out: list[Departure] = []
    for wheel in sorted(wheels, key=lambda w: Path(w).name):
        name, version = wheel_name_version(Path(wheel).name)
        if name in skip or pinned.get(name) == canonical_version(version):
            continue
        pins = lock.pins_of(name)
        if not pins:
            out.append(Departure(Path(wheel).name, f"nothing of {name} (not in the lock)", f"{name}=={version}"))
            continue
        same = [p for p in pins if canonical_version(p.version) == canonical_version(version)]
        if not same:
            out.append(Departure(Path(wheel).name, _describe(pins), f"{name}=={version}"))
            continue
        if any(not p.hashes for p in same):  # an unhashed pin: the version is the lock's, any file of it
            continue
        digest = file_sha256(wheel)
        if not any(digest in p.hashes for p in same):
            allowed = ", ".join(h for p in same for h in p.hashes)
            out.append(Departure(Path(wheel).name, f"{_describe(same)} with sha256 {allowed}", f"sha256 {digest}"))
    return out


def check_wheels(
    lock: ClosureLock,
    wheels: Sequence[Path],
    exempt: Iterable[str] = (),
    what: Optional[str] = None,
    held: Optional[dict[str, str]] = None,
) -> None:
    """Raise ClosureLockError naming every wheel of `wheels` the lock does not allow (see departures), the lock file
    and how to update it; `what` names the download in the message (e.g. sglang==0.5.9 with its dependencies)."""
    found = departures(lock, wheels, exempt, held)
    if found:
        raise ClosureLockError(
            f"{len(found)} of {len(wheels)} downloaded wheels{f' of {what}' if what else ''} depart from the lock {lock.source}: "
            + "; ".join(f"{d.wheel}: the lock says {d.locked}, found {d.found}" for d in found)
            + f". The closure a release installs is the one its lock names; {HOW_TO_UPDATE}",
            departures=[asdict(d) for d in found],
        )
