"""Does the package index's own wheel of an artifact fit this host? Judged by what the wheel is.

Controller side (``sglang-compat``; the deploy's plan). For each artifact of a release's stack
(torch, the kernel package, torchvision, torchaudio, torch_memory_saver, FlashInfer) the index's
wheel for the GPU host's Python and platform is downloaded once and read:

- the CUDA major its requirements name (``nvidia-*-cu13``, ``cuda-toolkit==13.*``, ...), evaluated
  for the host as pip would;
- the CUDA libraries each shared object links (``DT_NEEDED``: ``libcudart.so.13``, ``libcublas.so.12``);
- the GPU code of each shared object, as cuobjdump names it;

and checked with **the same rules a built wheel is** (``verify`` of the artifact's build spec,
``build/pipeline.check_objects``): SM120 machine code in every object with GPU code except those
the spec exempts by name and reason, the CUDA runtime major the host has. A wheel that ships one
object per CUDA major (torch_memory_saver: ``<stem>_cu12``/``<stem>_cu13``, picked at import by the
runtime's major) is judged on the variant this host loads. The verdict and its evidence are kept
per wheel (sha256) and rules, so a second look reads nothing.

What an artifact then costs: the index wheel when it fits; else a vetted ``+cu130`` wheel in the
controller's prebuilt wheelhouse; else a source build, with the spec's estimate.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from sglang_sm120.build.pipeline import BuildError, SharedObject, check_objects, read_gpu_code
from sglang_sm120.errors import ToolkitError
from sglang_sm120.files import file_sha256
from sglang_sm120.host.cuda_toolkit import cudart_major, elf_needed

from .pinned_stack import HOST_PIP_TARGET, canonical, requirements, stack_from_metadata

# Requirement names that say which CUDA a wheel is built for.
CUDA_REQUIREMENT_NAMES = (
    re.compile(r"^nvidia-[a-z0-9-]+-cu(?P<major>\d+)$"),  # nvidia-cudnn-cu13, nvidia-cuda-runtime-cu12
)
CUDA_REQUIREMENT_PINNED = ("cuda-toolkit", "nvidia-cuda-runtime", "cuda-bindings", "cuda-python")
# The CUDA toolkit's libraries, by soname, and the component (stack_cuda_components) whose version's
# major is their soname's: in CUDA 13.0.1 libcudart.so.13 and libcublas.so.13, but libcufft.so.12
# (cuFFT 12.0), libcurand.so.10, libcusolver.so.12 and libcusparse.so.12. A wheel that links another
# major of one of them was built against another CUDA. (cuDNN, NCCL, cuSPARSELt: their own versions.)
CUDA_LIBRARY_COMPONENTS = {
    "cudart": "nvidia-cuda-runtime",
    "cublas": "nvidia-cublas",
    "cublasLt": "nvidia-cublas",
    "cufft": "nvidia-cufft",
    "curand": "nvidia-curand",
    "cusolver": "nvidia-cusolver",
    "cusparse": "nvidia-cusparse",
    "nvrtc": "nvidia-cuda-nvrtc",
    "nvJitLink": "nvidia-nvjitlink",
    "cupti": "nvidia-cuda-cupti",
}
CUDA_SONAME = re.compile(rf"^lib(?P<library>{'|'.join(CUDA_LIBRARY_COMPONENTS)})\.so\.(?P<major>\d+)$")
VARIANT = re.compile(r"^(?P<stem>.+?)_cu(?P<major>\d+)(?P<rest>\..*)$")
# How a spec's prebuilt.origin begins when apply_choices took the index's wheel (read back by taken_from_index).
INDEX_ORIGIN = "the package index's own wheel"
JUDGEMENT_SCHEMA = 2  # bump when judge() changes: kept judgements are then read again


class IndexWheelError(ToolkitError):
    """An index wheel cannot be downloaded or read; the text names the requirement."""


@dataclass
class ObjectEvidence:
    path: str
    targets: list[str]
    cuda_libraries: list[str]  # the versioned CUDA sonames it links
    note: str = ""  # why it is not judged (another CUDA variant), or the spec's exemption


@dataclass
class Judgement:
    artifact: str
    requirement: str
    wheel: str
    sha256: str
    fits: bool
    cuda_majors: list[int]  # from its requirements and the sonames its objects link
    gpu_code: list[str]  # every target any judged object carries, sorted
    problems: list[str] = field(default_factory=list)
    objects: list[ObjectEvidence] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """'CUDA 13, sm_120a' / 'pure Python' / 'CUDA 12: ...' for a table cell."""
        if not self.fits:
            return "; ".join(self.problems)
        cuda = "/".join(str(m) for m in self.cuda_majors)
        arch = [t for t in self.gpu_code if t.startswith(("sm_12", "compute_12"))]
        if not cuda and not self.gpu_code:
            return "pure Python"
        return ", ".join(p for p in (f"CUDA {cuda}" if cuda else "", "+".join(arch)) if p)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["summary"] = self.summary
        return out


def wheel_metadata(wheel: Path) -> str:
    """The METADATA of any wheel."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
            if not names:
                raise IndexWheelError(f"{wheel.name}: no *.dist-info/METADATA in it")
            return archive.read(names[0]).decode("utf-8", errors="replace")
    except (zipfile.BadZipFile, OSError) as exc:
        raise IndexWheelError(f"{wheel} is not a wheel: {exc}") from exc


def _pinned_major(specifier: str) -> Optional[int]:
    """The CUDA major a version specifier of a CUDA package names: ``==13.0.2`` and ``~=13.0`` name
    13; ``>=13.0.3,<14`` names 13; ``<13`` names 12; a bare lower bound (``>=12.0``) names none,
    since any later CUDA satisfies it."""
    from packaging.specifiers import SpecifierSet

    lower = upper = None
    for spec in SpecifierSet(specifier):
        major = int(re.match(r"\d+", spec.version).group(0)) if re.match(r"\d+", spec.version) else None  # type: ignore[union-attr]
        if major is None:
            continue
        if spec.operator in ("==", "===", "~="):
            return major
        if spec.operator in (">=", ">"):
            lower = major
        if spec.operator == "<":
            upper = major - 1 if spec.version.split(".")[1:] in ([], ["0"], ["0", "0"]) else major
        if spec.operator == "<=":
            upper = major
    if upper is not None and (lower is None or lower == upper):
        return upper
    return None


def required_cuda(metadata: str) -> dict[int, list[str]]:
    """CUDA major -> the requirements (as written) that name it, for the GPU host's markers."""
    majors: dict[int, list[str]] = {}
    for pin in requirements(metadata):
        major: Optional[int] = None
        for pattern in CUDA_REQUIREMENT_NAMES:
            match = pattern.match(pin.key)
            if match:
                major = int(match.group("major"))
        if major is None and pin.key in CUDA_REQUIREMENT_PINNED:
            major = _pinned_major(pin.specifier)
        if major is not None:
            majors.setdefault(major, []).append(pin.text())
    return majors


def _variants(paths: Sequence[str], cuda_major: int) -> dict[str, str]:
    """Objects of a per-CUDA-major family this host does not load -> why. A family is the objects
    ``<stem>_cu<N><rest>`` of one stem and rest; where one exists for ``cuda_major``, the others
    and the plain ``<stem><rest>`` are other variants."""
    families: dict[tuple[str, str], dict[int, str]] = {}
    for path in paths:
        match = VARIANT.match(path)
        if match:
            families.setdefault((match.group("stem"), match.group("rest")), {})[int(match.group("major"))] = path
    skipped: dict[str, str] = {}
    for (stem, rest), members in families.items():
        if cuda_major not in members:
            continue
        ours = members[cuda_major]
        for major, path in members.items():
            if major != cuda_major:
                skipped[path] = f"the CUDA {major} variant; this host loads {ours}"
        if f"{stem}{rest}" in paths:
            skipped[f"{stem}{rest}"] = f"the unsuffixed variant; this host loads {ours}"
    return skipped


def soname_majors(components: Mapping[str, str]) -> dict[str, int]:
    """Library -> the soname major the host's CUDA has, from its component versions
    (stack_cuda_components: nvidia-cufft 12.0.0.61 -> cufft 12)."""
    return {lib: int(str(components[c]).split(".")[0]) for lib, c in CUDA_LIBRARY_COMPONENTS.items() if c in components}


def judge(
    artifact: str,
    requirement: str,
    wheel: Path,
    rules: Mapping[str, Any],
    cuda_major: int = 13,
    cuobjdump: Optional[str] = None,
    sonames: Optional[Mapping[str, int]] = None,
) -> Judgement:
    """Read ``wheel`` and judge it against the artifact's ``verify`` rules for a host of ``cuda_major``
    whose CUDA libraries have the soname majors ``sonames`` (``soname_majors``; libcudart and libcublas
    alone, at ``cuda_major``, when not given)."""
    expected = dict(sonames) if sonames else {"cudart": cuda_major, "cublas": cuda_major, "cublasLt": cuda_major}
    wheel = Path(wheel)
    problems: list[str] = []
    required = required_cuda(wheel_metadata(wheel))
    for major, names in sorted(required.items()):
        if major != cuda_major:
            more = f" and {len(names) - 2} more" if len(names) > 2 else ""
            problems.append(f"its requirements name CUDA {major} ({', '.join(names[:2])}{more}), the host has CUDA {cuda_major}")
    wrong_links: dict[str, list[str]] = {}
    evidence: list[ObjectEvidence] = []
    shared: list[SharedObject] = []
    with tempfile.TemporaryDirectory(prefix="index-wheel-") as tmp, zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if re.search(r"\.so(\.\d+)*$", m)]
        skipped = _variants(members, cuda_major)
        for member in members:
            target = Path(tmp) / "object.so"
            with archive.open(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            needed = elf_needed(str(target)) or []
            libraries = sorted({n for n in needed if CUDA_SONAME.match(n) and CUDA_SONAME.match(n).group("library") in expected})
            targets = read_gpu_code(target, cuobjdump)
            evidence.append(ObjectEvidence(member, targets, libraries, skipped.get(member, "")))
            if member in skipped:
                continue
            shared.append(SharedObject(member, targets, cudart_major(needed)))
            for name in libraries:
                match = CUDA_SONAME.match(name)
                if match is None:  # cudart_major and the libraries found come from this same pattern
                    continue
                want = expected[match.group("library")]
                if int(match.group("major")) != want:
                    wrong_links.setdefault(f"{name} (CUDA {cuda_major} has lib{match.group('library')}.so.{want})", []).append(member)
    for link, objects in sorted(wrong_links.items()):
        more = f" and {len(objects) - 1} more" if len(objects) > 1 else ""
        problems.append(f"links {link}: {objects[0]}{more}")
    try:
        # libcudart is judged above, with the other CUDA libraries
        check_objects(wheel.name, shared, {k: v for k, v in rules.items() if k != "cudart"})
    except BuildError as exc:
        problems.append(str(exc).split(" rejected: ", 1)[-1])
    linked = {lib for o in evidence if not o.note for lib in o.cuda_libraries}
    majors = set(required) | {int(m.group(1)) for lib in linked if (m := re.match(r"libcudart\.so\.(\d+)$", lib))}
    return Judgement(
        artifact=artifact,
        requirement=requirement,
        wheel=wheel.name,
        sha256=file_sha256(wheel),
        fits=not problems,
        cuda_majors=sorted(majors),
        gpu_code=sorted({t for o in evidence if not o.note for t in o.targets}),
        problems=problems,
        objects=evidence,
    )


# ------------------------------------------------------------------ download and cache


def _rules_key(rules: Mapping[str, Any], cuda_major: int) -> str:
    text = json.dumps({"rules": rules, "cuda_major": cuda_major, "schema": JUDGEMENT_SCHEMA}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def download(requirement: str, cache: Path, python: str = sys.executable, timeout: int = 900) -> Path:
    """The index's wheel of ``requirement`` for the GPU host (``pip download --no-deps``, its Python
    and platform), kept in ``cache/wheels/<requirement>/``; a kept download is reused."""
    target = Path(cache) / "wheels" / re.sub(r"[^A-Za-z0-9.=_-]+", "_", requirement)
    found = sorted(target.glob("*.whl"))
    if found:
        return found[0]
    Path(cache).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".download-", dir=Path(cache)))
    try:
        command = [python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:"]
        command += [*HOST_PIP_TARGET, "-d", str(scratch), requirement]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise IndexWheelError(f"pip download --no-deps {requirement} did not finish: {exc}") from exc
        wheels = sorted(scratch.glob("*.whl"))
        if done.returncode != 0 or not wheels:
            if "No matching distribution" in done.stderr:
                raise IndexWheelError(f"the package index has no wheel of {requirement} for the GPU host")
            errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
            reason = "; ".join(errors) or f"pip exit {done.returncode}"
            raise IndexWheelError(f"pip download --no-deps {requirement}: {reason}")
        target.mkdir(parents=True, exist_ok=True)
        final = target / wheels[0].name
        os.replace(wheels[0], final)
        return final
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def judge_cached(
    artifact: str,
    requirement: str,
    wheel: Path,
    rules: Mapping[str, Any],
    cache: Path,
    cuda_major: int = 13,
    cuobjdump: Optional[str] = None,
    sonames: Optional[Mapping[str, int]] = None,
) -> Judgement:
    """``judge``, kept under ``cache/judgements/`` by the wheel's sha256 and the rules."""
    key = f"{file_sha256(wheel)}-{_rules_key({'verify': rules, 'sonames': sonames or {}}, cuda_major)}"
    path = Path(cache) / "judgements" / f"{key}.json"
    if path.exists():
        data = json.loads(path.read_text())
        data.pop("summary", None)
        data["objects"] = [ObjectEvidence(**o) for o in data["objects"]]
        data["artifact"], data["requirement"] = artifact, requirement
        return Judgement(**data)
    result = judge(artifact, requirement, wheel, rules, cuda_major, cuobjdump, sonames)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(result.to_dict(), indent=1))
    os.replace(scratch, path)
    return result


# ------------------------------------------------------------------ what each artifact costs


@dataclass
class ArtifactChoice:
    artifact: str
    requirement: str
    choice: str  # "index wheel", "wheelhouse", "source build", "not needed"
    evidence: str
    build_hours: tuple[float, float] = (0.0, 0.0)
    judgement: Optional[Judgement] = None

    def cell(self) -> str:
        if self.choice == "source build":
            low, high = self.build_hours
            return f"source build (~{_hours(low)}-{_hours(high)} h): {self.evidence}"
        return f"{self.choice} ({self.evidence})"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["judgement"] = self.judgement.to_dict() if self.judgement else None
        out["cell"] = self.cell()
        return out


def _hours(value: float) -> str:
    return f"{value:g}"


def release_artifacts(metadata: str, torchvision_for_torch: Mapping[str, str]) -> list[tuple[str, str, bool]]:
    """(artifact, requirement, optional) of a release's CUDA-linked stack, from its SGLang wheel's
    METADATA (its exact pins, and its torch_memory_saver bound) and the torchvision recorded for its torch."""
    stack = stack_from_metadata(metadata)
    pins, torch = stack["pins"], stack["torch"]
    out = [
        ("torch", f"torch=={torch}", False),
        ("sgl_kernel", f"{stack['kernel_package']}=={stack['kernel_version']}", False),
        ("flashinfer", f"flashinfer-python=={stack['flashinfer']}", False),
        # FlashInfer's ahead-of-time kernels: without them it compiles each kernel on first use
        ("flashinfer_jit_cache", f"flashinfer-jit-cache=={stack['flashinfer']}", True),
    ]
    if torch in torchvision_for_torch:
        out.append(("torchvision", f"torchvision=={torchvision_for_torch[torch]}", False))
    else:
        out.append(("torchvision", f"torchvision: no version recorded for torch {torch} (stack_torch_torchvision_versions)", False))
    if "torchaudio" in pins:
        out.append(("torchaudio", f"torchaudio=={pins['torchaudio']}", False))
    saver = next((p for p in requirements(metadata) if p.key == "torch-memory-saver"), None)
    if saver is not None:
        out.append(("torch_memory_saver", f"torch_memory_saver{saver.specifier}", False))
    return out


def choose(
    artifact: str,
    requirement: str,
    optional: bool,
    rules: Mapping[str, Any],
    build_hours: tuple[float, float],
    cache: Path,
    prebuilt: Optional[Path] = None,
    cuda_major: int = 13,
    cuobjdump: Optional[str] = None,
    python: str = sys.executable,
    sonames: Optional[Mapping[str, int]] = None,
) -> ArtifactChoice:
    """Index wheel when it fits; else a vetted +cu130 wheel in ``prebuilt``; else a source build
    (or, for an optional artifact, nothing: said so)."""
    judgement: Optional[Judgement] = None
    why = ""
    if "==" in requirement or ">=" in requirement:
        try:
            wheel = download(requirement, cache, python)
            judgement = judge_cached(artifact, requirement, wheel, rules, cache, cuda_major, cuobjdump, sonames)
            if judgement.fits:
                return ArtifactChoice(artifact, requirement, "index wheel", f"{judgement.wheel}: {judgement.summary}", judgement=judgement)
            why = f"the index's {judgement.wheel} does not fit: {judgement.summary}"
        except IndexWheelError as exc:
            why = str(exc)
    else:
        why = requirement
    name = canonical(requirement.split("=")[0].split(">")[0]).replace("-", "_")
    if prebuilt is not None and "==" in requirement:
        version = requirement.split("==", 1)[1]
        found = sorted(Path(prebuilt).glob(f"{name}-{version}+cu130-*.whl"))
        if found:
            return ArtifactChoice(artifact, requirement, "wheelhouse", f"{found[0].name}, verified at the build", judgement=judgement)
    if optional:
        low, high = build_hours
        return ArtifactChoice(
            artifact,
            requirement,
            "JIT on first use",
            f"{why}; a source build of it (~{_hours(low)}-{_hours(high)} h) is optional",
            judgement=judgement,
        )
    return ArtifactChoice(artifact, requirement, "source build", why, build_hours, judgement)


PARALLEL = (("sgl_kernel", "flashinfer_jit_cache", "torchvision", "torchaudio"),)  # each only needs torch


def first_deploy_hours(choices: Sequence[ArtifactChoice], parallel: Sequence[Sequence[str]] = PARALLEL) -> tuple[float, float]:
    """The source builds' share of a first deploy: low with the artifacts that only need torch built
    side by side (``parallel``; a host with the cores and memory for them), high one after the other."""
    builds = {c.artifact: c.build_hours for c in choices if c.choice == "source build"}
    high = sum(b for _, b in builds.values())
    low = 0.0
    grouped: set[str] = set()
    for group in parallel:
        members = [builds[a][0] for a in group if a in builds]
        low += max(members, default=0.0)
        grouped.update(group)
    low += sum(a for name, (a, _) in builds.items() if name not in grouped)
    return low, high


def release_costs(
    metadata: str,
    verify_rules: Mapping[str, Mapping[str, Any]],
    build_hours: Mapping[str, Sequence[float]],
    torchvision_for_torch: Mapping[str, str],
    cache: Path,
    prebuilt: Optional[Path] = None,
    cuobjdump: Optional[str] = None,
    python: str = sys.executable,
    sonames: Optional[Mapping[str, int]] = None,
) -> tuple[list[ArtifactChoice], tuple[float, float]]:
    """Every CUDA-linked artifact of the release whose SGLang METADATA is ``metadata``: its choice
    and evidence (``verify_rules``: each build spec's ``verify``, rendered), and the first deploy's
    source-build hours."""
    choices = []
    for artifact, requirement, optional in release_artifacts(metadata, torchvision_for_torch):
        hours = tuple(build_hours.get(artifact, (0.0, 0.0)))
        choices.append(
            choose(
                artifact,
                requirement,
                optional,
                verify_rules.get(artifact, {"device_code": "if-present"}),
                (float(hours[0]), float(hours[1])),
                cache,
                prebuilt,
                cuobjdump=cuobjdump,
                python=python,
                sonames=sonames,
            )
        )
    return choices, first_deploy_hours(choices)


# ------------------------------------------------------------------ the deploy's build specs


def _wheelhouse_has(prebuilt: Any) -> bool:
    """Whether a spec's prebuilt wheelhouse on the controller holds a wheel its pattern matches."""
    if not isinstance(prebuilt, Mapping) or "wheelhouse" not in prebuilt:
        return False
    return any(Path(str(prebuilt["wheelhouse"])).glob(str(prebuilt.get("pattern", "*.whl"))))


def taken_from_index(spec: Mapping[str, Any]) -> bool:
    """Whether apply_choices made the package index's own wheel this spec's prebuilt wheel."""
    prebuilt = spec.get("prebuilt")
    return isinstance(prebuilt, Mapping) and str(prebuilt.get("origin", "")).startswith(INDEX_ORIGIN)


def apply_choices(
    specs: Sequence[Mapping[str, Any]],
    cache: Path,
    sonames: Mapping[str, int],
    build_optional: Sequence[str] = (),
    cuda_major: int = 13,
    cuobjdump: Optional[str] = None,
    python: str = sys.executable,
) -> list[dict[str, Any]]:
    """The build specs with each ``index:`` artifact resolved on the controller.

    A spec's ``index`` (a requirement, e.g. ``torch==2.11.0``) names the package index's wheel of it;
    that wheel is downloaded and judged with the spec's own ``verify``. When it fits, it becomes the
    spec's prebuilt wheel (from the controller's index-wheel cache, copied to the host and verified
    there as any prebuilt wheel is, the source build still behind it) and the spec loses its local
    version label (the file installed is the index's own). When it does not, the spec stays as it was
    (its prebuilt wheelhouse, else the source build) and its ``prebuilt.origin`` says why the index's
    wheel was not taken; an ``optional`` spec (FlashInfer's AOT cache) is then dropped, with every
    ``depends_on`` on it, unless its name is in ``build_optional``. Specs without ``index`` pass unchanged."""
    out: list[dict[str, Any]] = []
    dropped: set[str] = set()
    for spec in specs:
        spec = dict(spec)
        requirement = spec.pop("index", None)
        optional = bool(spec.pop("optional", False))
        if not requirement:
            out.append(spec)
            continue
        name = str(spec["name"])
        choice = choose(
            name,
            str(requirement),
            optional,
            spec.get("verify") or {},
            (0.0, 0.0),
            cache,
            None,
            cuda_major,
            cuobjdump,
            python,
            sonames,
        )
        if choice.choice == "index wheel" and choice.judgement is not None:
            wheel = next(Path(cache, "wheels").glob(f"*/{choice.judgement.wheel}"))
            spec["prebuilt"] = {
                "wheelhouse": str(wheel.parent),
                "pattern": wheel.name,
                "origin": f"{INDEX_ORIGIN}, {choice.judgement.wheel}: {choice.judgement.summary}",
            }
            spec.pop("local_version", None)
        elif optional and name not in build_optional and not _wheelhouse_has(spec.get("prebuilt")):
            dropped.add(name)
            continue
        elif isinstance(spec.get("prebuilt"), Mapping):
            spec["prebuilt"] = {**spec["prebuilt"], "origin": f"a vetted wheel of the controller's wheelhouse, if any ({choice.evidence})"}
        out.append(spec)
    for spec in out:
        if dropped & set(spec.get("depends_on") or []):
            spec["depends_on"] = [d for d in spec["depends_on"] if d not in dropped]
    return out
