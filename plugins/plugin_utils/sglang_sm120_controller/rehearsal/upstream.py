"""Upstream's own build-metadata files as the rehearsal's reference (tests/data/upstream/index.yml).

Plain Python (standard library and `packaging`), no Ansible. The index records, for each upstream
repository and tag the production build specs build, the files its build reads (pyproject.toml,
version.txt, build_backend.py, CMakeLists.txt): upstream repository, tag, path, the sha256 and size
of the file as read at that tag, and what this module extracts from it (the [build-system]
requires, the version, the environment variables a build backend reads, the strings of its wheel
tag). A file that could not be read at the tag is recorded with status `unchecked` and the reason:
every check that needs it reports UNCHECKED, never a pass.

Also here: PEP 440 bounds compared as sets (does every version a spec's requirement admits satisfy
upstream's bound?) and the CUDA arch lists read as torch and FlashInfer read them.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sglang_sm120.errors import ToolkitError

RECORDED = "recorded"
UNCHECKED = "unchecked"


class ReferenceError(ToolkitError):
    """The reference data is malformed, or a bound cannot be compared; the message names the file."""


@dataclass(frozen=True)
class UpstreamFile:
    repo: str
    tag: str
    path: str
    status: str
    sha256: str = ""
    extract: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""

    def where(self) -> str:
        return f"{self.repo} {self.tag} {self.path}"


@dataclass(frozen=True)
class Reference:
    index: Path
    files: tuple[UpstreamFile, ...]

    def tags(self, repo: str) -> list[str]:
        return sorted({f.tag for f in self.files if f.repo == repo})

    def get(self, repo: str, tag: str, path: str) -> Optional[UpstreamFile]:
        return next((f for f in self.files if (f.repo, f.tag, f.path) == (repo, tag, path)), None)


def load_reference(index: Path, data: Mapping[str, Any]) -> Reference:
    """The index (already parsed from YAML by the caller) as typed entries; malformed entries raise naming the index."""
    files = []
    for number, entry in enumerate(data.get("files") or []):
        missing = [k for k in ("repo", "tag", "path", "status") if not entry.get(k)]
        if missing:
            raise ReferenceError(f"{index}: files[{number}] lacks {', '.join(missing)}")
        status = str(entry["status"])
        if status not in (RECORDED, UNCHECKED):
            raise ReferenceError(f"{index}: files[{number}] status expected {RECORDED!r} or {UNCHECKED!r}, found {status!r}")
        if status == RECORDED and not re.fullmatch(r"[0-9a-f]{64}", str(entry.get("sha256", ""))):
            raise ReferenceError(f"{index}: {entry['repo']} {entry['tag']} {entry['path']}: recorded without a sha256")
        if status == UNCHECKED and not entry.get("reason"):
            raise ReferenceError(f"{index}: {entry['repo']} {entry['tag']} {entry['path']}: unchecked without a reason")
        files.append(
            UpstreamFile(
                repo=str(entry["repo"]),
                tag=str(entry["tag"]),
                path=str(entry["path"]),
                status=status,
                sha256=str(entry.get("sha256", "")),
                extract=dict(entry.get("extract") or {}),
                reason=str(entry.get("reason", "")),
            )
        )
    return Reference(index, tuple(files))


# ---------------------------------------------------------------- extraction from the real files


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def extract_pyproject(text: str) -> dict[str, Any]:
    import tomllib  # Python 3.11+; only the recorder and the copy check read TOML

    data = tomllib.loads(text)
    build = data.get("build-system", {})
    project = data.get("project", {})
    out: dict[str, Any] = {"build_system_requires": list(build.get("requires", [])), "build_backend": build.get("build-backend", "")}
    for key in ("name", "version", "dynamic", "dependencies"):
        if key in project:
            out[f"project_{key}"] = project[key]
    return out


def extract_version_file(text: str) -> dict[str, Any]:
    return {"version": text.strip()}


def _environ_name(node: ast.AST) -> Optional[str]:
    """NAME of os.environ.get("NAME"...), os.environ["NAME"], os.getenv("NAME"), "NAME" in os.environ."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = ast.unparse(node.func)
        if func in ("os.environ.get", "os.getenv", "environ.get"):
            return str(node.args[0].value)
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    if (
        isinstance(node, ast.Compare)
        and isinstance(node.left, ast.Constant)
        and any(isinstance(o, ast.In) for o in node.ops)
        and any(ast.unparse(c) == "os.environ" for c in node.comparators)
    ):
        return str(node.left.value)
    return None


def extract_python_backend(text: str) -> dict[str, Any]:
    """Environment variables the backend reads, and the string constants of a get_tag() (its wheel tag)."""
    tree = ast.parse(text)
    env = sorted({n for n in (_environ_name(node) for node in ast.walk(tree)) if n})
    tag_strings: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "get_tag":
            for inner in ast.walk(node):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and inner.value not in tag_strings:
                    tag_strings.append(inner.value)
    out: dict[str, Any] = {"environment": env}
    if tag_strings:
        out["get_tag_strings"] = tag_strings
    return out


def extract(path: str, data: bytes) -> dict[str, Any]:
    """What the index keeps of a file, by its kind (its name)."""
    text = data.decode("utf-8")
    name = path.rsplit("/", 1)[-1]
    if name == "pyproject.toml":
        return extract_pyproject(text)
    if name == "version.txt":
        return extract_version_file(text)
    if name.endswith(".py"):
        return extract_python_backend(text)
    return {}


def verify_copy(entry: UpstreamFile, data: bytes) -> list[str]:
    """A verbatim copy of the file against its index entry: sha256 and the extract. Problems, or none."""
    problems = []
    if sha256_of(data) != entry.sha256:
        problems.append(f"{entry.where()}: sha256 expected {entry.sha256}, found {sha256_of(data)}")
    found = extract(entry.path, data)
    for key in sorted(set(found) | set(entry.extract)):
        if found.get(key) != entry.extract.get(key):
            problems.append(f"{entry.where()}: {key} recorded {entry.extract.get(key)!r}, the file says {found.get(key)!r}")
    return problems


# ---------------------------------------------------------------- bounds


def parse_requirement(text: str, where: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise ReferenceError(f"{where}: {text!r} is not a requirement: {exc}") from None


def _release_plus(version: Version) -> Version:
    """A final release just above `version` and all its post-releases (1.2 -> 1.2.0.1)."""
    return Version(".".join(str(p) for p in version.release) + ".0.1")


_COMPARABLE = ("<", "<=", ">", ">=", "==", "!=")


def _boundaries(specifiers: Iterable[Specifier], where: str) -> list[Version]:
    out = []
    for spec in specifiers:
        if spec.operator not in _COMPARABLE or spec.version.endswith(".*"):
            raise ReferenceError(f"{where}: cannot compare the bound {spec} (only {', '.join(_COMPARABLE)} without wildcards)")
        try:
            out.append(Version(spec.version))
        except InvalidVersion:
            raise ReferenceError(f"{where}: {spec} has no PEP 440 version") from None
    return out


def admitted_outside(ours: SpecifierSet, theirs: SpecifierSet, where: str) -> Optional[Version]:
    """A final release `ours` admits and `theirs` excludes, or None when every release ours admits theirs admits too.

    Both sets are unions of intervals over the versions named in either; one witness per interval
    (the boundaries, a release just above each and one below the lowest) decides it."""
    named = sorted(set(_boundaries(theirs, where)))
    points = sorted(set(_boundaries(ours, where)) | set(named))
    candidates = set(points) | {_release_plus(p) for p in points}
    candidates.add(Version("0"))
    if not points:
        candidates.add(Version("1"))
    # upstream's own boundaries first: the witness then reads as the bound it breaks (80.0 for <80.0)
    for candidate in [*named, *sorted(candidates - set(named))]:
        if candidate.is_prerelease:
            continue
        if ours.contains(candidate) and not theirs.contains(candidate):
            return candidate
    return None


def _specifier_set(text: str, where: str) -> SpecifierSet:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise ReferenceError(f"{where}: {text!r} is not a version bound") from None


# ---------------------------------------------------------------- CUDA arch lists, as each build reads them

# torch/utils/cpp_extension.py _get_cuda_arch_flags: these names stand for these lists
TORCH_NAMED_ARCHES = (
    ("Kepler+Tesla", "3.7"),
    ("Kepler", "3.5+PTX"),
    ("Maxwell+Tegra", "5.3"),
    ("Maxwell", "5.0;5.2+PTX"),
    ("Pascal", "6.0;6.1+PTX"),
    ("Volta+Tegra", "7.2"),
    ("Volta", "7.0+PTX"),
    ("Turing", "7.5+PTX"),
    ("Ampere+Tegra", "8.7"),
    ("Ampere", "8.0;8.6+PTX"),
    ("Ada", "8.9+PTX"),
    ("Hopper", "9.0+PTX"),
    ("Blackwell+Tegra", "11.0"),
    ("Blackwell", "10.0;10.3;12.0;12.1+PTX"),
)


@dataclass(frozen=True)
class ArchEntry:
    """One entry of an arch list: 12.0 -> sm_120 (machine code), +PTX adds compute_120 (PTX)."""

    text: str
    major: int
    minor: int
    suffix: str
    ptx: bool

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @property
    def capability(self) -> str:
        return f"{self.major}.{self.minor}"


class ArchListError(ToolkitError):
    """The arch list is not one the build's own reader accepts; the message names the entry."""


def parse_torch_arch_list(value: str) -> list[ArchEntry]:
    """TORCH_CUDA_ARCH_LIST as torch reads it: entries separated by ';' or spaces (each space counts as
    a separator, so two in a row leave an empty entry, which torch refuses), the named lists expanded,
    each entry MAJOR.MINOR with an optional 'a' and an optional '+PTX'. Raises ArchListError naming the entry."""
    text = value.replace(" ", ";")
    for name, expansion in TORCH_NAMED_ARCHES:
        text = text.replace(name, expansion)
    accepts = "torch accepts (MAJOR.MINOR, optional 'a', optional '+PTX'; entries separated by ';' or one space)"
    return _arch_entries(value, text.split(";"), r"(\d+)\.(\d)(a?)(?P<ptx>\+PTX)?", accepts)


def parse_flashinfer_arch_list(value: str) -> list[ArchEntry]:
    """FLASHINFER_CUDA_ARCH_LIST as FlashInfer's compilation context reads it: split on single spaces,
    each entry MAJOR.MINOR where the minor keeps its suffix (12.0f -> sm_120f). ';' is no separator there."""
    accepts = "FlashInfer accepts (MAJOR.MINOR with optional 'a' or 'f'; entries separated by one space)"
    return _arch_entries(value, value.split(" "), r"(\d+)\.(\d)([af]?)", accepts)


def _arch_entries(value: str, items: Sequence[str], pattern: str, accepts: str) -> list[ArchEntry]:
    """Each of the arch list's ``items`` read by ``pattern`` (major, minor, suffix, and +PTX where it has a
    group ``ptx``); ArchListError naming the first that does not match and what the reader ``accepts``."""
    out = []
    for item in items:
        match = re.fullmatch(pattern, item)
        if not match:
            raise ArchListError(f"{item!r} is not an arch {accepts} in {value!r}")
        out.append(ArchEntry(item, int(match.group(1)), int(match.group(2)), match.group(3), bool(match.groupdict().get("ptx"))))
    return out


ARCH_READERS = {"TORCH_CUDA_ARCH_LIST": parse_torch_arch_list, "FLASHINFER_CUDA_ARCH_LIST": parse_flashinfer_arch_list}


def read_arch_list(variable: str, value: str) -> list[ArchEntry]:
    reader = ARCH_READERS.get(variable)
    if reader is None:
        raise ArchListError(f"no reader for the arch variable {variable} (known: {', '.join(sorted(ARCH_READERS))})")
    return reader(value)


def requirement_names(requirements: Sequence[str]) -> list[str]:
    return [parse_requirement(r, "requirement").name for r in requirements]
