"""Apply, check and revert the toolkit's source patches to an installed SGLang package.

The engine takes the parsed manifest (files/patches/manifest.yml, a dict) and the directory of its
Jinja2 templates, so Ansible hosts need no yaml; jinja2 is imported only when a template is rendered.
Only the standard library is imported at module load.

Rules, in the order they are checked for each selected patch:

* the target file does not exist in this release -> `not-applicable` (nothing to do, not a failure);
* target's current sha256 equals the `after_sha256` recorded in the state -> applied (nothing to do);
* the target already has the fix (the manifest's `fixed_upstream` detector matches what the code does and
  the file does not carry this toolkit's `sglang-patch <id>` marker) -> `fixed-upstream`, file untouched;
* the installed SGLang version is outside the patch's `applies_to` range -> refused, nothing changed;
* current sha256 is one of the patch's known pristine hashes -> to apply (with that hash's template);
* anything else -> drift, refused, naming the file, the expected hashes and the found hash.

Versions are compared as versions (0.5.9 < 0.5.10 < 0.5.10.post1 < 0.5.11), never as text.

Hunks are applied by this module's own unified-diff applier: no fuzz and NO offset. Every hunk must
match, context and removed lines byte for byte, at exactly the line its header states (the pristine
hash has been checked, so a moved hunk can only mean a wrong template). The whole selection is
rendered, applied in memory, compiled and linted before anything is written; one failure changes no
file. The lint (module_utils/patch_lint.py) runs pyflakes on the pristine and the patched source and
refuses a patch that adds a message (an undefined name compiles but raises NameError on import);
pyflakes is imported only then, so hosts without it skip the lint unless it is required (the
Ansible role lints on the controller with prove_rendered() before the host applies anything).

State lives in `state_dir` (default `<sglang_dir>/../.sglang-patches`, i.e. next to the package in
site-packages, so it moves and disappears with the virtualenv):

    state.json          {"schema": 1, "sglang_version": ..., "patches": {id: {target, values, before_sha256, after_sha256}}}
    pristine/<sha256>   the target's original bytes, named by their hash
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import os
import py_compile
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

try:  # inside Ansible (AnsiballZ ships it as ansible.module_utils.patch_lint)
    from ansible.module_utils.patch_lint import LintUnavailable, new_problems  # type: ignore[import-not-found]
except ImportError:  # plain Python: module_utils/ is on sys.path
    from patch_lint import LintUnavailable, new_problems  # type: ignore[no-redef]

STATE_SCHEMA = 1
STATE_FILE = "state.json"
PRISTINE_DIR = "pristine"
MARKER = "sglang-patch {id}"
VARIABLE_TYPES = ("int", "bool", "str", "list[int]", "dict[int,int]")
# fixed_upstream detectors: `class` + `defines` (the class defines these methods), `no_subscript` (no
# `TABLE[...]` indexing of these names is left: lookups cannot raise KeyError), `contains`, `regex`.
DETECTORS = ("class", "no_subscript", "contains", "regex")


class SglangPatchError(Exception):
    """A patch operation was refused; the message carries what was expected and what was found."""


class UsageError(SglangPatchError):
    """The request itself is wrong: unknown patch id, unknown variable, badly typed value."""


class ManifestError(SglangPatchError):
    """The manifest is malformed."""


class UnsupportedVersionError(SglangPatchError):
    """The installed SGLang version is not one the patch was written for."""


class DriftError(SglangPatchError):
    """A target's bytes are neither pristine nor the recorded patched result."""


class HunkError(SglangPatchError):
    """A hunk of a rendered patch does not apply exactly."""


class StateError(SglangPatchError):
    """The state directory is inconsistent with the request or the files."""


class LintError(SglangPatchError):
    """A rendered patch adds a pyflakes message (undefined name, syntax error, ...) to its target."""


@dataclass(frozen=True)
class Variable:
    name: str
    type: str
    default: Any
    description: str


@dataclass(frozen=True)
class PatchSpec:
    id: str
    target: str
    template: str
    description: str
    upstream: str
    default: bool
    versions: dict[str, str]
    variables: dict[str, Variable]
    fixed_upstream: Optional[dict[str, Any]]
    applies_to: str = ""  # a version range, e.g. ">=0.5.9,<0.5.14"; empty: exactly the listed versions
    templates: dict[str, str] = field(default_factory=dict)  # pristine sha256 -> template, when not `template`

    def in_range(self, version: str) -> bool:
        if not self.applies_to:
            return version in self.versions
        return version_in_range(version, self.applies_to)

    def range_text(self) -> str:
        known = ", ".join(sorted(self.versions, key=version_key))
        return f"{self.applies_to} (pristine files known from {known})" if self.applies_to else known

    def template_for(self, pristine_sha: Optional[str]) -> str:
        return self.templates.get(pristine_sha or "", self.template)


# ---------------------------------------------------------------- versions


def version_key(version: str) -> tuple:
    """A sort key comparing release numbers as numbers: 0.5.9 < 0.5.10 < 0.5.10.post1 < 0.5.11; rc/dev before."""
    found = re.match(r"^\s*v?(\d+(?:\.\d+)*)(?:[.-]?(a|b|rc|dev|post)\.?(\d*))?", str(version))
    if not found:
        return ((), 0, 0, str(version))
    release = tuple(int(p) for p in found.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    tag, number = found.group(2), int(found.group(3) or 0)
    phase = {"dev": -3, "a": -2, "b": -1, "rc": -1, None: 0, "post": 1}[tag]
    return (release, phase, number, "")


def version_in_range(version: str, spec: str) -> bool:
    """True when `version` meets every comma-separated clause of `spec` (>=, >, <=, <, ==, !=)."""
    key = version_key(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        found = re.fullmatch(r"(>=|<=|==|!=|>|<)\s*(\S+)", clause)
        if not found:
            raise ManifestError(f"version range {spec!r}: cannot read {clause!r} (expected e.g. >=0.5.9,<0.5.14)")
        op, other = found.group(1), version_key(found.group(2))
        ok = {">=": key >= other, "<=": key <= other, ">": key > other, "<": key < other, "==": key == other, "!=": key != other}[op]
        if not ok:
            return False
    return True


@dataclass(frozen=True)
class Manifest:
    patches: list[PatchSpec]
    template_dir: Optional[Path]
    # Pre-rendered diffs, {id: {"values": {...}, "text": "..."}}, from render_selected() on another
    # machine (Ansible renders on the controller, so the GPU host needs no jinja2).
    rendered: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def get(self, patch_id: str) -> PatchSpec:
        for spec in self.patches:
            if spec.id == patch_id:
                return spec
        raise UsageError(f"unknown patch id {patch_id!r}; the manifest has {', '.join(s.id for s in self.patches)}")


@dataclass
class Hunk:
    number: int
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class FileDiff:
    old_path: str
    new_path: str
    hunks: list[Hunk]


@dataclass
class PatchResult:
    id: str
    target: str
    status: str
    changed: bool = False
    found_sha256: Optional[str] = None
    before_sha256: Optional[str] = None
    after_sha256: Optional[str] = None
    values: dict[str, Any] = field(default_factory=dict)
    diff: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- manifest


def load_manifest(
    data: Mapping[str, Any],
    template_dir: str | os.PathLike[str] | None = None,
    rendered: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> Manifest:
    """Validate a parsed manifest.yml; templates are looked up in template_dir, or given pre-rendered."""
    if not isinstance(data, Mapping) or not isinstance(data.get("patches"), list):
        raise ManifestError("manifest must be a mapping with a `patches` list")
    specs = [_patch_spec(entry) for entry in data["patches"]]
    seen_ids: set[str] = set()
    seen_targets: dict[str, str] = {}
    for spec in specs:
        if spec.id in seen_ids:
            raise ManifestError(f"patch id {spec.id!r} appears twice in the manifest")
        if spec.target in seen_targets:
            raise ManifestError(f"patches {seen_targets[spec.target]!r} and {spec.id!r} both target {spec.target}; use one entry per file")
        seen_ids.add(spec.id)
        seen_targets[spec.target] = spec.id
    if template_dir is None and rendered is None:
        raise UsageError("give the template directory or the pre-rendered patches")
    for patch_id, entry in (rendered or {}).items():
        if patch_id not in seen_ids:
            raise ManifestError(f"pre-rendered patch {patch_id!r} is not in the manifest")
        if not (isinstance(entry, Mapping) and isinstance(entry.get("text"), str) and isinstance(entry.get("values"), Mapping)):
            raise ManifestError(f"pre-rendered patch {patch_id!r}: expected a mapping with `text` and `values`")
    return Manifest(patches=specs, template_dir=Path(template_dir) if template_dir is not None else None, rendered=dict(rendered or {}))


def _patch_spec(entry: Any) -> PatchSpec:
    if not isinstance(entry, Mapping):
        raise ManifestError(f"patch entry must be a mapping, found {entry!r}")
    missing = [key for key in ("id", "target", "versions", "description", "upstream", "default") if key not in entry]
    if missing:
        raise ManifestError(f"patch {entry.get('id', '?')!r} lacks {', '.join(missing)}")
    patch_id = str(entry["id"])
    versions: dict[str, str] = {}
    templates: dict[str, str] = {}
    for version, info in dict(entry["versions"]).items():
        digest = info.get("sha256") if isinstance(info, Mapping) else None
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ManifestError(f"patch {patch_id!r} version {version}: expected sha256 of 64 hex digits, found {digest!r}")
        versions[str(version)] = digest
        if isinstance(info, Mapping) and info.get("template"):
            if templates.get(digest, info["template"]) != info["template"]:
                raise ManifestError(f"patch {patch_id!r}: pristine sha256 {digest} is given two templates")
            templates[digest] = str(info["template"])
    applies_to = str(entry.get("applies_to") or "")
    if applies_to:
        version_in_range("0", applies_to)  # raises ManifestError on a malformed range
        outside = [v for v in versions if not version_in_range(v, applies_to)]
        if outside:
            raise ManifestError(f"patch {patch_id!r}: versions {', '.join(outside)} lie outside applies_to {applies_to!r}")
    variables = {}
    for name, info in dict(entry.get("variables") or {}).items():
        if not isinstance(info, Mapping) or "default" not in info or info.get("type") not in VARIABLE_TYPES:
            raise ManifestError(f"patch {patch_id!r} variable {name!r} needs a default and a type among {VARIABLE_TYPES}")
        var = Variable(name=str(name), type=info["type"], default=None, description=str(info.get("description", "")))
        variables[var.name] = Variable(var.name, var.type, coerce_value(var, info["default"]), var.description)
    detector = entry.get("fixed_upstream")
    if detector is not None and not (isinstance(detector, Mapping) and (set(DETECTORS) & set(detector))):
        raise ManifestError(f"patch {patch_id!r}: fixed_upstream needs one of {', '.join(DETECTORS)}")
    return PatchSpec(
        id=patch_id,
        target=str(entry["target"]),
        template=str(entry.get("template", f"{patch_id}.diff.j2")),
        description=str(entry["description"]),
        upstream=str(entry["upstream"]),
        default=bool(entry["default"]),
        versions=versions,
        variables=variables,
        fixed_upstream=dict(detector) if detector is not None else None,
        applies_to=applies_to,
        templates=templates,
    )


def coerce_value(var: Variable, raw: Any) -> Any:
    """Turn a value (typed, or a Python literal in a string as given by --set) into the variable's type."""
    value = raw
    if isinstance(raw, str) and var.type != "str":
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError) as exc:
            raise UsageError(f"variable {var.name}: expected a {var.type} literal, found {raw!r}") from exc
    if var.type == "str" and isinstance(value, str):
        return value
    if var.type == "bool" and isinstance(value, bool):
        return value
    if var.type == "int" and _is_int(value):
        return value
    if var.type == "list[int]" and isinstance(value, (list, tuple)) and all(_is_int(v) for v in value):
        return sorted(set(value))
    if var.type == "dict[int,int]" and isinstance(value, Mapping):
        try:
            result = {int(k): v for k, v in value.items()}
        except (TypeError, ValueError):
            result = None
        if result is not None and all(_is_int(v) and v > 0 for v in result.values()):
            return dict(sorted(result.items()))
    raise UsageError(f"variable {var.name}: expected {var.type}, found {raw!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------- facts about the installed package


def sglang_version(sglang_dir: str | os.PathLike[str]) -> str:
    """`__version__` of the package, read from version.py (following its `_version` import) without importing it."""
    pkg = Path(sglang_dir)
    version_py = pkg / "version.py"
    try:
        tree = ast.parse(version_py.read_text(encoding="utf-8"), str(version_py))
    except OSError as exc:
        raise SglangPatchError(f"cannot read the SGLang version: {exc}") from exc
    found = _literal_version(tree.body)
    if found:
        return found
    if _imports_version_module(tree.body):
        generated = pkg / "_version.py"
        try:
            found = _literal_version(ast.parse(generated.read_text(encoding="utf-8"), str(generated)).body)
        except OSError as exc:
            raise SglangPatchError(f"{version_py} takes __version__ from _version.py, which cannot be read: {exc}") from exc
        if found:
            return found
    raise SglangPatchError(f"no literal __version__ in {version_py} or its _version.py")


# ---------------------------------------------------------------- locating the package in a virtualenv


class SglangPackageError(SglangPatchError):
    """The directory is not a virtualenv holding exactly one SGLang package."""


@dataclass(frozen=True)
class SglangPackage:
    venv: str
    python_version: str
    site_packages: str
    sglang_dir: str
    version: str
    dist_info_version: Optional[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pyvenv_version(cfg: Path) -> str:
    for line in cfg.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("version_info", "version"):
            found = re.match(r"\s*(\d+\.\d+)", value)
            if found:
                return found.group(1)
    return ""


def find_sglang(venv: str | os.PathLike[str]) -> SglangPackage:
    root = Path(venv)
    cfg = root / "pyvenv.cfg"
    if not cfg.is_file():
        raise SglangPackageError(
            f"{root} is not a virtualenv: expected {cfg}, found {'no such directory' if not root.exists() else 'no pyvenv.cfg'}"
        )
    python_version = _pyvenv_version(cfg)
    candidates = sorted(p for p in root.glob("lib*/python3*/site-packages/sglang") if (p / "__init__.py").is_file())
    # lib64 is often a symlink to lib: the same package seen twice is one package.
    unique: dict[str, Path] = {}
    for path in candidates:
        unique.setdefault(os.path.realpath(path), path)
    if not unique:
        raise SglangPackageError(f"no sglang package in the virtualenv {root}: looked for lib*/python3*/site-packages/sglang/__init__.py")
    if len(unique) > 1:
        raise SglangPackageError(f"more than one sglang package in {root}: {', '.join(str(p) for p in unique.values())}")
    pkg = next(iter(unique.values()))
    try:
        version = sglang_version(pkg)
    except SglangPatchError as exc:
        raise SglangPackageError(f"{pkg}: {exc}") from exc
    dist_versions = sorted(
        m.group(1) for p in pkg.parent.glob("sglang-*.dist-info") if (m := re.fullmatch(r"sglang-(.+)\.dist-info", p.name))
    )
    dist_version = dist_versions[0] if len(dist_versions) == 1 else None
    if dist_version is not None and dist_version != version:
        raise SglangPackageError(f"{pkg}: version.py says {version} but pip installed sglang {dist_version} (mixed install)")
    return SglangPackage(
        venv=str(root),
        python_version=python_version,
        site_packages=str(pkg.parent),
        sglang_dir=str(pkg),
        version=version,
        dist_info_version=dist_version,
    )


def _literal_version(body: list[ast.stmt]) -> Optional[str]:
    for node in body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def _imports_version_module(body: list[ast.stmt]) -> bool:
    for node in body:
        statements = [node, *node.body] if isinstance(node, ast.Try) else [node]
        for stmt in statements:
            if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").split(".")[-1] == "_version":
                return True
    return False


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def default_state_dir(sglang_dir: str | os.PathLike[str]) -> Path:
    """`<sglang_dir>/../.sglang-patches`: beside the package in site-packages, so it lives and dies with the virtualenv."""
    return Path(sglang_dir).resolve().parent / ".sglang-patches"


def fixed_upstream(spec: PatchSpec, source: bytes) -> bool:
    """True when the target already has the fix and it is not this toolkit's own patch."""
    detector = spec.fixed_upstream
    if not detector:
        return False
    text = source.decode("utf-8", errors="replace")
    if MARKER.format(id=spec.id) in text:
        return False
    if "class" in detector:
        return _class_defines(text, str(detector["class"]), [str(n) for n in detector.get("defines", [])])
    if "no_subscript" in detector:
        return _no_subscript(text, [str(n) for n in detector["no_subscript"]])
    if "contains" in detector:
        return str(detector["contains"]) in text
    return re.search(str(detector["regex"]), text, re.MULTILINE) is not None


def _no_subscript(text: str, names: list[str]) -> bool:
    """True when no `NAME[...]` / `obj.NAME[...]` read is left for any of the names (``.get()`` or an
    explicit membership check instead): indexing by an unknown key can no longer raise KeyError."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            value = node.value
            name = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else None
            if name in names:
                return False
    return True


def _class_defines(text: str, class_name: str, names: list[str]) -> bool:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            defined = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            return all(name in defined for name in names)
    return False


# ---------------------------------------------------------------- unified diffs

_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_unified_diff(text: str) -> FileDiff:
    """Parse a single-file unified diff (`--- a/x`, `+++ b/x`, hunks). Header counts are checked against the body."""
    lines = text.splitlines(keepends=True)
    index = 0
    while index < len(lines) and not lines[index].startswith("--- "):
        index += 1
    if index + 1 >= len(lines) or not lines[index + 1].startswith("+++ "):
        raise HunkError("diff has no `--- ` / `+++ ` header")
    old_path = _diff_path(lines[index][4:])
    new_path = _diff_path(lines[index + 1][4:])
    hunks: list[Hunk] = []
    for line in lines[index + 2 :]:
        header = _HUNK_HEADER.match(line)
        if header:
            old_start, old_len, new_start, new_len = (int(g) if g is not None else 1 for g in header.groups())
            hunks.append(Hunk(len(hunks) + 1, old_start, old_len, new_start, new_len))
        elif not hunks:
            raise HunkError(f"unexpected line before the first hunk: {line!r}")
        elif line.startswith("\\"):
            tag, body = hunks[-1].lines[-1]
            hunks[-1].lines[-1] = (tag, body.rstrip("\n"))
        elif line[:1] in (" ", "-", "+"):
            hunks[-1].lines.append((line[0], line[1:]))
        elif line in ("\n", ""):
            hunks[-1].lines.append((" ", line))
        else:
            raise HunkError(f"hunk {hunks[-1].number}: unexpected line {line!r}")
    if not hunks:
        raise HunkError(f"diff for {new_path} has no hunks")
    for hunk in hunks:
        old = sum(1 for tag, _ in hunk.lines if tag != "+")
        new = sum(1 for tag, _ in hunk.lines if tag != "-")
        if (old, new) != (hunk.old_len, hunk.new_len):
            raise HunkError(f"hunk {hunk.number}: header says -{hunk.old_len} +{hunk.new_len} lines, body has -{old} +{new}")
    return FileDiff(old_path, new_path, hunks)


def _diff_path(raw: str) -> str:
    path = raw.rstrip("\n").split("\t")[0].strip()
    return path[2:] if path.startswith(("a/", "b/")) else path


def apply_diff(source: bytes, diff: FileDiff) -> bytes:
    """Apply hunks at exactly their stated lines (no offset, no fuzz); HunkError names the failing hunk."""
    original = source.decode("utf-8").splitlines(keepends=True)
    out: list[str] = []
    cursor = 0
    for hunk in diff.hunks:
        position = hunk.old_start if hunk.old_len == 0 else hunk.old_start - 1
        if position < cursor or position > len(original):
            raise HunkError(f"hunk {hunk.number}: starts at line {hunk.old_start}, file has {len(original)} lines (or hunks overlap)")
        out.extend(original[cursor:position])
        new_position = hunk.new_start if hunk.new_len == 0 else hunk.new_start - 1
        if new_position != len(out):
            raise HunkError(
                f"hunk {hunk.number}: header puts the new text at line {hunk.new_start}, the patched file has it at {len(out) + 1}"
            )
        expected = [body for tag, body in hunk.lines if tag != "+"]
        found = original[position : position + len(expected)]
        if found != expected:
            bad = next((i for i, (e, f) in enumerate(zip(expected, found)) if e != f), min(len(expected), len(found)))
            wanted = expected[bad] if bad < len(expected) else "<end>"
            got = found[bad] if bad < len(found) else "<end of file>"
            raise HunkError(f"hunk {hunk.number}: line {position + bad + 1} expected {wanted!r}, found {got!r}")
        out.extend(body for tag, body in hunk.lines if tag != "-")
        cursor = position + len(expected)
    out.extend(original[cursor:])
    return "".join(out).encode("utf-8")


def unified_diff(old: bytes, new: bytes, target: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.decode("utf-8").splitlines(keepends=True),
            new.decode("utf-8").splitlines(keepends=True),
            fromfile=f"a/{target}",
            tofile=f"b/{target}",
        )
    )


def render_patch(manifest: Manifest, spec: PatchSpec, values: Mapping[str, Any], pristine_sha: Optional[str] = None) -> str:
    """Render the patch's .diff.j2 (the one for this pristine sha256) with StrictUndefined (jinja2 imported here)."""
    if spec.id in manifest.rendered:
        entry = manifest.rendered[spec.id]
        variants = entry.get("variants")
        if pristine_sha and isinstance(variants, Mapping) and pristine_sha in variants:
            entry = {"values": entry["values"], "text": variants[pristine_sha]}
        if json.loads(json.dumps(dict(entry["values"]))) != json.loads(json.dumps(dict(values))):
            raise UsageError(f"patch {spec.id}: pre-rendered with values {dict(entry['values'])}, but {dict(values)} are requested")
        return str(entry["text"])
    if manifest.template_dir is None:
        raise UsageError(f"patch {spec.id}: no template directory and no pre-rendered text")
    import jinja2

    path = manifest.template_dir / spec.template_for(pristine_sha)
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SglangPatchError(f"patch {spec.id}: cannot read template {path}: {exc}") from exc
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    try:
        return env.from_string(source).render(**values)
    except jinja2.TemplateError as exc:
        raise SglangPatchError(f"patch {spec.id}: template {path} does not render: {exc}") from exc


def render_selected(
    manifest: Manifest,
    only: Optional[Iterable[str]] = None,
    values: Optional[Mapping[str, Any]] = None,
) -> dict[str, dict[str, Any]]:
    """Render the selected patches (default-on ones unless `only`) for use by load_manifest(rendered=...)."""
    out: dict[str, dict[str, Any]] = {}
    for spec in _select(manifest, only):
        chosen = _values_for(manifest, spec, values or {})
        out[spec.id] = {"values": json.loads(json.dumps(chosen)), "text": render_patch(manifest, spec, chosen)}
        if spec.templates:  # pristine files that need their own template (same change, other line numbers)
            out[spec.id]["variants"] = {sha: render_patch(manifest, spec, chosen, sha) for sha in spec.templates}
    return out


# ---------------------------------------------------------------- state


def read_state(state_dir: Path) -> dict[str, Any]:
    path = state_dir / STATE_FILE
    if not path.exists():
        return {"schema": STATE_SCHEMA, "patches": {}}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StateError(f"cannot read patch state {path}: {exc}") from exc
    if state.get("schema") != STATE_SCHEMA or not isinstance(state.get("patches"), dict):
        raise StateError(f"patch state {path}: expected schema {STATE_SCHEMA} with a `patches` mapping, found {state!r:.200}")
    return state


def atomic_write(path: Path, data: bytes, mode: Optional[int] = None) -> None:
    """Write through a temp file in the same directory, then os.replace; keeps `mode` (or the old file's mode)."""
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_state(state_dir: Path, state: dict[str, Any]) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(state_dir / STATE_FILE, (json.dumps(state, indent=2, sort_keys=True) + "\n").encode(), 0o644)


# ---------------------------------------------------------------- operations


def _select(manifest: Manifest, only: Optional[Iterable[str]]) -> list[PatchSpec]:
    if only:
        return [manifest.get(patch_id) for patch_id in dict.fromkeys(only)]
    return [spec for spec in manifest.patches if spec.default]


def _values_for(manifest: Manifest, spec: PatchSpec, values: Mapping[str, Any]) -> dict[str, Any]:
    known = {name for s in manifest.patches for name in s.variables}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UsageError(f"unknown variable {', '.join(unknown)}; the manifest declares {', '.join(sorted(known)) or 'none'}")
    return {name: coerce_value(var, values[name]) if name in values else var.default for name, var in spec.variables.items()}


def _read_target(sglang_dir: Path, spec: PatchSpec) -> Optional[bytes]:
    try:
        return (sglang_dir / spec.target).read_bytes()
    except FileNotFoundError:
        return None


def _classify(spec: PatchSpec, version: str, data: Optional[bytes], entry: Optional[Mapping[str, Any]]) -> str:
    """One of not-applicable / pristine / applied / drifted / fixed-upstream / unsupported-version."""
    if data is None:
        return "applied" if entry else "not-applicable"
    found = sha256_bytes(data)
    if entry and found == entry.get("after_sha256"):
        return "applied"
    if fixed_upstream(spec, data):
        return "fixed-upstream"
    if not spec.in_range(version):
        return "unsupported-version"
    return "pristine" if found in spec.versions.values() else "drifted"


# Outcomes that need nothing done and fail nothing.
NOT_NEEDED = ("fixed-upstream", "not-applicable")


def status(
    manifest: Manifest,
    sglang_dir: str | os.PathLike[str],
    state_dir: str | os.PathLike[str] | None = None,
    only: Optional[Iterable[str]] = None,
) -> list[PatchResult]:
    """Per patch (all of the manifest unless `only`): pristine / applied / drifted / fixed-upstream / unsupported-version."""
    pkg = Path(sglang_dir)
    state = read_state(Path(state_dir) if state_dir else default_state_dir(pkg))
    version = sglang_version(pkg)
    specs = [manifest.get(i) for i in only] if only else manifest.patches
    results = []
    for spec in specs:
        data = _read_target(pkg, spec)
        entry = state["patches"].get(spec.id)
        results.append(
            PatchResult(
                id=spec.id,
                target=spec.target,
                status=_classify(spec, version, data, entry),
                found_sha256=sha256_bytes(data) if data is not None else None,
                before_sha256=entry.get("before_sha256") if entry else spec.versions.get(version),
                after_sha256=entry.get("after_sha256") if entry else None,
                values=dict(entry.get("values", {})) if entry else {},
            )
        )
    return results


def apply(
    manifest: Manifest,
    sglang_dir: str | os.PathLike[str],
    state_dir: str | os.PathLike[str] | None = None,
    only: Optional[Iterable[str]] = None,
    values: Optional[Mapping[str, Any]] = None,
    check: bool = False,
    lint: Optional[bool] = None,
) -> list[PatchResult]:
    """Apply the default-on patches (or `only`), all or nothing. With check=True nothing is written.

    lint: True requires pyflakes and refuses a patch that adds a message; None lints when pyflakes
    is installed; False does not lint.
    """
    pkg = Path(sglang_dir)
    states = Path(state_dir) if state_dir else default_state_dir(pkg)
    state = read_state(states)
    version = sglang_version(pkg)
    planned: list[tuple[PatchSpec, bytes, bytes]] = []
    results: list[PatchResult] = []
    for spec in _select(manifest, only):
        chosen = _values_for(manifest, spec, values or {})
        result, new = _plan_one(manifest, spec, pkg, version, state["patches"].get(spec.id), chosen, lint)
        results.append(result)
        if new is not None:
            planned.append((spec, _read_target(pkg, spec) or b"", new))
    if check or not planned:
        return results
    pristine_dir = states / PRISTINE_DIR
    pristine_dir.mkdir(parents=True, exist_ok=True)
    for _spec, old, _ in planned:
        blob = pristine_dir / sha256_bytes(old)
        if not blob.exists():
            atomic_write(blob, old, 0o644)
    by_id = {r.id: r for r in results}
    for spec, _, _ in planned:
        r = by_id[spec.id]
        state["patches"][spec.id] = {
            "target": spec.target,
            "values": r.values,
            "before_sha256": r.before_sha256,
            "after_sha256": r.after_sha256,
        }
    state["sglang_version"] = version
    _write_state(states, state)
    for spec, _, new in planned:
        target = pkg / spec.target
        atomic_write(target, new)
        py_compile.compile(str(target), doraise=True)
        by_id[spec.id].status = "applied"
        by_id[spec.id].found_sha256 = sha256_bytes(new)  # what is on disk now
    return results


def _plan_one(
    manifest: Manifest,
    spec: PatchSpec,
    pkg: Path,
    version: str,
    entry: Optional[Mapping[str, Any]],
    chosen: dict[str, Any],
    lint: Optional[bool] = None,
) -> tuple[PatchResult, Optional[bytes]]:
    data = _read_target(pkg, spec)
    result = PatchResult(id=spec.id, target=spec.target, status="", values=chosen)
    kind = _classify(spec, version, data, entry)
    if data is None:
        if kind == "applied":
            raise DriftError(f"patch {spec.id}: {pkg / spec.target} is recorded as patched but no longer exists; nothing changed")
        result.status = "not-applicable"
        return result, None
    found = sha256_bytes(data)
    result.found_sha256 = found
    if kind == "applied":
        assert entry is not None
        if dict(entry.get("values", {})) != json.loads(json.dumps(chosen)):
            raise StateError(
                f"patch {spec.id}: {spec.target} is applied with values {entry.get('values')}, requested {chosen}; revert it first"
            )
        result.status, result.before_sha256, result.after_sha256 = "already-applied", entry.get("before_sha256"), found
        return result, None
    if kind == "fixed-upstream":
        result.status = "fixed-upstream"
        return result, None
    if kind == "unsupported-version":
        raise UnsupportedVersionError(
            f"patch {spec.id}: written for SGLang {spec.range_text()}, found SGLang {version} at {pkg}, "
            f"where {spec.target} is not recognised as fixed upstream; nothing changed"
        )
    if kind == "drifted":
        known = list(dict.fromkeys([spec.versions[version]] if version in spec.versions else []))
        known += [d for d in dict.fromkeys(spec.versions.values()) if d not in known]
        expected = known + ([entry["after_sha256"]] if entry and entry.get("after_sha256") else [])
        raise DriftError(
            f"patch {spec.id}: {pkg / spec.target} has drifted: expected sha256 {' or '.join(expected)}, found {found}; nothing changed"
        )
    new = patched_source(manifest, spec, data, chosen, lint)
    result.status = "would-apply"
    result.changed = True
    result.before_sha256 = found
    result.after_sha256 = sha256_bytes(new)
    result.diff = unified_diff(data, new, spec.target)
    return result, new


def patched_source(manifest: Manifest, spec: PatchSpec, data: bytes, chosen: Mapping[str, Any], lint: Optional[bool] = None) -> bytes:
    """The target's bytes with the rendered patch applied in memory, compiled and (see apply) linted."""
    rendered = render_patch(manifest, spec, chosen, sha256_bytes(data))
    try:
        diff = parse_unified_diff(rendered)
        if diff.new_path != spec.target:
            raise HunkError(f"diff targets {diff.new_path}, manifest says {spec.target}")
        new = apply_diff(data, diff)
    except HunkError as exc:
        raise HunkError(f"patch {spec.id}: {spec.target}: {exc}; nothing changed") from exc
    try:
        compile(new, spec.target, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise HunkError(f"patch {spec.id}: patched {spec.target} does not compile: {exc}; nothing changed") from exc
    if lint is not False:
        lint_patch(spec, data, new, required=bool(lint))
    return new


def lint_patch(spec: PatchSpec, pristine: bytes, patched: bytes, required: bool = True) -> None:
    """Raise LintError naming the patch, the file and each line where the patch adds a pyflakes message."""
    try:
        added = new_problems(pristine, patched, spec.target)
    except LintUnavailable as exc:
        if required:
            raise SglangPatchError(f"patch {spec.id}: cannot lint {spec.target}: {exc}; install requirements.txt") from exc
        return
    if added:
        found = "; ".join(dict.fromkeys(f"{spec.target}:{m.line}: {m.text} ({m.kind})" for m in added))
        raise LintError(f"patch {spec.id}: the patched file has problems the pristine one has not: {found}; nothing changed")


def prove_rendered(
    manifest: Manifest,
    originals: Mapping[str, bytes],
    only: Optional[Iterable[str]] = None,
    values: Optional[Mapping[str, Any]] = None,
) -> list[str]:
    """Apply the selected patches in memory to the given pristine sources ({target: bytes}) and lint them.

    What the controller runs before the host applies anything. A target that is missing from
    `originals` (the host found it drifted or of another version; the apply refuses it there) or
    already has the fix upstream is skipped. Returns the ids that were checked; raises like apply().
    """
    checked = []
    for spec in _select(manifest, only):
        data = originals.get(spec.target)
        if data is None or fixed_upstream(spec, data):
            continue
        patched_source(manifest, spec, data, _values_for(manifest, spec, values or {}), lint=True)
        checked.append(spec.id)
    return checked


def pristine_sources(
    manifest: Manifest,
    sglang_dir: str | os.PathLike[str],
    state_dir: str | os.PathLike[str] | None = None,
    targets: Optional[Iterable[str]] = None,
) -> dict[str, dict[str, Any]]:
    """The pristine bytes of the targets (default: every manifest target), for linting elsewhere.

    Per target: the file itself when its sha256 is one of the manifest's pristine hashes, else the
    copy recorded in the state when the file is the recorded patched result. Targets that are
    neither (missing, drifted, unknown version) are left out. {target: {sha256, source, content}}.
    """
    pkg = Path(sglang_dir)
    states = Path(state_dir) if state_dir else default_state_dir(pkg)
    state = read_state(states)
    by_target = {spec.target: spec for spec in manifest.patches}
    out: dict[str, dict[str, Any]] = {}
    for target in dict.fromkeys(targets if targets is not None else by_target):
        spec = by_target.get(target)
        if spec is None:
            raise UsageError(f"{target} is not the target of any patch in the manifest")
        data = _read_target(pkg, spec)
        if data is None:
            continue
        found = sha256_bytes(data)
        if found in spec.versions.values():
            out[target] = {"sha256": found, "source": str(pkg / target), "content": data}
            continue
        entry = state["patches"].get(spec.id)
        if entry and entry.get("after_sha256") == found:
            blob = states / PRISTINE_DIR / str(entry.get("before_sha256"))
            pristine = blob.read_bytes() if blob.is_file() else b""
            if sha256_bytes(pristine) == entry.get("before_sha256"):
                out[target] = {"sha256": entry["before_sha256"], "source": str(blob), "content": pristine}
    return out


def revert(
    manifest: Manifest,
    sglang_dir: str | os.PathLike[str],
    state_dir: str | os.PathLike[str] | None = None,
    only: Optional[Iterable[str]] = None,
    check: bool = False,
) -> list[PatchResult]:
    """Restore the pristine bytes of applied patches (all recorded, or `only`), all or nothing."""
    pkg = Path(sglang_dir)
    states = Path(state_dir) if state_dir else default_state_dir(pkg)
    state = read_state(states)
    ids = list(dict.fromkeys(only)) if only else sorted(state["patches"])
    for patch_id in ids:
        manifest.get(patch_id)
    results: list[PatchResult] = []
    planned: list[tuple[str, Path, bytes]] = []
    for patch_id in ids:
        entry = state["patches"].get(patch_id)
        spec = manifest.get(patch_id)
        if entry is None:
            results.append(PatchResult(id=patch_id, target=spec.target, status="not-applied"))
            continue
        target = pkg / entry["target"]
        data = target.read_bytes() if target.exists() else b""
        found = sha256_bytes(data)
        result = PatchResult(patch_id, entry["target"], "", found_sha256=found, before_sha256=entry["before_sha256"])
        result.after_sha256, result.values = entry["after_sha256"], dict(entry.get("values", {}))
        if found == entry["before_sha256"]:
            result.status = "not-applied"
            planned.append((patch_id, target, b""))
            results.append(result)
            continue
        if found != entry["after_sha256"]:
            raise DriftError(
                f"patch {patch_id}: {target} is not the patched file recorded in {states}: "
                f"expected sha256 {entry['after_sha256']}, found {found}; nothing reverted"
            )
        blob = states / PRISTINE_DIR / entry["before_sha256"]
        pristine = blob.read_bytes() if blob.exists() else b""
        if sha256_bytes(pristine) != entry["before_sha256"]:
            raise StateError(
                f"patch {patch_id}: saved pristine copy {blob} missing or not sha256 {entry['before_sha256']}; nothing reverted"
            )
        result.status, result.changed, result.diff = "would-revert", True, unified_diff(data, pristine, entry["target"])
        planned.append((patch_id, target, pristine))
        results.append(result)
    if check:
        return results
    by_id = {r.id: r for r in results}
    for patch_id, target, pristine in planned:
        if pristine:
            atomic_write(target, pristine)
            py_compile.compile(str(target), doraise=True)
            by_id[patch_id].status = "reverted"
            by_id[patch_id].found_sha256 = sha256_bytes(pristine)
        del state["patches"][patch_id]
    if planned:
        _write_state(states, state)
        _prune_pristine(states, state)
    return results


def _prune_pristine(states: Path, state: Mapping[str, Any]) -> None:
    keep = {entry["before_sha256"] for entry in state["patches"].values()}
    blobs = states / PRISTINE_DIR
    if blobs.is_dir():
        for blob in blobs.iterdir():
            if blob.name not in keep:
                blob.unlink()
