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
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

try:  # inside Ansible (AnsiballZ ships it as ansible.module_utils.cuda_toolkit)
    from ansible.module_utils.cuda_toolkit import cudart_major, elf_needed, gpu_targets  # type: ignore[import-not-found]
except ImportError:  # plain Python: module_utils/ is on sys.path
    from cuda_toolkit import cudart_major, elf_needed, gpu_targets  # type: ignore[no-redef]

KEY_SCHEMA = 1
SPEC_FIELDS = {
    "name": "artifact name (also the pip distribution installed into releases unless `package` says otherwise)",
    "package": "pip distribution name the wheel provides",
    "source": "exactly one of git/ref, sdist, wheel, wheelhouse, path (see SOURCE_KINDS)",
    "depends_on": "artifact names whose wheels are installed into this build's venv first",
    "env": "environment for the build (mapping of strings)",
    "build": "bash script run in the source directory; must leave wheels in $WHEEL_DIR",
    "build_requires": "pip requirements installed into the build venv before building",
    "jobs_env": "variable names that receive the derived parallelism (MAX_JOBS, ...)",
    "mem_per_job_gib": "memory one compile job needs, for the parallelism",
    "verify": "what every wheel must show: cuda_arch, ptx_ok, cudart, device_code",
    "install": "whether releases install it (false: build-only, e.g. a test fixture)",
    "timeout_minutes": "build time limit",
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
SOURCE_FIELDS = {"git", "ref", "submodules", "sdist", "wheel", "with_deps", "index", "wheelhouse", "pattern", "path"}
VERIFY_FIELDS = {"cuda_arch", "ptx_ok", "cudart", "device_code"}
DEVICE_CODE = ("required", "if-present", "none")
BUILT_KINDS = ("git", "sdist", "path")
ARTIFACT_FILE = "artifact.json"


class BuildSpecError(Exception):
    """A build spec is malformed; the message names the artifact and the field."""


class BuildError(Exception):
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
    source = spec.get("source")
    _need(
        isinstance(source, Mapping) and bool(source),
        name,
        "`source` is missing; give one of " + "; ".join(f"{k}: {v}" for k, v in SOURCE_KINDS.items()),
    )
    bad = sorted(set(source) - SOURCE_FIELDS)
    _need(not bad, name, f"unknown source field {', '.join(bad)}; known: {', '.join(sorted(SOURCE_FIELDS))}")
    kinds = [k for k in SOURCE_KINDS if k in source]
    _need(len(kinds) == 1, name, f"`source` needs exactly one of {', '.join(SOURCE_KINDS)}, found {', '.join(kinds) or 'none'}")
    kind = kinds[0]
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
    for key in ("depends_on", "build_requires", "jobs_env"):
        value = spec.get(key, [])
        _need(isinstance(value, list) and all(isinstance(v, str) for v in value), name, f"`{key}` must be a list of strings")
    verify = spec.get("verify", {})
    _need(isinstance(verify, Mapping), name, "`verify` must be a mapping")
    unknown_verify = sorted(set(verify) - VERIFY_FIELDS)
    _need(not unknown_verify, name, f"unknown verify field {', '.join(unknown_verify)}; known: {', '.join(sorted(VERIFY_FIELDS))}")
    device_code = verify.get("device_code", "required")
    _need(device_code in DEVICE_CODE, name, f"verify.device_code must be one of {', '.join(DEVICE_CODE)}, found {device_code!r}")
    if device_code != "none":
        _need(re.fullmatch(r"\d+\.\d+[af]?", str(verify.get("cuda_arch", ""))) is not None, name, "verify.cuda_arch must look like 12.0")
    cudart = verify.get("cudart")
    _need(
        cudart is None or re.fullmatch(r"\d+", str(cudart)) is not None,
        name,
        f"verify.cudart must be a major version like 13, found {cudart!r}",
    )
    for key in ("mem_per_job_gib", "timeout_minutes"):
        if key in spec:
            _need(isinstance(spec[key], (int, float)) and spec[key] > 0, name, f"`{key}` must be a positive number")
    out = dict(spec)
    out.setdefault("package", name)
    out.setdefault("depends_on", [])
    out.setdefault("env", {})
    out.setdefault("build_requires", [])
    out.setdefault("jobs_env", [])
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


def file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
        key_input = {
            "schema": KEY_SCHEMA,
            "spec": {k: v for k, v in spec.items() if k not in ("jobs_env", "mem_per_job_gib", "timeout_minutes", "install")},
            "controller": extra,
            "context": dict(context),
            "deps": {dep: keys[dep] for dep in spec["depends_on"]},
        }
        keys[name] = hashlib.sha256(json.dumps(key_input, sort_keys=True).encode()).hexdigest()
        kind = next(k for k in SOURCE_KINDS if k in spec["source"])
        planned.append(Planned(name, spec["package"], keys[name], kind, list(spec["depends_on"]), spec, files))
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


# ---------------------------------------------------------------- verification


@dataclass
class SharedObject:
    path: str
    targets: list[str]
    cudart: list[str]


def verify_wheel(wheel: str | os.PathLike[str], rules: Mapping[str, Any], cuobjdump: Optional[str] = None) -> dict[str, Any]:
    """Unpack a wheel's shared objects and check GPU targets and the CUDA runtime they link.

    Raises BuildError with what was found. Returns the evidence recorded in manifests.
    """
    wheel = Path(wheel)
    arch = str(rules.get("cuda_arch", "")).rstrip("af").replace(".", "")
    device_code = rules.get("device_code", "required")
    want_cudart = str(rules["cudart"]) if rules.get("cudart") is not None else None
    objects: list[SharedObject] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="verify-") as tmp, zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if not re.search(r"\.so(\.\d+)*$", member):
                continue
            target = Path(tmp) / "lib.so"
            target.write_bytes(archive.read(member))
            needed = elf_needed(str(target)) or []
            targets = _cuobjdump_targets(cuobjdump, str(target)) if cuobjdump else gpu_targets(str(target))
            objects.append(SharedObject(member, targets, cudart_major(needed)))
    with_code = [o for o in objects if o.targets]
    if device_code == "required" and not with_code:
        problems.append(f"no shared object with GPU code (shared objects: {', '.join(o.path for o in objects) or 'none'})")
    if device_code != "none":
        for obj in with_code:
            has_sm = f"sm_{arch}" in obj.targets
            has_ptx = f"compute_{arch}" in obj.targets
            if not (has_sm or (rules.get("ptx_ok") and has_ptx)):
                wanted = f"sm_{arch}" + (f" or compute_{arch} PTX" if rules.get("ptx_ok") else "")
                problems.append(f"{obj.path}: expected {wanted}, found {', '.join(obj.targets)}")
    if want_cudart:
        for obj in objects:
            wrong = [m for m in obj.cudart if m != want_cudart]
            if wrong:
                problems.append(f"{obj.path}: links libcudart.so.{wrong[0]}, expected libcudart.so.{want_cudart}")
    if problems:
        raise BuildError(f"{wheel.name} rejected: " + "; ".join(problems))
    return {
        "wheel": wheel.name,
        "sha256": file_sha256(wheel),
        "witness": f"cuobjdump --list-elf ({cuobjdump})" if cuobjdump else "built-in ELF/fatbin reader",
        "shared_objects": [asdict(o) for o in objects],
    }


def _cuobjdump_targets(cuobjdump: str, path: str) -> list[str]:
    found: set[str] = set()
    for flag, pattern in (("--list-elf", r"\.(sm_\d+[af]?)\.cubin"), ("--list-ptx", r"\.(sm_\d+[af]?)\.ptx")):
        proc = subprocess.run([cuobjdump, flag, path], capture_output=True, text=True, check=False)
        if proc.returncode != 0 and "does not contain device code" not in (proc.stdout + proc.stderr):
            raise BuildError(f"{cuobjdump} {flag} {path} failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
        for match in re.finditer(pattern, proc.stdout):
            target = match.group(1).rstrip("af")
            found.add(target if flag == "--list-elf" else target.replace("sm_", "compute_"))
    return sorted(found)


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


def work_dir(root: str | os.PathLike[str], name: str, key: str) -> Path:
    return Path(root) / "work" / f"{name}-{key[:12]}"


def log_path(root: str | os.PathLike[str], name: str, key: str) -> Path:
    return Path(root) / "logs" / f"{name}-{key[:12]}.log"


def _q(value: str) -> str:
    return shlex.quote(value)


def build_script(
    item: Mapping[str, Any],
    root: str,
    staged: Optional[str],
    python: str,
    dep_dirs: Mapping[str, str],
    jobs: int,
    cuda_home: str,
) -> str:
    """The bash script a detached build runs (kept in the work directory for the operator to read)."""
    spec = item["spec"]
    source = spec["source"]
    work = work_dir(root, item["name"], item["key"])
    lines = [
        "#!/bin/bash",
        f"# build of {item['name']} (key {item['key']}), written by the sglang-sm120 build pipeline",
        "set -euo pipefail",
        f"cd {_q(str(work))}",
        f"export WHEEL_DIR={_q(str(work / 'out'))} CUDA_HOME={_q(cuda_home)} SGLANG_BUILD_JOBS={jobs}",
        'export PATH="$CUDA_HOME/bin:$PATH" LD_LIBRARY_PATH="$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"',
        'mkdir -p "$WHEEL_DIR"',
        'echo "== $(date -u +%FT%TZ) start"',
    ]
    for var in spec.get("jobs_env", []):
        lines.append(f"export {var}={jobs}")
    for var, value in sorted(spec.get("env", {}).items()):
        lines.append(f"export {var}={_q(str(value))}")
    index = ["--index-url", source["index"]] if source.get("index") else []
    if "git" in source:
        lines += [
            f"git clone --quiet {_q(source['git'])} src",
            f"git -C src checkout --quiet {_q(source['ref'])}",
        ]
        if source.get("submodules", True):
            lines.append("git -C src submodule update --init --recursive --quiet")
    elif "sdist" in source:
        lines += [
            "mkdir -p dl src",
            " ".join(["python3 -m pip download --quiet --no-deps --no-binary :all: -d dl", *map(_q, index), _q(source["sdist"])]),
            "tar -xf dl/*.tar.gz -C src --strip-components=1",
        ]
    elif "wheel" in source:
        deps = [] if source.get("with_deps") else ["--no-deps"]
        links = [f"--find-links {_q(d)}" for d in dep_dirs.values()]
        lines.append(
            " ".join(
                [
                    "python3 -m pip download --quiet",
                    *deps,
                    *links,
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
            lines.append(f"cp -a {_q(staged)} src")
    if item["kind"] in BUILT_KINDS:
        lines.append(f"{_q(python)} -m venv venv")
        if dep_dirs:
            links = " ".join(f"--find-links {_q(d)}" for d in dep_dirs.values())
            packages = " ".join(_q(p) for p in dep_dirs)
            lines.append(f"venv/bin/pip install --quiet --no-index {links} {packages}")
        if spec.get("build_requires"):
            lines.append(" ".join(["venv/bin/pip install --quiet", *map(_q, index), *map(_q, spec["build_requires"])]))
        lines += [
            'export VIRTUAL_ENV="$PWD/venv" PATH="$PWD/venv/bin:$PATH"',
            "cd src",
            'echo "== $(date -u +%FT%TZ) build"',
            spec["build"].rstrip(),
        ]
    lines.append('echo "== $(date -u +%FT%TZ) done"')
    return "\n".join(lines) + "\n"


def start(
    item: Mapping[str, Any],
    root: str,
    staged: Optional[str],
    python: str,
    dep_dirs: Mapping[str, str],
    jobs: int,
    cuda_home: str,
    check: bool = False,
) -> dict[str, Any]:
    """Start the detached build of `item` unless its key is cached or a build of it is running."""
    name, key = item["name"], item["key"]
    record = cached(root, name, key)
    if record is not None:
        return {"status": "cached", "changed": False, "artifact": record}
    work = work_dir(root, name, key)
    job = _read_job(work)
    if job and _alive(job) and not (work / "rc").exists():
        return {"status": "running", "changed": False, "log": job["log"], "started": job["started"]}
    if check:
        return {"status": "would-build", "changed": True}
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = log_path(root, name, key)
    log.parent.mkdir(parents=True, exist_ok=True)
    script = work / "build.sh"
    script.write_text(build_script(item, root, staged, python, dep_dirs, jobs, cuda_home), encoding="utf-8")
    script.chmod(0o755)
    rc = _q(str(work / "rc"))
    wrapper = f"bash {_q(str(script))} > {_q(str(log))} 2>&1; echo $? > {rc}.tmp; mv {rc}.tmp {rc}"
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
        "started": time.time(),
        "log": str(log),
        "key": key,
        "timeout_minutes": item["spec"].get("timeout_minutes", 600),
    }
    (work / "job.json").write_text(json.dumps(job), encoding="utf-8")
    return {"status": "started", "changed": True, "log": str(log), "started": job["started"]}


def _read_job(work: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads((work / "job.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _alive(job: Mapping[str, Any]) -> bool:
    try:
        os.kill(int(job["pid"]), 0)
    except (OSError, ValueError, KeyError):
        return False
    # A zombie (our own exited child) is not alive; a reused pid would not have our work dir open.
    try:
        with open(f"/proc/{int(job['pid'])}/stat", encoding="ascii") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
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
    """Wait up to wait_seconds for the build; when it has ended, verify and cache it, or clean up and raise."""
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
    while not rc_file.exists():
        elapsed = time.time() - job["started"]
        if elapsed > job["timeout_minutes"] * 60:
            _kill(job)
            _discard(work)
            raise BuildError(
                f"{name}: build exceeded {job['timeout_minutes']} minutes and was stopped; log {job['log']}:\n{tail(job['log'])}"
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
            return {"done": False, "status": "running", "elapsed": int(elapsed), "log": job["log"], "last_line": tail(job["log"], 1)}
        time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
    rc = rc_file.read_text().strip()
    elapsed = int(time.time() - job["started"])
    if rc != "0":
        _discard(work)
        raise BuildError(
            f"{name}: build failed with exit status {rc} after {elapsed} s; nothing cached; "
            f"log {job['log']}, last lines:\n{tail(job['log'])}"
        )
    out = work / "out"
    wheels = sorted(out.glob("*.whl"))
    if not wheels:
        _discard(work)
        raise BuildError(f"{name}: build succeeded but left no wheel in $WHEEL_DIR; nothing cached; log {job['log']}")
    try:
        evidence = [verify_wheel(w, item["spec"]["verify"], cuobjdump) for w in wheels]
    except BuildError as exc:
        _discard(work)
        raise BuildError(f"{name}: {exc}; nothing cached") from exc
    record = {
        "name": name,
        "package": item["package"],
        "key": key,
        "kind": item["kind"],
        "depends_on": item["depends_on"],
        "build_seconds": elapsed,
        "log": job["log"],
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wheels": evidence,
    }
    (out / ARTIFACT_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    final = cache_dir(root, name, key)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        shutil.rmtree(final)
    os.rename(out, final)
    _discard(work)
    return {"done": True, "status": "built", "artifact": record}


def _kill(job: Mapping[str, Any]) -> None:
    with contextlib.suppress(OSError, ValueError):
        os.killpg(int(job["pid"]), signal.SIGTERM)


def _discard(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
