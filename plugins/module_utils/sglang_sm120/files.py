"""Small file helpers: the sha256 of bytes, an atomic write (temp file, fsync, os.replace), a
write only when the content differs, an exclusive lock of a directory, and a set of files and
directories (and symbolic links) made to hold exactly their content, mode and owner in one pass
(``ensure_file_set``: what ``sglang_files`` does in one module run where a template task costs two).

Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import hashlib
import os
import pwd
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .errors import ToolkitError


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def atomic_write(path: Path, data: bytes, mode: Optional[int] = None, uid: int = -1, gid: int = -1) -> None:
    """Write through a temp file in the same directory, then os.replace; keeps `mode` (or the old file's mode).
    ``uid``/``gid`` (-1: unchanged) are set on the temp file, so the file never shows other owners."""
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if uid != -1 or gid != -1:
            os.chown(tmp, uid, gid)
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


@dataclass(frozen=True)
class FileSpec:
    """A file that must hold exactly ``content`` with ``mode`` and owner (``content`` None: must not exist)."""

    path: Path
    content: Optional[bytes] = None
    mode: int = 0o644
    owner: Optional[str] = None
    group: Optional[str] = None


@dataclass(frozen=True)
class DirSpec:
    """A directory that must exist with ``mode`` and owner (its missing parents are made 0755, root's)."""

    path: Path
    mode: int = 0o755
    owner: Optional[str] = None
    group: Optional[str] = None


@dataclass(frozen=True)
class LinkSpec:
    """A symbolic link at ``path`` that must point to ``target`` (written as given; it may not exist yet).
    Whatever else is at ``path``, except a directory, is replaced."""

    path: Path
    target: str


@dataclass
class FileSetOutcome:
    changed_paths: list[str] = field(default_factory=list)
    # One entry per changed file, as Ansible's diff mode shows it (before/after text and headers).
    diff: list[dict] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changed_paths)


def parse_mode(value: object, where: str) -> int:
    """An octal mode given as a string ("0640") or an int already read as octal; else a ToolkitError naming ``where``."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o7777:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        try:
            mode = int(value.strip(), 8)
        except ValueError:
            mode = -1
        if 0 <= mode <= 0o7777:
            return mode
    raise ToolkitError(f"{where}: mode must be an octal string such as '0644', got {value!r}")


def _id(name: Optional[str], kind: str, where: Path, check_mode: bool) -> int:
    """The uid (kind "owner") or gid (kind "group") of ``name``; -1 when none is asked for. In check mode
    a name that does not exist yet (a user an earlier task would create) is -2: the path counts as one
    that would change, as it will once the user exists."""
    if not name:
        return -1
    try:
        return pwd.getpwnam(name).pw_uid if kind == "owner" else grp.getgrnam(name).gr_gid
    except KeyError:
        if check_mode:
            return -2
        what = "user" if kind == "owner" else "group"
        raise ToolkitError(f"{where}: the {kind} {name!r} is not a {what} on this host; nothing of this file set was written") from None


def _ids(owner: Optional[str], group: Optional[str], where: Path, check_mode: bool) -> tuple[int, int]:
    return _id(owner, "owner", where, check_mode), _id(group, "group", where, check_mode)


def _off(st: os.stat_result, mode: int, uid: int, gid: int) -> bool:
    """Whether mode or owner differ (an owner unknown in check mode, -2, always does)."""
    return stat.S_IMODE(st.st_mode) != mode or (uid != -1 and st.st_uid != uid) or (gid != -1 and st.st_gid != gid)


def _text(data: Optional[bytes]) -> str:
    if data is None:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return f"({len(data)} bytes, not text)\n"


def ensure_file_set(
    files: Sequence[FileSpec], directories: Sequence[DirSpec] = (), check_mode: bool = False, links: Sequence[LinkSpec] = ()
) -> FileSetOutcome:
    """Make ``directories`` (first), ``files`` and then ``links`` hold what they say; report each path that changed
    (or would, in check mode, where nothing is written). Owners are looked up before anything is
    written, so an unknown user or group changes nothing (in check mode it is one an earlier task would
    create: the path counts as changing). A file's content is written atomically
    (temp file with its final owner and mode, then rename); a file whose content is right but whose
    mode or owner is not gets only those fixed."""
    resolved_dirs = [(d, *_ids(d.owner, d.group, d.path, check_mode)) for d in directories]
    resolved_files = [(f, *_ids(f.owner, f.group, f.path, check_mode)) for f in files]
    outcome = FileSetOutcome()
    for spec, uid, gid in resolved_dirs:
        try:
            st: Optional[os.stat_result] = os.stat(spec.path)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise ToolkitError(f"{spec.path}: expected a directory, found another kind of file; left as it is")
        if st is not None and not _off(st, spec.mode, uid, gid):
            continue
        outcome.changed_paths.append(str(spec.path))
        if check_mode:
            continue
        if st is None:
            spec.path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            spec.path.mkdir(mode=0o700, exist_ok=True)
        os.chown(spec.path, uid, gid)
        os.chmod(spec.path, spec.mode)
    for spec, uid, gid in resolved_files:
        try:
            before: Optional[bytes] = spec.path.read_bytes()
            st = os.stat(spec.path)
        except FileNotFoundError:
            before, st = None, None
        if spec.content is None:
            if before is None:
                continue
            outcome.changed_paths.append(str(spec.path))
            outcome.diff.append(_diff_entry(spec.path, before, None))
            if not check_mode:
                spec.path.unlink()
            continue
        if before == spec.content:
            if st is None or not _off(st, spec.mode, uid, gid):
                continue
            outcome.changed_paths.append(str(spec.path))
            if not check_mode:
                os.chown(spec.path, uid, gid)
                os.chmod(spec.path, spec.mode)
            continue
        outcome.changed_paths.append(str(spec.path))
        outcome.diff.append(_diff_entry(spec.path, before, spec.content))
        if not check_mode:
            spec.path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            atomic_write(spec.path, spec.content, spec.mode, uid, gid)
    for link in links:
        _ensure_link(link, outcome, check_mode)
    return outcome


def _ensure_link(link: LinkSpec, outcome: FileSetOutcome, check_mode: bool) -> None:
    """Point ``link.path`` at ``link.target``: a new symlink beside it renamed over it, so the path is
    never missing; a directory there is an error (left as it is)."""
    try:
        st: Optional[os.stat_result] = os.lstat(link.path)
    except FileNotFoundError:
        st = None
    before = None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise ToolkitError(f"{link.path}: expected a symbolic link to {link.target}, found a directory; left as it is")
        if stat.S_ISLNK(st.st_mode):
            before = os.readlink(link.path)
            if before == link.target:
                return
    outcome.changed_paths.append(str(link.path))
    outcome.diff.append(
        {
            "before_header": str(link.path) if st is not None else f"{link.path} (absent)",
            "after_header": str(link.path),
            "before": f"symbolic link to {before}\n" if before is not None else ("(not a symbolic link)\n" if st is not None else ""),
            "after": f"symbolic link to {link.target}\n",
        }
    )
    if check_mode:
        return
    link.path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = link.path.with_name(f".{link.path.name}.{os.getpid()}.link")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(link.target, tmp)
    try:
        os.replace(tmp, link.path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _diff_entry(path: Path, before: Optional[bytes], after: Optional[bytes]) -> dict:
    return {
        "before_header": str(path) if before is not None else f"{path} (absent)",
        "after_header": str(path) if after is not None else f"{path} (absent)",
        "before": _text(before),
        "after": _text(after),
    }
