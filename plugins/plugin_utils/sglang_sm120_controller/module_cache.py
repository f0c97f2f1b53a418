"""Keep the modules Ansible builds (its AnsiballZ payloads) from one ansible-playbook run to the next.

For each module a play runs, ansible-playbook reads the module and walks every module_utils file it
imports (parsing each), then zips them: about 0.2 s of controller CPU per module, every run, because
it keeps what it built only in the run's own temporary directory (``<local_tmp>/ansible-local-*/
ansiballz_cache``). A converge that changes nothing runs 13 of the toolkit's modules: ~3 s of a
~15 s no-op. The callback plugin ``sm120.sglang.module_cache`` copies the payloads built by earlier
runs into a new run's cache before its first task, and the payloads it built into a store afterwards.

A payload is only valid for exactly the sources it was built from, so the store is split by a
fingerprint of every file that can go into one: the ansible package's own modules and module_utils
(with its version) and each collection's ``plugins/modules`` and ``plugins/module_utils``, by path,
size and modification time. Editing, adding or removing any of them, or another ansible-core, selects
another (empty) directory of the store; the few newest directories are kept. Only payloads of
modules named by a fully qualified collection name (``ansible_collections.*``) or of ansible's
own modules (``ansible.modules.*``) are kept: ``ansible.legacy.*`` modules can come from a role's
``library/`` or an adjacent directory, which the fingerprint does not cover.

The payloads are Python pickles (Ansible's own cache format), so a store is only used when it is a
directory of the user running ansible-playbook, writable by nobody else; anything else is left alone
and the run builds its modules as usual. Plain Python, no Ansible imports; the callback passes the paths.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from sglang_sm120.errors import ToolkitError

# Payload names in Ansible's per-run cache: <module fqn>-<compression>-<extensions>.
KEPT_PREFIXES = ("ansible_collections.", "ansible.modules.")
SOURCE_SUFFIXES = (".py", ".ps1", ".psm1", ".cs")
# Fingerprint directories kept in the store (the newest by modification time).
KEEP = 4


class StoreError(ToolkitError):
    """The store cannot be used safely; the message says why (the run builds its modules as usual)."""


def _source_files(directory: Path) -> Iterable[tuple[str, int, int]]:
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(SOURCE_SUFFIXES):
                path = os.path.join(dirpath, name)
                info = os.stat(path)
                yield path, info.st_size, info.st_mtime_ns


def module_source_dirs(ansible_dir: Path, collection_roots: Sequence[Path]) -> list[Path]:
    """Every directory whose files can end up in a payload: ansible's modules and module_utils, and each
    collection's plugins/modules and plugins/module_utils under the given roots (each holding
    ansible_collections/<namespace>/<name>)."""
    dirs = [ansible_dir / "modules", ansible_dir / "module_utils"]
    seen: set[Path] = set()
    for root in collection_roots:
        base = Path(root) / "ansible_collections"
        if not base.is_dir():
            continue
        for collection in sorted(p for p in base.glob("*/*") if p.is_dir()):
            real = collection.resolve()
            if real in seen:
                continue
            seen.add(real)
            dirs += [collection / "plugins" / "modules", collection / "plugins" / "module_utils"]
    return [d for d in dirs if d.is_dir()]


def fingerprint(source_dirs: Sequence[Path], ansible_version: str) -> str:
    """sha256 over ansible's version and the path, size and mtime of every source file in source_dirs."""
    digest = hashlib.sha256(f"ansible-core {ansible_version}\n".encode())
    for directory in source_dirs:
        digest.update(f"dir {directory.resolve()}\n".encode())
        for path, size, mtime in _source_files(directory):
            digest.update(f"{path} {size} {mtime}\n".encode())
    return digest.hexdigest()[:32]


def _own_private_dir(path: Path) -> None:
    """Refuse a store directory another user owns or may write (its pickles would run as this user)."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise StoreError(f"{path} is not a directory")
    if info.st_uid != os.getuid():
        raise StoreError(f"{path} belongs to uid {info.st_uid}, not to uid {os.getuid()} running ansible-playbook")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StoreError(f"{path} is writable by its group or others (mode {stat.S_IMODE(info.st_mode):o})")


def store_dir(base: Path, key: str) -> Path:
    """The store's directory for one fingerprint, made (mode 0700) if missing; base and it must be this
    user's own and writable by nobody else."""
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    _own_private_dir(base)
    directory = base / key
    directory.mkdir(mode=0o700, exist_ok=True)
    _own_private_dir(directory)
    os.utime(directory)  # in use: the newest, so no other run prunes it
    return directory


def _payloads(directory: Path) -> list[Path]:
    return [
        p
        for p in sorted(directory.iterdir())
        if p.name.startswith(KEPT_PREFIXES) and not p.name.endswith((".lock", "-part")) and p.is_file() and not p.is_symlink()
    ]


def _copy_atomic(source: Path, target: Path) -> None:
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    shutil.copyfile(source, part)
    os.chmod(part, 0o600)
    os.replace(part, target)


def _copy_missing(source: Path, target: Path) -> list[str]:
    copied = []
    for payload in _payloads(source):
        if not (target / payload.name).exists():
            _copy_atomic(payload, target / payload.name)
            copied.append(payload.name)
    return copied


def restore(store: Path, run_cache: Path) -> list[str]:
    """Copy the store's payloads into a run's ansiballz_cache (missing ones only); returns their names."""
    run_cache.mkdir(parents=True, exist_ok=True)
    return _copy_missing(store, run_cache)


def save(run_cache: Path, store: Path) -> list[str]:
    """Copy the payloads a run built (those the store lacks) into the store; returns their names."""
    if not run_cache.is_dir() or not store.is_dir():  # pruned meanwhile by a run of other sources: nothing kept
        return []
    return _copy_missing(run_cache, store)


def prune(base: Path, keep_key: str, keep: int = KEEP) -> list[str]:
    """Remove all but the `keep` newest fingerprint directories (never keep_key's); returns the removed."""
    dirs = sorted((p for p in base.iterdir() if p.is_dir() and not p.is_symlink()), key=lambda p: p.stat().st_mtime, reverse=True)
    removed = []
    for directory in [d for d in dirs if d.name != keep_key][max(keep - 1, 0) :]:
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(directory.name)
    return removed
