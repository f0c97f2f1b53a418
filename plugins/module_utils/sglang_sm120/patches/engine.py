"""Apply, check and revert the toolkit's source patches to an installed SGLang package.

The engine takes the parsed manifest (roles/sglang_patches/files/patches/manifest.yml, a dict; see manifest.py) and
the directory of its Jinja2 templates, so Ansible hosts need no yaml; jinja2 is imported only when a
template is rendered. At module load only the standard library and the package's own modules are imported
(errors, manifest, diff, lint, ..release.venv, ..files); their public
names are re-exported here (__all__) for existing callers.

Rules, in the order they are checked for each selected patch:

* the target file does not exist in this release -> `not-applicable` (nothing to do, not a failure);
* target's current sha256 equals the `after_sha256` recorded in the state -> applied (nothing to do);
* the target already has the fix (the manifest's `fixed_upstream` detector matches what the code does and
  the file does not carry this toolkit's `sglang-patch <id>` marker) -> `fixed-upstream`, file untouched;
* the installed SGLang version is outside the patch's `applies_to` range -> refused, nothing changed;
* current sha256 is one of the patch's known pristine hashes -> to apply (with that hash's template);
* anything else -> drift, refused, naming the file, the expected hashes and the found hash.

Hunks are applied by unified_diff.apply_diff: no fuzz and NO offset. Every hunk must match, context
and removed lines byte for byte, at exactly the line its header states (the pristine hash has been
checked, so a moved hunk can only mean a wrong template). The whole selection is
rendered, applied in memory, compiled and linted before anything is written; one failure changes no
file. The lint (plugins/module_utils/sglang_sm120/patches/lint.py) runs pyflakes on the pristine and the patched source and
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
import base64
import binascii
import json
import os
import py_compile
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..files import atomic_write, sha256_bytes
from ..release.venv import SglangPackage, SglangPackageError, find_sglang, sglang_version
from .diff import FileDiff, Hunk, apply_diff, parse_unified_diff, unified_diff
from .errors import DriftError, HunkError, LintError, ManifestError, SglangPatchError, StateError, UnsupportedVersionError, UsageError
from .lint import LintUnavailable, new_problems
from .manifest import DETECTORS, VARIABLE_TYPES, Manifest, PatchSpec, Variable, coerce_value, load_manifest, version_in_range, version_key

# The engine's own names and, so that `from sglang_patches import X` keeps working, those of the modules split from it.
__all__ = [
    "DETECTORS",
    "MARKER",
    "NOT_NEEDED",
    "PRISTINE_DIR",
    "STATE_FILE",
    "STATE_SCHEMA",
    "VARIABLE_TYPES",
    "DriftError",
    "FileDiff",
    "Hunk",
    "HunkError",
    "LintError",
    "Manifest",
    "ManifestError",
    "PatchResult",
    "PatchSpec",
    "SglangPackage",
    "SglangPackageError",
    "SglangPatchError",
    "StateError",
    "UnsupportedVersionError",
    "UsageError",
    "Variable",
    "apply",
    "apply_diff",
    "atomic_write",
    "coerce_value",
    "default_state_dir",
    "find_sglang",
    "fixed_upstream",
    "lint_patch",
    "load_manifest",
    "parse_unified_diff",
    "patched_source",
    "pristine_sources",
    "prove_rendered",
    "read_state",
    "render_patch",
    "render_selected",
    "revert",
    "sglang_version",
    "sha256_bytes",
    "status",
    "unified_diff",
    "version_in_range",
    "version_key",
]

STATE_SCHEMA = 1
STATE_FILE = "state.json"
PRISTINE_DIR = "pristine"
MARKER = "sglang-patch {id}"


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


# ---------------------------------------------------------------- rendering


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
    if kind == "applied" and entry is not None:  # "applied" is only ever found with its state entry
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


def pristine_originals(pristine: Mapping[str, Any]) -> dict[str, bytes]:
    """The pristine sources pristine_sources returned through a module ({target: {content_base64, ...}})
    as {target: bytes}, for prove_rendered; UsageError when an entry is not such a mapping."""
    try:
        return {target: base64.b64decode(entry["content_base64"], validate=True) for target, entry in pristine.items()}
    except (KeyError, TypeError, binascii.Error) as exc:
        raise UsageError(f"pristine: expected per target a mapping with content_base64: {exc!r}") from exc


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
