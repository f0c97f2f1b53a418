"""Is an SGLang release usable for this stack? Patches, EAGLE-3 audit, launch flags and pinned stack, in seconds.

Used by ``sglang-compat``. Nothing is built or imported from the release: patches are checked in
memory (``sglang_patches.apply(check=True)``), the audit reads the sources with ``ast`` (with the
patches that would apply laid over them), the flags go through ``flag_rules.check_launch`` (its static
table unless a Python is given) and the stack comes from the wheel's METADATA ``Requires-Dist``.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from sglang_sm120.errors import ToolkitError
from sglang_sm120.patches.audit import SglangAuditError, SglangSource, audit
from sglang_sm120.patches.engine import NOT_NEEDED, _select, _values_for, apply, patched_source
from sglang_sm120.patches.errors import SglangPatchError
from sglang_sm120.release.venv import sglang_version

from .pinned_stack import FLASHINFER, KERNEL_PACKAGES, ReleaseStackError, download_wheel, requirements

VERSION = re.compile(r"^\d+(\.\d+)+((a|b|rc|\.post|\.dev)\d+)?$")
STACK_PACKAGES = {"torch": "torch", FLASHINFER: "flashinfer_python", **dict.fromkeys(KERNEL_PACKAGES, "kernel")}


class CompatError(ToolkitError):
    """The release cannot be found or is not SGLang; the text names it."""


@dataclass
class Release:
    label: str
    sglang_dir: Path
    wheel: Optional[Path]
    metadata: Optional[str]


@dataclass
class CompatRow:
    release: str
    version: str
    sglang_dir: str
    patches: dict[str, str] = field(default_factory=dict)  # id -> would-apply / fixed-upstream / not-applicable / refused: why
    audit_model_class: str = ""
    audit_algorithm: str = ""
    audit_missing_pristine: list[str] = field(default_factory=list)
    audit_missing: list[str] = field(default_factory=list)  # with the patches that would apply
    flags_profile: str = ""
    flags_parser: str = ""
    flags_ok: bool = False
    flags_errors: list[str] = field(default_factory=list)
    stack: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # what each CUDA-linked artifact costs on the GPU host (index_wheels.ArtifactChoice.to_dict), and
    # the source builds' hours of a first deploy (low, high); empty when not asked for
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    source_build_hours: list[float] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["usable"] = self.usable
        return out


# ------------------------------------------------------------------ finding the release


def resolve(spec: str, cache: Path, pip_python: str = sys.executable) -> Release:
    """A version (from ``cache/<version>`` or downloaded there), a wheel or a tree."""
    path = Path(spec)
    if path.is_file():
        return _from_wheel(path, cache)
    if path.is_dir():
        root = path if (path / "version.py").is_file() else path / "sglang"
        if not (root / "version.py").is_file() or not (root / "srt").is_dir():
            raise CompatError(f"{spec} is not an SGLang tree: no sglang/version.py and sglang/srt/")
        dist = sorted(root.parent.glob("sglang-*.dist-info/METADATA"))
        return Release(spec, root, None, dist[0].read_text(encoding="utf-8", errors="replace") if dist else None)
    if not VERSION.match(spec):
        raise CompatError(f"{spec!r} is neither an SGLang version (e.g. 0.5.23), a wheel, nor a directory")
    tree = cache / spec / "sglang"
    wheels = sorted(cache.glob(f"sglang-{spec}-*.whl"))
    if tree.is_dir() and (tree / "version.py").is_file():
        dist = sorted((cache / spec).glob("sglang-*.dist-info/METADATA"))
        metadata = dist[0].read_text(encoding="utf-8", errors="replace") if dist else None
        return Release(spec, tree, wheels[0] if wheels else None, metadata)
    if not wheels:
        wheels = [_download(spec, cache, pip_python)]
    return _from_wheel(wheels[0], cache, label=spec)


def _download(version: str, cache: Path, pip_python: str) -> Path:
    """The wheel of ``version`` the GPU host would install (cp311 manylinux from 0.5.11 on, whatever
    the controller's Python), fetched once by release_stack.download_wheel and kept in the cache."""
    try:
        wheel = download_wheel(version, cache / "downloads", pip_python)
    except ReleaseStackError as exc:
        raise CompatError(str(exc)) from exc
    final = cache / wheel.name
    shutil.copyfile(wheel, final)
    return final


def _from_wheel(wheel: Path, cache: Path, label: Optional[str] = None) -> Release:
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise CompatError(f"{wheel} is not a wheel: {exc}") from exc
    with archive:
        names = archive.namelist()
        if "sglang/version.py" not in names or not wheel.name.startswith("sglang-"):
            raise CompatError(f"{wheel} is not an SGLang wheel (no sglang/version.py in it)")
        meta = [n for n in names if re.fullmatch(r"sglang-[^/]+\.dist-info/METADATA", n)]
        metadata = archive.read(meta[0]).decode("utf-8", errors="replace") if meta else None
        version = re.match(r"sglang-([^-]+)-", wheel.name)
        tree = cache / (version.group(1) if version else wheel.stem)
        if not (tree / "sglang" / "version.py").is_file():
            cache.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=tree.name + ".", dir=cache))
            archive.extractall(partial)
            shutil.rmtree(tree, ignore_errors=True)
            partial.rename(tree)
    return Release(label or str(wheel), tree / "sglang", wheel, metadata)


def stack_from_metadata(metadata: Optional[str]) -> dict[str, str]:
    """{torch, flashinfer_python, kernel} pins as written in Requires-Dist (release_stack parses them)."""
    if metadata is None:
        return {name: "unknown (no wheel METADATA)" for name in ("torch", "flashinfer_python", "kernel")}
    found: dict[str, str] = {}
    for pin in requirements(metadata):
        key = STACK_PACKAGES.get(pin.key)
        if key and key not in found:
            found[key] = pin.text() if key == "kernel" else (pin.specifier or "any")
    for key in ("torch", "flashinfer_python", "kernel"):
        found.setdefault(key, "not required")
    return found


# ------------------------------------------------------------------ the checks


def check_release(
    release: Release,
    manifest: Any,
    model_class: str,
    algorithm: str,
    profile_name: str,
    profile: Optional[Mapping[str, Any]],
    python: Optional[str] = None,
) -> CompatRow:
    from sglang_sm120.launch.flag_check import check_launch

    try:
        version = sglang_version(release.sglang_dir)
    except SglangPatchError as exc:
        raise CompatError(f"{release.label}: {exc}") from exc
    row = CompatRow(release.label, version, str(release.sglang_dir), audit_model_class=model_class, audit_algorithm=algorithm)
    overlay: dict[str, str] = {}
    applying: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sglang-compat-") as state:
        for spec in _select(manifest, None):
            try:
                (result,) = apply(manifest, release.sglang_dir, state, only=[spec.id], check=True, lint=None)
            except SglangPatchError as exc:
                row.patches[spec.id] = f"refused: {exc}"
                row.problems.append(f"patch {spec.id} refused")
                continue
            row.patches[spec.id] = result.status
            if result.status == "would-apply":
                applying.append(spec.id)
                data = (release.sglang_dir / spec.target).read_bytes()
                new = patched_source(manifest, spec, data, _values_for(manifest, spec, {}), lint=False)
                overlay[spec.target] = new.decode("utf-8")
    unexpected = {i: s for i, s in row.patches.items() if not (s in ("would-apply", *NOT_NEEDED) or s.startswith("refused"))}
    if unexpected:
        raise CompatError(f"{release.version}: patch states the table cannot show: {unexpected}")
    try:
        source = SglangSource(release.sglang_dir)
        row.audit_missing_pristine = audit(source, model_class, algorithm).missing_required
        if overlay:
            source = SglangSource(release.sglang_dir)
            source._texts.update(overlay)  # the patched files, in memory
            row.audit_missing = audit(source, model_class, algorithm).missing_required
        else:
            row.audit_missing = list(row.audit_missing_pristine)
    except SglangAuditError as exc:
        row.audit_missing = [f"audit failed: {exc}"]
    if row.audit_missing:
        row.problems.append(f"{model_class} lacks {', '.join(row.audit_missing)} for {algorithm}")
    row.flags_profile = profile_name
    if profile is not None:
        report = check_launch(release.sglang_dir, profile=profile, model_class=model_class, planned_patches=applying, python=python)
        row.flags_parser, row.flags_ok = report.parser_line, report.ok
        row.flags_errors = [f.text() for f in report.errors]
        if not report.ok:
            row.problems.append(f"profile {profile_name}: {len(report.errors)} flag problem(s)")
    row.stack = stack_from_metadata(release.metadata)
    return row


def _version_test(value: Any, other: Any, operator: str = "eq") -> bool:
    """Ansible's ``version`` test (PEP 440 versions) for the stack's expressions."""
    from packaging.version import Version

    ops = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "=": "eq", "!=": "ne"}
    a, b = Version(str(value)), Version(str(other))
    return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[ops.get(operator, operator)]


def render_profile(profile: Mapping[str, Any], variables: Mapping[str, Any]) -> dict[str, Any]:
    """A launch profile of the inventory with its ``{{ name }}`` filled from the stack variables, as
    Ansible renders it: a variable that is itself an expression over the others (stack.yml's
    stack_moe_runner_backend over stack_sglang_version, with Ansible's ``version`` test) is evaluated
    with Jinja's native types, so ``none`` stays None (the flag is left out). Unknown names stay a
    placeholder ``<name>``."""
    from jinja2.nativetypes import NativeEnvironment

    env = NativeEnvironment()
    env.tests["version"] = _version_test

    def variable(name: str) -> Any:
        if name not in variables:
            return f"<{name}>"
        value = variables[name]
        if isinstance(value, str) and "{{" in value:
            return env.from_string(value).render(dict(variables))
        return value

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            whole = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", value)
            if whole:
                return variable(whole.group(1))
            return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: str(variable(m.group(1))), value)
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    return {key: fill(value) for key, value in profile.items()}


def format_table(rows: Sequence[CompatRow]) -> str:
    short = {"would-apply": "applies", "fixed-upstream": "fixed upstream", "not-applicable": "n/a", "already-applied": "applied"}
    header = ["release", "patches (default set)", "audit", "flags", "torch", "flashinfer_python", "kernel", "usable"]
    body = []
    for row in rows:
        patches = "; ".join(
            f"{'_'.join(pid.split('_')[:2])}: {short.get(s, 'REFUSED' if s.startswith('refused') else s)}" for pid, s in row.patches.items()
        )
        if row.audit_missing:
            audit_text = f"MISSING {', '.join(row.audit_missing)}"
        elif row.audit_missing_pristine:
            audit_text = "OK with patches"
        else:
            audit_text = "OK"
        flags = ("ok" if row.flags_ok else f"REFUSED ({len(row.flags_errors)})") + (
            " static" if "static" in row.flags_parser else " sglang"
        )
        body.append(
            [
                row.version,
                patches,
                audit_text,
                flags,
                row.stack["torch"],
                row.stack["flashinfer_python"],
                row.stack["kernel"],
                "yes" if row.usable else "NO",
            ]
        )
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(header, widths)).rstrip(), "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in body]
    for row in rows:
        for status in row.patches.values():
            if status.startswith("refused"):
                lines.append(f"{row.version}: {status[len('refused: ') :]}")
        lines += [f"{row.version}: {text}" for text in row.flags_errors]
    for row in rows:
        if not row.artifacts:
            continue
        lines.append(f"{row.version}: what each artifact costs on the GPU host (CUDA 13, compute capability 12.0):")
        width = max(len(a["artifact"]) for a in row.artifacts)
        for choice in row.artifacts:
            lines.append(f"  {choice['artifact'].ljust(width)}  {choice['cell']}")
        low, high = row.source_build_hours or [0.0, 0.0]
        builds = [a["artifact"] for a in row.artifacts if a["choice"] == "source build"]
        lines.append(
            f"  first deploy: {'no source build' if not builds else f'source builds of {chr(44).join(builds)}: about {low:g}-{high:g} h'}"
            " (estimates, sglang_build_estimate_hours), then the canary (~3 min) and the model load (~10 min)"
        )
    if rows:
        lines.append(
            f"audit: {rows[0].audit_model_class}, {rows[0].audit_algorithm}; "
            f"flags: profile {rows[0].flags_profile}, {rows[0].flags_parser or 'not checked'}"
        )
    return "\n".join(lines)
