"""The SGLang package in a virtualenv: where it is and which version it is, read without importing it."""

from __future__ import annotations

import ast
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from ..patches.errors import SglangPatchError


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


def release_sglang(venv: str | os.PathLike[str]) -> SglangPackage:
    """find_sglang for the release venv a module was given; its refusal names that venv (``venv V: ...``)."""
    try:
        return find_sglang(venv)
    except SglangPatchError as exc:
        raise SglangPackageError(f"venv {venv}: {exc}") from exc


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
