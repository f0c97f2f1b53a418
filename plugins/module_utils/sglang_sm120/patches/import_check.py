"""Import patched SGLang modules with a release's own Python and report each failure's traceback.

A patch that applies and compiles can still break at import (a NameError at module level, a wrong
import). This runs `<python> -c ...` once, importing every module in turn with importlib and
reporting each outcome, so the release is proven with the interpreter and packages it will serve
with. Only the standard library is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from ..errors import ToolkitError

SENTINEL = "@@sglang-import-check@@"

# Runs in the release's Python: argv is the sentinel, then the modules; prints one JSON line after the sentinel.
_RUNNER = """
import importlib, json, sys, traceback
results = []
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        results.append({"module": name, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc()})
    else:
        results.append({"module": name, "ok": True, "error": "", "traceback": ""})
sys.stdout.flush()
print(sys.argv[1] + json.dumps(results), flush=True)
"""


class ImportCheckError(ToolkitError):
    """The check could not run (no such Python, the interpreter died, timed out), or a target names no module."""


@dataclass
class ImportOutcome:
    module: str
    ok: bool
    error: str = ""
    traceback: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def module_name(target: str) -> str:
    """srt/x/y.py (relative to the sglang package) -> sglang.srt.x.y; srt/x/__init__.py -> sglang.srt.x.
    ImportCheckError for a target that names no module."""
    path = target.strip("/")
    if not path.endswith(".py"):
        raise ImportCheckError(f"{target} is not a Python file")
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(p.isidentifier() for p in parts):
        raise ImportCheckError(f"{target} does not name an importable module")
    return ".".join(["sglang", *parts])


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def check_imports(
    python: str,
    modules: Iterable[str],
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 600,
) -> list[ImportOutcome]:
    """Import each module in one `python` process; one outcome per module, in order."""
    names = list(dict.fromkeys(modules))
    if not names:
        return []
    run_env = dict(os.environ)
    run_env.update(env or {})
    run_env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    try:
        proc = subprocess.run(
            [python, "-c", _RUNNER, SENTINEL, *names],
            capture_output=True,
            text=True,
            env=run_env,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise ImportCheckError(f"no Python at {python}: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise ImportCheckError(f"importing {', '.join(names)} with {python} took more than {timeout:g} s") from exc
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(SENTINEL):
            try:
                return [ImportOutcome(**item) for item in json.loads(line[len(SENTINEL) :])]
            except ValueError as exc:
                raise ImportCheckError(str(exc)) from exc
    raise ImportCheckError(
        f"{python} exited {proc.returncode} before reporting the imports of {', '.join(names)}:\n{tail(proc.stderr or proc.stdout)}"
    )


def failure_message(python: str, outcomes: Iterable[ImportOutcome], lines: int = 15) -> str:
    """One paragraph per failed import: the module, the error and the traceback's last lines."""
    failed = [o for o in outcomes if not o.ok]
    parts = [f"{o.module} does not import with {python}: {o.error}\n{tail(o.traceback, lines)}" for o in failed]
    return "\n".join(parts)


def proof_key(python: str, names: Sequence[str], env: Mapping[str, str], sglang_dir: str | os.PathLike[str], targets: Sequence[str]) -> str:
    """A key over what decides the outcome: the interpreter, the modules, the environment, the bytes of
    every target file, and what is installed beside sglang (the site-packages' entries and .pth files,
    and the entries of every directory a .pth adds). A release venv changes only through these."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"python": os.path.realpath(python), "names": list(names), "env": dict(env)}, sort_keys=True).encode())
    root = Path(sglang_dir)
    for target in targets:
        digest.update(f"\0{target}\0".encode())
        digest.update((root / target.strip("/")).read_bytes())
    site = root.parent
    extra: list[Path] = []
    for entry in sorted(os.listdir(site)):
        digest.update(f"\0{entry}".encode())
        if entry.endswith(".pth"):
            text = (site / entry).read_text(encoding="utf-8", errors="replace")
            digest.update(text.encode())
            extra += [Path(line.strip()) for line in text.splitlines() if line.strip().startswith("/")]
    for directory in extra:
        if directory.is_dir():
            digest.update(f"\0{directory}:{','.join(sorted(os.listdir(directory)))}".encode())
    return digest.hexdigest()


def read_proof(stamp: str | os.PathLike[str], key: str) -> Optional[list[ImportOutcome]]:
    """The outcomes recorded under ``key`` by an earlier successful check, or None."""
    try:
        data = json.loads(Path(stamp).read_text(encoding="utf-8"))
        if data.get("key") != key:
            return None
        outcomes = [ImportOutcome(**item) for item in data["imports"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return outcomes if outcomes and all(o.ok for o in outcomes) else None


def write_proof(stamp: str | os.PathLike[str], key: str, outcomes: Sequence[ImportOutcome]) -> None:
    """Record a successful check atomically; a failure to write only costs the next check."""
    path = Path(stamp)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"key": key, "imports": [o.to_dict() for o in outcomes]}, handle)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:
        pass
