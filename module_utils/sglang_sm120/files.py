"""Small file helpers: the sha256 of bytes, an atomic write (temp file, fsync, os.replace), a
write only when the content differs and an exclusive lock of a directory.

Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Optional


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


def write_changed(path: Path, data: bytes, mode: int = 0o644, check_mode: bool = False) -> bool:
    """Write ``data`` atomically (making the parent directories) unless ``path`` holds exactly it already;
    whether it changed (or would, in check mode, writing nothing). A file that cannot be read differs."""
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    if not check_mode:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        atomic_write(path, data, mode)
    return True


@contextlib.contextmanager
def directory_lock(directory: Path) -> Iterator[None]:
    """An exclusive flock of ``directory`` for the block (released when it ends, or if the process dies)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
