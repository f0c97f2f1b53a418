"""`make rehearsal`: the production build specs run on a machine without a GPU or git access.

Plain Python, standard library and the sibling modules only (no Ansible); scripts/rehearsal.py is
the command line. Each check is a function that returns what it saw (PASS) or raises
RehearsalError naming the artifact or file, what was expected and what was found (FAIL).

What cannot be compiled here (torch, flashinfer, flashinfer-jit-cache, sgl-kernel: hours of CUDA
builds from git) is replaced by STAND-IN source trees (tests/fixtures/rehearsal-standins): the
upstream's build requirements and a build backend that writes a wheel with exactly the name,
version (from where the real build takes it), tag and Requires-Dist of the real build, holding
small real CUDA objects compiled here with nvcc 13.0.1 for the SM120 target the spec asks for.
Everything else is the production code path: the build pipeline's plan, build venvs with the
declared build requirements really installed, dependency installs, verification, the sglang
dependency closure from the package index, and the release install with read-back.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from sglang_sm120.build.pipeline import (
    BUILT_KINDS,
    BuildError,
    SharedObject,
    Workspace,
    cache_dir,
    check_local_version,
    check_objects,
    gpu_code,
    normalize,
    start,
    verify_wheels,
    wait,
    wheel_name_version,
)
from sglang_sm120.errors import ToolkitError
from sglang_sm120.host.cuda_toolkit import cudart_major, elf_needed, parse_requires_dist
from sglang_sm120.release.install import constraints_text, find_dist, install_argv, read_back, release_wheels, site_packages

from .upstream import (
    RECORDED,
    ArchEntry,
    ArchListError,
    Reference,
    ReferenceError,
    UpstreamFile,
    admitted_outside,
    parse_requirement,
    read_arch_list,
)

SO = re.compile(r"\.so(\.\d+)*$")


class RehearsalError(ToolkitError):
    """A rehearsal check failed; the message names the artifact or file, expected and found."""


class Unchecked(ToolkitError):
    """A check could not be made (an upstream file it needs was not read at its tag): reported as
    UNCHECKED, never as a pass; the message says what was not checked and why."""


@dataclass
class Outcome:
    name: str
    ok: bool
    detail: str
    unchecked: bool = False

    @property
    def failed(self) -> bool:
        return not self.ok and not self.unchecked

    def line(self) -> str:
        return f"{'UNCHECKED' if self.unchecked else 'PASS' if self.ok else 'FAIL'} {self.name}: {self.detail}"


def run_check(name: str, check: Callable[..., str], *args: Any, **kwargs: Any) -> Outcome:
    """Run one check; any exception is its FAIL line (the message says why), Unchecked its UNCHECKED line."""
    try:
        return Outcome(name, True, check(*args, **kwargs))
    except Unchecked as exc:
        return Outcome(name, False, " ".join(str(exc).split())[:3000], unchecked=True)
    except Exception as exc:
        text = str(exc).strip() or type(exc).__name__
        return Outcome(name, False, " ".join(text.split())[:3000])


def summary(outcomes: Sequence[Outcome]) -> str:
    failed = sum(1 for o in outcomes if o.failed)
    unchecked = sum(1 for o in outcomes if o.unchecked)
    passed = len(outcomes) - failed - unchecked
    return f"{passed} passed, {failed} failed" + (f", {unchecked} unchecked" if unchecked else "")


# ---------------------------------------------------------------- facts of the upstream tags


def fact(facts: Mapping[str, Any], artifact: str, key: str, default: Any = None) -> Any:
    entry = (facts.get(artifact) or {}).get(key)
    return entry.get("value", default) if isinstance(entry, Mapping) else default


def requirement_name(requirement: str) -> str:
    return normalize(re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0])


def _by_name(specs: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {s["name"]: s for s in specs}


def _spec(specs: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    found = _by_name(specs).get(name)
    if found is None:
        raise RehearsalError(f"the production specs define no {name!r} (defined: {', '.join(s['name'] for s in specs)})")
    return found


def git_source(spec: Mapping[str, Any]) -> tuple[str, str]:
    """(owner/name, ref) of a spec's GitHub source."""
    source = spec.get("source", {})
    match = re.fullmatch(r"https://github\.com/([^/]+/[^/]+?)(?:\.git)?/?", str(source.get("git", "")))
    if not match or not source.get("ref"):
        raise RehearsalError(f"{spec['name']}: source expected a GitHub git URL and a ref, found {dict(source)}")
    return match.group(1), str(source["ref"])


def reference_file(spec: Mapping[str, Any], facts: Mapping[str, Any], reference: Reference, key: str) -> UpstreamFile:
    """The recorded upstream file `key` (a facts entry naming its path) at the spec's ref; a ref without
    recorded files is refused (RehearsalError), a file not read at the tag is Unchecked."""
    name = spec["name"]
    repo, ref = git_source(spec)
    value = fact(facts, name, key)
    path = value["path"] if isinstance(value, Mapping) else value
    if not path:
        raise RehearsalError(f"{name}: tests/data/upstream-build-facts.yml names no {key} for it")
    entry = reference.get(repo, ref, str(path))
    if entry is None:
        tags = reference.tags(repo)
        raise RehearsalError(
            f"{name}: source ref {ref} of {repo} has no recorded {path} ({reference.index} records "
            f"{', '.join(tags) or 'no tag'} of {repo}): refused, nothing says what that ref builds"
        )
    if entry.status != RECORDED:
        raise Unchecked(f"{name}: {entry.where()} was not read at the tag ({entry.reason})")
    return entry


def check_build_requires(specs: Sequence[Mapping[str, Any]], facts: Mapping[str, Any], reference: Reference, name: str) -> str:
    """The spec's build_requires (or a depends_on artifact) admit only versions its ref's [build-system]
    requires admit (read from the recorded pyproject.toml, bounds included), and the facts' extra build
    requirements likewise. A pyproject not read at the tag makes it UNCHECKED (after the extras, and the
    bounds the facts state for the unread file, stated_build_system_requires, are checked: a spec admitting
    what one of those excludes FAILS; agreeing with them is still no pass, the file was not read)."""
    spec = _spec(specs, name)
    by_name = _by_name(specs)
    needed: list[tuple[str, str]] = []
    unchecked = ""
    try:
        entry = reference_file(spec, facts, reference, "build_system_file")
        needed += [(r, f"{entry.where()} [build-system] requires") for r in entry.extract.get("build_system_requires", [])]
    except Unchecked as exc:
        unchecked = str(exc)
        stated = facts.get(name, {}).get("stated_build_system_requires") or {}
        for item in fact(facts, name, "stated_build_system_requires", []):
            needed.append(
                (
                    str(item["requirement"]),
                    f"{item['from']}, tests/data/upstream-build-facts.yml {name}.stated_build_system_requires "
                    f"(verified: {str(stated.get('verified')).lower()})",
                )
            )
    source = (facts.get(name, {}).get("extra_build_requires") or {}).get("source", {})
    needed += [
        (r, f"{source.get('repo')} {source.get('ref')} {source.get('path')} (facts)") for r in fact(facts, name, "extra_build_requires", [])
    ]
    have = {}
    for text in spec.get("build_requires", []):
        requirement = parse_requirement(text, f"{name}: build_requires")
        have[normalize(requirement.name)] = requirement
    provided = {normalize(by_name[d].get("package", d)) for d in spec.get("depends_on", []) if d in by_name}
    problems, covered = [], []
    for text, where in needed:
        theirs = parse_requirement(text, where)
        key = normalize(theirs.name)
        if key in provided:
            covered.append(f"{theirs.name} (depends_on)")
            continue
        ours = have.get(key)
        if ours is None:
            problems.append(
                f"{name}: build_requires lacks {text} (required by {where}; found build_requires {list(spec.get('build_requires', []))})"
            )
            continue
        try:
            witness = admitted_outside(ours.specifier, theirs.specifier, f"{name}: {ours} vs {where}")
        except ReferenceError as exc:
            problems.append(str(exc))
            continue
        if witness is not None:
            problems.append(
                f"{name}: build_requires {ours} admits {theirs.name} {witness}, which the upstream bound {text} of {where} excludes "
                f"(pip may install it, and the build's dependency check stops): expected bounds that admit nothing {text} excludes"
            )
        covered.append(str(ours))
    if problems:
        raise RehearsalError("; ".join(problems))
    if unchecked:
        raise Unchecked(
            f"{unchecked}: its [build-system] requires and their bounds are not checked; "
            f"the facts' extras and stated bounds are covered ({', '.join(dict.fromkeys(covered)) or 'none'}), "
            "which is no pass while the file is not read"
        )
    return f"{name}: {len(covered)} build requirements within upstream's bounds ({', '.join(covered)})"


def check_source_identity(
    specs: Sequence[Mapping[str, Any]], facts: Mapping[str, Any], reference: Reference, stack: Mapping[str, Any], name: str
) -> str:
    """The version the spec's ref produces, read from that tag's recorded version file, is the version the stack needs."""
    spec = _spec(specs, name)
    _, ref = git_source(spec)
    entry = reference_file(spec, facts, reference, "version_file")
    key = (fact(facts, name, "version_file") or {}).get("key", "version")
    version = entry.extract.get(key)
    variable = str(fact(facts, name, "stack_version", ""))
    if variable not in stack:
        raise RehearsalError(f"{name}: the stack has no {variable or 'stack_version (facts)'} to compare {entry.where()} with")
    needed = str(stack[variable])
    if version is None:
        raise RehearsalError(f"{name}: {entry.where()} recorded without {key!r} (the version the ref builds)")
    if str(version) != needed:
        raise RehearsalError(
            f"{name}: source ref {ref} builds version {version} ({entry.where()}), the stack needs {needed} ({variable}): "
            f"expected a ref whose {entry.path} says {needed}"
        )
    return f"{name}: ref {ref} builds {version} ({entry.where()}) = {variable}"


def check_facts_agree(facts: Mapping[str, Any], reference: Reference) -> str:
    """Every fact whose source is a recorded upstream file says what that file says (wheel tag strings,
    environment variables, dependencies); a source file not read at its tag makes it UNCHECKED."""
    problems, agreed, unchecked = [], [], []
    for artifact, entries in facts.items():
        if not isinstance(entries, Mapping) or "value" in entries:
            continue
        for key, entry in entries.items():
            if not isinstance(entry, Mapping) or "source" not in entry:
                continue
            source = entry["source"]
            upstream = reference.get(str(source.get("repo")), str(source.get("ref")), str(source.get("path")))
            if upstream is None:
                continue
            where = f"tests/data/upstream-build-facts.yml {artifact}.{key}"
            if key in ("build_system_file", "version_file", "stack_version", "source_subdir", "objects", "cmake_options"):
                continue  # where to look, not what the file says
            if upstream.status != RECORDED:
                unchecked.append(f"{where} ({upstream.where()} not read)")
                continue
            value, found = entry.get("value"), upstream.extract
            if key == "wheel_tag":
                missing = [part for part in str(value).split("-") if part not in found.get("get_tag_strings", [])]
                if missing:
                    problems.append(
                        f"{where}: wheel tag {value!r} has {', '.join(missing)}, which {upstream.where()} get_tag() does not name "
                        f"(its strings: {', '.join(found.get('get_tag_strings', [])) or 'no get_tag'})"
                    )
            elif key in ("local_version_env", "requires_env", "arch_env") or (key == "version_from" and "env:" in str(value)):
                variable = str(value).rsplit("env:", 1)[-1]
                if variable not in found.get("environment", []):
                    problems.append(
                        f"{where}: expected {upstream.where()} to read {variable}, found it reads {found.get('environment', [])}"
                    )
            elif key == "runtime_requires":
                if list(value or []) != list(found.get("project_dependencies", [])):
                    problems.append(
                        f"{where}: {value} differs from {upstream.where()} [project] dependencies {found.get('project_dependencies')}"
                    )
            else:
                continue
            agreed.append(f"{artifact}.{key}")
    if problems:
        raise RehearsalError("; ".join(problems))
    if unchecked:
        raise Unchecked(f"{len(agreed)} facts agree with their recorded files; not checked: {'; '.join(unchecked)}")
    return f"{len(agreed)} facts agree with their recorded upstream files"


def check_cmake_options(specs: Sequence[Mapping[str, Any]], facts: Mapping[str, Any]) -> str:
    """CMake cache variables reach a build only through CMAKE_ARGS (-DNAME=...), never as environment variables."""
    problems, seen = [], []
    for spec in specs:
        options = fact(facts, spec["name"], "cmake_options", [])
        env = spec.get("env", {})
        for option in options:
            if option in env:
                problems.append(
                    f"{spec['name']}: {option} is a CMake cache variable, set as an environment variable (does nothing); "
                    f'expected CMAKE_ARGS="-D{option}=...", found env {option}={env[option]!r}'
                )
        try:
            defines = cmake_defines(spec)
        except RehearsalError as exc:
            problems.append(str(exc))
            continue
        seen += [f"{spec['name']}: -D{define}" for define in defines]
    if problems:
        raise RehearsalError("; ".join(problems))
    return "CMake options only through CMAKE_ARGS (" + (", ".join(seen) or "none set") + ")"


def check_triton_pin(specs: Sequence[Mapping[str, Any]], facts: Mapping[str, Any]) -> str:
    """torch pins the triton its upstream wheel pins: in the wheel it builds and wherever it is installed."""
    torch = _spec(specs, "torch")
    pin = fact(facts, "torch", "triton_pin")
    env_name = fact(facts, "torch", "requires_env", "PYTORCH_EXTRA_INSTALL_REQUIREMENTS")
    extra = [r.split(";")[0].strip() for r in str(torch.get("env", {}).get(env_name, "")).split("|") if r.strip()]
    problems = []
    if pin not in torch.get("pins", []):
        problems.append(f"torch: pins expected to hold {pin}, found {torch.get('pins', [])}")
    if pin not in extra:
        problems.append(f"torch: env {env_name} expected to declare {pin} (a source build declares no triton), found {extra or 'nothing'}")
    if problems:
        raise RehearsalError("; ".join(problems))
    return f"torch pins {pin} and its wheel declares it ({env_name})"


def check_flashinfer_arch(specs: Sequence[Mapping[str, Any]], facts: Mapping[str, Any], cuda_version: str) -> str:
    """FlashInfer builds use the family target its tag needs on this CUDA (12.0f on CUDA 13)."""
    checked = []
    problems = []
    for spec in specs:
        required = (facts.get(spec["name"], {}).get("arch_env") or {}).get("required_on_cuda13")
        if not required or int(cuda_version.split(".")[0]) < 13:
            continue
        var = fact(facts, spec["name"], "arch_env")
        found = spec.get("env", {}).get(var)
        if found != required:
            problems.append(
                f"{spec['name']}: env {var} expected {required!r} on CUDA {cuda_version} "
                f"(plain 12.0 fails, flashinfer #1966), found {found!r}"
            )
        checked.append(f"{spec['name']}={found}")
    if problems:
        raise RehearsalError("; ".join(problems))
    if not checked:
        raise RehearsalError("no FlashInfer spec found to check FLASHINFER_CUDA_ARCH_LIST")
    return "FLASHINFER_CUDA_ARCH_LIST " + ", ".join(checked)


def check_local_versions(specs: Sequence[Mapping[str, Any]], facts: Mapping[str, Any]) -> str:
    """Every artifact built here carries the local label (cu130), and builds that name it themselves get the same."""
    label = fact(facts, "local_version", "value") or (facts.get("local_version") or {}).get("value")
    problems, checked = [], []
    for spec in specs:
        if not any(k in spec.get("source", {}) for k in BUILT_KINDS) or spec["name"] not in facts:
            continue
        if spec.get("local_version") != label:
            problems.append(
                f"{spec['name']}: local_version expected {label!r} (else an upstream wheel of the same version outranks ours), "
                f"found {spec.get('local_version')!r}"
            )
        env_name = fact(facts, spec["name"], "local_version_env")
        if env_name and spec.get("env", {}).get(env_name) != label:
            problems.append(f"{spec['name']}: env {env_name} expected {label!r}, found {spec.get('env', {}).get(env_name)!r}")
        checked.append(spec["name"])
    if problems:
        raise RehearsalError("; ".join(problems))
    return f"+{label} on " + ", ".join(checked)


# ---------------------------------------------------------------- static checks of the other defects


def _tasks(data: Any) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for task in data or []:
        if not isinstance(task, Mapping):
            continue
        out.append(task)
        for key in ("block", "rescue", "always"):
            out += _tasks(task.get(key))
    return out


def check_poll_not_recursive(task_file: Path) -> str:
    """The build poll task file does not include itself (ansible-core aborts after ~250 levels, runs no `always:`)."""
    import yaml  # the controller's venv has it; only this check needs it

    data = yaml.safe_load(task_file.read_text(encoding="utf-8"))
    includes = []
    for task in _tasks(data):
        for key in ("include_tasks", "import_tasks", "ansible.builtin.include_tasks", "ansible.builtin.import_tasks", "include"):
            value = task.get(key)
            target = value.get("file") if isinstance(value, Mapping) else value
            if isinstance(target, str):
                includes.append(target)
                if Path(target).name == task_file.name:
                    raise RehearsalError(
                        f"{task_file}: task {task.get('name', '(unnamed)')!r} includes {target}, the file itself: expected a flat poll "
                        "(until/retries), found recursion that ansible-core 2.19 aborts after about 250 levels"
                    )
    polls = [t for t in _tasks(data) if "until" in t]
    if not polls:
        raise RehearsalError(f"{task_file}: expected a flat poll (a task with until/retries), found none")
    return f"{task_file.name}: flat poll ({polls[0].get('name', 'until')!s:.60}), includes: {', '.join(includes) or 'none'}"


def check_nvidia_keys(repos_dir: Path, expected: Mapping[str, str]) -> str:
    """Each distribution's NVIDIA repository key (file and fingerprint) is the one NVIDIA signs it with."""
    import yaml

    problems, seen = [], []
    for distro, key in expected.items():
        path = repos_dir / f"{distro}.yml"
        if not path.is_file():
            problems.append(f"{path}: missing (expected the repository facts of {distro}, key {key})")
            continue
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        key_file = str(data.get("cuda_toolkit_nvidia_repo_key_file", ""))
        prints = [str(p).upper() for p in data.get("cuda_toolkit_nvidia_repo_key_fingerprints", [])]
        if key_file.lower() != f"{key.lower()}.pub" or not prints or not all(p.endswith(key.upper()) for p in prints):
            problems.append(f"{path}: expected key {key} ({key}.pub, fingerprint ...{key.upper()}), found {key_file or 'none'} {prints}")
        seen.append(f"{distro}={key_file}")
    if problems:
        raise RehearsalError("; ".join(problems))
    return ", ".join(seen)


def fetch_meta_wheel(python: str, requirement: str, dest: Path) -> Path:
    """NVIDIA's cuda-toolkit meta wheel (pip download --no-deps), kept in `dest`."""
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    found = sorted(dest.glob(pattern))
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [python, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:", "-d", str(dest), requirement],
            capture_output=True,
            text=True,
            check=False,
        )
        found = sorted(dest.glob(pattern))
        if proc.returncode != 0 or not found:
            raise RehearsalError(f"pip download --no-deps {requirement} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
    return found[0]


def check_cuda_pins(meta_wheel: Path, components: Mapping[str, str]) -> str:
    """stack_cuda_components equals the component pins (extra 'all') of NVIDIA's cuda-toolkit meta wheel."""
    with zipfile.ZipFile(meta_wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        pins = parse_requires_dist(archive.read(name).decode("utf-8", "replace"), "all")
    ours = {normalize(k): str(v) for k, v in components.items()}
    theirs = {normalize(k): v for k, v in pins.items()}
    problems = [f"{k}: expected {theirs[k]}, found {ours.get(k, 'missing')}" for k in sorted(theirs) if ours.get(k) != theirs[k]]
    problems += [f"{k}: expected no pin (not in the meta wheel), found {ours[k]}" for k in sorted(set(ours) - set(theirs))]
    if problems:
        raise RehearsalError(f"stack_cuda_components vs {meta_wheel.name} Requires-Dist (extra all): " + "; ".join(problems))
    return f"{len(ours)} components equal {meta_wheel.name}'s pins (nvidia-cuda-runtime {ours.get('nvidia-cuda-runtime')})"


def list_elf(cuobjdump: str, path: Path) -> set[str]:
    proc = subprocess.run([cuobjdump, "--list-elf", str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0 and "does not contain device code" not in proc.stdout + proc.stderr:
        raise RehearsalError(f"{cuobjdump} --list-elf {path} failed: {proc.stderr.strip()[-300:]}")
    return set(re.findall(r"\.(sm_\d+[af]?)\.cubin\s*$", proc.stdout, re.MULTILINE))


def check_cuda_arch_matches_cuobjdump(cuda_arch: Path, cuobjdump: str, files: Sequence[Path], python: str) -> str:
    """cuda-arch (built-in reader) lists exactly the cubins cuobjdump --list-elf lists, suffixes included."""
    if not files:
        raise RehearsalError("no shared objects to compare (expected the unpacked real sgl-kernel wheel)")
    proc = subprocess.run([python, str(cuda_arch), "--builtin", *map(str, files)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RehearsalError(f"{cuda_arch} --builtin failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    mine: dict[str, set[str]] = {}
    for line in proc.stdout.splitlines():
        path, _, targets = line.rpartition(": ")
        mine[path] = set() if targets == "no GPU code" else {t for t in targets.split(", ") if t.startswith("sm_")}
    problems, suffixed = [], set()
    for path in files:
        witness = list_elf(cuobjdump, path)
        suffixed |= {t for t in witness if t[-1] in "af"}
        if mine.get(str(path)) != witness:
            problems.append(
                f"{path.name}: expected {', '.join(sorted(witness)) or 'no cubins'} (cuobjdump), "
                f"found {', '.join(sorted(mine.get(str(path), set()))) or 'no cubins'}"
            )
    if problems:
        raise RehearsalError(f"{cuda_arch} differs from cuobjdump --list-elf: " + "; ".join(problems))
    return f"{len(files)} objects agree with cuobjdump, suffixes included ({', '.join(sorted(suffixed))})"


# ---------------------------------------------------------------- stand-in wheels


def gencode(target: str) -> list[str]:
    match = re.fullmatch(r"sm_(\d+)([af]?)", target)
    if not match:
        raise RehearsalError(f"a stand-in target looks like sm_120, sm_120a or sm_120f, found {target!r}")
    return [f"-gencode=arch=compute_{match.group(1)}{match.group(2)},code={target}"]


def compile_object(cuda_home: Path, probe: Path, target: str, cache: Path) -> Path:
    """A small real shared object with `target` machine code, linking libcudart.so.13; cached by its inputs."""
    nvcc = cuda_home / "bin" / "nvcc"
    if not nvcc.exists():
        raise RehearsalError(f"no nvcc at {nvcc} (expected the controller toolkit of `make wheelhouse`)")
    key = hashlib.sha256(b"|".join([probe.read_bytes(), target.encode(), str(nvcc.resolve()).encode(), b"v1"])).hexdigest()[:16]
    out = cache / f"{target}-{key}.so"
    if out.exists():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.so")
    cmd = [
        str(nvcc), *gencode(target), "-shared", "-Xcompiler", "-fPIC", "-cudart", "none", "-o", str(tmp), str(probe),
        f"-L{cuda_home / 'lib64'}", "-l:libcudart.so.13",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RehearsalError(f"nvcc for the {target} stand-in object failed: {proc.stderr.strip()[-500:]}")
    os.replace(tmp, out)
    return out


def arch_entries(spec: Mapping[str, Any], facts: Mapping[str, Any]) -> list[ArchEntry]:
    """The spec's arch list read as its build reads it (TORCH_CUDA_ARCH_LIST as torch, FLASHINFER_CUDA_ARCH_LIST
    as FlashInfer); [] when the build takes no arch variable or the spec sets none."""
    var = fact(facts, spec["name"], "arch_env")
    value = spec.get("env", {}).get(var) if var else None
    if value is None:
        return []
    try:
        return read_arch_list(str(var), str(value))
    except ArchListError as exc:
        raise RehearsalError(f"{spec['name']}: env {var}={value!r}: {exc}") from None


# CMake's false constants (cmIsOff): `if(VAR)` is false for these (any case), a value ending in -NOTFOUND, or VAR unset
_CMAKE_FALSE = {"", "0", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND"}


def cmake_true(value: Optional[str]) -> bool:
    """`if(VAR)` of a CMake variable holding `value` (None: unset)."""
    if value is None:
        return False
    text = value.strip().upper()
    return not (text in _CMAKE_FALSE or text.endswith("-NOTFOUND"))


def _cmake_version(text: str) -> tuple[int, ...]:
    """A version as CMake's VERSION_* comparisons read it: dot-separated integer components."""
    parts = []
    for part in str(text).split("."):
        match = re.match(r"\d+", part)
        parts.append(int(match.group(0)) if match else 0)
    return tuple(parts)


def _version_at_least(found: str, wanted: str) -> bool:
    a, b = _cmake_version(found), _cmake_version(wanted)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def cmake_defines(spec: Mapping[str, Any]) -> dict[str, str]:
    """The CMake cache variables the spec's env CMAKE_ARGS set, read as scikit-build-core passes them (shlex.split)
    and CMake applies them (in order): -DNAME=VALUE, -DNAME:TYPE=VALUE, -D NAME=VALUE; -UGLOB removes those set
    before. Other arguments are not variables. Raises RehearsalError naming the spec and the argument CMake refuses."""
    text = str(spec.get("env", {}).get("CMAKE_ARGS", ""))
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise RehearsalError(f"{spec['name']}: env CMAKE_ARGS={text!r} cannot be split as the build splits it (shlex): {exc}") from None
    out: dict[str, str] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token[:2] not in ("-D", "-U"):
            continue
        flag, argument = token[:2], token[2:]
        if not argument:
            if index >= len(tokens):
                raise RehearsalError(f"{spec['name']}: env CMAKE_ARGS={text!r} ends with {flag} and no variable")
            argument = tokens[index]
            index += 1
        if flag == "-U":
            for name in [n for n in out if fnmatch.fnmatchcase(n, argument)]:
                del out[name]
            continue
        match = re.fullmatch(r"([^:=]+)(?::[A-Za-z]+)?=(.*)", argument, re.DOTALL)
        if not match:
            raise RehearsalError(
                f"{spec['name']}: env CMAKE_ARGS={text!r}: {flag}{argument!r} is not -DNAME=VALUE or -DNAME:TYPE=VALUE (CMake refuses it)"
            )
        out[match.group(1)] = match.group(2)
    return out


def _code_capability(code: str) -> str:
    match = re.fullmatch(r"sm_(\d+)(\d)[af]?", code)
    return f"{match.group(1)}.{match.group(2)}" if match else ""


def _code_number(code: str) -> int:
    match = re.fullmatch(r"sm_(\d+)[af]?", code)
    return int(match.group(1)) if match else -1


def _rule_where(facts: Mapping[str, Any], name: str) -> str:
    entry = (facts.get(name) or {}).get("cmake_arch_rule") or {}
    source = entry.get("source") or {}
    path, ref = str(source.get("path", "")).split(" ")[0], str(source.get("ref", ""))[:8]
    return f"{path} at {ref}, verified: {str(entry.get('verified')).lower()}"


# Where a CMake build is pointed at another CUDA toolkit than the pipeline's (CUDA_HOME, the stack's):
# CMake's CUDA language and FindCUDAToolkit take the compiler from these, and CUDA_VERSION with it.
TOOLKIT_DEFINES = ("CMAKE_CUDA_COMPILER", "CUDAToolkit_ROOT", "CUDA_TOOLKIT_ROOT_DIR")
_TOOLKIT_PATH_VERSION = re.compile(r"cuda-(\d+\.\d+(?:\.\d+)?)(?:/|$)")


def cmake_cuda_version(spec: Mapping[str, Any], cuda_version: str) -> tuple[str, str]:
    """(the CUDA version the spec's CMake build compiles with, where it comes from): the toolkit a CMAKE_ARGS
    define or env CUDACXX names (its version read from the path, laid out as /usr/local/cuda-X.Y), else
    `cuda_version` (the stack's, the pipeline's CUDA_HOME). A toolkit path without a readable version fails."""
    defines = cmake_defines(spec)
    named = [(f"-D{k}", defines[k]) for k in TOOLKIT_DEFINES if defines.get(k)]
    if spec.get("env", {}).get("CUDACXX"):
        named.append(("env CUDACXX", str(spec["env"]["CUDACXX"])))
    for where, path in named:
        match = _TOOLKIT_PATH_VERSION.search(path)
        if not match:
            raise RehearsalError(
                f"{spec['name']}: {where}={path!r} points the build at a CUDA toolkit whose version cannot be read "
                "from its path (expected .../cuda-X.Y/...): drop it to build with the stack's toolkit"
            )
        return match.group(1), f"{where}={path}"
    return cuda_version, "the stack's toolkit"


def cmake_gencodes(spec: Mapping[str, Any], facts: Mapping[str, Any], cuda_version: str) -> list[str]:
    """The -gencode codes the spec's CMake build gives its objects, by the fact cmake_arch_rule: each code whose
    conditions (any of them) hold for the spec's CMAKE_ARGS (else the option() defaults) and the CUDA version
    it compiles with (cmake_cuda_version: the stack's `cuda_version` unless CMAKE_ARGS name another toolkit)."""
    cuda_version = cmake_cuda_version(spec, cuda_version)[0]
    rule = fact(facts, spec["name"], "cmake_arch_rule") or {}
    options = {**{k: str(v) for k, v in (rule.get("options") or {}).items()}, **cmake_defines(spec)}
    codes = []
    for entry in rule.get("gencodes") or []:
        conditions = entry.get("any") or []
        if not conditions or any(_condition_holds(c, options, cuda_version) for c in conditions):
            codes.append(str(entry["code"]))
    return codes


def _condition_holds(condition: Mapping[str, Any], options: Mapping[str, str], cuda_version: str) -> bool:
    if "cuda_at_least" in condition:
        return _version_at_least(cuda_version, str(condition["cuda_at_least"]))
    if "option" in condition:
        return cmake_true(options.get(str(condition["option"])))
    raise RehearsalError(f"cmake_arch_rule: condition {dict(condition)} is neither cuda_at_least nor option")


def _gates(spec: Mapping[str, Any], facts: Mapping[str, Any], cuda_version: str, capability: str) -> str:
    """What the rule needs for a code of `capability`, with what the spec and the CUDA version give."""
    rule = fact(facts, spec["name"], "cmake_arch_rule") or {}
    defaults = {k: str(v) for k, v in (rule.get("options") or {}).items()}
    defines = cmake_defines(spec)
    cuda_version, origin = cmake_cuda_version(spec, cuda_version)
    if origin != "the stack's toolkit":
        cuda_version = f"{cuda_version}, {origin}"
    out = []
    for entry in rule.get("gencodes") or []:
        if _code_capability(str(entry["code"])) != capability:
            continue
        parts = []
        for condition in entry.get("any") or []:
            if "cuda_at_least" in condition:
                parts.append(f"CUDA_VERSION >= {condition['cuda_at_least']} (found {cuda_version})")
            else:
                option = str(condition["option"])
                found = f"-D{option}={defines[option]}" if option in defines else f"unset, option() default {defaults.get(option, 'none')}"
                parts.append(f"{option} is ON (found {found})")
        out.append(f"{entry['code']} when " + (" or ".join(parts) or "always"))
    return "; ".join(out) or f"no code for {capability} in the rule"


def arch_origin(spec: Mapping[str, Any], facts: Mapping[str, Any], cuda_version: Optional[str] = None) -> str:
    """Where a spec's machine code comes from, in words (for a stand-in whose verification fails)."""
    var = fact(facts, spec["name"], "arch_env")
    if var and var in spec.get("env", {}):
        return f"env {var}={spec['env'][var]!r}"
    if fact(facts, spec["name"], "cmake_arch_rule") and cuda_version:
        try:
            codes = cmake_gencodes(spec, facts, cuda_version)
            cuda = cmake_cuda_version(spec, cuda_version)[0]
        except RehearsalError as exc:
            return str(exc)
        return (
            f"env CMAKE_ARGS={spec.get('env', {}).get('CMAKE_ARGS', '')!r} on CUDA {cuda} gives {', '.join(codes)} "
            f"({_rule_where(facts, spec['name'])})"
        )
    return ""


def arch_target(spec: Mapping[str, Any], facts: Mapping[str, Any], capability: str = "12.0", cuda_version: Optional[str] = None) -> str:
    """The machine code the real build of `spec` makes for `capability`: from its arch list (12.0 -> sm_120,
    12.0a -> sm_120a, 12.0f -> sm_120f); a list without it gives its first entry's code (so verification
    fails naming it); no arch variable: the code the fact cmake_arch_rule gives for the spec's CMAKE_ARGS
    and `cuda_version` (the highest it gives when none is for `capability`)."""
    entries = arch_entries(spec, facts)
    if entries:
        return next((e.sm for e in entries if e.capability == capability), entries[0].sm)
    if fact(facts, spec["name"], "cmake_arch_rule"):
        if not cuda_version:
            raise RehearsalError(f"{spec['name']}: its CMake arch rule (cmake_arch_rule) needs the stack's CUDA version, given none")
        codes = cmake_gencodes(spec, facts, cuda_version)
        if not codes:
            raise RehearsalError(f"{spec['name']}: cmake_arch_rule gives no code for CMAKE_ARGS {spec.get('env', {}).get('CMAKE_ARGS')!r}")
        return next((c for c in codes if _code_capability(c) == capability), max(codes, key=lambda c: (_code_number(c), c)))
    var = fact(facts, spec["name"], "arch_env")
    raise RehearsalError(f"{spec['name']}: no SM120 target (expected env {var or 'an arch list'} or the fact cmake_arch_rule)")


def check_arch_lists(
    specs: Sequence[Mapping[str, Any]], facts: Mapping[str, Any], capability: str, cuda_version: Optional[str] = None
) -> str:
    """Each spec's arch variable, read as its build reads it, asks for `capability` (stack_cuda_arch); a CMake
    build's CMAKE_ARGS give it code for `capability` on `cuda_version` (stack_cuda_version) by its cmake_arch_rule."""
    problems, seen = [], []
    for spec in specs:
        name = spec["name"]
        if fact(facts, name, "cmake_arch_rule") and spec.get("verify", {}).get("device_code", "required") != "none":
            args = spec.get("env", {}).get("CMAKE_ARGS", "")
            if not cuda_version:
                problems.append(f"{name}: its CMake arch rule needs the stack's CUDA version (stack_cuda_version), given none")
                continue
            try:
                codes = cmake_gencodes(spec, facts, cuda_version)
                gates = _gates(spec, facts, cuda_version, capability)
                cuda = cmake_cuda_version(spec, cuda_version)[0]
            except RehearsalError as exc:
                problems.append(str(exc))
                continue
            where = _rule_where(facts, name)
            if not any(_code_capability(c) == capability for c in codes):
                problems.append(
                    f"{name}: env CMAKE_ARGS={args!r} on CUDA {cuda} gives {', '.join(codes)} ({where}): "
                    f"expected code for {capability} (stack_cuda_arch): {gates}"
                )
            seen.append(f"{name} CMAKE_ARGS={args!r} on CUDA {cuda} -> {', '.join(codes)} ({where})")
            continue
        var = fact(facts, name, "arch_env")
        if not var or var not in spec.get("env", {}):
            continue
        try:
            entries = arch_entries(spec, facts)
        except RehearsalError as exc:
            problems.append(str(exc))
            continue
        codes = ", ".join(e.sm + ("+PTX" if e.ptx else "") for e in entries)
        if not any(e.capability == capability for e in entries):
            problems.append(f"{name}: env {var}={spec['env'][var]!r} reads as {codes}: expected {capability} (stack_cuda_arch) among them")
        seen.append(f"{name} {var}={spec['env'][var]!r} -> {codes}")
    if problems:
        raise RehearsalError("; ".join(problems))
    if not seen:
        raise RehearsalError("no spec sets an arch variable (expected TORCH_CUDA_ARCH_LIST on torch)")
    return "; ".join(seen)


def _instantiate(pattern: str, real_names: Sequence[str]) -> list[str]:
    matching = [n for n in real_names if fnmatch.fnmatchcase(n, pattern)]
    return matching or [pattern.replace("*", "standin")]


def standin_objects(
    spec: Mapping[str, Any], facts: Mapping[str, Any], real_names: Sequence[str] = (), cuda_version: Optional[str] = None
) -> dict[str, str]:
    """Wheel path -> target of the CUDA objects a stand-in carries: the spec's arch_objects (at the
    real wheel's paths where known) with the target its real build makes (arch_target: from its arch list,
    or from its CMAKE_ARGS on `cuda_version`), its other_arch_objects with sm_90a."""
    verify = spec.get("verify", {})
    if verify.get("device_code", "required") == "none":
        return {}
    target = arch_target(spec, facts, cuda_version=cuda_version)
    objects = {p: target for pattern in verify.get("arch_objects", []) for p in _instantiate(pattern, real_names)}
    for pattern in verify.get("other_arch_objects", {}):
        for path in _instantiate(pattern, real_names):
            objects.setdefault(path, "sm_90a")
    for path in fact(facts, spec["name"], "objects", []):
        objects.setdefault(path, target)
    if not any(t == target for t in objects.values()):
        objects[f"{spec.get('package', spec['name']).replace('-', '_')}/standin_kernels.so"] = target
    return objects


def write_standin_tree(
    spec: Mapping[str, Any],
    facts: Mapping[str, Any],
    stack: Mapping[str, Any],
    dest: Path,
    backend: Path,
    object_files: Mapping[str, Path],
    objects: Mapping[str, str],
    python_tag: str,
    reference: Optional[Reference] = None,
) -> Path:
    """A source tree laid out like the upstream's (sub-directory, pyproject) whose backend writes the stand-in wheel:
    [build-system] requires from the ref's recorded pyproject.toml (the facts' stated_build_system_requires where
    it was not read; plus the facts' extra build requirements),
    the base version from the ref's recorded version file (the stack's version where none was read)."""
    name = spec["name"]
    if name not in facts:
        raise RehearsalError(f"{name}: no upstream facts in tests/data/upstream-build-facts.yml (needed for its stand-in)")
    if dest.exists():
        shutil.rmtree(dest)
    project = dest / fact(facts, name, "source_subdir", ".")
    helper = project / "_standin"
    helper.mkdir(parents=True)
    shutil.copy2(backend, helper / "standin_backend.py")
    sources = {}
    for path, target in sorted(objects.items()):
        local = f"{target}.so"
        shutil.copy2(object_files[target], helper / local)
        sources[path] = local
    base = str(stack.get(str(fact(facts, name, "stack_version", "")), ""))
    upstream_requires: list[str] = []
    if reference is not None:
        for key in ("version_file", "build_system_file"):
            try:
                entry = reference_file(spec, facts, reference, key)
            except Unchecked:
                if key == "build_system_file":  # the bounds known from elsewhere, so the dependency check runs on them
                    upstream_requires = [str(i["requirement"]) for i in fact(facts, name, "stated_build_system_requires", [])]
                continue
            if key == "version_file":
                base = str(entry.extract.get((fact(facts, name, key) or {}).get("key", "version"), base))
            else:
                upstream_requires = list(entry.extract.get("build_system_requires", []))
    config = {
        "distribution": spec.get("package", name),
        "package": spec.get("package", name).replace("-", "_"),
        "version_from": fact(facts, name, "version_from"),
        "base_version": base,
        "requires": list(fact(facts, name, "runtime_requires", [])),
        "requires_env": fact(facts, name, "requires_env", ""),
        "dynamic_requires": list(fact(facts, name, "dynamic_requires", [])),
        "pin_env": fact(facts, name, "pin_env", {}),
        "tag": str(fact(facts, name, "wheel_tag", "py3-none-any")).replace("{python}", python_tag),
        "objects": sources,
    }
    (helper / "standin.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    wanted = dict.fromkeys([*upstream_requires, *fact(facts, name, "extra_build_requires", [])])
    requires = ", ".join(json.dumps(r) for r in wanted if requirement_name(r) != "torch")
    lines = [
        "# STAND-IN source tree written by make rehearsal: the upstream's build requirements, a backend that writes a stand-in wheel",
        "[build-system]",
        f"requires = [{requires}]",
        'build-backend = "standin_backend"',
        'backend-path = ["_standin"]',
    ]
    if config["version_from"] == "pyproject":
        lines += ["", "[project]", f'name = "{config["distribution"]}"', f'version = "{base}"']
    (project / "pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if config["version_from"] == "setup.py":  # the file the spec's build script edits and checks
        setup = f"# STAND-IN setup.py: only its version line, which the real build script edits\nsetup(\n    version='{base}',\n)\n"
        (project / "setup.py").write_text(setup, encoding="utf-8")
    (project / "STANDIN").write_text(f"stand-in source of {name} for make rehearsal (not the upstream source)\n", encoding="utf-8")
    return dest


def rehearsal_spec(spec: Mapping[str, Any], tree: Optional[Path]) -> dict[str, Any]:
    """The production spec with its git source replaced by the stand-in tree (and no prebuilt shelf): env,
    build command, build_requires, depends_on, pins, local_version and verify are production's."""
    out = json.loads(json.dumps(spec))
    if tree is not None:
        out["source"] = {"path": str(tree)}
        out.pop("prebuilt", None)
    return out


# The build a spec taken from the index gets in the rehearsal: its prebuilt phase is the production one; were the
# wheel refused, the source build behind it would run, which the rehearsal does not stand in for: it fails, naming why.
NOT_REHEARSED = (
    "echo 'make rehearsal: the package index wheel of this artifact was refused (the reason is above); "
    "its source build is not rehearsed for a release whose artifacts come from the index' >&2; exit 1"
)


def index_rehearsal_spec(spec: Mapping[str, Any], empty: Path) -> dict[str, Any]:
    """The production spec of an artifact taken from the package index: its prebuilt wheel, pins, depends_on and
    verify as production has them; its git source (the fallback) replaced by `empty`, whose build fails at once."""
    out = json.loads(json.dumps(spec))
    empty.mkdir(parents=True, exist_ok=True)
    (empty / "NOT-REHEARSED").write_text(f"{spec['name']}: taken from the package index; its source build is not rehearsed\n")
    out["source"] = {"path": str(empty)}
    out["build"] = NOT_REHEARSED
    out["build_requires"] = []
    for key in ("jobs_env", "mem_per_job_gib"):
        out.pop(key, None)
    return out


def check_index_pins(spec: Mapping[str, Any], wheel: Path) -> str:
    """What the spec pins beside an index wheel (triton with torch) is what that wheel itself requires."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1))
    required = {}
    for line in metadata.decode("utf-8", "replace").splitlines():
        found = re.match(r"^Requires-Dist:\s*([A-Za-z0-9._-]+)\s*==\s*([^\s;,]+)", line)
        if found:
            required[normalize(found.group(1))] = found.group(2)
    problems, held = [], []
    for pin in spec.get("pins", []):
        dist, version = pin.split("==", 1)
        if required.get(normalize(dist)) != version:
            found = required.get(normalize(dist)) or "no exact version"
            problems.append(f"{pin}: expected {wheel.name} to require it, found it requires {found}")
        else:
            held.append(pin)
    if problems:
        raise RehearsalError(f"{spec['name']}: " + "; ".join(problems) + " (set the pin in stack.yml from the wheel's METADATA)")
    return f"{wheel.name} requires {', '.join(held) or 'nothing the spec pins'}, as the spec pins"


def check_index_artifact(spec: Mapping[str, Any], record: Mapping[str, Any]) -> str:
    """The artifact the pipeline made for a spec taken from the index is that wheel, by its prebuilt phase, not a build."""
    wanted = spec["prebuilt"]["pattern"]
    problems = []
    if record.get("origin") != "prebuilt":
        problems.append(f"expected the prebuilt wheel, found origin {record.get('origin')!r}")
    if record.get("prebuilt_rejected"):
        problems.append(f"its prebuilt wheel was refused: {record['prebuilt_rejected']}")
    if list(record.get("installs", [])) != [wanted]:
        problems.append(f"expected it to install {wanted}, found {record.get('installs')}")
    if problems:
        raise RehearsalError(f"{spec['name']}: " + "; ".join(problems))
    codes = sorted({t for w in record.get("wheels", []) for o in w.get("shared_objects", []) for t in o.get("targets", [])})
    return f"{wanted} from the index, verified on the host as a build is ({', '.join(codes) or 'no GPU code'})"


def build_in_process(tree: Path, spec: Mapping[str, Any], facts: Mapping[str, Any], out: Path) -> Path:
    """The stand-in wheel without a build venv (the reduced rehearsal): the backend with the spec's environment."""
    project = tree / fact(facts, spec["name"], "source_subdir", ".")
    pyproject = project / "pyproject.toml"
    if spec.get("local_version") and fact(facts, spec["name"], "version_from") == "pyproject":
        text = pyproject.read_text(encoding="utf-8")
        pyproject.write_text(
            re.sub(r'^version = "([^"+]+)"$', rf'version = "\1+{spec["local_version"]}"', text, flags=re.MULTILINE), encoding="utf-8"
        )
    if spec.get("local_version") and fact(facts, spec["name"], "version_from") == "setup.py":
        setup = project / "setup.py"
        text = setup.read_text(encoding="utf-8")
        setup.write_text(
            re.sub(r"^(\s*)version='([^'+]+)',$", rf"\1version='\2+{spec['local_version']}',", text, flags=re.MULTILINE), encoding="utf-8"
        )
    out.mkdir(parents=True, exist_ok=True)
    code = "import os, sys; sys.path.insert(0, sys.argv[1]); import standin_backend as b; print(b.build_wheel(sys.argv[2]))"
    env = {**os.environ, **{k: str(v) for k, v in spec.get("env", {}).items()}}
    if spec.get("local_version"):
        env["SGLANG_LOCAL_VERSION"] = str(spec["local_version"])
    proc = subprocess.run(
        ["python3", "-c", code, str(project / "_standin"), str(out)], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise RehearsalError(f"{spec['name']}: stand-in build failed: {proc.stderr.strip()[-500:]}")
    return out / proc.stdout.strip().splitlines()[-1]


def verify_standin(wheel: Path, spec: Mapping[str, Any], expected_tag: str, origin: str = "") -> str:
    """A stand-in passes production's verification and is clearly named a stand-in; `origin` (arch_origin)
    says where its objects' code came from, named when verification refuses them."""
    check_local_version([wheel], spec.get("local_version"))
    try:
        evidence = verify_wheels([wheel], spec.get("verify", {"device_code": "none"}))
    except BuildError as exc:
        raise RehearsalError(f"{spec['name']}: {exc}" + (f" (its objects' code: {origin})" if origin else "")) from None
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    if not any(n.endswith("/STANDIN") for n in names) or "STAND-IN" not in metadata:
        raise RehearsalError(f"{wheel.name}: expected a STANDIN file and a STAND-IN summary, found neither")
    tag = "-".join(wheel.name[: -len(".whl")].split("-")[-3:])
    if tag != expected_tag:
        raise RehearsalError(f"{wheel.name}: expected tag {expected_tag} (the real build's), found {tag}")
    codes = sorted({t for e in evidence for o in e["shared_objects"] for t in o["targets"]})
    return f"{wheel.name} verified ({', '.join(codes) or 'no GPU code'})"


# ---------------------------------------------------------------- the host side: builds through the pipeline


def run_builds(
    items: Sequence[Mapping[str, Any]],
    root: Path,
    staged: Mapping[str, Optional[str]],
    cuda_home: str,
    python: str = "python3",
    pip_args: Sequence[str] = (),
    jobs: int = 2,
    cuobjdump: Optional[str] = None,
    timeout: float = 1800,
    records: Optional[Mapping[str, Mapping[str, Any]]] = None,
    prebuilt_staged: Optional[Mapping[str, str]] = None,
) -> dict[str, Outcome]:
    """Start and wait for each planned item through build_pipeline (dependencies first, independent ones
    together); `records` are dependencies already built (name -> artifact record); `prebuilt_staged` the
    host directories holding each spec's prebuilt wheels, as the role stages them (name -> dir)."""
    results: dict[str, Outcome] = {}
    records = dict(records or {})
    running: dict[str, Mapping[str, Any]] = {}
    pending = list(items)
    began = {i["name"]: 0.0 for i in items}
    deadline = time.monotonic() + timeout
    while pending or running:
        for item in list(pending):
            deps = item["depends_on"]
            if any(d in results and not results[d].ok for d in deps):
                results[item["name"]] = Outcome(
                    f"build {item['name']}",
                    False,
                    f"not built: dependency {', '.join(d for d in deps if d in results and not results[d].ok)} failed",
                )
                pending.remove(item)
                continue
            if all(d in records for d in deps):
                dep_dirs = {d: str(cache_dir(root, d, records[d]["key"])) for d in deps}
                try:
                    shelf = (prebuilt_staged or {}).get(item["name"])
                    place = Workspace(str(root), python, cuda_home, jobs, dep_dirs, pip_args, staged.get(item["name"]), shelf)
                    start(item, place)
                    running[item["name"]] = item
                    began[item["name"]] = time.monotonic()
                except (BuildError, OSError) as exc:
                    results[item["name"]] = Outcome(f"build {item['name']}", False, str(exc))
                pending.remove(item)
        for name, item in list(running.items()):
            try:
                state = wait(item, str(root), 1, cuobjdump)
            except BuildError as exc:
                results[name] = Outcome(f"build {name}", False, " ".join(str(exc).split())[-1500:])
                del running[name]
                continue
            if state["done"]:
                record = state["artifact"]
                records[name] = record
                wheels = record.get("installs") or [w["wheel"] for w in record["wheels"]]
                took = time.monotonic() - began[name]
                how = "prebuilt wheel verified" if record.get("origin") == "prebuilt" and state["status"] != "cached" else state["status"]
                results[name] = Outcome(
                    f"build {name}",
                    True,
                    f"{how} in {took:.0f} s: {', '.join(wheels)} ({len(record['wheels'])} wheels in its wheelhouse)",
                )
                del running[name]
        if time.monotonic() > deadline:
            for name in running:
                results[name] = Outcome(f"build {name}", False, f"still running after {timeout:.0f} s")
            break
    return results


def artifact_records(root: Path, items: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for item in items:
        path = cache_dir(root, item["name"], item["key"]) / "artifact.json"
        if path.is_file():
            out[item["name"]] = json.loads(path.read_text(encoding="utf-8"))
    return out


# ---------------------------------------------------------------- upstream wheels: shadowing and verification


def pip_choice(python: str, requirement: str, find_links: Sequence[Path]) -> str:
    """The wheel file pip would take for `requirement` from these directories alone (no index)."""
    argv = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--no-index", "--no-deps", "--ignore-installed", "--report", "-"]
    for link in find_links:
        argv += ["--find-links", str(link)]
    proc = subprocess.run([*argv, requirement], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RehearsalError(f"pip cannot resolve {requirement} from {', '.join(map(str, find_links))}: {proc.stderr.strip()[-400:]}")
    report = json.loads(proc.stdout)
    return urllib.parse.unquote(str(report["install"][0]["download_info"]["url"]).rsplit("/", 1)[-1])


def check_ours_wins(python: str, spec: Mapping[str, Any], version: str, ours: Path, upstream: Path, find_links: Sequence[Path]) -> str:
    """With the upstream wheel of the same version beside ours, pip takes ours for `package==version`."""
    package = spec.get("package", spec["name"])
    chosen = pip_choice(python, f"{package}=={version}", find_links)
    if chosen != ours.name:
        raise RehearsalError(
            f"{package}=={version}: with {upstream.name} beside {ours.name}, expected pip to take ours, found it takes {chosen} "
            f"(an upstream wheel of the same version shadows ours: give the build a local_version label)"
        )
    return f"{package}=={version} resolves to {chosen}, not {upstream.name}"


def objects_of_dir(unpacked: Path, rules: Mapping[str, Any]) -> list[SharedObject]:
    """The shared objects of an unpacked wheel, read as verify_wheel reads them (for the reduced rehearsal)."""
    exempt = dict(rules.get("other_arch_objects", {}))
    out = []
    for path in sorted(p for p in unpacked.rglob("*") if p.is_file() and SO.search(p.name)):
        rel = path.relative_to(unpacked).as_posix()
        reasons = [exempt[p] for p in exempt if fnmatch.fnmatchcase(rel, p)]
        rule = f"other architectures on purpose: {reasons[0]}" if reasons else "must carry the target"
        out.append(SharedObject(rel, gpu_code(path), cudart_major(elf_needed(str(path)) or []), rule))
    return out


def check_upstream_rejected(wheel: Path, spec: Mapping[str, Any], objects: Sequence[SharedObject]) -> str:
    """The upstream wheel passes the spec's SM120 rule (arch objects carry sm_120*, the others are named exceptions)
    and is still rejected by the full rule: it links libcudart.so.12 and has no local label. Expected outcome."""
    rules = dict(spec.get("verify", {}))
    arch_only = {k: v for k, v in rules.items() if k != "cudart"}
    try:
        check_objects(wheel.name, objects, arch_only)
    except BuildError as exc:
        raise RehearsalError(f"{spec['name']} verify rule for {rules.get('cuda_arch')} rejects the real {wheel.name}: {exc}") from None
    reasons = []
    try:
        check_objects(wheel.name, objects, rules)
    except BuildError as exc:
        reasons.append(str(exc).split(": ", 1)[-1].split(";")[0])
    try:
        check_local_version([wheel], spec.get("local_version"))
    except BuildError as exc:
        reasons.append(str(exc).rsplit("; ", 1)[-1])
    if not reasons:
        raise RehearsalError(
            f"{wheel.name}: expected the production rule to refuse the upstream CUDA-12 wheel (cudart, local label), found it accepted"
        )
    carrying = sorted({o.path for o in objects if any(t.startswith("sm_120") for t in o.targets)})
    exempt = sum(1 for o in objects if o.rule.startswith("other"))
    return (
        f"{wheel.name}: SM120 rule passes ({len(carrying)} objects with sm_120*, {exempt} named other-arch objects); "
        f"rejected as expected: {'; '.join(reasons)}"
    )


# ---------------------------------------------------------------- the release


def release_install(
    python: str, venv: Path, root: Path, artifacts: Mapping[str, Mapping[str, Any]], specs: Mapping[str, Mapping[str, Any]], log: Path
) -> dict[str, Any]:
    """What plugins/modules/sglang_release_install.py does (same functions): the verified wheel files with --no-index, then read back."""
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True)
    wheels = release_wheels(str(root), artifacts, specs)
    dirs = list(dict.fromkeys(os.path.dirname(w["wheel"]) for w in wheels))
    with tempfile.NamedTemporaryFile("w", suffix="-constraints.txt", delete=False) as handle:
        handle.write(constraints_text(wheels))
    argv = install_argv(str(venv / "bin" / "python"), wheels, True, dirs, handle.name)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    os.unlink(handle.name)
    log.write_text("+ " + " ".join(argv) + "\n" + proc.stdout + proc.stderr, encoding="utf-8")
    if proc.returncode != 0:
        raise RehearsalError(
            f"pip install of the verified wheels failed ({proc.returncode}), log {log}: {(proc.stderr or proc.stdout).strip()[-1200:]}"
        )
    return {"argv": argv, **read_back(str(venv), wheels)}


def check_release(result: Mapping[str, Any], venv: Path, expected: Mapping[str, str], pins: Sequence[str]) -> str:
    """The installed torch, sgl-kernel, FlashInfer are the artifacts made (built +label, or the index's own), pinned
    requirements hold, evidence read from installed files, every object's libraries load (naming what the allowlist let pass)."""
    installed = {normalize(i["distribution"]): i for i in result.get("installed", [])}
    problems = []
    for dist, version in expected.items():
        found = installed.get(normalize(dist))
        if not found or found["version"] != version:
            problems.append(f"{dist}: expected {version} (ours), found {found['version'] if found else 'not read back'}")
    sites = site_packages(str(venv))
    for pin in pins:
        dist, version = pin.split("==")
        copies = find_dist(sites, dist)
        if [v for _, _, v in copies] != [version]:
            problems.append(
                f"{dist}: expected {version} (pinned with torch), found {', '.join(v for _, _, v in copies) or 'not installed'}"
            )
    for evidence in result.get("sm120_verification", []):
        if not str(evidence.get("read_from", "")).startswith("installed files"):
            problems.append(
                f"{evidence.get('distribution')}: expected sm_120 evidence read from the installed files, "
                f"found {evidence.get('read_from')!r}"
            )
    cuda = {normalize(e["distribution"]) for e in result.get("sm120_verification", [])}
    if not cuda:
        problems.append("expected sm_120 evidence of the installed CUDA artifacts, found none")
    from sglang_sm120.build.elf_closure import scan_venv  # every library of the release loads (issue 23, item 3)

    from ..toolkit_data import role_allowlist

    closure = scan_venv(sites, allowlist=role_allowlist())
    if closure.failure():
        problems.append(str(closure.failure()))
    if problems:
        raise RehearsalError("release venv " + str(venv) + ": " + "; ".join(problems))
    files = sum(i["files_checked"] for i in result["installed"])
    return (
        ", ".join(f"{d} {installed[normalize(d)]['version']}" for d in expected)
        + f"; {', '.join(pins)}; RECORD read back ({files} files); sm_120 evidence from installed files of {', '.join(sorted(cuda))}"
        + f"; {closure.objects} ELF objects load ({len(closure.allowed)} unloadable allowlisted"
        + (f": {', '.join(sorted({str(u.allowed_by) for u in closure.allowed}))})" if closure.allowed else ")")
    )


def wheel_version(path: Path) -> str:
    return wheel_name_version(path)[1]
