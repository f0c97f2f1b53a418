"""The launch plan: what the server runs, computed once per deploy and used by the release key, the unit and the benchmark.

A plan is the profile merged with the listen address and the operator's extra flags, checked by
the checker of sglang-flags (plugins/module_utils/sglang_sm120/launch/flag_check.py) against the SGLang the release will
carry; the server's environment merged from its parts (secrets never in it); and the ids of the
patches the release will carry. Then the start gate: every entry of the catalogue of known start
failures (roles/sglang_launch/files/start-failures.yml, plugins/module_utils/sglang_sm120/launch/start_failures.py)
is evaluated on those flags and
that environment, the model and draft directories the flags name (read on the host) and the host's
facts preflight saved; a refused entry refuses the plan, a warning is one of its flag warnings, and
every verdict is kept in the plan (``start_gate``). Plain Python, no Ansible imports;
plugins/modules/sglang_launch_plan.py wraps it.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Optional

from ..errors import ToolkitError
from . import flag_check as flag_rules
from . import flags as server_flags
from . import model_access, release_sources, start_failures
from . import server_args as server_args_check
from .flag_check import check_launch
from .flags import exec_start_args


class LaunchPlanError(ToolkitError):
    """The inputs of a plan are wrong; the message names the variable, what was expected and found."""


@dataclass
class LaunchPlan:
    profile: str
    flags: dict[str, Any]
    argv: list[str]
    exec_args: str
    launch_module: str
    env: dict[str, str]
    patches: list[str]
    sglang_version: Optional[str]
    parser: str
    parser_line: str
    check_mode: str  # "import" (SGLang's own parser) or "static" (the table read from its sources)
    flag_warnings: list[str] = field(default_factory=list)
    # The start gate's outcome: summary (one line), counts per verdict, verdicts (id, verdict, text);
    # {"summary": "not run: ..."} when no catalogue was given.
    start_gate: dict[str, Any] = field(default_factory=dict)
    # SGLang's own ServerArgs on the plan, in the venv of the release that will run it (verify_plan):
    # {} until then; else verdict, python, sglang_version, device, device_from, rewritten, chosen,
    # seconds, import_seconds, cached.
    server_args: dict[str, Any] = field(default_factory=dict)
    # The catalogue's log signatures for this SGLang version (start_failures.log_signatures): how the start canary
    # names a failure by its catalogue entry; [] when no catalogue was given.
    log_signatures: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def merge_flags(
    profiles: Mapping[str, Any],
    profile: str,
    host: str,
    port: int,
    extra_flags: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """THE merge: the profile, then the listen address, then the operator's extra flags (last wins)."""
    if not profiles:
        raise LaunchPlanError("sglang_profiles is empty: expected at least one launch profile")
    if profile not in profiles:
        known = ", ".join(sorted(profiles))
        raise LaunchPlanError(f"sglang_profile is {profile!r}, expected one of {known}")
    base = profiles[profile]
    if not isinstance(base, Mapping):
        raise LaunchPlanError(f"sglang_profiles.{profile}: expected a mapping of flag -> value, found {type(base).__name__}")
    if extra_flags is not None and not isinstance(extra_flags, Mapping):
        raise LaunchPlanError(f"sglang_extra_flags: expected a mapping of flag -> value, found {type(extra_flags).__name__}")
    return {**dict(base), "host": host, "port": port, **dict(extra_flags or {})}


def merge_env(parts: Sequence[Mapping[str, Any]], secret_names: Sequence[str]) -> dict[str, str]:
    """The server's environment: the parts in order (last wins), values as strings; refuses any secret name."""
    env: dict[str, str] = {}
    for part in parts:
        for key, value in (part or {}).items():
            env[str(key)] = "" if value is None else str(value)
    clash = sorted(set(env) & set(secret_names))
    if clash:
        raise LaunchPlanError(
            f"{', '.join(clash)} set both as environment (sglang_extra_env) and as secret (sglang_service_secrets); "
            "keep secrets in sglang_service_secrets only"
        )
    return env


def planned_patches(manifest: Mapping[str, Any], only: Optional[Sequence[str]]) -> list[str]:
    """The patch ids the release will carry: the operator's selection, else the manifest's defaults."""
    entries = manifest.get("patches") if isinstance(manifest, Mapping) else None
    if not isinstance(entries, list):
        raise LaunchPlanError("roles/sglang_patches/files/patches/manifest.yml: expected a mapping with a `patches` list")
    ids = [str(entry.get("id")) for entry in entries if isinstance(entry, Mapping)]
    if only:
        unknown = [patch_id for patch_id in only if patch_id not in ids]
        if unknown:
            raise LaunchPlanError(f"sglang_patches_only names {', '.join(unknown)}, expected ids from the manifest: {', '.join(ids)}")
        return list(dict.fromkeys(only))
    return [str(entry["id"]) for entry in entries if isinstance(entry, Mapping) and entry.get("default")]


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """sha256 of the parsed patch manifest as canonical JSON ("" for none): part of a release's key."""
    if not manifest:
        return ""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, default=str).encode()).hexdigest()


def make_plan(
    sglang: str | Path,
    *,
    profiles: Mapping[str, Any],
    profile: str,
    host: str,
    port: int,
    extra_flags: Optional[Mapping[str, Any]],
    env_parts: Sequence[Mapping[str, Any]],
    secret_names: Sequence[str],
    patches: Sequence[str],
    model_class: Optional[str],
    gpu_major: int,
    launch_module: str,
    python: Optional[str] = None,
    pythonpath: Sequence[str] = (),
    cache: Optional[str | Path] = None,
    write_cache: bool = True,
    catalogue: Optional[Mapping[str, Any]] = None,
    model_dirs: Optional[Mapping[str, str]] = None,
    host_facts: Optional[str] = None,
    host_facts_pending: Sequence[str] = (),
    gate_skipped: str = "",
) -> LaunchPlan:
    """Merge, check against the SGLang at ``sglang`` and return the plan; LaunchPlanError lists every refusal.
    ``gate_skipped``: why no catalogue is given, for the plan's start-gate summary; ``host_facts_pending``: host facts
    this run is about to change (the CUDA toolkit's, before its play), which the gate takes as unknown.

    With ``cache`` (a directory) and ``sglang`` a wheel file, a plan already checked for exactly
    these inputs (the wheel's sha256, the merged flags, environment, patches, Python, and the
    checker's own source) is read back instead of checked again: importing SGLang's parser takes
    seconds to tens of seconds, and a converge that changes nothing should not pay it.
    """
    flags = merge_flags(profiles, profile, host, port, extra_flags)
    env = merge_env(env_parts, secret_names)
    key = _cache_key(sglang, flags, env, patches, model_class, gpu_major, launch_module, python, pythonpath) if cache else None
    checked = _read_cached(Path(cache), key) if cache and key else None
    if checked is None:
        report = check_launch(
            sglang,
            profile=flags,
            model_class=model_class,
            gpu_major=gpu_major,
            planned_patches=list(patches),
            python=python,
            pythonpath=list(pythonpath),
        )
        if not report.ok:
            errors = "; ".join(f.text() for f in report.errors)
            raise LaunchPlanError(f"invalid SGLang launch flags for profile {profile} ({report.parser_line}), nothing changed: {errors}")
        checked = LaunchPlan(
            profile=profile,
            flags=flags,
            argv=list(report.argv),
            exec_args=exec_start_args(report.argv),
            launch_module=launch_module,
            env=env,
            patches=list(patches),
            sglang_version=report.version,
            parser=report.parser,
            parser_line=report.parser_line,
            check_mode="import" if report.parser == "sglang" else "static",
            flag_warnings=[f.text() for f in report.warnings],
        )
        if cache and key and write_cache:
            _write_cached(Path(cache), key, checked)
    return start_gate(
        checked,
        sglang,
        catalogue,
        model_dirs,
        host_facts,
        gpu_major,
        skipped=gate_skipped,
        pending=host_facts_pending,
        sources_cache=cache,
        write_cache=write_cache,
    )


def write_model_files(scratch: str | Path, model_files: Mapping[str, Any]) -> dict[str, str]:
    """The config files given for model paths the host does not hold (model path -> file name ->
    content; the lab's config-only copies) written under ``scratch``, one directory per path:
    model path -> that directory. LaunchPlanError for a name that is not a plain file name."""
    model_dirs: dict[str, str] = {}
    for number, (path, files) in enumerate(sorted(model_files.items())):
        directory = Path(scratch) / str(number)
        directory.mkdir()
        for name, content in (files or {}).items():
            if "/" in str(name) or os.sep in str(name) or str(name) in ("", ".", ".."):
                raise LaunchPlanError(f"model_files[{path!r}]: {name!r} is not a file name")
            text = content if isinstance(content, str) else json.dumps(content)
            (directory / str(name)).write_text(text, encoding="utf-8")
        model_dirs[str(path)] = str(directory)
    return model_dirs


MODEL_FLAGS = (("model-path", "model"), ("speculative-draft-model-path", "draft"))
# The inventory variable each model flag's path comes from in the toolkit's profiles
# (inventory/*/group_vars/all/service.yml), named when the directory cannot be read.
MODEL_PATH_VARIABLES = {"model-path": "stack_model_path", "speculative-draft-model-path": "stack_draft_model_path"}


def service_access(plan: LaunchPlan, model_dirs: Optional[Mapping[str, str]], user: str) -> dict[str, Any]:
    """Whether the service's ``user`` can read, inside the unit's sandbox, every model directory the
    plan's flags name that is read on this host (not those given as config files: ``model_dirs``).
    Raises LaunchPlanError naming the flag, the path, the user and what keeps it out; returns
    {user, checked, notes}."""
    flags = start_failures.parse_argv(plan.argv, None)
    paths = [
        (flag, value, MODEL_PATH_VARIABLES[flag])
        for flag, _kind in MODEL_FLAGS
        for value in [flags.get(flag)]
        if isinstance(value, str) and value not in (model_dirs or {})
    ]
    try:
        notes = model_access.check(paths, user)
    except model_access.ModelAccessError as exc:
        raise LaunchPlanError(str(exc)) from exc
    return {"user": user, "checked": [path for _flag, path, _variable in paths], "notes": notes}


def start_gate(
    plan: LaunchPlan,
    sglang: str | Path,
    catalogue: Optional[Mapping[str, Any]],
    model_dirs: Optional[Mapping[str, str]],
    host_facts: Optional[str],
    gpu_major: int,
    *,
    resolved: Optional[dict[str, Any]] = None,
    resolved_by: str = "",
    reserve: Optional[Mapping[str, Any]] = None,
    aliases: Optional[Mapping[str, str]] = None,
    skipped: str = "",
    venv_probes: Optional[Mapping[str, Any]] = None,
    outcome: str = "nothing changed",
    pending: Sequence[str] = (),
    sources_cache: Optional[str | Path] = None,
    write_cache: bool = True,
    sources: Optional[release_sources.ReleaseSources] = None,
) -> LaunchPlan:
    """The plan with the start gate applied (its verdicts never cached: the model directories and the host's facts
    are read every time). Refused entries raise LaunchPlanError naming each, with its fix; a model
    directory the flags name that cannot be read is refused naming the flag and the path. Facts that
    are absent (no host-facts file) make the entries that need them ``unknown``, never a pass.

    ``resolved`` (canonical flag name -> value, by ``resolved_by``): the values SGLang's own ServerArgs
    resolved (verify_plan), which the entries read instead of the flags as typed; ``reserve``: its
    own --mem-fraction-static for these flags without the operator's; ``venv_probes``: what
    server_args_check's probes saw in the release's venv (whether ``deep_gemm`` imports, whether
    Triton's ptxas assembles for the GPUs: VENV_PROBES), for a host-facts file that does not say;
    ``outcome``: what a refusal left as it was, for its message; ``sources_cache``: where what the gate read from the
    release's sources is kept by their identity (release_sources), read back instead of parsed again (``sources``:
    already read)."""
    if not catalogue:
        return replace(plan, start_gate={"summary": f"not run: {skipped or 'no catalogue given'}", "counts": {}, "verdicts": []})
    try:
        entries = start_failures.parse_catalogue(catalogue, "roles/sglang_launch/files/start-failures.yml")
    except start_failures.CatalogueError as exc:
        raise LaunchPlanError(f"start gate: {exc}") from exc
    flags, facts, host, notes = _gate_facts(plan, model_dirs, host_facts, aliases)
    host = _with_venv_probes(_pending(host, pending), venv_probes)
    capability = host.capability if host is not None and host.capability else f"{gpu_major}.0"
    acknowledged = [k[1:].replace("_", "-") for k, v in plan.flags.items() if str(k).startswith("_") and v]
    if facts and sources is None:
        sources = release_sources.read(sglang, sources_cache, write=write_cache)
    ctx = start_failures.Context(
        flags=flags,
        env=dict(plan.env),
        version=plan.sglang_version,
        capability=capability,
        model=facts.get("model"),
        draft=facts.get("draft"),
        host=host,
        registry=set(sources.registry) if sources is not None and sources.registry is not None and "draft" in facts else None,
        release=sources.release if sources is not None and facts else None,
        planned_patches=list(plan.patches),
        acknowledged=acknowledged,
        aliases=dict(aliases or {}),
        resolved=resolved,
        resolved_by=resolved_by or "SGLang's ServerArgs",
        sglang_auto_fraction=(reserve or {}).get("auto_mem_fraction_static"),
        sglang_auto_unknown=str((reserve or {}).get("unknown") or ""),
    )
    verdicts = start_failures.evaluate(entries, ctx)
    counts = {name: sum(1 for v in verdicts if v.verdict == name) for name in start_failures.VERDICTS}
    summary = f"{len(verdicts)} known start failures checked (SGLang {plan.sglang_version}, capability {capability}): "
    summary += ", ".join(f"{n} {name}" for name, n in counts.items() if n) + f"; read from the {ctx.flag_source}"
    if notes:
        summary += "; " + "; ".join(notes)
    refused = [v for v in verdicts if v.verdict == "refused"]
    if refused:
        raise LaunchPlanError(
            f"the start gate refuses profile {plan.profile} ({summary}), {outcome}: " + " | ".join(v.text() for v in refused)
        )
    gate = {
        "summary": summary,
        "counts": counts,
        "flag_values": "resolved" if resolved is not None else "typed",
        "verdicts": [{"id": v.id, "verdict": v.verdict, "text": v.text()} for v in verdicts],
    }
    # a gate run again (verify_plan) replaces the warnings of the one before
    kept = [w for w in plan.flag_warnings if not w.startswith(GATE_WARNING)]
    warnings = [f"{GATE_WARNING}{v.text()}" for v in verdicts if v.verdict == "warning"]
    return replace(
        plan, flag_warnings=[*kept, *warnings], start_gate=gate, log_signatures=start_failures.log_signatures(entries, plan.sglang_version)
    )


GATE_WARNING = "start gate "


# Facts only the release's venv can tell (server_args_check's probes), taken where the host-facts file does not say.
VENV_PROBES = {
    "deep_gemm_importable": ("deep_gemm_note", "import probe"),
    "triton_ptxas_knows_arch": ("triton_ptxas_note", "Triton's ptxas asked"),
}


def _with_venv_probes(host: Any, probe: Optional[Mapping[str, Any]]) -> Any:
    """The host's facts with each VENV_PROBES fact from the release venv's probes where the file does
    not say (a host without a facts file gets one holding only those), and what the probe saw as the
    fact's ``<fact>_from``."""
    found = {fact: bool(probe[fact]) for fact in VENV_PROBES if probe and probe.get(fact) is not None}
    if not found:
        return host
    if host is None:
        why = "no host-facts file given"
        host = start_failures.HostFacts(source="(no host-facts file)", gpus=[], unknown={fact: why for fact in start_failures.HOST_FACTS})
    taken = {fact: value for fact, value in found.items() if getattr(host, fact) is None}
    if not taken:
        return host
    seen = {f"{fact}_from": f"{VENV_PROBES[fact][1]} in the release's venv: {(probe or {}).get(VENV_PROBES[fact][0])}" for fact in taken}
    unknown = {fact: why for fact, why in host.unknown.items() if fact not in taken}
    return replace(host, **taken, unknown=unknown, facts={**host.facts, **seen})


# The host facts the CUDA toolkit's play changes: before it ran, the preflight's file says what the host had, not
# what the deploy will find (site.yml's input check takes them as unknown; the deploy's gate reads them again).
TOOLKIT_FACTS = ("nvcc_version", "jit_tools_missing", "cuda_cccl_headers")


def _pending(host: Any, pending: Sequence[str]) -> Any:
    """The host facts with those in ``pending`` taken as unknown (this run installs what they describe later)."""
    if host is None or not pending:
        return host
    unknown = {fact: "the CUDA toolkit this run installs is not there yet; the deploy's gate reads it again" for fact in pending}
    return replace(host, **{fact: None for fact in pending}, unknown={**host.unknown, **unknown})


def _gate_facts(
    plan: LaunchPlan, model_dirs: Optional[Mapping[str, str]], host_facts: Optional[str], aliases: Optional[Mapping[str, str]]
) -> tuple[dict[str, Any], dict[str, Any], Any, list[str]]:
    """What the gate reads besides the catalogue: (the flags as typed, the model / draft facts, the
    host's facts or None, notes on what is absent). LaunchPlanError for a model directory the flags
    name that cannot be read."""
    flags = start_failures.parse_argv(plan.argv, aliases)
    facts: dict[str, Any] = {}
    notes: list[str] = []
    for flag, kind in MODEL_FLAGS:
        value = flags.get(flag)
        if not isinstance(value, str):
            continue
        directory = (model_dirs or {}).get(value, value)
        try:
            facts[kind] = start_failures.read_model_dir(directory, f"--{flag}")
        except start_failures.FactsError as exc:
            shown = value if directory == value else f"{value} (its config files as given, read at {directory})"
            raise LaunchPlanError(
                f"start gate: --{flag} {shown} cannot be read on this host: {exc}; SGLang would fail after starting. "
                f"Put the model there (config.json, its quantization config and weights) or set {MODEL_PATH_VARIABLES[flag]} "
                f"(the inventory variable the profiles' --{flag} comes from; or the profile's path if it names one itself) "
                "to where it is; nothing changed"
            ) from exc
    host = None
    if host_facts:
        try:
            host = start_failures.read_host_facts(host_facts)
        except (start_failures.FactsError, OSError) as exc:
            notes.append(f"host facts not read ({exc}): the entries that need them are unknown; run playbooks/preflight.yml")
    else:
        notes.append("no host-facts file given: the entries that need the host's facts are unknown")
    return flags, facts, host, notes


def verify_plan(
    plan: LaunchPlan | Mapping[str, Any],
    *,
    python: str,
    sglang_dir: str | Path,
    catalogue: Optional[Mapping[str, Any]],
    model_dirs: Optional[Mapping[str, str]] = None,
    host_facts: Optional[str] = None,
    gpu_major: int = 12,
    sglang_root: Optional[str | Path] = None,
    cache: Optional[str | Path] = None,
    write_cache: bool = True,
    timeout: float = 600,
) -> LaunchPlan:
    """The plan checked by SGLang's own ServerArgs in the Python of the release that will run it (the
    release's venv: ``python``, its sglang package at ``sglang_dir``), then the start gate again on
    the values SGLang resolved. After the release is made and before anything starts.

    SGLang is shown the device of the host's facts (capability, the smallest GPU's memory, GPU count;
    else capability ``gpu_major``.0 on the target host's 8 GPUs) and FlashInfer at the version the
    release pins; it reads the model and draft directories the flags name (or their config files as
    given, ``model_dirs``). What SGLang refuses raises LaunchPlanError with its own message and
    location, as does an SGLang that does not import in that Python (the server could not start
    either); each value it rewrites is a flag warning naming the flag, the value given and the value
    it uses. ``sglang_root``: a tree to put first on the path instead (tests).

    With ``cache`` (a directory), SGLang's verdict for exactly these inputs (the Python, the release's
    server_args.py and RECORD, the flags, environment, device, the model directories' config files
    and this checker's source) is read back instead of computed again: importing SGLang takes tens of
    seconds. The catalogue is evaluated every time."""
    if not isinstance(plan, LaunchPlan):
        plan = LaunchPlan(**{f.name: plan[f.name] for f in fields(LaunchPlan) if f.name in plan})
    package = Path(sglang_dir)
    flags, _, host, _ = _gate_facts(plan, model_dirs, host_facts, None)
    version = plan.sglang_version
    gpu_cc = None if host is not None and host.capability else f"{gpu_major}.0"
    device, device_from = server_args_check.device_for(
        host, gpu_cc, server_flags.flashinfer_pin(package), version, "sglang_launch_gpu_major", "the host-facts file"
    )
    check: dict[str, Any] = {"argv": list(plan.argv), "env": dict(plan.env), "label": plan.profile}
    host_paths: dict[str, str] = {}
    for flag, key in (("model-path", "model"), ("speculative-draft-model-path", "draft_model")):
        value = flags.get(flag)
        if isinstance(value, str) and value in (model_dirs or {}):
            check[key] = str((model_dirs or {})[value])
            host_paths[check[key]] = value
    key = _verify_key(python, package, check, device) if cache else None
    cached = _read_verdict(Path(cache), key, check) if cache and key else None
    report = cached
    if report is None:
        try:
            report = server_args_check.run_checks(python, sglang_root, device, [check], timeout=timeout)
        except (server_args_check.CheckRunError, OSError, subprocess.SubprocessError) as exc:
            raise LaunchPlanError(
                f"SGLang's own check of profile {plan.profile} could not run in the release's Python ({python}): {exc}; "
                "SGLang's server would not start in it either; nothing started"
            ) from exc
        if cache and key and write_cache and report["results"][0]["verdict"] == "ok":
            _write_verdict(Path(cache), key, report, check)
    result = report["results"][0]
    sglang_version = report.get("sglang_version") or version
    where = f"in the release's venv ({python})"
    if result["verdict"] != "ok":
        raise LaunchPlanError(
            f"SGLang {sglang_version}'s own ServerArgs refuses profile {plan.profile} {where}, nothing started "
            "(the release is made and kept, nothing switched to it): " + server_args_check.refusal_text(result, sglang_version)
        )
    sources = release_sources.read(package, cache, write=write_cache)
    aliases = sources.aliases
    read = server_args_check.accepted(result, report.get("field_flags") or {}, aliases, host_paths, sglang_version)
    checked = replace(
        plan,
        flag_warnings=[*plan.flag_warnings, *(f"SGLang's ServerArgs: {text}" for text in read.rewritten)],
        server_args={
            "verdict": "ok",
            "python": python,
            "sglang_version": sglang_version,
            "device": device,
            "device_from": device_from,
            "rewritten": read.rewritten,
            "chosen": read.chosen,
            "seconds": result.get("seconds"),
            "import_seconds": report.get("import_seconds"),
            "cached": cached is not None,
        },
    )
    return start_gate(
        checked,
        package,
        catalogue,
        model_dirs,
        host_facts,
        gpu_major,
        resolved=read.resolved,
        resolved_by=f"SGLang {sglang_version}'s ServerArgs {where}",
        reserve=result.get("sglang_reserve"),
        aliases=aliases,
        venv_probes=report.get("environment"),
        outcome="nothing started (the release is made and kept, nothing switched to it)",
        sources=sources,
    )


def _verify_key(python: str, package: Path, check: Mapping[str, Any], device: Mapping[str, Any]) -> str:
    """A key over every input of SGLang's verdict (see verify_plan)."""

    def stat(path: Path) -> Any:
        try:
            info = path.stat()
            return [info.st_size, info.st_mtime_ns]
        except OSError:
            return None

    def directory(path: str) -> dict[str, Any]:
        # config files by content (a directory of them may be rewritten in place each run), weights by size and time
        out: dict[str, Any] = {}
        with contextlib.suppress(OSError):
            for entry in sorted(Path(path).iterdir()):
                if entry.is_file():
                    small = entry.stat().st_size <= (1 << 20)
                    out[entry.name] = hashlib.sha256(entry.read_bytes()).hexdigest() if small else stat(entry)
        return out

    # the directories by what they hold, not where: the lab's config files are written to a new
    # temporary directory every run
    dirs = {kind: directory(path) for kind, path in _model_paths(check).items() if isinstance(path, str)}
    records = sorted(package.parent.glob("sglang-*.dist-info/RECORD"))
    venv = Path(python).absolute().parent.parent
    inputs = {
        "python": python,
        # the environment itself (a runtime rebuilt in a new store directory behind the same link)
        "venv": [str(venv.resolve()), stat(venv / "pyvenv.cfg")],
        "package": str(package),
        "server_args": stat(package / "srt" / "server_args.py"),
        "record": [str(r) for r in records] + [stat(r) for r in records],
        "check": {k: v for k, v in check.items() if k not in ("model", "draft_model")},
        "device": device,
        "models": dirs,
        "checker": hashlib.sha256(inspect.getsource(server_args_check).encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def _model_paths(check: Mapping[str, Any]) -> dict[str, Any]:
    """The model and draft directories a check names (its substitutes, else its flags)."""
    flags = start_failures.parse_argv(check["argv"])
    return {
        "model": check.get("model") or flags.get("model-path"),
        "draft": check.get("draft_model") or flags.get("speculative-draft-model-path"),
    }


def _moved(value: Any, moves: Mapping[str, str]) -> Any:
    """``value`` with every string that is, or lies under, an old directory of ``moves`` rewritten to the new one."""
    if isinstance(value, str):
        for old, new in moves.items():
            if value == old or value.startswith(old.rstrip("/") + "/"):
                return new + value[len(old) :]
        return value
    if isinstance(value, list):
        return [_moved(v, moves) for v in value]
    if isinstance(value, dict):
        return {k: _moved(v, moves) for k, v in value.items()}
    return value


def _read_verdict(cache: Path, key: str, check: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """A kept verdict for ``key``, its values under the model directories ``check`` names now: the key
    holds the directories by content, so a verdict made with the same files elsewhere is reused."""
    try:
        report = json.loads((cache / f"server-args-{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (isinstance(report, dict) and isinstance(report.get("results"), list) and report["results"]):
        return None
    if not isinstance(report.get("model_paths"), dict):
        return None  # kept before the directories were recorded: its values may name other ones
    then, now = report.pop("model_paths"), _model_paths(check)
    moves = {old: now[kind] for kind, old in then.items() if isinstance(old, str) and isinstance(now.get(kind), str) and old != now[kind]}
    return _moved(report, moves) if moves else report


def _write_verdict(cache: Path, key: str, report: Mapping[str, Any], check: Mapping[str, Any]) -> None:
    """Atomically, with the model directories it was made with; a failure to write only costs the next check."""
    report = {**report, "model_paths": _model_paths(check)}
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=".server-args-")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(report, handle)
        os.replace(tmp, cache / f"server-args-{key}.json")
    except OSError:
        pass


def _cache_key(
    sglang: str | Path,
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    patches: Sequence[str],
    model_class: Optional[str],
    gpu_major: int,
    launch_module: str,
    python: Optional[str],
    pythonpath: Sequence[str],
) -> Optional[str]:
    """A key over every input of the check, or None when the SGLang checked is not a single file (not cached)."""
    path = Path(sglang)
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    checker = hashlib.sha256("".join(inspect.getsource(m) for m in (flag_rules, server_flags)).encode()).hexdigest()
    inputs = {
        "sglang_sha256": digest.hexdigest(),
        "flags": flags,
        "env": env,
        "patches": list(patches),
        "model_class": model_class,
        "gpu_major": gpu_major,
        "launch_module": launch_module,
        "python": python,
        "pythonpath": list(pythonpath),
        "checker": checker,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def _read_cached(cache: Path, key: str) -> Optional[LaunchPlan]:
    try:
        data = json.loads((cache / f"{key}.json").read_text(encoding="utf-8"))
        return LaunchPlan(**{f.name: data[f.name] for f in fields(LaunchPlan)})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cached(cache: Path, key: str, plan: LaunchPlan) -> None:
    """Atomically (a temporary file renamed into place); a failure to write only costs the next check."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=".plan-")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(plan.to_dict(), handle)
        os.replace(tmp, cache / f"{key}.json")
    except OSError:
        pass
