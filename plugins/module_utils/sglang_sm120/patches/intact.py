"""Whether the patched SGLang of a release is still exactly as the release was made.

A release is found by the key of its inputs, patch inputs included (the manifest's sha256, the
patches and their values), so on an existing release only the host can have changed something: a
patched file edited or reverted, a package installed beside sglang, a file of the package touched.
Three records say what was proven when the release was made, each with the key of what decided it:
the patch state (each target's sha256 after patching), the import check's proof and the audit's
proof. When all three still hold for the files as they are, the patch role has nothing to do; when
any does not, it runs as on a new release (and re-applies, refuses drift or re-audits, as it would).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..files import sha256_bytes
from . import audit as audit_mod
from . import import_check
from .engine import StateError, default_state_dir, read_state
from .manifest import Manifest


@dataclass
class Intact:
    ok: bool
    reasons: list[str] = field(default_factory=list)
    patches: dict[str, str] = field(default_factory=dict)  # id -> 'already-applied', as the apply step would say
    imported: list[str] = field(default_factory=list)
    audit: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check(
    sglang_dir: str | os.PathLike[str],
    manifest: Manifest,
    python: str,
    state_dir: Optional[str | os.PathLike[str]] = None,
    import_stamp: Optional[str] = None,
    audit: Optional[Mapping[str, Any]] = None,
) -> Intact:
    """``audit``: {stamp, model_class, algorithm, model_dir} as the audit step gets them (None: no audit).
    ``import_stamp``: the import check's proof file (None: no import check)."""
    root = Path(sglang_dir)
    result = Intact(ok=False)
    try:
        entries = read_state(Path(state_dir) if state_dir else default_state_dir(root))["patches"]
    except StateError as exc:
        result.reasons.append(str(exc))
        return result
    if not entries:
        result.reasons.append("no patch is recorded as applied")
        return result
    targets = [spec.target for spec in manifest.patches if spec.id in entries]
    if len(targets) != len(entries):
        unknown = sorted(set(entries) - {spec.id for spec in manifest.patches})
        result.reasons.append(f"the patch state names patches the manifest does not: {unknown}")
        return result
    for patch_id, entry in entries.items():
        path = root / str(entry.get("target", "")).strip("/")
        try:
            found = sha256_bytes(path.read_bytes())
        except OSError as exc:
            result.reasons.append(f"patch {patch_id}: cannot read {path}: {exc.strerror}")
            continue
        if found != entry.get("after_sha256"):
            result.reasons.append(f"patch {patch_id}: {path} is no longer the patched file (sha256 {found[:12]})")
        else:
            result.patches[patch_id] = "already-applied"
    if import_stamp is not None:
        names = [import_check.module_name(t) for t in targets]
        try:
            key = import_check.proof_key(python, names, {}, root, targets)
        except OSError:
            key = ""
        proven = import_check.read_proof(import_stamp, key) if key else None
        if proven is None:
            result.reasons.append("the import check's proof does not hold for the package as it is")
        else:
            result.imported = [o.module for o in proven]
    if audit is not None:
        key = audit_mod.audit_key(root, audit.get("model_class"), str(audit["algorithm"]), audit.get("model_dir"))
        report = audit_mod.read_audit_proof(audit["stamp"], key)
        if report is None:
            result.reasons.append("the audit's proof does not hold for the package as it is")
        else:
            result.audit = report
    result.ok = not result.reasons
    return result
