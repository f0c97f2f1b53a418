"""Before any build starts: can this host reach what the planned builds will fetch, and does it have the
Debian packages a source build needs?

For every artifact still to build, each place its build may fetch from is probed the way the build will
fetch it, with the host's own configuration (git's ``url.<base>.insteadOf`` mirrors, pip's index-url and
certificates): a git source with ``git ls-remote`` of its ref, a requirement (an sdist or wheel source, a
prebuilt wheel) with ``pip index versions`` against its index, a prebuilt URL with an HTTP HEAD. An artifact
none of whose places answers is refused, naming each place and what it said; one whose prebuilt answers but
whose source fallback does not is a warning (the fallback would fail only if the prebuilt wheel fails its
verification). Sources copied from the controller (``path``, ``wheelhouse``) need nothing from the network.

Ships to the host inside the module ``sglang_build`` (``state=reach``); standard library only.
"""

from __future__ import annotations

import os
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ..errors import ToolkitError

# argv, env -> (rc, output)
Runner = Callable[[Sequence[str], Mapping[str, str]], "tuple[int, str]"]
REMOTE_KINDS = ("git", "sdist", "wheel")
_PROJECT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class ReachError(ToolkitError):
    """A planned build cannot fetch what it needs from this host; nothing was built."""


@dataclass
class Probe:
    what: str  # "source" or "prebuilt"
    where: str
    how: str
    ok: Optional[bool] = None  # None: could not be probed here (unknown)
    said: str = ""
    argv: list[str] = field(default_factory=list)  # the command that probes it; none for an HTTP HEAD


@dataclass
class ArtifactReach:
    name: str
    probes: list[Probe] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        known = [p for p in self.probes if p.ok is not None]
        return bool(known) and not any(p.ok for p in known) and all(p.ok is not None for p in self.probes)

    @property
    def warning(self) -> str:
        failed = [p for p in self.probes if p.ok is False]
        if not failed or self.refused:
            return ""
        return f"{self.name}: " + "; ".join(f"{p.what} {p.where} does not answer ({p.said})" for p in failed)

    def to_dict(self) -> dict[str, Any]:
        probes = [{k: v for k, v in asdict(p).items() if k != "argv"} for p in self.probes]
        return {"name": self.name, "refused": self.refused, "probes": probes}


def project(requirement: str) -> str:
    """The project name of a requirement string: 'torch==2.9.1+cu130' -> 'torch'."""
    found = _PROJECT.match(requirement)
    if not found:
        raise ReachError(f"cannot read a project name from the requirement {requirement!r}")
    return found.group(1)


def _tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "no output"


def plan_probes(item: Mapping[str, Any], python: str) -> ArtifactReach:
    """What to probe for one planned artifact (its spec's source, and its prebuilt wheel if any)."""
    spec = item["spec"]
    source = spec.get("source") or {}
    reach = ArtifactReach(str(item["name"]))
    prebuilt = spec.get("prebuilt") or {}
    if "wheel" in prebuilt:
        reach.probes.append(_pip_probe("prebuilt", prebuilt["wheel"], prebuilt.get("index"), python))
    elif "url" in prebuilt:
        reach.probes.append(Probe("prebuilt", prebuilt["url"], "HTTP HEAD"))
    if "git" in source:
        argv = ["git", "ls-remote", "--exit-code", source["git"], source["ref"]]
        reach.probes.append(Probe("source", f"{source['git']} at {source['ref']}", " ".join(argv), argv=argv))
    elif "sdist" in source or "wheel" in source:
        reach.probes.append(_pip_probe("source", source.get("sdist") or source["wheel"], source.get("index"), python))
    return reach


def _pip_probe(what: str, requirement: str, index: Optional[str], python: str) -> Probe:
    where = f"{requirement} (" + (f"index {index}" if index else "pip's configured index") + ")"
    argv = [python, "-m", "pip", "index", "versions", "--disable-pip-version-check", project(requirement)]
    if index:
        argv += ["--index-url", index]
    return Probe(what, where, " ".join(argv), argv=argv)


def run_probe(probe: Probe, run: Runner, git: Optional[str], timeout: float) -> Probe:
    """Probe one place; fills ok and said."""
    if not probe.argv:  # a prebuilt URL: HTTP HEAD
        try:
            request = urllib.request.Request(probe.where, method="HEAD")
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                probe.ok, probe.said = answer.status < 400, f"HTTP {answer.status}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            probe.ok, probe.said = False, str(getattr(exc, "reason", exc))
        return probe
    argv = list(probe.argv)
    is_git = argv[0] == "git"
    if is_git:
        if not git:
            probe.ok, probe.said = None, "git is not installed yet (the role installs it before a real build)"
            return probe
        argv[0] = git
        probe.how = " ".join(argv)
    rc, out = run(argv, {"GIT_TERMINAL_PROMPT": "0", "PIP_NO_INPUT": "1"})
    probe.ok = rc == 0
    probe.said = _tail(out) if rc else "answers"
    if is_git and rc == 2:  # git ls-remote --exit-code: the repository answered, the ref is not there
        probe.said = "the repository answers but has no such ref"
    return probe


def subprocess_runner(timeout: float) -> Runner:
    def run(argv: Sequence[str], env: Mapping[str, str]) -> tuple[int, str]:
        try:
            done = subprocess.run(list(argv), env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return 124, f"no answer within {timeout:.0f} s"
        except OSError as exc:
            return 127, str(exc)
        return done.returncode, done.stdout + done.stderr

    return run


def check_reach(
    items: Sequence[Mapping[str, Any]], missing: Sequence[str], python: str, run: Runner, git: Optional[str], timeout: float = 60.0
) -> tuple[list[ArtifactReach], list[str]]:
    """Probe every place the missing artifacts' builds fetch from. Returns each artifact's probes and the
    warnings; raises ReachError naming every refused artifact, its places and what they said."""
    wanted = set(missing)
    results = []
    for item in items:
        if item["name"] not in wanted:
            continue
        reach = plan_probes(item, python)
        for probe in reach.probes:
            run_probe(probe, run, git, timeout)
        results.append(reach)
    refused = [r for r in results if r.refused]
    if refused:
        raise ReachError(
            "the host cannot reach what these builds fetch, so nothing was built: "
            + "; ".join(f"{r.name}: " + ", ".join(f"{p.what} {p.where}: {p.said}" for p in r.probes) for r in refused)
            + ". Give the host a way there (a mirror: git's url.<base>.insteadOf, pip's index-url), or a prebuilt wheel "
            "in the controller wheelhouse (sglang_build_specs' prebuilt.wheelhouse)",
            reach=[r.to_dict() for r in results],
        )
    return results, [r.warning for r in results if r.warning]


def missing_packages(
    items: Sequence[Mapping[str, Any]], missing: Sequence[str], wanted: Mapping[str, Sequence[str]], installed: Mapping[str, str]
) -> tuple[list[str], dict[str, list[str]]]:
    """The Debian packages the missing artifacts' source builds need (``wanted``: source kind -> packages)
    that dpkg does not have installed, and which artifacts need each."""
    needed: dict[str, list[str]] = {}
    names = set(missing)
    for item in items:
        if item["name"] not in names:
            continue
        for package in wanted.get(str(item.get("kind", "")), []):
            needed.setdefault(str(package), []).append(str(item["name"]))
    absent = [p for p in sorted(needed) if p not in installed]
    return absent, {p: needed[p] for p in absent}
