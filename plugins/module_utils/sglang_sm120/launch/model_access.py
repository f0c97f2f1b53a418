"""Whether the server's user can read the model directories the launch flags name, inside the unit's sandbox.

Runs on the host (module sglang_launch_plan), before anything is built. A directory the unit hides
(``ProtectHome=yes``: /home, /root, /run/user; ``PrivateTmp=yes``: /tmp, /var/tmp, as
roles/sglang_service/templates/sglang.service.j2 sets them) or whose permissions keep the service's
user out would load as root in every check here and fail only when the server starts, after a build.

Permissions are judged from the mode bits as the kernel does (owner, else group, else other), for the
user and its groups as the host's account database has them; a user that does not exist yet (a first
deploy creates it, as a system user with a group of its own) is judged as a user that is neither the
files' owner nor in their groups. An object with a POSIX ACL is not judged (its mode bits do not say
it all): it is noted, never refused. Symbolic links are followed (the sandbox applies to the target).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ToolkitError

# What the unit hides from the server (systemd.exec: ProtectHome=yes makes these three inaccessible;
# PrivateTmp=yes gives the unit empty private /tmp and /var/tmp). tests/unit/host/test_model_access.py checks
# that the unit's template still sets both.
HIDDEN: tuple[tuple[str, str], ...] = (
    ("/home", "ProtectHome=yes"),
    ("/root", "ProtectHome=yes"),
    ("/run/user", "ProtectHome=yes"),
    ("/tmp", "PrivateTmp=yes"),
    ("/var/tmp", "PrivateTmp=yes"),
)
READ, SEARCH = 4, 1
MAX_SHOWN = 5


class ModelAccessError(ToolkitError):
    """The service's user cannot read a model directory the flags name (names the flag, path, user, why)."""


@dataclass(frozen=True)
class Identity:
    name: str
    uid: Optional[int]  # None: the user does not exist yet
    gids: frozenset[int]

    @property
    def exists(self) -> bool:
        return self.uid is not None

    def describe(self) -> str:
        if self.uid is None:
            return f"{self.name} (not created yet: judged as a new system user, neither owner nor in the files' groups)"
        return f"{self.name} (uid {self.uid}, groups {', '.join(_group_name(g) for g in sorted(self.gids))})"


def identity(user: str) -> Identity:
    """The user's uid and groups (primary and supplementary) from the host's account database."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return Identity(user, None, frozenset())
    gids = {entry.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    return Identity(user, entry.pw_uid, frozenset(gids))


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _allows(st: os.stat_result, who: Identity, want: int) -> bool:
    if who.uid is not None and st.st_uid == who.uid:
        bits = (st.st_mode >> 6) & 7
    elif st.st_gid in who.gids:
        bits = (st.st_mode >> 3) & 7
    else:
        bits = st.st_mode & 7
    return bits & want == want


def _has_acl(path: str) -> bool:
    try:
        os.getxattr(path, "system.posix_acl_access")
    except (OSError, AttributeError):
        return False
    return True


def _hidden_by(real: str, hidden: Sequence[tuple[str, str]]) -> Optional[str]:
    for prefix, setting in hidden:
        if real == prefix or real.startswith(prefix.rstrip("/") + "/"):
            return f"{real} is under {prefix}, which the unit hides from the server ({setting})"
    return None


def problems(path: str, who: Identity, hidden: Sequence[tuple[str, str]] = HIDDEN) -> tuple[list[str], list[str]]:
    """(what keeps ``who`` from reading the model directory ``path`` in the unit, notes on what was not
    judged). The directory's ancestors must let it search, the directory itself read and search, and
    each entry in it be readable (and searchable for a directory)."""
    real = os.path.realpath(path)
    shown = path if real == path else f"{path} (-> {real})"
    why = _hidden_by(real, hidden)
    if why:
        return [why], []
    if who.uid == 0:
        return [], []
    found: list[str] = []
    notes: list[str] = []

    def judge(obj: str, want: int, verb: str) -> None:
        try:
            st = os.stat(obj)
        except OSError as exc:
            found.append(f"{obj} cannot be read ({exc.strerror})")
            return
        if _has_acl(obj):
            notes.append(f"{obj} has a POSIX ACL: not judged")
            return
        if not _allows(st, who, want):
            owner = f"{_user_name(st.st_uid)}:{_group_name(st.st_gid)}"
            found.append(f"{obj} ({owner}, mode {stat.S_IMODE(st.st_mode):04o}) does not let {who.name} {verb} it")

    parents = list(Path(real).parents)[::-1]  # "/" first
    for parent in parents:
        judge(str(parent), SEARCH, "enter")
    judge(real, READ | SEARCH, "list and enter")
    if not found:
        try:
            entries = sorted(os.scandir(real), key=lambda e: e.name)
        except OSError as exc:
            entries = []
            found.append(f"{real} cannot be listed ({exc.strerror})")
        entered = {str(p) for p in parents} | {real}
        for entry in entries:
            if entry.is_symlink():  # e.g. a Hugging Face cache snapshot: files link into ../../blobs/
                target = os.path.realpath(entry.path)
                why = _hidden_by(target, hidden)
                if why:
                    found.append(f"{entry.path} links to {why}")
                    continue
                for parent in list(Path(target).parents)[::-1]:
                    if str(parent) not in entered:
                        entered.add(str(parent))
                        judge(str(parent), SEARCH, "enter")
            if entry.is_dir():
                judge(entry.path, READ | SEARCH, "list and enter")
            elif entry.is_file():
                judge(entry.path, READ, "read")
    if found and real != path:
        found[0] = f"{shown}: {found[0]}"
    return found, notes


def check(paths: Sequence[tuple[str, str, str]], user: str, hidden: Sequence[tuple[str, str]] = HIDDEN) -> list[str]:
    """Raise ModelAccessError for the first of ``paths`` ((flag, path, inventory variable)) the service's
    user cannot read in the unit; return the notes on what was not judged."""
    who = identity(user)
    notes: list[str] = []
    for flag, path, variable in paths:
        found, more = problems(path, who, hidden)
        notes += more
        if found:
            listed = "; ".join(found[:MAX_SHOWN]) + (f"; and {len(found) - MAX_SHOWN} more" if len(found) > MAX_SHOWN else "")
            group = _group_name(sorted(who.gids)[0]) if who.gids else user
            raise ModelAccessError(
                f"start gate: --{flag} {path}: the service's user {who.describe()} could not read it when the unit starts: "
                f"{listed}. SGLang would fail after the build, at its start. Keep the models outside "
                f"{', '.join(p for p, _ in hidden)} (e.g. under /srv or /opt) and readable by {user} (e.g. chmod -R o+rX, or "
                f"chgrp -R {group} with g+rX), or set {variable} to a copy that is; nothing changed"
            )
    return notes
