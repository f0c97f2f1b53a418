"""Versioned SGLang releases: the explicit record (releases.json), the current symlink, pruning.

Plain Python, standard library and the package's ``files`` (its atomic write) only;
plugins/modules/sglang_release.py wraps it.

    <root>/releases/<id>/          one release: venv/ (created at its final path), logs/, manifest.json
    <root>/current -> releases/<id>   switched atomically (symlink to a temp name, then rename)
    <root>/releases.json           order, state of each release, current, last known-good

A release's id is `<sequence>-<key8>`; its key is the sha256 of everything that went into it
(artifact keys, patch set, service inputs), so a converge whose inputs match an existing usable
release reuses it instead of creating one. States: building -> ready -> good, or bad at any point.
Nothing is inferred from mtimes; every change goes through a lock and an atomic rewrite.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from ..errors import ToolkitError
from ..files import atomic_write

SCHEMA = 1
STATES = ("building", "ready", "good", "bad")
USABLE = ("ready", "good")
TRANSITIONS = {"building": {"ready", "bad"}, "ready": {"good", "bad"}, "good": {"bad", "good"}, "bad": {"bad"}}


class ReleaseError(ToolkitError):
    """A release operation was refused; the message says why and what was found."""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _atomic_json(path: Path, data: Mapping[str, Any], mode: int = 0o644) -> None:
    atomic_write(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"), mode)


def release_key(inputs: Mapping[str, Any]) -> str:
    """The key of a release: sha256 of its inputs as canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(dict(inputs), sort_keys=True).encode()).hexdigest()


class Releases:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.record = self.root / "releases.json"
        self.current_link = self.root / "current"

    # ------------------------------------------------------------ record

    def empty(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "seq": 0, "order": [], "releases": {}, "current": None, "last_good": None}

    def load(self) -> dict[str, Any]:
        if not self.record.exists():
            return self.empty()
        try:
            data = json.loads(self.record.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ReleaseError(f"cannot read {self.record}: {exc}") from exc
        if data.get("schema") != SCHEMA or not isinstance(data.get("releases"), dict):
            raise ReleaseError(f"{self.record}: expected schema {SCHEMA} with a `releases` mapping, found {str(data)[:200]}")
        return data

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".releases.lock", "a", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self.load()
            yield data
            _atomic_json(self.record, data)

    def path(self, release_id: str) -> Path:
        return self.root / "releases" / release_id

    def get(self, data: Mapping[str, Any], release_id: str) -> dict[str, Any]:
        if release_id not in data["releases"]:
            known = ", ".join(data["order"]) or "none"
            raise ReleaseError(f"no release {release_id!r} in {self.record} (releases: {known})")
        return data["releases"][release_id]

    # ------------------------------------------------------------ queries

    def find(self, key: str) -> Optional[str]:
        """The newest usable release built from exactly these inputs, if its directory still exists."""
        data = self.load()
        for release_id in reversed(data["order"]):
            entry = data["releases"][release_id]
            if entry["key"] == key and entry["state"] in USABLE and self.path(release_id).is_dir():
                return release_id
        return None

    def rollback_target(self, requested: Optional[str] = None) -> tuple[str, str]:
        """(from, to): the current release and the one to roll back to, ``requested`` or else the
        newest good release before current that is still on disk. Raises naming why there is none."""
        data = self.load()
        current = data.get("current")
        releases = data["releases"]
        if requested:
            target = requested
        else:
            candidates = [
                r for r in reversed(data["order"]) if r != current and releases[r]["state"] == "good" and not releases[r].get("removed")
            ]
            target = candidates[0] if candidates else ""
        problem = ""
        if not target:
            problem = "no other good release"
        elif target not in releases:
            problem = f"{target} is unknown"
        elif releases[target].get("removed"):
            problem = f"{target} is {releases[target]['state']} and removed"
        elif releases[target]["state"] not in ("ready", "good"):
            problem = f"{target} is {releases[target]['state']}"
        elif target == current:
            problem = f"{target} is already current"
        if problem:
            known = ", ".join(f"{r}={releases[r]['state']}" for r in data["order"]) or "none"
            raise ReleaseError(f"nothing to roll back to: {problem}. Current: {current}; releases: {known}")
        return current or "", target

    def summary(self) -> dict[str, Any]:
        data = self.load()
        link = os.readlink(self.current_link) if self.current_link.is_symlink() else None
        return {**data, "current_link": link}

    # ------------------------------------------------------------ changes

    def create(self, key: str, inputs: Mapping[str, Any]) -> str:
        with self._locked() as data:
            data["seq"] += 1
            release_id = f"{data['seq']:04d}-{key[:8]}"
            path = self.path(release_id)
            if path.exists():
                raise ReleaseError(f"{path} exists but is not in {self.record}; remove it or restore the record")
            (path / "logs").mkdir(parents=True)
            data["order"].append(release_id)
            data["releases"][release_id] = {"key": key, "state": "building", "created": _now(), "updated": _now()}
            _atomic_json(
                path / "manifest.json", {"id": release_id, "key": key, "state": "building", "created": _now(), "inputs": dict(inputs)}
            )
        return release_id

    def update_manifest(self, release_id: str, update: Mapping[str, Any]) -> dict[str, Any]:
        manifest_path = self.path(release_id) / "manifest.json"
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        manifest.update(update)
        _atomic_json(manifest_path, manifest)
        return manifest

    def annotate(self, release_id: str, field: str, value: Any) -> None:
        """Keep `value` under `field` of the release's entry in releases.json (it outlives pruning)."""
        if field in ("key", "state", "created", "updated", "reason", "removed"):
            raise ReleaseError(f"{field!r} is kept by the release record itself and cannot be annotated")
        with self._locked() as data:
            self.get(data, release_id)[field] = value

    def set_state(self, release_id: str, state: str, reason: str = "", manifest: Optional[Mapping[str, Any]] = None) -> bool:
        """Move a release to `state`; returns whether anything changed."""
        if state not in STATES:
            raise ReleaseError(f"state must be one of {', '.join(STATES)}, found {state!r}")
        with self._locked() as data:
            entry = self.get(data, release_id)
            if entry["state"] == state and not manifest and not reason:
                return False
            if state not in TRANSITIONS[entry["state"]] and state != entry["state"]:
                raise ReleaseError(f"release {release_id} is {entry['state']}; it cannot become {state}")
            entry.update(state=state, updated=_now())
            if reason:
                entry["reason"] = reason
            if state == "good":
                data["last_good"] = release_id
            elif data.get("last_good") == release_id:
                data["last_good"] = None
            if self.path(release_id).is_dir():
                self.update_manifest(release_id, {**dict(manifest or {}), "state": state, **({"reason": reason} if reason else {})})
        return True

    def discard(self, release_id: str, reason: str) -> None:
        """A release that failed while building: mark it bad and remove its directory (no half-built release)."""
        with self._locked() as data:
            entry = self.get(data, release_id)
            if data.get("current") == release_id:
                raise ReleaseError(f"release {release_id} is current; switch away from it first")
            entry.update(state="bad", reason=reason, updated=_now(), removed=True)
        shutil.rmtree(self.path(release_id), ignore_errors=True)

    def switch(self, release_id: str, check: bool = False) -> bool:
        """Point `current` at a usable release atomically; returns whether it changed."""
        data = self.load()
        entry = self.get(data, release_id)
        if entry["state"] not in USABLE:
            raise ReleaseError(f"release {release_id} is {entry['state']}; only a ready or good release can become current")
        target = f"releases/{release_id}"
        if self.current_link.is_symlink() and os.readlink(self.current_link) == target and data.get("current") == release_id:
            return False
        if self.current_link.exists() and not self.current_link.is_symlink():
            raise ReleaseError(f"{self.current_link} exists and is not a symlink; refusing to replace it")
        if check:
            return True
        with self._locked() as locked:
            tmp = self.root / f".current.{os.getpid()}"
            if tmp.is_symlink() or tmp.exists():
                tmp.unlink()
            os.symlink(target, tmp)
            os.replace(tmp, self.current_link)
            locked["current"] = release_id
            locked.setdefault("history", []).append({"current": release_id, "at": _now()})
            locked["history"] = locked["history"][-50:]
        return True

    def prune(self, keep: int, check: bool = False) -> list[str]:
        """Keep the newest `keep` releases plus the current, the last good and any building; remove the rest."""
        if keep < 1:
            raise ReleaseError(f"sglang_keep_releases must be at least 1, found {keep}")
        data = self.load()
        present = [r for r in data["order"] if self.path(r).is_dir()]
        protected = {data.get("current"), data.get("last_good")} | {r for r in present if data["releases"][r]["state"] == "building"}
        victims = [r for r in present[: max(0, len(present) - keep)] if r not in protected]
        if check or not victims:
            return victims
        with self._locked() as locked:
            for release_id in victims:
                locked["releases"][release_id].update(removed=True, updated=_now())
        for release_id in victims:
            shutil.rmtree(self.path(release_id), ignore_errors=True)
        return victims
