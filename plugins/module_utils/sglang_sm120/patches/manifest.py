"""The patch manifest (roles/sglang_patches/files/patches/manifest.yml, already parsed): its types, validation, version
ranges and value coercion.

Versions are compared as versions (0.5.9 < 0.5.10 < 0.5.10.post1 < 0.5.11), never as text.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .errors import ManifestError, UsageError

VARIABLE_TYPES = ("int", "bool", "str", "list[int]", "dict[int,int]")
# fixed_upstream detectors: `class` + `defines` (the class defines these methods), `no_subscript` (no
# `TABLE[...]` indexing of these names is left: lookups cannot raise KeyError), `contains`, `regex`.
DETECTORS = ("class", "no_subscript", "contains", "regex")


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
