"""make rehearsal, the release further (issue 23, items 3 and 4): imports in the release venv on a CPU
host, and sglang's dependency closure for every host Python the preflight allows.

Imports: each module of IMPORTS is imported in the release venv's own Python, in its own process
with a timeout, and reported as one of
  PASS       imported;
  UNCHECKED  not importable on a CPU here, and why: the distribution that provides it is the
             rehearsal's stand-in (no real code: not imported at all), the import needs the real
             build of a stand-in (torch), or it needs the NVIDIA driver (libcuda.so.1);
  FAIL       any other failure, naming the module and the error's last line.

Pythons: the host Pythons are those of the distributions preflight supports, from the oldest
preflight allows (DISTRIBUTION_PYTHONS). For each, our built wheels are re-tagged for that Python
(as `wheel tags --python-tag --abi-tag` does) and the closure is resolved as the host would,
with `pip install --dry-run --report --python-version X.Y --only-binary=:all: --target`: PASS
names the Python and our wheels pip chose; FAIL the Python and the requirement it could not
resolve; UNCHECKED a Python the package index here holds no wheels for (not our specs' fault).

Standard library only, but for Outcome (plugins/plugin_utils/sglang_sm120_controller/rehearsal/build.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.parse
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from .build import Outcome

# ---------------------------------------------------------------- imports in the release venv

# (module, the distribution that provides it; "a or b": whichever is installed)
IMPORTS: tuple[tuple[str, str], ...] = (
    ("torch", "torch"),
    ("torchvision", "torchvision"),
    ("sgl_kernel", "sgl-kernel or sglang-kernel"),  # the kernel package's name from SGLang 0.5.10 on (stack_kernel_package)
    ("flashinfer", "flashinfer-python"),
    ("sglang", "sglang"),
    ("sglang.srt.server_args", "sglang"),
    ("sglang.srt.entrypoints.http_server", "sglang"),
    ("sglang.launch_server", "sglang"),
)
STANDIN_SUMMARY = "STAND-IN"  # the Summary the stand-in backend writes (tests/fixtures/rehearsal-standins)
# what a CPU host cannot give: the NVIDIA driver's user-space libraries, a GPU
DRIVER = re.compile(
    r"(libcuda\.so(\.\d+)*|libnvidia-ml\.so(\.\d+)*|no NVIDIA driver|CUDA driver (?:version is insufficient|initialization failed))"
)
SUBJECT = (
    re.compile(r"No module named '([\w.]+)'"),
    re.compile(r"cannot import name '[\w.]+' from '([\w.]+)'"),
    re.compile(r"module '([\w.]+)' has no attribute"),
)
# run by the venv's Python: imports one module, prints one JSON line last
PROBE = r"""
import importlib, json, sys, traceback
name = sys.argv[1]
out = {"module": name, "ok": False}
try:
    module = importlib.import_module(name)
    out.update(ok=True, file=getattr(module, "__file__", None))
except BaseException as exc:
    subject = None
    if isinstance(exc, ImportError):
        subject = exc.name
    elif isinstance(exc, AttributeError) and type(getattr(exc, "obj", None)).__name__ == "module":
        subject = exc.obj.__name__
    out.update(type=type(exc).__name__, subject=subject, last_line=traceback.format_exception_only(type(exc), exc)[-1].strip())
sys.stdout.flush()
sys.stdout.write("\n" + json.dumps(out) + "\n")
sys.stdout.flush()
"""


@dataclass
class Installed:
    name: str
    version: str
    summary: str
    tops: tuple[str, ...]  # the top-level import names its RECORD installs

    @property
    def standin(self) -> bool:
        return self.summary.startswith(STANDIN_SUMMARY)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions(sites: Sequence[Path]) -> dict[str, Installed]:
    """Each distribution of the sites (normalized name -> Installed), read from its METADATA and RECORD."""
    found: dict[str, Installed] = {}
    for site in sites:
        for dist_info in sorted(Path(site).glob("*.dist-info")):
            try:
                meta = (dist_info / "METADATA").read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            head = meta.split("\n\n", 1)[0]
            fields = dict(line.split(": ", 1) for line in head.splitlines() if ": " in line and not line.startswith(" "))
            tops: set[str] = set()
            record = dist_info / "RECORD"
            if record.is_file():
                for line in record.read_text(encoding="utf-8", errors="replace").splitlines():
                    first = line.split(",", 1)[0].split("/", 1)[0]
                    if first and not first.endswith((".dist-info", ".data")) and first != "..":
                        tops.add(first[:-3] if first.endswith(".py") else first.split(".", 1)[0] if first.endswith(".so") else first)
            name = fields.get("Name", dist_info.name.split("-", 1)[0])
            found[normalize(name)] = Installed(name, fields.get("Version", "?"), fields.get("Summary", ""), tuple(sorted(tops)))
    return found


def probe_import(python: Path, module: str, timeout: float, runner: Callable[..., Any] = subprocess.run) -> dict[str, Any]:
    """Import `module` with the venv's Python in a fresh process: {ok, file | type, subject, last_line} or {timeout}."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["CUDA_VISIBLE_DEVICES"] = env.get("CUDA_VISIBLE_DEVICES", "")
    with tempfile.TemporaryDirectory(prefix="rehearsal-import-") as cwd:  # not the repository: nothing of it on sys.path
        try:
            proc = runner([str(python), "-c", PROBE, module], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
        except subprocess.TimeoutExpired:
            return {"module": module, "ok": False, "timeout": timeout}
    lines = [line for line in (proc.stdout or "").splitlines() if line.startswith("{")]
    if not lines:
        tail = " ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-1:]) or f"exit status {proc.returncode}"
        return {
            "module": module,
            "ok": False,
            "type": "exit",
            "subject": None,
            "last_line": f"the process ended ({proc.returncode}): {tail}",
        }
    return json.loads(lines[-1])


def classify_import(module: str, distribution: str, result: Mapping[str, Any], installed: Mapping[str, Installed]) -> Outcome:
    """One Outcome for one import: PASS imported, UNCHECKED not importable on a CPU here (why), FAIL otherwise."""
    name = f"import {module}"
    if result.get("ok"):
        return Outcome(name, True, f"imported in the release venv ({result.get('file')})")
    if "timeout" in result:
        return Outcome(name, False, f"{module}: the import did not finish in {result['timeout']:.0f} s")
    last = str(result.get("last_line", ""))
    subject = result.get("subject") or next((m.group(1) for p in SUBJECT for m in [p.search(last)] if m), None)
    if subject:
        top = str(subject).split(".", 1)[0]
        standin = next((d for d in installed.values() if d.standin and top in d.tops), None)
        if standin is not None:
            return Outcome(
                name,
                False,
                f"not importable on a CPU here: {module} needs the real {standin.name} ({last}); the release's "
                f"{standin.name} {standin.version} is the rehearsal's stand-in (no compiled code)",
                unchecked=True,
            )
    driver = DRIVER.search(last)
    if driver:
        return Outcome(
            name,
            False,
            f"not importable on a CPU here: {module} needs the NVIDIA driver ({driver.group(1)}), which this host has not: "
            + " ".join(last.split())[:400],
            unchecked=True,
        )
    return Outcome(name, False, f"{module}: {last or 'failed without a message'}")


def check_imports(
    venv: Path,
    sites: Sequence[Path],
    imports: Sequence[tuple[str, str]] = IMPORTS,
    timeout: float = 300,
    runner: Callable[..., Any] = subprocess.run,
) -> list[Outcome]:
    """Each import of `imports` in the release venv, one Outcome each (see the module's docstring)."""
    installed = installed_distributions(sites)
    python = Path(venv) / "bin" / "python"
    outcomes = []
    for module, distribution in imports:
        dist = next((installed[n] for n in map(normalize, distribution.split(" or ")) if n in installed), None)
        if dist is None:
            outcomes.append(Outcome(f"import {module}", False, f"{module}: {distribution}, which provides it, is not installed in {venv}"))
            continue
        if dist.standin:
            provides = ", ".join(dist.tops) or "nothing"
            outcomes.append(
                Outcome(
                    f"import {module}",
                    False,
                    f"not importable on a CPU here: {dist.name} {dist.version} in the release is the rehearsal's stand-in "
                    f"(METADATA Summary {STANDIN_SUMMARY}; it installs {provides} with no real code), so importing it would prove "
                    "nothing; the real import needs the real build (hours on a GPU build host, not made here)",
                    unchecked=True,
                )
            )
            continue
        outcomes.append(classify_import(module, dist.name, probe_import(python, module, timeout, runner), installed))
    return outcomes


# ---------------------------------------------------------------- the closure for every host Python

# the system Python of each supported distribution (major version as preflight names it)
DISTRIBUTION_PYTHONS: dict[str, dict[str, str]] = {
    "Debian": {"11": "3.9", "12": "3.11", "13": "3.13"},
    "Ubuntu": {"20": "3.8", "22": "3.10", "24": "3.12"},
}
WHEEL_NAME = re.compile(r"^(?P<stem>[^-]+-[^-]+(?:-\d[^-]*)?)-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def supported_pythons(defaults: Mapping[str, Any], table: Mapping[str, Mapping[str, str]] = DISTRIBUTION_PYTHONS) -> list[str]:
    """The Pythons of preflight's supported distributions from preflight_min_python on, up to
    preflight_max_python where one is set, oldest first."""
    minimum = str(defaults["preflight_min_python"])
    maximum = str(defaults.get("preflight_max_python") or "")
    pythons = set()
    for distribution, majors in dict(defaults["preflight_supported_distributions"]).items():
        for major in majors:
            python = (table.get(distribution) or {}).get(str(major))
            if python is None:
                raise ValueError(
                    f"preflight supports {distribution} {major}, whose Python the rehearsal does not know: "
                    "add it to DISTRIBUTION_PYTHONS (plugins/plugin_utils/sglang_sm120_controller/rehearsal/release.py)"
                )
            if _version_tuple(python) >= _version_tuple(minimum) and (not maximum or _version_tuple(python) <= _version_tuple(maximum)):
                pythons.add(python)
    return sorted(pythons, key=_version_tuple)


def refused_pythons(defaults: Mapping[str, Any], table: Mapping[str, Mapping[str, str]] = DISTRIBUTION_PYTHONS) -> list[str]:
    """The Pythons of preflight's supported distributions that its preflight_max_python refuses."""
    maximum = str(defaults.get("preflight_max_python") or "")
    if not maximum:
        return []
    return sorted(
        {
            python
            for distribution, majors in dict(defaults["preflight_supported_distributions"]).items()
            for major in majors
            for python in [(table.get(distribution) or {}).get(str(major))]
            if python and _version_tuple(python) > _version_tuple(maximum)
        },
        key=_version_tuple,
    )


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def retag_wheel(wheel: Path, dest: Path, python: str) -> Path:
    """`wheel tags --python-tag cpXY --abi-tag cpXY` for a wheel built for one CPython (cpAB-cpAB): the file
    renamed, its WHEEL Tag lines and RECORD rewritten; a wheel for any Python (abi3, none) is copied as it is."""
    match = WHEEL_NAME.match(wheel.name)
    if not match:
        raise ValueError(f"{wheel.name}: not a wheel file name")
    dest.mkdir(parents=True, exist_ok=True)
    py, abi = match["py"], match["abi"]
    if not (py.startswith("cp") and abi == py):
        target = dest / wheel.name
        shutil.copy2(wheel, target)
        return target
    tag = "cp" + python.replace(".", "")
    target = dest / f"{match['stem']}-{tag}-{tag}-{match['plat']}.whl"
    with zipfile.ZipFile(wheel) as src:
        members = {i.filename: (i, src.read(i.filename)) for i in src.infolist()}
    wheel_file = next((n for n in members if n.endswith(".dist-info/WHEEL") and n.count("/") == 1), None)
    record_file = next((n for n in members if n.endswith(".dist-info/RECORD") and n.count("/") == 1), None)
    if wheel_file is None or record_file is None:
        raise ValueError(f"{wheel.name}: no .dist-info/WHEEL or RECORD")
    text = members[wheel_file][1].decode("utf-8")
    text = re.sub(r"^Tag: .*$", lambda m: f"Tag: {tag}-{tag}-{match['plat']}", text, flags=re.MULTILINE)
    members[wheel_file] = (members[wheel_file][0], text.encode("utf-8"))
    record = [
        _record_line(n, d) if n == wheel_file else line
        for line in members[record_file][1].decode("utf-8").splitlines()
        for n in [line.split(",", 1)[0]]
        for d in [members.get(n, (None, b""))[1]]
    ]
    members[record_file] = (members[record_file][0], ("\n".join(record) + "\n").encode("utf-8"))
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for info, data in members.values():
            out.writestr(info, data)
    return target


def closure_argv(
    python: str, version: str, requirements: Sequence[str], links: Sequence[Path], constraints: Path, target: Path, report: Path
) -> list[str]:
    argv = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--report", str(report)]
    argv += ["--python-version", version, "--only-binary=:all:", "--target", str(target), "-c", str(constraints)]
    for link in links:
        argv += ["--find-links", str(link)]
    return argv + list(requirements)


def report_choices(report: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """pip's --report: normalized name -> (version, file name pip took)."""
    out = {}
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        url = str(item.get("download_info", {}).get("url", ""))
        out[normalize(meta.get("name", ""))] = (str(meta.get("version", "")), urllib.parse.unquote(url.rsplit("/", 1)[-1]))
    return out


def unresolved(stderr: str) -> str:
    """The requirement pip could not resolve (or the conflict), read from its error output."""
    for pattern in (
        r"Could not find a version that satisfies the requirement (.+?) \(from versions:",
        r"No matching distribution found for (\S+)",
    ):
        found = re.search(pattern, stderr)
        if found:
            return found.group(1).strip()
    conflict = re.search(r"The conflict is caused by:\n(.*?)\n\n", stderr, re.DOTALL)
    if conflict:
        return "conflict: " + "; ".join(line.strip() for line in conflict.group(1).splitlines() if line.strip())
    lines = [line.strip() for line in stderr.splitlines() if line.startswith("ERROR")]
    return lines[-1] if lines else " ".join(stderr.split())[-400:]


def check_python_closure(
    version: str,
    choices: Optional[Mapping[str, tuple[str, str]]],
    error: str,
    ours: Mapping[str, Path],
    index_has_python: Callable[[str], bool],
    index: Optional[Mapping[str, str]] = None,
) -> str:
    """The verdict for one Python: `choices` pip's (None: it failed with `error`); `ours` distribution -> our re-tagged
    wheel; `index` distribution -> version of the artifacts taken from the package index, which pip must take from
    the index at that version (no local label). Raises RehearsalError (FAIL) or Unchecked; returns the PASS detail."""
    from .build import RehearsalError, Unchecked

    if choices is None:
        requirement = unresolved(error)
        name = normalize(re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0])
        if name and name not in ours and not requirement.startswith("conflict") and not index_has_python(name):
            raise Unchecked(
                f"Python {version}: the package index here has no Python {version} wheel of {name} at any version, so "
                f"{requirement} cannot be resolved here (the index's gap, not our specs'; a host's index may have it)"
            )
        raise RehearsalError(f"pip cannot resolve {requirement} for Python {version}")
    problems, chosen = [], []
    for dist, wheel in ours.items():
        found = choices.get(normalize(dist))
        if found is None:
            problems.append(f"{dist}: expected ours ({wheel.name}), found it not in the closure")
        elif found[1] != wheel.name:
            problems.append(f"{dist}: expected ours ({wheel.name}), found pip takes {found[1]}")
        else:
            chosen.append(f"{dist} {found[0]}")
    taken = []
    for dist, wanted in (index or {}).items():
        found = choices.get(normalize(dist))
        if found is None:
            problems.append(f"{dist}: expected the index's {wanted}, found it not in the closure")
        elif found[0] != wanted or "+" in found[0]:
            problems.append(f"{dist}: expected the index's {wanted}, found pip takes {found[1]}")
        else:
            taken.append(f"{dist} {found[0]}")
    if problems:
        raise RehearsalError(f"for Python {version}: " + "; ".join(problems))
    return (
        f"{len(choices)} packages resolve for Python {version}"
        + (f", ours chosen: {', '.join(chosen)}" if chosen or not taken else "")
        + (f", the index's own: {', '.join(taken)}" if taken else "")
    )


def find_interpreter(version: str, runner: Callable[..., Any] = subprocess.run) -> Optional[str]:
    """A Python `version` with pip on this machine (PATH, pyenv), so pip reads markers as that Python does; None if none."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [
        shutil.which(f"python{version}"),
        *map(str, sorted(root.glob(f"versions/{version}.*/bin/python"))),
        f"/usr/bin/python{version}",
    ]
    for candidate in dict.fromkeys(c for c in candidates if c):
        try:
            proc = runner(
                [candidate, "-c", "import sys, pip; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0 and proc.stdout.strip() == version:
            return candidate
    return None


def python_closure(
    python: str,
    version: str,
    requirements: Sequence[str],
    ours: Mapping[str, Path],
    pins: Sequence[str],
    work: Path,
    timeout: float = 900,
    runner: Callable[..., Any] = subprocess.run,
    index: Optional[Mapping[str, str]] = None,
) -> Outcome:
    """Re-tag our wheels for `version`, resolve `requirements` with them for that Python, judge the report;
    `index` (distribution -> version) the artifacts taken from the package index, pinned, for pip to take there."""
    from .build import run_check

    exact = find_interpreter(version, runner)
    markers = f"pip under {exact}" if exact else f"markers of the running {Path(python).name}, tags of {version}: no Python {version} here"
    python = exact or python
    base = work / f"cp{version.replace('.', '')}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    retagged = {dist: retag_wheel(wheel, base / "wheels" / normalize(dist), version) for dist, wheel in ours.items()}
    constraints = base / "constraints.txt"
    pinned = [*(f"{d}=={wheel_version(w)}" for d, w in retagged.items()), *(f"{d}=={v}" for d, v in (index or {}).items()), *pins]
    constraints.write_text("".join(f"{p}\n" for p in pinned))
    links = sorted({w.parent for w in retagged.values()})
    report = base / "report.json"

    def has_python(name: str) -> bool:
        probe = base / f"probe-{name}.json"
        argv = closure_argv(python, version, [name], [], constraints, base / "probe-target", probe)
        argv.insert(argv.index("--dry-run") + 1, "--no-deps")
        proc = runner(argv, capture_output=True, text=True, timeout=timeout)
        return proc.returncode == 0

    def verdict() -> str:
        if not has_python("numpy"):
            from .build import Unchecked

            raise Unchecked(f"Python {version}: the package index here holds no Python {version} wheels (probe: numpy has none)")
        try:
            proc = runner(
                closure_argv(python, version, requirements, links, constraints, base / "target", report),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            from .build import RehearsalError

            raise RehearsalError(f"Python {version}: pip did not resolve in {timeout:.0f} s") from None
        choices = report_choices(json.loads(report.read_text())) if proc.returncode == 0 and report.is_file() else None
        output = f"{proc.stdout or ''}\n{proc.stderr or ''}"
        return check_python_closure(version, choices, output, retagged, has_python, index) + f" ({markers})"

    return run_check(f"closure python{version}", verdict)


def wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def closures_for_pythons(
    python: str,
    preflight_defaults: Path,
    requirement: str,
    ours: Mapping[str, Path],
    pins: Sequence[str],
    work: Path,
    jobs: int = 4,
    timeout: float = 900,
    preflight_overrides: Optional[Mapping[str, Any]] = None,
    index: Optional[Mapping[str, str]] = None,
) -> list[Outcome]:
    """python_closure for each host Python preflight allows (roles/preflight/defaults/main.yml, with the
    inventory's `preflight_overrides`, e.g. production's preflight_max_python): `requirement` with all of ours,
    as the release installs them, and the `index` artifacts (distribution -> version) at their versions from the
    index; in parallel, as pip's work here is mostly reading the index. A Python the preflight refuses is listed as
    unchecked, naming the variable."""
    from concurrent.futures import ThreadPoolExecutor

    import yaml  # the controller's

    try:
        settings = {**yaml.safe_load(Path(preflight_defaults).read_text(encoding="utf-8")), **dict(preflight_overrides or {})}
        versions = supported_pythons(settings)
        refused = refused_pythons(settings)
    except (OSError, KeyError, ValueError, TypeError) as exc:
        return [Outcome("closure pythons", False, f"{preflight_defaults}: {exc}")]
    requirements = [requirement, *ours, *(index or {})]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(python_closure, python, v, requirements, ours, pins, work, timeout, index=index) for v in versions]
        outcomes = [f.result() for f in futures]
    for version in refused:
        outcomes.append(
            Outcome(
                f"closure python{version}",
                False,
                f"not resolved: the preflight refuses Python {version} on the host "
                f"(preflight_max_python {settings['preflight_max_python']}, set in the inventory with its reason)",
                unchecked=True,
            )
        )
    return outcomes
