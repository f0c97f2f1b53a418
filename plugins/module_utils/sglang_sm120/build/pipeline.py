"""The SM120 build pipeline: build specs as data, cache keys, detached builds, wheel verification.

Plain Python, no Ansible imports; the modules sglang_build_plan (controller) and sglang_build
(host) are thin wrappers. Only the standard library and the sibling ``cuda_toolkit`` are used.

A *spec* describes one artifact (see ``SPEC_FIELDS``). ``plan()`` validates every spec before
anything is built, orders them by ``depends_on`` and gives each a cache *key*: the sha256 of its
inputs (source, with the content hash of controller-side files, environment, build command,
verification rules, CUDA version and home, arch) and of the keys of what it depends on. So one
changed input rebuilds that artifact and its dependents, nothing else.

On the host, under ``root``:

    wheelhouse/<name>/<key>/          the verified wheels + artifact.json (renamed into place last)
    work/<name>-<key12>/              a running build: build.sh, job.json, rc, src/, venv/, out/
    logs/<name>-<key12>.log           the build log (kept after success and failure)

A build runs detached (its own session), so a dropped connection does not kill a four-hour torch
build; ``wait()`` polls it. A failed or interrupted build removes its work directory; the cache
only ever holds verified artifacts.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import json
import mmap
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..errors import ToolkitError
from ..files import file_sha256
from ..host.cuda_toolkit import cudart_major, elf_needed
from .closure_lock import ClosureLockError, LockFileError, canonical_version, check_wheels, constraints_text, exact_pins, parse_lock

KEY_SCHEMA = 2  # 2: dependency installs resolve their requirements, build_requires, local versions, prebuilt
SPEC_FIELDS = {
    "name": "artifact name (also the pip distribution installed into releases unless `package` says otherwise)",
    "package": "pip distribution name the wheel provides",
    "source": "exactly one of git/ref, sdist, wheel, wheelhouse, path (see SOURCE_KINDS)",
    "depends_on": "artifact names whose wheels are installed into this build's venv first",
    "env": "environment for the build (mapping of strings)",
    "build": "bash script run in the source directory; must leave wheels in $WHEEL_DIR",
    "build_requires": (
        "pip requirements the build needs in its venv (build backend, cmake, ninja, ...), installed after the "
        "dependencies' wheels and constrained by them; REQUIRED for built sources (git, sdist, path), [] when none"
    ),
    "local_version": (
        "local version label every wheel of this artifact must carry (e.g. cu130: torch 2.9.1+cu130), checked after the "
        "build or download; exported to the build as SGLANG_LOCAL_VERSION. An upstream wheel of the same version never outranks it"
    ),
    "pins": "requirements pinned wherever this artifact is installed (dependents' build venvs, releases), e.g. triton==3.5.1 with torch",
    "prebuilt": (
        "a prebuilt wheel tried FIRST (one of wheel+index, url[+sha256], wheelhouse+pattern on the controller); used only "
        "if it passes the same verification (and local_version), else the artifact is built from `source`"
    ),
    "jobs_env": "variable names that receive the derived parallelism (MAX_JOBS, ...)",
    "mem_per_job_gib": "memory one compile job needs, for the parallelism",
    "verify": "what every wheel must show: cuda_arch, ptx_ok, cudart, device_code, arch_objects, other_arch_objects (VERIFY_FIELDS)",
    "install": "whether releases install it (false: build-only, e.g. a test fixture)",
    "timeout_minutes": "build time limit",
    "index": (
        "the package index's wheel of this artifact, as a requirement (torch==2.11.0): judged on the controller by the "
        "lookup sglang_artifact_choices, which makes it `prebuilt` when it fits and removes this field; ignored here"
    ),
    "optional": "true: left out when neither `index` nor `prebuilt` yields a wheel (sglang_artifact_choices); ignored here",
    "lock": (
        "for a `wheel` source with with_deps: the controller path of the lock of its closure (pip's hash-checking format, "
        "build/closure_lock.py), read and keyed by the plan; the download takes its pins as constraints and a downloaded "
        "wheel it does not allow (name, version, sha256) fails the build. The depends_on artifacts' own wheels are exempt. "
        "null or absent: the closure floats to what the index serves"
    ),
}
SOURCE_KINDS = {
    "git": "clone `git` at `ref` (a tag or commit) with submodules, then run `build`",
    "sdist": "download the sdist of the requirement `sdist` (from `index` if given), then run `build`",
    "wheel": (
        "download the prebuilt wheel of the requirement `wheel` (from `index` if given; with_deps: its whole "
        "dependency closure, preferring the dependencies' built wheels); verified like a build"
    ),
    "wheelhouse": "prebuilt wheels matching `pattern` in the controller directory `wheelhouse`; verified like a build",
    "path": "a source tree in the controller directory `path`, copied to the host, then run `build`",
}
PREBUILT_KINDS = {
    "wheel": "the requirement `wheel` (e.g. torch==2.9.1+cu130) downloaded without dependencies, from `index` if given",
    "url": "the wheel at `url` (optionally checked against `sha256`)",
    "wheelhouse": "a wheel matching `pattern` in the controller directory `wheelhouse` (air-gapped hosts); none there: build",
}
PREBUILT_FIELDS = {"wheel", "index", "url", "sha256", "wheelhouse", "pattern", "origin"}  # origin: what the wheel is, for the record
SOURCE_FIELDS = {"git", "ref", "submodules", "sdist", "wheel", "with_deps", "index", "wheelhouse", "pattern", "path"}
VERIFY_FIELDS = {
    "cuda_arch": "compute capability every shared object with GPU code must carry machine code for: 12.0 accepts "
    "sm_120, sm_120a and sm_120f cubins; 12.0a only sm_120a; 12.0f sm_120f or sm_120 (how cuobjdump names family cubins)",
    "ptx_ok": "also accept PTX of that architecture (compute_120...) instead of machine code",
    "cudart": "the libcudart major every shared object must link, e.g. 13",
    "device_code": "required (at least one shared object with GPU code), if-present, none (no GPU check)",
    "arch_objects": "wheel paths (glob patterns) that must exist and carry cuda_arch code, e.g. sgl_kernel/*/common_ops.*.so",
    "other_arch_objects": "wheel paths (glob patterns) -> reason: objects that carry only other architectures ON PURPOSE "
    "(e.g. Hopper-only FA3 kernels); every other object with GPU code must carry cuda_arch",
}
DEVICE_CODE = ("required", "if-present", "none")
BUILT_KINDS = ("git", "sdist", "path")
ARTIFACT_FILE = "artifact.json"


class BuildSpecError(ToolkitError):
    """A build spec is malformed; the message names the artifact and the field."""


class BuildError(ToolkitError):
    """A build failed or its output did not verify; nothing was cached."""


# ---------------------------------------------------------------- specs and keys


@dataclass
class Planned:
    name: str
    package: str
    key: str
    kind: str
    depends_on: list[str]
    spec: dict[str, Any]
    controller_files: list[str] = field(default_factory=list)
    prebuilt_files: list[str] = field(default_factory=list)
    lock: Optional[dict[str, str]] = None  # the spec's lock as read on the controller: {file, text, digest}

    @property
    def short(self) -> str:
        return self.key[:12]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["short"] = self.short
        return out


def _need(cond: bool, name: str, message: str) -> None:
    if not cond:
        raise BuildSpecError(f"build spec {name!r}: {message}")


def _string_map(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, (str, int, float)) for k, v in value.items())


def _kind_of(name: str, what: str, value: Mapping[str, Any], kinds: Mapping[str, str], fields: set[str]) -> str:
    """The kind of a `source` or `prebuilt` mapping: only known fields, and exactly one of `kinds`."""
    bad = sorted(set(value) - fields)
    _need(not bad, name, f"unknown {what} field {', '.join(bad)}; known: {', '.join(sorted(fields))}")
    given = [k for k in kinds if k in value]
    _need(len(given) == 1, name, f"`{what}` needs exactly one of {', '.join(kinds)}, found {', '.join(given) or 'none'}")
    return given[0]


def validate_spec(spec: Any, index: int) -> dict[str, Any]:
    """Check one spec's fields and types; return it with defaults filled in."""
    _need(isinstance(spec, Mapping), f"#{index}", f"expected a mapping, found {type(spec).__name__}")
    name = spec.get("name")
    _need(
        isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or "") is not None,
        f"#{index}",
        f"`name` must be a simple name, found {name!r}",
    )
    unknown = sorted(set(spec) - set(SPEC_FIELDS))
    _need(not unknown, name, f"unknown field {', '.join(unknown)}; known fields: {', '.join(SPEC_FIELDS)}")
    if "index" in spec:
        requirement = spec["index"]
        _need(isinstance(requirement, str) and bool(requirement.strip()), name, f"`index` must be a requirement, found {requirement!r}")
    if "optional" in spec:
        _need(isinstance(spec["optional"], bool), name, f"`optional` must be true or false, found {spec['optional']!r}")
    source = spec.get("source")
    _need(
        isinstance(source, Mapping) and bool(source),
        name,
        "`source` is missing; give one of " + "; ".join(f"{k}: {v}" for k, v in SOURCE_KINDS.items()),
    )
    kind = _kind_of(name, "source", source, SOURCE_KINDS, SOURCE_FIELDS)
    _need(isinstance(source[kind], str) and bool(source[kind]), name, f"source `{kind}` must be a non-empty string")
    if kind == "git":
        _need(isinstance(source.get("ref"), str) and bool(source.get("ref")), name, "a git source needs `ref` (a tag or a commit)")
    build = spec.get("build")
    if kind in BUILT_KINDS:
        _need(
            isinstance(build, str) and bool(build.strip()), name, f"a {kind} source needs a `build` script that leaves wheels in $WHEEL_DIR"
        )
    else:
        _need(build is None, name, f"a {kind} source is a prebuilt wheel: remove `build`")
    env = spec.get("env", {})
    _need(_string_map(env), name, "`env` must map names to strings")
    if kind in BUILT_KINDS:
        _need(
            "build_requires" in spec,
            name,
            f"a {kind} source must declare `build_requires` (the pip requirements its build needs in the build venv: "
            "build backend, cmake, ninja, ...; [] when it needs none)",
        )
    else:
        _need("build_requires" not in spec, name, f"a {kind} source is a prebuilt wheel: remove `build_requires`")
    for key in ("depends_on", "build_requires", "jobs_env", "pins"):
        value = spec.get(key, [])
        _need(
            isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value),
            name,
            f"`{key}` must be a list of non-empty strings, found {value!r}",
        )
    for pin in spec.get("pins", []):
        _need(
            re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*\s*==\s*[A-Za-z0-9.+!_-]+", pin) is not None,
            name,
            f"`pins` entries look like triton==3.5.1, found {pin!r}",
        )
    local = spec.get("local_version")
    _need(
        local is None or (isinstance(local, str) and re.fullmatch(r"[A-Za-z0-9]+(\.[A-Za-z0-9]+)*", local) is not None),
        name,
        f"`local_version` must be a local version label like cu130 (without the +), found {local!r}",
    )
    prebuilt = spec.get("prebuilt")
    if prebuilt is not None:
        _need(kind in BUILT_KINDS, name, f"`prebuilt` needs a source to fall back to (git, sdist or path), found a {kind} source")
        _need(
            isinstance(prebuilt, Mapping),
            name,
            "`prebuilt` must be a mapping: " + "; ".join(f"{k}: {v}" for k, v in PREBUILT_KINDS.items()),
        )
        _kind_of(name, "prebuilt", prebuilt, PREBUILT_KINDS, PREBUILT_FIELDS)
        for key in PREBUILT_FIELDS & set(prebuilt):
            _need(isinstance(prebuilt[key], str) and bool(prebuilt[key]), name, f"prebuilt `{key}` must be a non-empty string")
        _need(
            "sha256" not in prebuilt or re.fullmatch(r"[0-9a-f]{64}", prebuilt["sha256"]) is not None,
            name,
            f"prebuilt `sha256` must be 64 hex digits, found {prebuilt.get('sha256')!r}",
        )
    verify = spec.get("verify", {})
    _need(isinstance(verify, Mapping), name, "`verify` must be a mapping")
    unknown_verify = sorted(set(verify) - set(VERIFY_FIELDS))
    _need(not unknown_verify, name, f"unknown verify field {', '.join(unknown_verify)}; known: {', '.join(sorted(VERIFY_FIELDS))}")
    arch_objects = verify.get("arch_objects", [])
    _need(
        isinstance(arch_objects, list) and all(isinstance(p, str) and p.strip() for p in arch_objects),
        name,
        f"verify.arch_objects must be a list of wheel path patterns (e.g. sgl_kernel/*/common_ops.*.so), found {arch_objects!r}",
    )
    other = verify.get("other_arch_objects", {})
    _need(
        isinstance(other, Mapping) and all(isinstance(p, str) and p.strip() for p in other),
        name,
        "verify.other_arch_objects must map wheel path patterns to the reason they carry no "
        f"{verify.get('cuda_arch', 'target')} code, found {other!r}",
    )
    for pattern, reason in dict(other).items():
        _need(
            isinstance(reason, str) and bool(reason.strip()),
            name,
            f"verify.other_arch_objects[{pattern!r}] needs a reason (why this object carries no {verify.get('cuda_arch', 'target')} code)",
        )
    both = sorted(set(arch_objects) & set(other))
    _need(not both, name, f"verify: {', '.join(both)} is both in arch_objects and other_arch_objects")
    device_code = verify.get("device_code", "required")
    _need(device_code in DEVICE_CODE, name, f"verify.device_code must be one of {', '.join(DEVICE_CODE)}, found {device_code!r}")
    if device_code != "none" or arch_objects or other:
        _need(
            re.fullmatch(r"\d+\.\d+[af]?", str(verify.get("cuda_arch", ""))) is not None,
            name,
            f"verify.cuda_arch must look like 12.0 (or 12.0a, 12.0f), found {verify.get('cuda_arch')!r}",
        )
    cudart = verify.get("cudart")
    _need(
        cudart is None or re.fullmatch(r"\d+", str(cudart)) is not None,
        name,
        f"verify.cudart must be a major version like 13, found {cudart!r}",
    )
    for key in ("mem_per_job_gib", "timeout_minutes"):
        if key in spec:
            _need(isinstance(spec[key], (int, float)) and spec[key] > 0, name, f"`{key}` must be a positive number")
    lock = spec.get("lock")
    if lock is not None:
        _need(isinstance(lock, str) and bool(lock.strip()), name, f"`lock` must be a lock file's path on the controller, found {lock!r}")
        _need(
            kind == "wheel" and bool(source.get("with_deps")),
            name,
            f"`lock` locks the dependency closure of a `wheel` source with with_deps: true, found a {kind} source"
            + ("" if kind != "wheel" else " without with_deps"),
        )
    out = dict(spec)
    out.setdefault("package", name)
    out.setdefault("depends_on", [])
    out.setdefault("env", {})
    out.setdefault("build_requires", [])
    out.setdefault("jobs_env", [])
    out.setdefault("pins", [])
    out.setdefault("local_version", None)
    out.setdefault("prebuilt", None)
    out.setdefault("mem_per_job_gib", 4)
    out.setdefault("install", True)
    out.setdefault("timeout_minutes", 600)
    out["verify"] = {"device_code": device_code, "ptx_ok": bool(verify.get("ptx_ok", False)), **dict(verify)}
    out["env"] = {k: str(v) for k, v in env.items()}
    return out


def tree_hash(root: str) -> tuple[str, list[str]]:
    """sha256 over a directory's files (relative path, executable bit, bytes); also the file list."""
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(root)
    digest = hashlib.sha256()
    files = sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        rel = path.relative_to(base).as_posix()
        digest.update(rel.encode() + b"\0" + (b"x" if os.access(path, os.X_OK) else b"-") + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest(), [str(p) for p in files]


def prebuilt_inputs(spec: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The controller-side prebuilt wheels of a spec (prebuilt: {wheelhouse: ...}); none there is no error (build instead)."""
    prebuilt = spec.get("prebuilt") or {}
    if "wheelhouse" not in prebuilt:
        return {}, []
    wheels = sorted(Path(prebuilt["wheelhouse"]).glob(prebuilt.get("pattern", "*.whl")))
    return {"prebuilt_wheels": {w.name: file_sha256(w) for w in wheels}}, [str(w) for w in wheels]


def _controller_inputs(spec: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    source = spec["source"]
    name = spec["name"]
    if "path" in source:
        try:
            digest, files = tree_hash(source["path"])
        except FileNotFoundError:
            raise BuildSpecError(f"build spec {name!r}: source path {source['path']} does not exist on the controller") from None
        return {"tree_sha256": digest}, files
    if "wheelhouse" in source:
        pattern = source.get("pattern", "*.whl")
        wheels = sorted(Path(source["wheelhouse"]).glob(pattern))
        if not wheels:
            raise BuildSpecError(f"build spec {name!r}: no wheel matching {pattern} in {source['wheelhouse']} on the controller")
        return {"wheels": {w.name: file_sha256(w) for w in wheels}}, [str(w) for w in wheels]
    return {}, []


def _key_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec as it enters the key: without what only tunes a build, and without where the controller
    keeps its files (a source tree, a wheelhouse, a prebuilt shelf): their content is keyed instead
    (_controller_inputs, prebuilt_inputs), so the same files under another checkout keep the key."""
    keyed = {k: v for k, v in spec.items() if k not in ("jobs_env", "mem_per_job_gib", "timeout_minutes", "install", "lock")}
    keyed["source"] = {k: v for k, v in spec["source"].items() if k not in ("path", "wheelhouse")}
    if isinstance(spec.get("prebuilt"), Mapping):
        keyed["prebuilt"] = {k: v for k, v in spec["prebuilt"].items() if k != "wheelhouse"}
    return keyed


def read_lock(spec: Mapping[str, Any]) -> Optional[dict[str, str]]:
    """The spec's lock file, read on the controller: {file, text, digest} (the digest of its pins enters the key), None
    without `lock`. BuildSpecError when the file is missing (saying how to write it), does not parse, or does not pin
    the version of the spec's own requirement."""
    path = spec.get("lock")
    if not path:
        return None
    name = spec["name"]
    requirement = str(spec["source"]["wheel"])
    exact = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;,]+)\s*", requirement)
    version = exact.group(2) if exact else "VERSION"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BuildSpecError(
            f"build spec {name!r}: its lock file {path} does not exist on the controller, so the closure of {requirement} is not "
            f'locked. Write it with `scripts/lock_release.py {version}` and review it (docs/operations.md, "Locked Python '
            "closures\"), or download the closure unlocked: leave `lock` out (the toolkit's sglang spec: sglang_build_require_lock: false)"
        ) from None
    except OSError as exc:
        raise BuildSpecError(f"build spec {name!r}: cannot read its lock file {path}: {exc.strerror or exc}") from None
    try:
        lock = parse_lock(text, str(path))
    except LockFileError as exc:
        raise BuildSpecError(f"build spec {name!r}: {exc}") from None
    if exact:
        own = lock.pins_of(exact.group(1))
        _need(
            bool(own) and all(canonical_version(p.version) == canonical_version(version) for p in own),
            name,
            f"its lock file {path} pins {', '.join(p.requirement() for p in own) or f'no {exact.group(1)}'}, "
            f"the spec downloads {requirement}: the lock of another release?",
        )
    return {"file": str(path), "text": text, "digest": lock.digest()}


def plan(specs: Sequence[Any], context: Mapping[str, Any]) -> list[Planned]:
    """Validate every spec, order by dependencies, compute keys. Raises before anything is built."""
    if not isinstance(specs, Sequence) or isinstance(specs, (str, bytes)):
        raise BuildSpecError(f"build specs must be a list, found {type(specs).__name__}")
    checked = [validate_spec(spec, i) for i, spec in enumerate(specs)]
    by_name: dict[str, dict[str, Any]] = {}
    for spec in checked:
        _need(spec["name"] not in by_name, spec["name"], "defined twice")
        by_name[spec["name"]] = spec
    for spec in checked:
        for dep in spec["depends_on"]:
            _need(dep in by_name, spec["name"], f"depends_on {dep!r}, which no spec defines (defined: {', '.join(by_name)})")
    order: list[str] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise BuildSpecError(f"build spec {name!r}: dependency cycle: {' -> '.join([*visiting[visiting.index(name) :], name])}")
        visiting.append(name)
        for dep in by_name[name]["depends_on"]:
            visit(dep)
        visiting.pop()
        order.append(name)

    for spec in checked:
        visit(spec["name"])
    keys: dict[str, str] = {}
    planned = []
    for name in order:
        spec = by_name[name]
        extra, files = _controller_inputs(spec)
        prebuilt_extra, prebuilt_files = prebuilt_inputs(spec)
        extra = {**extra, **prebuilt_extra}
        lock = read_lock(spec)
        if lock is not None:
            extra["lock"] = lock["digest"]
        key_input = {
            "schema": KEY_SCHEMA,
            "spec": _key_spec(spec),
            "controller": extra,
            "context": dict(context),
            "deps": {dep: keys[dep] for dep in spec["depends_on"]},
        }
        keys[name] = hashlib.sha256(json.dumps(key_input, sort_keys=True).encode()).hexdigest()
        kind = next(k for k in SOURCE_KINDS if k in spec["source"])
        planned.append(Planned(name, spec["package"], keys[name], kind, list(spec["depends_on"]), spec, files, prebuilt_files, lock))
    return planned


def host_resources() -> tuple[int, float]:
    """(usable cores, total memory GiB) of this machine."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    mem_gib = 1.0
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    mem_gib = int(line.split()[1]) / (1024 * 1024)
    except OSError:
        pass
    return cores, mem_gib


def derive_jobs(cores: int, mem_gib: float, mem_per_job_gib: float, cap: int = 0) -> int:
    """Compile jobs the host can afford: min(cores, memory / memory per job), at least 1, capped if cap > 0."""
    jobs = max(1, min(cores, int(mem_gib // max(mem_per_job_gib, 0.1))))
    return min(jobs, cap) if cap > 0 else jobs


# ---------------------------------------------------------------- reading GPU code
#
# The target names are cuobjdump's: a cubin is `sm_NNN` or, built for an architecture-specific
# target, `sm_NNNa` (cuobjdump 13.2 lists family-specific `sm_NNNf` cubins as `sm_NNN`, and so
# does this reader); PTX is `compute_NNN`, `compute_NNNa` or `compute_NNNf` (cuobjdump's
# `--list-ptx` calls it `sm_NNN[af].ptx`).

EM_CUDA = 190
FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
_FATBIN = struct.Struct("<IHHQ")  # magic, version, header size, payload size
# kind, version, header size, payload size, compressed size, ?, minor, major, arch, name offset, name size, flags
_ENTRY = struct.Struct("<HHIQIIHHIIIQ")
_ENTRY_ELF, _ENTRY_PTX = 2, 1
_ENTRY_ARCH_SPECIFIC = 0x100000  # the `a` targets (sm_90a, sm_120a)
_ENTRY_FAMILY = 0x200000  # the `f` targets (sm_120f)
_COMPAT_ARCH_SPECIFIC = 9  # .nv.compat attribute of a standalone cubin: nonzero for an `a` target


def _suffix(flags: int) -> str:
    return "a" if flags & _ENTRY_ARCH_SPECIFIC else "f" if flags & _ENTRY_FAMILY else ""


def _elf_sections(data: Any) -> dict[str, tuple[int, int]]:
    """Section name -> (offset, size) of a 64-bit little-endian ELF image."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shentsize < 64 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        return {}
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    out = {}
    for name_at, _, _, _, offset, size in headers:
        end = data.find(b"\0", names + name_at)
        out[bytes(data[names + name_at : end]).decode("ascii", "replace")] = (offset, size)
    return out


def _cubin_target(data: Any) -> Optional[str]:
    """The target of a standalone cubin (an ELF file for EM_CUDA), or None when `data` is not one."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or struct.unpack_from("<H", data, 18)[0] != EM_CUDA:
        return None
    abi, flags = data[8], struct.unpack_from("<I", data, 48)[0]
    # ABI 8 (CUDA 12.9 and newer) keeps the SM number in bits 8-15, older ABIs in bits 0-7.
    sm = (flags >> 8) & 0xFF if abi >= 8 else flags & 0xFF
    compat = _elf_sections(data).get(".nv.compat")
    if compat:
        # attributes: format byte, attribute byte, then (format 2/3) a 16-bit value or (format 4) a 16-bit size and data
        pos, end, specific = compat[0], compat[0] + compat[1], False
        while pos + 4 <= end:
            fmt, attr, value = data[pos], data[pos + 1], struct.unpack_from("<H", data, pos + 2)[0]
            if attr == _COMPAT_ARCH_SPECIFIC:
                specific = value != 0
            pos += 4 + (value if fmt == 4 else 0)
    else:  # EF_CUDA_ACCELERATORS: bit 11 before ABI 8, bit 3 in ABI 8 (CUDA 12.9)
        specific = bool(flags & (0x8 if abi >= 8 else 0x800))
    return f"sm_{sm}" + ("a" if specific else "")


def _fatbin_targets(data: Any) -> list[str]:
    """The entries of every fat binary embedded in `data` (a host object or shared library)."""
    found: list[str] = []
    start = data.find(FATBIN_MAGIC)
    while start != -1:
        if start + _FATBIN.size <= len(data):
            _, _, header_size, payload = _FATBIN.unpack_from(data, start)
            entry, end = start + header_size, min(start + header_size + payload, len(data))
            while entry + _ENTRY.size <= end:
                kind, _, entry_header, size, _, _, _, _, arch, _, _, flags = _ENTRY.unpack_from(data, entry)
                if kind not in (_ENTRY_ELF, _ENTRY_PTX) or entry_header < _ENTRY.size:
                    break
                if kind == _ENTRY_ELF:  # cuobjdump names family cubins without their `f`
                    found.append(f"sm_{arch}" + ("a" if flags & _ENTRY_ARCH_SPECIFIC else ""))
                else:
                    found.append(f"compute_{arch}{_suffix(flags)}")
                entry += entry_header + size
        start = data.find(FATBIN_MAGIC, start + 4)
    return found


def gpu_code(path: str | os.PathLike[str]) -> list[str]:
    """Sorted, unique GPU targets of a cubin, object or shared library, read without cuobjdump."""
    if os.path.getsize(path) == 0:
        return []
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        direct = _cubin_target(data)
        return sorted({direct} if direct else set(_fatbin_targets(data)))


def cuobjdump_code(cuobjdump: str, path: str | os.PathLike[str]) -> list[str]:
    """The same list from NVIDIA's cuobjdump: `--list-elf` for cubins, `--list-ptx -all` for PTX."""
    found: set[str] = set()
    for args, kind in ((["--list-elf"], "sm"), (["--list-ptx", "-all"], "compute")):
        proc = subprocess.run([cuobjdump, *args, str(path)], capture_output=True, text=True, check=False)
        if proc.returncode != 0 and "does not contain device code" not in (proc.stdout + proc.stderr):
            raise BuildError(f"{cuobjdump} {' '.join(args)} {path} failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
        suffix = "cubin" if kind == "sm" else "ptx"
        for match in re.finditer(rf"\.sm_(\d+[af]?)\.{suffix}\s*$", proc.stdout, re.MULTILINE):
            found.add(f"{kind}_{match.group(1)}")
    return sorted(found)


def find_cuobjdump(cuda_home: Optional[str] = None) -> Optional[str]:
    """cuobjdump of the given CUDA home, else of $CUDA_HOME, else on PATH; None when there is none."""
    for home in (cuda_home, os.environ.get("CUDA_HOME")):
        if home and os.access(os.path.join(home, "bin", "cuobjdump"), os.X_OK):
            return os.path.join(home, "bin", "cuobjdump")
    return shutil.which("cuobjdump")


def witness_name(cuobjdump: Optional[str]) -> str:
    return f"cuobjdump --list-elf ({cuobjdump})" if cuobjdump else "built-in ELF/fatbin reader"


def read_gpu_code(path: str | os.PathLike[str], cuobjdump: Optional[str] = None) -> list[str]:
    return cuobjdump_code(cuobjdump, path) if cuobjdump else gpu_code(path)


def arch_targets(arch: str, ptx_ok: bool = False) -> list[str]:
    """The targets that satisfy a compute capability: '12.0' -> sm_120, sm_120a, sm_120f (+ PTX when ptx_ok)."""
    match = re.fullmatch(r"(\d+)\.?(\d)([af]?)", str(arch).strip())
    if not match:
        raise BuildSpecError(f"a compute capability looks like 12.0, 12.0a or 12.0f, found {arch!r}")
    number, suffix = match.group(1) + match.group(2), match.group(3)
    suffixes = {"": ["", "a", "f"], "a": ["a"], "f": ["f", ""]}[suffix]
    kinds = ["sm", "compute"] if ptx_ok else ["sm"]
    return [f"{kind}_{number}{s}" for kind in kinds for s in suffixes]


def carries(targets: Sequence[str], arch: str, ptx_ok: bool = False) -> bool:
    wanted = set(arch_targets(arch, ptx_ok))
    return any(t in wanted for t in targets)


# ---------------------------------------------------------------- verification


@dataclass
class SharedObject:
    path: str
    targets: list[str]
    cudart: list[str]
    rule: str = "must carry the target"


def _matching(path: str, patterns: Any) -> list[str]:
    return [p for p in patterns if fnmatch.fnmatchcase(path, p)]


def read_wheel(wheel: str | os.PathLike[str], rules: Mapping[str, Any], cuobjdump: Optional[str] = None) -> list[SharedObject]:
    """The shared objects of a wheel: GPU targets, linked libcudart majors, the rule that applies."""
    exempt = dict(rules.get("other_arch_objects", {}))
    objects: list[SharedObject] = []
    with tempfile.TemporaryDirectory(prefix="verify-") as tmp, zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if not re.search(r"\.so(\.\d+)*$", member):
                continue
            target = Path(tmp) / "lib.so"
            with archive.open(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            needed = elf_needed(str(target)) or []
            reasons = [exempt[p] for p in _matching(member, exempt)]
            rule = f"other architectures on purpose: {reasons[0]}" if reasons else "must carry the target"
            objects.append(SharedObject(member, read_gpu_code(target, cuobjdump), cudart_major(needed), rule))
    return objects


def check_objects(name: str, objects: Sequence[SharedObject], rules: Mapping[str, Any], check_patterns: bool = True) -> None:
    """Raise BuildError naming every object of wheel `name` that breaks `rules` (see verify_wheel)."""
    arch = str(rules.get("cuda_arch", ""))
    ptx_ok = bool(rules.get("ptx_ok"))
    device_code = rules.get("device_code", "required")
    want_cudart = str(rules["cudart"]) if rules.get("cudart") is not None else None
    required = list(rules.get("arch_objects", []))
    exempt = dict(rules.get("other_arch_objects", {}))
    problems: list[str] = []
    with_code = [o for o in objects if o.targets]
    if device_code == "required" and not with_code:
        problems.append(f"no shared object with GPU code (shared objects: {', '.join(o.path for o in objects) or 'none'})")
    if device_code != "none":
        wanted = " or ".join(arch_targets(arch, ptx_ok))
        for obj in objects:
            must = bool(_matching(obj.path, required))
            if _matching(obj.path, exempt) and not must:
                continue
            if (obj.targets or must) and not carries(obj.targets, arch, ptx_ok):
                problems.append(f"{obj.path}: expected {wanted}, found {', '.join(obj.targets) or 'no GPU code'}")
        if check_patterns:
            problems += unmatched_arch_objects(rules, [o.path for o in objects])
    if want_cudart:
        for obj in objects:
            wrong = [m for m in obj.cudart if m != want_cudart]
            if wrong:
                problems.append(f"{obj.path}: links libcudart.so.{wrong[0]}, expected libcudart.so.{want_cudart}")
    if problems:
        raise BuildError(f"{name} rejected: " + "; ".join(problems))


def verify_wheel(
    wheel: str | os.PathLike[str],
    rules: Mapping[str, Any],
    cuobjdump: Optional[str] = None,
    check_patterns: bool = True,
) -> dict[str, Any]:
    """Unpack a wheel's shared objects and check GPU targets and the CUDA runtime they link.

    Every shared object with GPU code must carry machine code for `cuda_arch` (sm_120, sm_120a or
    sm_120f for 12.0), except those `other_arch_objects` names with a reason; every
    `arch_objects` pattern must match an object that does. Raises BuildError naming each object
    that fails. Returns the evidence recorded in manifests (which reader saw what).
    """
    wheel = Path(wheel)
    objects = read_wheel(wheel, rules, cuobjdump)
    check_objects(wheel.name, objects, rules, check_patterns)
    return {
        "wheel": wheel.name,
        "sha256": file_sha256(wheel),
        "witness": witness_name(cuobjdump),
        "shared_objects": [asdict(o) for o in objects],
    }


def unmatched_arch_objects(rules: Mapping[str, Any], paths: Sequence[str]) -> list[str]:
    """The `arch_objects` patterns that match none of `paths` (a renamed or missing kernel library)."""
    return [
        f"verify.arch_objects {p!r} matches no shared object (found: {', '.join(paths) or 'none'})"
        for p in rules.get("arch_objects", [])
        if not any(fnmatch.fnmatchcase(path, p) for path in paths)
    ]


def verify_wheels(wheels: Sequence[Path], rules: Mapping[str, Any], cuobjdump: Optional[str] = None) -> list[dict[str, Any]]:
    """verify_wheel for each wheel of one artifact; the `arch_objects` patterns may match in any of them."""
    evidence = [verify_wheel(w, rules, cuobjdump, check_patterns=len(wheels) == 1) for w in wheels]
    if len(wheels) > 1 and rules.get("device_code", "required") != "none":
        missing = unmatched_arch_objects(rules, [o["path"] for e in evidence for o in e["shared_objects"]])
        if missing:
            raise BuildError("; ".join(missing))
    return evidence


# ---------------------------------------------------------------- the host side: cache and jobs


def cache_dir(root: str | os.PathLike[str], name: str, key: str) -> Path:
    return Path(root) / "wheelhouse" / name / key


def cached(root: str | os.PathLike[str], name: str, key: str) -> Optional[dict[str, Any]]:
    """The artifact record when a verified build of exactly this key is in the cache."""
    record = cache_dir(root, name, key) / ARTIFACT_FILE
    if not record.is_file():
        return None
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except ValueError:
        return None
    if data.get("key") != key:
        return None
    for wheel in data.get("wheels", []):
        path = cache_dir(root, name, key) / wheel["wheel"]
        if not path.is_file() or file_sha256(path) != wheel["sha256"]:
            return None
    return data


BUILD_DIRS = ("wheelhouse", "work", "logs", "src")


def survey(root: str | os.PathLike[str], items: Sequence[Mapping[str, Any]], create: bool = True) -> dict[str, Any]:
    """One look at the host's build root for the whole plan: its directories (made when missing and
    ``create``), the record of every item whose verified build is cached, and the names of the rest,
    in plan order. A converge that builds nothing reads the cache here, once, instead of per artifact."""
    base = Path(root)
    missing_dirs = [str(base / sub) for sub in BUILD_DIRS if not (base / sub).is_dir()]
    if create:
        for path in missing_dirs:
            Path(path).mkdir(mode=0o755, parents=True, exist_ok=True)
    artifacts: dict[str, Any] = {}
    missing: list[str] = []
    for item in items:
        record = cached(root, item["name"], item["key"])
        if record is None:
            missing.append(item["name"])
        else:
            artifacts[item["name"]] = record
    return {"created": missing_dirs, "artifacts": artifacts, "missing": missing}


def work_dir(root: str | os.PathLike[str], name: str, key: str) -> Path:
    return Path(root) / "work" / f"{name}-{key[:12]}"


def log_path(root: str | os.PathLike[str], name: str, key: str) -> Path:
    return Path(root) / "logs" / f"{name}-{key[:12]}.log"


def _q(value: str) -> str:
    return shlex.quote(value)


def normalize(name: str) -> str:
    """A distribution name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name_version(wheel: str | os.PathLike[str]) -> tuple[str, str]:
    """(distribution, version) from a wheel's file name (PEP 427: name-version[-build]-py-abi-plat.whl)."""
    parts = Path(wheel).name[: -len(".whl")].split("-")
    if len(parts) < 5:
        raise BuildError(f"{Path(wheel).name} is not a wheel file name (name-version-python-abi-platform.whl)")
    return parts[0], parts[1]


def check_local_version(wheels: Sequence[Path], label: Optional[str]) -> None:
    """Every wheel's version must end with +label (so an upstream wheel of the same version never outranks ours)."""
    if not label:
        return
    wrong = [f"{w.name} has version {wheel_name_version(w)[1]}" for w in wheels if not wheel_name_version(w)[1].endswith(f"+{label}")]
    if wrong:
        raise BuildError(f"local_version {label!r}: expected every wheel's version to end with +{label}; " + "; ".join(wrong))


def own_wheels(record: Mapping[str, Any]) -> list[str]:
    """The wheels that ARE the artifact (installed as files into dependents and releases).

    A `wheel` source with `with_deps` also holds its dependency closure: only the wheel(s) of its
    own distribution are the artifact; the rest is a local index for resolving requirements."""
    if record.get("installs"):
        return list(record["installs"])
    names = [w["wheel"] for w in record.get("wheels", [])]
    if record.get("kind") == "wheel":
        own = [n for n in names if normalize(wheel_name_version(n)[0]) == normalize(record.get("package", ""))]
        return own or names
    return names


def _dependency_wheels(dep_dirs: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(wheel files, pins) of the dependencies' cached artifacts, read from their records."""
    files: list[str] = []
    pins: list[str] = []
    for directory in dep_dirs.values():
        try:
            record = json.loads((Path(directory) / ARTIFACT_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {"wheels": [{"wheel": w.name} for w in sorted(Path(directory).glob("*.whl"))]}
        files += [str(Path(directory) / w) for w in own_wheels(record)]
        pins += list(record.get("pins", []))
    return files, sorted(set(pins))


def lock_held(dep_dirs: Mapping[str, str]) -> dict[str, str]:
    """What the dependencies' own wheels pin exactly themselves (torch 2.9.1+cu130: its CUDA-13 nvidia-* packages),
    name -> version, from their METADATA: a download of those is held by the artifact's pin, not the lock's."""
    held: dict[str, str] = {}
    for wheel in _dependency_wheels(dep_dirs)[0]:
        with contextlib.suppress(OSError, zipfile.BadZipFile, KeyError, StopIteration), zipfile.ZipFile(wheel) as archive:
            name = next(n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
            held.update(exact_pins(archive.read(name).decode("utf-8", "replace")))
    return held


def lock_exempt(dep_dirs: Mapping[str, str]) -> list[str]:
    """The distributions a lock does not hold the download to: those of the dependencies' own wheels (torch 2.9.1+cu130
    from its wheelhouse, under its own exact pin in constraints.txt), by normalized name."""
    return sorted({normalize(wheel_name_version(f)[0]) for f in _dependency_wheels(dep_dirs)[0]})


def dependency_install(venv_pip: str, dep_dirs: Mapping[str, str], pip_args: Sequence[str], constraints: str) -> list[str]:
    """The commands that install the dependencies' verified wheels, then their own requirements.

    1. the wheel FILES themselves, from the host wheelhouse only (--no-index --no-deps): exactly what was verified;
    2. the same files again WITH their requirements (torch: filelock, sympy, ..., triton==3.5.1), from the
       dependencies' wheelhouse directories and the index `pip_args` allow, under `constraints`
       (the dependencies' pins); already-installed files stay as they are;
    3. pip check: the venv is complete and consistent before the build starts."""
    files, _ = _dependency_wheels(dep_dirs)
    if not files:
        return []
    links = [f"--find-links {_q(d)}" for d in dep_dirs.values()]
    return [
        " ".join([f"{venv_pip} install --quiet --no-index --no-deps", *map(_q, files)]),
        " ".join([f"{venv_pip} install --quiet", *map(_q, pip_args), *links, f"-c {_q(constraints)}", *map(_q, files)]),
        f"{venv_pip} check",
    ]


def _head(item: Mapping[str, Any], work: Path, cuda_home: str, jobs: int) -> list[str]:
    spec = item["spec"]
    lines = [
        "#!/bin/bash",
        f"# build of {item['name']} (key {item['key']}), written by the sglang-sm120 build pipeline",
        "set -euo pipefail",
        f"cd {_q(str(work))}",
        f"export WHEEL_DIR={_q(str(work / 'out'))} CUDA_HOME={_q(cuda_home)} SGLANG_BUILD_JOBS={jobs}",
        'export PATH="$CUDA_HOME/bin:$PATH" LD_LIBRARY_PATH="$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"',
        'mkdir -p "$WHEEL_DIR"',
    ]
    if spec.get("local_version"):
        lines.append(f"export SGLANG_LOCAL_VERSION={_q(spec['local_version'])}")
    return lines


@dataclass(frozen=True)
class Workspace:
    """Where and with what a build runs on the host: the build root, the Python that makes the build venvs,
    the CUDA toolkit, the compile jobs, the built dependencies' wheel directories (name -> dir), pip's extra
    arguments (an index), and what the controller staged (the source tree, a prebuilt wheelhouse)."""

    root: str
    python: str
    cuda_home: str
    jobs: int = 1
    dep_dirs: Mapping[str, str] = field(default_factory=dict)
    pip_args: Sequence[str] = ()
    staged: Optional[str] = None
    prebuilt_staged: Optional[str] = None


def prebuilt_script(item: Mapping[str, Any], place: Workspace) -> str:
    """The script that fetches a spec's prebuilt wheel into $WHEEL_DIR (verified by wait(), else the source build runs)."""
    prebuilt = item["spec"]["prebuilt"]
    work = work_dir(place.root, item["name"], item["key"])
    lines = _head(item, work, place.cuda_home, 1)
    download = f'{_q(place.python)} -m pip download --quiet --no-deps --only-binary :all: --retries 1 --timeout 30 -d "$WHEEL_DIR"'
    if "wheel" in prebuilt:
        index = ["--index-url", prebuilt["index"]] if prebuilt.get("index") else []
        lines += [
            f'echo "== $(date -u +%FT%TZ) prebuilt: {prebuilt["wheel"]}"',
            " ".join([download, *map(_q, index), _q(prebuilt["wheel"])]),
        ]
    elif "url" in prebuilt:
        url = prebuilt["url"] + (f"#sha256={prebuilt['sha256']}" if prebuilt.get("sha256") else "")
        lines += [f'echo "== $(date -u +%FT%TZ) prebuilt: {prebuilt["url"]}"', f"{download} {_q(url)}"]
    else:
        where = f"{prebuilt['wheelhouse']}/{prebuilt.get('pattern', '*.whl')} (controller)"
        lines.append(f'echo "== $(date -u +%FT%TZ) prebuilt: {where}"')
        if item.get("prebuilt_files") and place.prebuilt_staged:
            lines.append(f'cp {_q(place.prebuilt_staged)}/*.whl "$WHEEL_DIR"/')
        else:
            lines += [f"echo {_q('no prebuilt wheel matching ' + where)} >&2", "exit 3"]
    lines.append('echo "== $(date -u +%FT%TZ) prebuilt fetched"')
    return "\n".join(lines) + "\n"


def build_script(item: Mapping[str, Any], place: Workspace) -> str:
    """The bash script a detached build runs (kept in the work directory for the operator to read)."""
    spec = item["spec"]
    source = spec["source"]
    work = work_dir(place.root, item["name"], item["key"])
    jobs, dep_dirs, staged = place.jobs, place.dep_dirs, place.staged
    lines = _head(item, work, place.cuda_home, jobs)
    lines.append('echo "== $(date -u +%FT%TZ) start"')
    for var in spec.get("jobs_env", []):
        lines.append(f"export {var}={jobs}")
    for var, value in sorted(spec.get("env", {}).items()):
        lines.append(f"export {var}={_q(str(value))}")
    index = ["--index-url", source["index"]] if source.get("index") else []
    constraints = str(work / "constraints.txt")
    dep_files, pins = _dependency_wheels(dep_dirs)
    # the dependencies' exact versions and pins (triton==3.5.1 with torch) hold for everything installed or downloaded here
    body = "\n".join([*(f"{wheel_name_version(f)[0]}=={wheel_name_version(f)[1]}" for f in dep_files), *pins])
    lines.append(f"printf '%s\\n' {_q(body)} > {_q(constraints)}" if body else f": > {_q(constraints)}")
    if "git" in source:
        lines += [
            "rm -rf src",
            f"git clone --quiet {_q(source['git'])} src",
            f"git -C src checkout --quiet {_q(source['ref'])}",
        ]
        if source.get("submodules", True):
            lines.append("git -C src submodule update --init --recursive --quiet")
    elif "sdist" in source:
        lines += [
            "rm -rf dl src && mkdir -p dl src",
            " ".join(["python3 -m pip download --quiet --no-deps --no-binary :all: -d dl", *map(_q, index), _q(source["sdist"])]),
            "tar -xf dl/*.tar.gz -C src --strip-components=1",
        ]
    elif "wheel" in source:
        deps = [] if source.get("with_deps") else ["--no-deps"]
        links = [f"--find-links {_q(d)}" for d in dep_dirs.values()]
        locked = []
        if item.get("lock"):
            # the lock's pins (not its hashes: wait() checks those on the files), less the dependencies' own distributions
            lock_file = str(work / "lock-constraints.txt")
            pins = constraints_text(parse_lock(item["lock"]["text"], item["lock"]["file"]), lock_exempt(dep_dirs))
            lines.append(f"printf '%s' {_q(pins)} > {_q(lock_file)}")
            locked = [f"-c {_q(lock_file)}"]
        lines.append(
            " ".join(
                [
                    "python3 -m pip download --quiet",
                    *deps,
                    *links,
                    f"-c {_q(constraints)}",
                    *locked,
                    '--only-binary :all: -d "$WHEEL_DIR"',
                    *map(_q, index),
                    _q(source["wheel"]),
                ]
            )
        )
    elif staged:
        if "wheelhouse" in source:
            lines.append(f'cp {_q(staged)}/*.whl "$WHEEL_DIR"/')
        else:
            lines += ["rm -rf src", f"cp -a {_q(staged)} src"]
    if item["kind"] in BUILT_KINDS:
        lines.append(f"{_q(place.python)} -m venv venv")
        lines += dependency_install("venv/bin/pip", dep_dirs, place.pip_args, constraints)
        if spec.get("build_requires"):
            links = [f"--find-links {_q(d)}" for d in dep_dirs.values()]
            lines.append(
                " ".join(
                    [
                        "venv/bin/pip install --quiet",
                        *map(_q, place.pip_args),
                        *links,
                        f"-c {_q(constraints)}",
                        *map(_q, spec["build_requires"]),
                    ]
                )
            )
            lines.append("venv/bin/pip check")
        lines += [
            'export VIRTUAL_ENV="$PWD/venv" PATH="$PWD/venv/bin:$PATH"',
            "cd src",
            'echo "== $(date -u +%FT%TZ) build"',
            spec["build"].rstrip(),
        ]
    lines.append('echo "== $(date -u +%FT%TZ) done"')
    return "\n".join(lines) + "\n"


def start(item: Mapping[str, Any], place: Workspace, check: bool = False) -> dict[str, Any]:
    """Start the detached build of `item` unless its key is cached or a build of it exists.

    Re-attaches instead of starting another: a build of this key that is still running (its
    recorded process, identified by pid, process start time and boot) returns `running`; one
    that ended while nobody watched (the controller died) returns `ended`, for wait() to verify
    and cache. Only a build that is gone without an exit status (host rebooted, killed) is
    started anew. A lock keeps two runs from starting the same key twice.

    A spec with `prebuilt` first runs prebuilt.sh (fetch the prebuilt wheel); wait() verifies it
    and, when it is missing or fails verification, starts build.sh (the source build) itself.
    """
    name, key, root = item["name"], item["key"], place.root
    record = cached(root, name, key)
    if record is not None:
        return {"status": "cached", "changed": False, "artifact": record}
    work = work_dir(root, name, key)
    with _start_lock(root, name, key, check):
        found = attached(root, name, key)
        if found is not None:
            return found
        if check:
            return {"status": "would-build", "changed": True}
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        log = log_path(root, name, key)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("", encoding="utf-8")
        script = work / "build.sh"
        script.write_text(build_script(item, place), encoding="utf-8")
        script.chmod(0o755)
        phase = "source"
        if item["spec"].get("prebuilt"):
            script = work / "prebuilt.sh"
            script.write_text(prebuilt_script(item, place), encoding="utf-8")
            script.chmod(0o755)
            phase = "prebuilt"
        extra = {"lock_exempt": lock_exempt(place.dep_dirs), "lock_held": lock_held(place.dep_dirs)} if item.get("lock") else {}
        job = _launch(work, script, log, key, phase, item["spec"].get("timeout_minutes", 600), **extra)
    return {"status": "started", "changed": True, "log": str(log), "started": job["started"], "pid": job["pid"], "phase": phase}


def _launch(work: Path, script: Path, log: Path, key: str, phase: str, timeout_minutes: float, **extra: Any) -> dict[str, Any]:
    """Run `script` detached (own session), appending to `log`; record it in job.json."""
    rc = _q(str(work / "rc"))
    wrapper = f"bash {_q(str(script))} >> {_q(str(log))} 2>&1; echo $? > {rc}.tmp; mv {rc}.tmp {rc}"
    proc = subprocess.Popen(
        ["bash", "-c", wrapper],
        cwd=str(work),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    job = {
        "pid": proc.pid,
        "proc_start": _proc_start(proc.pid),
        "boot_id": _boot_id(),
        "started": time.time(),
        "log": str(log),
        "key": key,
        "phase": phase,
        "timeout_minutes": timeout_minutes,
        **extra,
    }
    tmp = work / "job.json.tmp"
    tmp.write_text(json.dumps(job), encoding="utf-8")
    os.replace(tmp, work / "job.json")
    return job


def attached(root: str | os.PathLike[str], name: str, key: str) -> Optional[dict[str, Any]]:
    """The build of this key a previous run left behind: `running` (still alive) or `ended`
    (exit status written, not yet verified); None when there is none or it is gone."""
    work = work_dir(root, name, key)
    job = _read_job(work)
    if job is None or job.get("key") != key:
        return None
    info = {"changed": False, "log": job["log"], "started": job["started"], "pid": job["pid"], "reattached": True}
    if (work / "rc").exists():
        return {"status": "ended", **info}
    if _alive(job):
        return {"status": "running", **info}
    return None


@contextlib.contextmanager
def _start_lock(root: str | os.PathLike[str], name: str, key: str, check: bool) -> Any:
    if check:  # check mode changes nothing, not even a lock file
        yield
        return
    lock = Path(root) / "work" / f".{name}-{key[:12]}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a", encoding="ascii") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _proc_start(pid: int) -> Optional[int]:
    """The start time (clock ticks after boot) of a process: with the boot id it tells a reused pid."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _read_job(work: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads((work / "job.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _alive(job: Mapping[str, Any]) -> bool:
    """Whether the recorded build process still runs: same pid, same boot, same start time, not a zombie."""
    try:
        pid = int(job["pid"])
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if job.get("boot_id") and _boot_id() and job["boot_id"] != _boot_id():
        return False  # the host rebooted: the pid belongs to something else
    if job.get("proc_start") is not None and _proc_start(pid) not in (None, job["proc_start"]):
        return False  # the pid was reused
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def tail(path: str | os.PathLike[str], lines: int = 25) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            return "\n".join(handle.read().decode("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait(
    item: Mapping[str, Any],
    root: str,
    wait_seconds: float,
    cuobjdump: Optional[str] = None,
) -> dict[str, Any]:
    """Wait up to wait_seconds for the build; when it has ended, verify and cache it, or clean up and raise.

    A prebuilt phase that fails (not reachable, not verified, wrong local version) starts the
    source build in the same work directory and keeps waiting; the reason is kept in the record."""
    name, key = item["name"], item["key"]
    record = cached(root, name, key)
    if record is not None:
        return {"done": True, "status": "cached", "artifact": record}
    work = work_dir(root, name, key)
    job = _read_job(work)
    if job is None:
        raise BuildError(f"{name}: no build of key {key[:12]} is running (no {work / 'job.json'})")
    deadline = time.monotonic() + wait_seconds
    rc_file = work / "rc"
    while True:
        while not rc_file.exists():
            elapsed = time.time() - job["started"]
            if elapsed > job["timeout_minutes"] * 60:
                _kill(job)
                _discard(work)
                raise BuildError(
                    f"{name}: build exceeded {job['timeout_minutes']} minutes and was stopped (the build spec's timeout_minutes: raise it "
                    f"in the spec named {name} of sglang_build_specs, e.g. roles/toolkit_defaults/defaults/main/build.yml, if the build "
                    f"was progressing); log {job['log']}:\n{tail(job['log'])}"
                )
            if not _alive(job):
                time.sleep(0.5)
                if rc_file.exists():
                    break
                _discard(work)
                raise BuildError(
                    f"{name}: build was interrupted (process {job['pid']} is gone, no exit status); nothing cached; "
                    f"log {job['log']}:\n{tail(job['log'])}"
                )
            if time.monotonic() >= deadline:
                return {
                    "done": False,
                    "status": "running",
                    "phase": job.get("phase", "source"),
                    "elapsed": int(elapsed),
                    "log": job["log"],
                    "last_line": tail(job["log"], 1),
                }
            time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
        rc = rc_file.read_text().strip()
        elapsed = int(time.time() - job["started"])
        out = work / "out"
        wheels = sorted(out.glob("*.whl"))
        phase = job.get("phase", "source")
        problem = None
        if rc != "0":
            problem = f"exit status {rc} after {elapsed} s"
        elif not wheels:
            problem = "it left no wheel in $WHEEL_DIR"
        else:
            try:
                check_lock(item, wheels, job)
                check_local_version(wheels, item["spec"].get("local_version"))
                evidence = verify_wheels(wheels, item["spec"]["verify"], cuobjdump)
            except (BuildError, ClosureLockError) as exc:
                problem = str(exc)
        if problem is None:
            break
        if phase == "prebuilt":
            reason = f"prebuilt wheel not used: {problem}"
            with open(job["log"], "a", encoding="utf-8") as handle:
                handle.write(f"== {reason}\n== building from source instead\n")
            shutil.rmtree(out, ignore_errors=True)
            rc_file.unlink()
            job = _launch(work, work / "build.sh", Path(job["log"]), key, "source", job["timeout_minutes"], prebuilt_rejected=reason)
            continue
        _discard(work)
        if rc != "0":
            raise BuildError(
                f"{name}: build failed with exit status {rc} after {elapsed} s; nothing cached; "
                f"log {job['log']}, last lines:\n{tail(job['log'])}"
            )
        if not wheels:
            raise BuildError(f"{name}: build succeeded but left no wheel in $WHEEL_DIR; nothing cached; log {job['log']}")
        raise BuildError(f"{name}: {problem}; nothing cached")
    spec = item["spec"]
    record = {
        "name": name,
        "package": item["package"],
        "key": key,
        "kind": item["kind"],
        "origin": "prebuilt" if phase == "prebuilt" else "built" if item["kind"] in BUILT_KINDS else "downloaded",
        "depends_on": item["depends_on"],
        "build_seconds": elapsed,
        "log": job["log"],
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wheels": evidence,
        "local_version": spec.get("local_version"),
        "pins": list(spec.get("pins", [])),
    }
    if job.get("prebuilt_rejected"):
        record["prebuilt_rejected"] = job["prebuilt_rejected"]
    if item.get("lock"):
        record["lock"] = {
            "file": item["lock"]["file"],
            "digest": item["lock"]["digest"],
            "exempt": list(job.get("lock_exempt", [])),
            "held": dict(job.get("lock_held", {})),
        }
    if phase == "prebuilt" and isinstance(spec.get("prebuilt"), Mapping) and spec["prebuilt"].get("origin"):
        record["prebuilt_origin"] = spec["prebuilt"]["origin"]
    record["installs"] = own_wheels(record)
    (out / ARTIFACT_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    final = cache_dir(root, name, key)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        shutil.rmtree(final)
    os.rename(out, final)
    _discard(work)
    return {"done": True, "status": "built", "artifact": record}


def check_lock(item: Mapping[str, Any], wheels: Sequence[Path], job: Mapping[str, Any]) -> None:
    """A locked download (the item's `lock`): every wheel in $WHEEL_DIR is one the lock allows, but for the
    distributions of the dependencies' own wheels (job.json's lock_exempt, written by start()) and what those wheels
    pin exactly themselves (lock_held); ClosureLockError naming each one that is not (closure_lock.check_wheels).
    Nothing to check without a lock."""
    lock = item.get("lock")
    if not lock:
        return
    if "lock_exempt" not in job:
        raise BuildError(f"{item['name']}: the build was started without its lock's exemptions (job.json has no lock_exempt); run it again")
    what = f"{item['spec']['source'].get('wheel')} with its dependencies"
    check_wheels(parse_lock(lock["text"], lock["file"]), wheels, job["lock_exempt"], what, held=job.get("lock_held", {}))


def _kill(job: Mapping[str, Any]) -> None:
    with contextlib.suppress(OSError, ValueError):
        os.killpg(int(job["pid"]), signal.SIGTERM)


def _discard(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
