"""What the start gate reads from one SGLang release's sources, kept on disk by the sources' identity.

Reading them (srt/models, srt/layers/quantization, the backend checks: ~0.3-0.5 s of parsing per process) is the
larger part of a plan or verify module run on the host; the result depends only on the release's files and on this
reader's own code. With a cache directory the result is stored under a key over both: a wheel by its sha256, an
unpacked tree by every file's path, size and modification time (a patched file changes it), and the reader by the
source of the modules that parse (invariants, start_failures). Anything not read back whole is read again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from . import flags as server_flags
from . import invariants, start_failures

# release-sources-<key>.json files kept in one cache directory; older ones are removed when a new one is written
KEEP = 8
_PREFIX = "release-sources-"


@dataclass(frozen=True)
class ReleaseSources:
    """The invariants' release data, the model classes SGLang registers (None where the release does not say) and
    the flag names its server_args accepts."""

    release: Optional[invariants.ReleaseData]
    registry: Optional[frozenset[str]]
    aliases: dict[str, str]  # every flag name SGLang accepts -> its canonical name (empty: no flag table read)
    cached: bool = False


def _package_dir(path: Path) -> Path:
    if path.is_dir() and not (path / "srt").is_dir() and (path / "sglang" / "srt").is_dir():
        return path / "sglang"
    return path


def _reader_source() -> str:
    digest = hashlib.sha256()
    for module in (invariants, start_failures, server_flags):
        loader = getattr(module, "__loader__", None)
        source = loader.get_source(module.__name__) if loader is not None and hasattr(loader, "get_source") else None
        if source is None:  # no source to key on: never read a stored result back
            return ""
        digest.update(source.encode("utf-8"))
    return digest.hexdigest()


def source_key(sglang: str | Path) -> Optional[str]:
    """The key of `sglang` (a wheel, or an unpacked tree) with this reader; None when it cannot be read."""
    reader = _reader_source()
    if not reader:
        return None
    path = Path(sglang)
    digest = hashlib.sha256(reader.encode("ascii"))
    try:
        if path.is_file():
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            return digest.hexdigest()[:32]
        root = _package_dir(path)
        if not root.is_dir():
            return None
        entries = []
        for parent, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                full = os.path.join(parent, name)
                info = os.stat(full)
                entries.append([os.path.relpath(full, root), info.st_size, info.st_mtime_ns])
    except OSError:
        return None
    digest.update(json.dumps(entries).encode("utf-8"))
    return digest.hexdigest()[:32]


def _to_json(sources: ReleaseSources) -> dict[str, Any]:
    release = None
    if sources.release is not None:
        release = asdict(sources.release)
        release.pop("source")
        classes = release["eagle3_classes"]
        release["eagle3_classes"] = sorted(classes) if classes is not None else None
        moe = sources.release.moe
        release["moe"] = (
            None
            if moe is None
            else {
                "core": sorted(moe.core),
                "fused_only": sorted(moe.fused_only),
                "fused_pairs": sorted([a2a, runner] for a2a, runner in moe.fused_pairs),
                "raise_line": moe.raise_line,
                "sm90_only": sorted(moe.sm90_only),
            }
        )
    return {"release": release, "registry": sorted(sources.registry) if sources.registry is not None else None, "aliases": sources.aliases}


def _moe_from_json(moe: Optional[dict[str, Any]]) -> Optional[invariants.MoeRunnerFacts]:
    if moe is None:
        return None
    return invariants.MoeRunnerFacts(
        core=frozenset(moe["core"]),
        fused_only=frozenset(moe["fused_only"]),
        fused_pairs=frozenset((a2a, runner) for a2a, runner in moe["fused_pairs"]),
        raise_line=moe["raise_line"],
        sm90_only=frozenset(moe["sm90_only"]),
    )


def _from_json(data: dict[str, Any], sglang: str | Path) -> ReleaseSources:
    release = data["release"]
    registry = data["registry"]
    read = None
    if release is not None:
        classes = release["eagle3_classes"]
        read = invariants.ReleaseData(
            source=str(sglang),
            eagle3_classes=frozenset(classes) if classes is not None else None,
            compatible_quantization=release["compatible_quantization"],
            quant_config_files=release["quant_config_files"],
            context_length_keys=release["context_length_keys"],
            backend_lines=release["backend_lines"],
            moe=_moe_from_json(release["moe"]),
        )
    aliases = data["aliases"]
    if not isinstance(aliases, dict):
        raise TypeError("aliases")
    return ReleaseSources(release=read, registry=frozenset(registry) if registry is not None else None, aliases=aliases, cached=True)


def read(sglang: str | Path, cache: Optional[str | Path] = None, write: bool = True) -> ReleaseSources:
    """The release data, registry and flag aliases of `sglang`, read back from `cache` when stored for the same sources and reader,
    else parsed (and stored when `write`). A damaged or partial record is parsed again, never trusted."""
    key = source_key(sglang) if cache else None
    record = Path(cache) / f"{_PREFIX}{key}.json" if cache and key else None
    if record is not None:
        try:
            return _from_json(json.loads(record.read_text(encoding="utf-8")), sglang)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    registry = start_failures.registered_architectures(sglang)
    try:
        aliases = server_flags.flag_aliases(server_flags.release_flag_table(sglang))
    except server_flags.FlagError:
        aliases = {}
    sources = ReleaseSources(
        release=invariants.read_release_data(sglang), registry=frozenset(registry) if registry is not None else None, aliases=aliases
    )
    if record is not None and write:
        _store(record, _to_json(sources))
    return sources


def _store(record: Path, data: dict[str, Any]) -> None:
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=record.parent, prefix=f".{_PREFIX}")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, sort_keys=True)
        os.replace(tmp, record)
        kept = sorted(record.parent.glob(f"{_PREFIX}*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in kept[KEEP:]:
            old.unlink()
    except OSError:
        pass  # a cache that cannot be written is read again next time
