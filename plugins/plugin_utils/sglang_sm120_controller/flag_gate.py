"""The flag gate of sglang-flags: SGLang's own ServerArgs built from the launch flags on a faked
device, then the toolkit's rules (the start-failure catalogue, flag_check's hardware rules) on the
values SGLang resolved.

For flag sets checked against one SGLang release (one runtime process for all of them):

1. the Python: ``python`` when given, else the runtime environment ``make sglang-runtime`` builds for
   that release (``<cache>/sglang-runtime/<version>/venv/bin/python``, finished once its ``.stamp``
   is written); the report says which and why;
2. the release's tree: a directory as given; a wheel is first checked to be SGLang (its
   ``sglang/srt/server_args.py`` read from the archive) and only then unpacked, once, into the cache;
3. the device SGLang sees (``server_args_check.Device``): the capability, the smallest GPU's memory
   and the GPU count from the host's facts, else the capability given (default 12.0) on the target
   host's 8 x 97887 MiB; FlashInfer at the version the release's METADATA pins (its venv has that);
4. the model's config files: ``FlagSet.model`` (sglang-flags --model), else ``--model-path``
   when it is a directory holding config.json on this machine;
5. ``server_args_check.run_checks``: SGLang's ``prepare_server_args`` + ``check_server_args``;
6. the verdict: SGLang's refusal (its exception, message and location); the toolkit's refusal of
   abbreviations (SGLang's argparse expands them); a warning for each value SGLang rewrote (the flag,
   the value given, the value SGLang uses); the catalogue and the hardware rules on the values SGLang
   resolved (each catalogue verdict's evidence says which values it read).

Where that cannot run (no runtime for the release, SGLang does not import in that Python, the model's
config files are not here), the flag set gets today's check, ``flag_rules.check_launch`` (SGLang's
argparse or the static flag table, the rules on the flags as typed), and the report says the verdict
is partial and why.

Plain Python, no Ansible imports; sglang-flags and the tests drive it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sglang_sm120.launch.flag_check import (
    RULE_DESTS,
    Finding,
    FlagReport,
    _unpacked,
    check_launch,
    profile_from_argv,
    release_rules,
    static_values,
)
from sglang_sm120.launch.flags import (
    Flag,
    FlagError,
    flag_aliases,
    flashinfer_pin,
    package_dir,
    read_server_args,
    release_flag_table,
    sglang_version,
)
from sglang_sm120.launch.invariants import read_release_data
from sglang_sm120.launch.plan import _read_verdict, _verify_key, _write_verdict
from sglang_sm120.launch.server_args import (
    DEFAULT_CAPABILITY,
    CheckRunError,
    accepted,
    device_for,
    refusal_text,
    run_checks,
)
from sglang_sm120.launch.start_failures import (
    Context,
    Entry,
    FactsError,
    HostFacts,
    ModelFacts,
    Verdict,
    evaluate,
    parse_argv,
    read_model_dir,
    registered_architectures,
)
from sglang_sm120_controller.paths import CACHE, CATALOGUE, COLLECTION
from sglang_sm120_controller.toolkit_data import load_catalogue

# Today's parser check (the partial path) has always used the 0.5.9 runtime when no --python is given.
PARSER_CHECK_RUNTIME = "0.5.9"
META_KEYS = ("sglang_version", "sglang_dir", "python", "import_seconds", "field_flags", "warm")
VERDICT_ORDER = {"refused": 0, "warning": 1, "unknown": 2, "ok": 3, "n/a": 4}


@dataclass
class FlagSet:
    """One launch to check: the flags, the server's environment, the local model / draft config dirs."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    model: Optional[Path] = None  # the model's config files here (replaces --model-path's value for SGLang)
    draft_model: Optional[Path] = None  # the draft's (replaces --speculative-draft-model-path's value)
    label: Optional[str] = None
    # The host facts the catalogue judges this launch against, where they differ from the call's `host` (one plan
    # on several hosts of a fleet, in one import of SGLang). SGLang's device (capability, GPU count and memory) is the
    # call's for every flag set; check_flag_sets refuses a host whose GPUs differ from it.
    host: Optional[HostFacts] = None


@dataclass
class Runtime:
    """The Python SGLang's ServerArgs is built under, or why there is none."""

    python: Optional[str]
    reason: str


@dataclass
class GateReport:
    label: Optional[str]
    flags: FlagReport  # parser verdict, errors and warnings (SGLang's refusal, rewrites, hardware rules)
    complete: bool  # SGLang's ServerArgs ran on this flag set
    partial_reason: str
    python: Optional[str]
    python_reason: str
    device: Optional[dict[str, Any]]
    device_from: list[str]
    model_dir: Optional[str]
    model_from: str
    server_args: Optional[dict[str, Any]]  # SGLang's own verdict (None where it did not run)
    chosen: list[str]  # values SGLang chose for watched flags that were not given
    verdicts: list[Verdict] = field(default_factory=list)
    start_failures: Optional[dict[str, Any]] = None  # the catalogue's summary (None: not evaluated)

    @property
    def refused_entries(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.verdict == "refused"]

    @property
    def ok(self) -> bool:
        return self.flags.ok and not self.refused_entries

    @property
    def problems(self) -> int:
        return len(self.flags.errors) + len(self.refused_entries)

    @property
    def verdict_line(self) -> str:
        if self.complete:
            return "verdict: complete: SGLang's own ServerArgs checked the flags; the rules read the values it resolved"
        return (
            f"verdict: partial: SGLang's ServerArgs did not run ({self.partial_reason}); only SGLang's argparse or the "
            "static flag table checked the flags, and the rules read them as typed"
        )

    def to_dict(self) -> dict[str, Any]:
        out = self.flags.to_dict()
        out.update(
            ok=self.ok,
            label=self.label,
            verdict_scope="complete" if self.complete else "partial",
            verdict_line=self.verdict_line,
            partial_reason=self.partial_reason or None,
            python=self.python,
            python_reason=self.python_reason,
            device=self.device,
            device_from=self.device_from,
            model_dir=self.model_dir,
            model_from=self.model_from,
            server_args=self.server_args,
            chosen_by_sglang=self.chosen,
        )
        if self.start_failures is not None:
            out["start_failures"] = {**self.start_failures, "verdicts": [v.to_dict() for v in self.verdicts]}
        return out

    def lines(self) -> list[str]:
        out = [f"sglang {self.flags.version or 'unknown version'} at {self.flags.sglang}"]
        out.append(f"python: {self.python or 'none'} ({self.python_reason})")
        if self.device is not None:
            out.append("device faked for SGLang: " + "; ".join(self.device_from))
        if self.model_dir:
            out.append(f"model config: {self.model_dir} ({self.model_from})")
        out.append(self.flags.parser_line)
        if self.server_args is not None:
            sa = self.server_args
            timing = f"check {sa['seconds']} s, SGLang imported in {sa['import_seconds']} s"
            if sa.get("warm"):
                warm = sa["warm"]
                timing = (
                    f"check {sa['seconds']} s, by the warm checker pid {warm['pid']} (SGLang imported "
                    f"{time.time() - warm['since']:.0f} s ago in {sa['import_seconds']} s; {warm['checks']} checks answered)"
                )
            if sa.get("cached"):
                timing = f"verdict read back from {_shown_path(CACHE / 'flag-gate' / 'verdicts')}: same inputs, SGLang not imported"
            if sa["verdict"] == "ok":
                out.append(f"server args: accepted by SGLang {sa['sglang_version']}'s ServerArgs ({timing})")
            else:
                out.append(f"server args: refused by SGLang {sa['sglang_version']}'s ServerArgs at stage {sa['stage']} ({timing})")
        out.append(self.verdict_line)
        out += [finding.text() for finding in self.flags.errors + self.flags.warnings]
        if self.chosen:
            out.append("chosen by SGLang (not given): " + ", ".join(self.chosen))
        if self.start_failures is not None:
            out.append(self.start_failures["summary"])
            out += [v.text() for v in sorted(self.verdicts, key=lambda v: VERDICT_ORDER[v.verdict])]
        out.append("flags accepted" if self.ok else f"flags refused: {self.problems} problem(s)")
        return out


# --- the pieces -------------------------------------------------------------------------------


def find_runtime(version: Optional[str], python: Optional[str] = None, cache: Path = CACHE) -> Runtime:
    """``python`` when given (and there), else the finished runtime of ``make sglang-runtime`` for ``version``."""
    if python:
        found = python if os.sep in python else shutil.which(python)
        if not found or not Path(found).is_file():
            return Runtime(None, f"--python {python}: no such file")
        return Runtime(python, "given with --python")
    if not version:
        return Runtime(None, "the SGLang version is unknown, so no runtime environment can be picked for it; give --python")
    base = cache / "sglang-runtime" / version
    candidate = base / "venv" / "bin" / "python"
    if candidate.exists() and (base / ".stamp").is_file():
        return Runtime(str(candidate), f"the runtime environment `make sglang-runtime` builds for SGLang {version}; no --python given")
    if candidate.exists():
        return Runtime(None, f"the runtime for SGLang {version} at {base} is unfinished (no .stamp): run `make sglang-runtime`")
    return Runtime(
        None,
        f"no runtime environment for SGLang {version} at {base} (`make sglang-runtime` builds one per "
        "tests/runtime/sglang-<version>.txt) and no --python given",
    )


def release_root(sglang: str | Path) -> Path:
    """The directory holding the release's sglang/ package. A wheel is checked to be SGLang before it
    is unpacked (FlagError otherwise, nothing written), then unpacked once into the cache."""
    path = package_dir(sglang)
    read_server_args(path)
    if path.is_file():
        return _unpacked(path)
    return path.resolve().parent


@dataclass
class _Prepared:
    typed: dict[str, Any]
    model_dir: Optional[Path]
    model_from: str
    model_facts: Optional[ModelFacts]
    draft_facts: Optional[ModelFacts]
    substitute_model: bool
    substitute_draft: bool
    # local config dir -> the host path typed in the flags (SGLang saw the former in their place)
    host_paths: dict[str, str] = field(default_factory=dict)


def _local_config_dir(value: Any) -> Optional[Path]:
    return Path(value) if isinstance(value, str) and (Path(value) / "config.json").is_file() else None


def _prepare(flag_set: FlagSet, aliases: Mapping[str, str]) -> _Prepared:
    """The typed flags and the model / draft directories read (FactsError naming the directory)."""
    typed = parse_argv(flag_set.argv, aliases)
    model_key = aliases.get("model-path", "model-path")
    draft_key = aliases.get("speculative-draft-model-path", "speculative-draft-model-path")
    if flag_set.model is not None:
        model_dir, model_from = flag_set.model, "--model"
        model_facts = read_model_dir(flag_set.model, "--model")
    else:
        model_dir = _local_config_dir(typed.get(model_key))
        if model_dir is not None:
            model_from = "--model-path, a directory on this machine"
            model_facts = read_model_dir(model_dir, "--model-path")
        elif model_key not in typed:
            model_from, model_facts = "no --model-path in the flags", None
        else:
            model_from = (
                f"the model's config files are not here (--model-path {typed[model_key]} is no directory holding "
                "config.json on this machine): give --model DIR with a copy of them"
            )
            model_facts = None
    draft_facts = None
    if flag_set.draft_model is not None:
        draft_facts = read_model_dir(flag_set.draft_model, "--draft-model")
    elif _local_config_dir(typed.get(draft_key)) is not None:
        draft_facts = read_model_dir(typed[draft_key], "--speculative-draft-model-path")
    substitute_model = flag_set.model is not None and isinstance(typed.get(model_key), str)
    substitute_draft = flag_set.draft_model is not None and isinstance(typed.get(draft_key), str)
    host_paths = {}
    if substitute_model:
        host_paths[str(flag_set.model)] = typed[model_key]
    if substitute_draft:
        host_paths[str(flag_set.draft_model)] = typed[draft_key]
    return _Prepared(
        typed=typed,
        model_dir=model_dir,
        model_from=model_from,
        model_facts=model_facts,
        draft_facts=draft_facts,
        substitute_model=substitute_model,
        substitute_draft=substitute_draft,
        host_paths=host_paths,
    )


# --- the gate ---------------------------------------------------------------------------------


@dataclass
class _Release:
    """What the gate reads of the release and the options once, for every flag set."""

    sglang: Path
    version: Optional[str]
    table: Optional[dict[str, Flag]]
    aliases: dict[str, str]
    model_class: str
    capability: str
    capability_from: str
    host: Optional[HostFacts]
    planned_patches: list[str]
    allow_topk_tree_on_mla: bool
    registry: Optional[set[str]]

    @property
    def gpu_major(self) -> int:
        return int(self.capability.split(".")[0])

    @property
    def options(self) -> dict[str, Any]:
        """The options the flag check's rules take, as keyword arguments (attributes of the same names)."""
        return {name: getattr(self, name) for name in ("model_class", "gpu_major", "planned_patches", "allow_topk_tree_on_mla")}

    @functools.cached_property
    def rules(self) -> Callable[[Mapping[str, Any]], list[Finding]]:
        """The hardware rules of this release and these options, on flag values (the release read once)."""
        return release_rules(self.sglang, version=self.version, **self.options)


def check_flag_sets(
    sglang: str | Path,
    flag_sets: Sequence[FlagSet],
    *,
    model_class: str,
    gpu_cc: Optional[str] = None,
    host: Optional[HostFacts] = None,
    planned_patches: Sequence[str] = (),
    allow_topk_tree_on_mla: bool = False,
    python: Optional[str] = None,
    pythonpath: Sequence[str] = (),
    catalogue_when_partial: bool = True,
    entries: Optional[list[Entry]] = None,
    cache: Path = CACHE,
    timeout: float = 300,
    warm: float = 0,
) -> list[GateReport]:
    """Check each flag set against the SGLang at ``sglang`` (package dir, the dir holding it, or a
    wheel); SGLang's ServerArgs for all of them in one runtime process.

    FlagError: not an SGLang package or wheel (before anything is unpacked); FactsError: a model or
    draft directory that cannot be read; CatalogueError: the catalogue file is broken. All three
    before anything runs."""
    sglang = Path(sglang)
    read_server_args(sglang)
    version = sglang_version(sglang)
    table: Optional[dict[str, Flag]]
    try:
        table = release_flag_table(sglang)
        aliases = flag_aliases(table)
    except FlagError:
        table, aliases = None, {}
    entries = load_catalogue() if entries is None else entries
    prepared = [_prepare(fs, aliases) for fs in flag_sets]
    runtime = find_runtime(version, python, cache)
    device, device_from = device_for(host, gpu_cc, flashinfer_pin(sglang), version)
    for fs in flag_sets:
        if fs.host is not None and fs.host.gpus:
            other, _ = device_for(fs.host, gpu_cc, None, version)
            if (other["capability"], other["count"], other["memory_mib"]) != (device["capability"], device["count"], device["memory_mib"]):
                raise FactsError(
                    f"flag set {fs.label or fs.argv}: its host facts ({fs.host.source}) have {other['count']} GPU(s) of "
                    f"{other['memory_mib']} MiB, capability {other['capability']}; SGLang is shown {device['count']} of "
                    f"{device['memory_mib']} MiB, capability {device['capability']} for every flag set of one check: "
                    "check such a host in a call of its own"
                )
    release = _Release(
        sglang=sglang,
        version=version,
        table=table,
        aliases=aliases,
        model_class=model_class,
        capability=device["capability"],
        capability_from="--gpu-cc"
        if gpu_cc
        else "--host-facts"
        if host is not None and host.capability
        else f"default {DEFAULT_CAPABILITY}",
        host=host,
        planned_patches=list(planned_patches),
        allow_topk_tree_on_mla=allow_topk_tree_on_mla,
        registry=registered_architectures(sglang) if any(p.draft_facts for p in prepared) else None,
    )
    results, meta, why_not = _run_server_args(sglang, flag_sets, prepared, runtime, device, timeout, cache / "flag-gate", warm)
    # Today's parser check, for what SGLang's ServerArgs could not check: --python, the release's
    # runtime, else the 0.5.9 runtime (as before the gate), else the static table.
    parser_python = python or runtime.python
    default_parser_python = cache / "sglang-runtime" / PARSER_CHECK_RUNTIME / "venv" / "bin" / "python"
    if parser_python is None and default_parser_python.exists():
        parser_python = str(default_parser_python)

    out = []
    for i, (fs, p) in enumerate(zip(flag_sets, prepared)):
        complete = i in results
        if complete:
            flags, resolved, chosen, server_args = _complete(release, fs, p, results[i], meta)
        else:
            flags, resolved, chosen, server_args = _partial(release, fs, parser_python, pythonpath), None, [], None
        verdicts: list[Verdict] = []
        summary = None
        if complete or catalogue_when_partial:
            verdicts, summary = _catalogue(release, entries, fs, p, resolved, results[i].get("sglang_reserve") if complete else None)
        out.append(
            GateReport(
                label=fs.label,
                flags=flags,
                complete=complete,
                partial_reason="" if complete else why_not.get(i, ""),
                python=runtime.python,
                python_reason=runtime.reason,
                device=device if complete else None,
                device_from=device_from if complete else [],
                model_dir=str(p.model_dir) if p.model_dir else None,
                model_from=p.model_from,
                server_args=server_args,
                chosen=chosen,
                verdicts=verdicts,
                start_failures=summary,
            )
        )
    return out


def _run_server_args(
    sglang: Path,
    flag_sets: Sequence[FlagSet],
    prepared: Sequence[_Prepared],
    runtime: Runtime,
    device: Mapping[str, Any],
    timeout: float,
    cache_dir: Optional[Path] = None,
    warm: float = 0,
) -> tuple[dict[int, dict[str, Any]], dict[str, Any], dict[int, str]]:
    """SGLang's ServerArgs on every flag set whose model config is here, in one process:
    (index -> SGLang's result, the report's own facts, index -> why it did not run)."""
    why_not = {i: p.model_from for i, p in enumerate(prepared) if p.model_dir is None}
    if runtime.python is None:
        return {}, {}, {i: runtime.reason + (f"; and {why_not[i]}" if i in why_not else "") for i in range(len(flag_sets))}
    runnable = [i for i in range(len(flag_sets)) if i not in why_not]
    if not runnable:
        return {}, {}, why_not
    checks = []
    for i in runnable:
        fs, p = flag_sets[i], prepared[i]
        check: dict[str, Any] = {"argv": list(fs.argv), "env": dict(fs.env), "label": fs.label or str(i)}
        if p.substitute_model:
            check["model"] = str(fs.model)
        if p.substitute_draft:
            check["draft_model"] = str(fs.draft_model)
        checks.append(check)
    root = release_root(sglang)
    # SGLang's accepted verdicts are kept per flag set, keyed by every input (launch_plan's key: the
    # Python, the release's server_args.py and RECORD, flags, environment, device, the model config
    # files by content, the checker's source): a check repeated on the same inputs imports nothing.
    keys = {i: _verify_key(str(runtime.python), root / "sglang", check, device) for i, check in zip(runnable, checks)}
    verdicts = cache_dir / "verdicts" if cache_dir is not None else None
    found = {i: _read_verdict(verdicts, keys[i], check) for i, check in zip(runnable, checks)} if verdicts is not None else {}
    results: dict[int, dict[str, Any]] = {}
    meta: dict[str, Any] = {}
    for i, cached in found.items():
        if cached is not None:
            results[i] = {**cached["results"][0], "cached": True}
            meta = meta or {k: cached.get(k) for k in META_KEYS}
    todo = [i for i in runnable if i not in results]
    if todo:
        try:
            todo_checks = [checks[runnable.index(i)] for i in todo]
            warm_dir = cache_dir / "warm" if cache_dir is not None else None
            report = run_checks(runtime.python, root, device, todo_checks, timeout=timeout, warm=warm, warm_dir=warm_dir)
        except (CheckRunError, OSError, subprocess.SubprocessError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return {}, {}, {**why_not, **{i: f"it could not be built under {runtime.python}: {first}" for i in runnable}}
        meta = {k: report.get(k) for k in META_KEYS}
        for i, result in zip(todo, report["results"]):
            results[i] = {**result, "cached": False}
            if verdicts is not None and result["verdict"] == "ok":
                _write_verdict(verdicts, keys[i], {**meta, "results": [result]}, checks[runnable.index(i)])
    return results, meta, why_not


def _complete(
    release: _Release, flag_set: FlagSet, prepared: _Prepared, result: Mapping[str, Any], meta: Mapping[str, Any]
) -> tuple[FlagReport, Optional[dict[str, Any]], list[str], dict[str, Any]]:
    """SGLang's verdict on one flag set as the toolkit reports it: (flag report, the values it
    resolved by flag name or None when it refused, its choices for watched flags, its verdict)."""
    errors: list[Finding] = []
    warnings: list[Finding] = []
    resolved: Optional[dict[str, Any]] = None
    chosen: list[str] = []
    if result["verdict"] == "ok":
        read = accepted(result, meta.get("field_flags") or {}, release.aliases, prepared.host_paths, release.version)
        resolved, chosen = read.resolved, read.chosen
        rule_values = {dest: read.values.get(dest) for dest in RULE_DESTS}
        warnings += [Finding("warning", text) for text in read.rewritten]
    else:
        error = result["error"]
        where = (error.get("sglang_frame") or {}).get("at") or error.get("raised_at") or "its parser"
        errors.append(Finding("error", refusal_text(result, release.version), f"change the flags so that SGLang's check at {where} passes"))
        table = release.table
        rule_values = static_values(table, profile_from_argv(table, flag_set.argv)[0]) if table is not None else {}
    for abbreviation in result.get("abbreviations") or []:
        option = abbreviation["option"]
        text = f"{abbreviation['typed']} is an abbreviation (SGLang's parser expands it to {option}), which is refused"
        errors.append(Finding("error", text, f"use {option}"))
    findings = release.rules(rule_values)
    flags = FlagReport(
        sglang=str(release.sglang),
        version=release.version,
        parser="server_args",
        parser_reason="",
        argv=list(flag_set.argv),
        errors=errors + [f for f in findings if f.level == "error"],
        warnings=warnings + [f for f in findings if f.level == "warning"],
        flags_known=len(release.table) if release.table else 0,
    )
    server_args = {
        "verdict": result["verdict"],
        "stage": result["stage"],
        "error": result["error"],
        "rewritten": [c for c in result.get("changes", []) if c["kind"] == "rewritten"],
        "changes": result.get("changes", []),
        "resolved": result.get("resolved"),
        "abbreviations": result.get("abbreviations") or [],
        "argv_checked": result["argv_checked"],
        "device": result["device"],
        "log": result["log"],
        "env_set_by_sglang": result["env_set_by_sglang"],
        "sglang_reserve": result.get("sglang_reserve"),
        "seconds": result["seconds"],
        "cached": bool(result.get("cached")),
        **{k: meta.get(k) for k in ("sglang_version", "sglang_dir", "python", "import_seconds")},
        "warm": None if result.get("cached") else meta.get("warm"),
    }
    return flags, resolved, chosen, server_args


def _partial(release: _Release, flag_set: FlagSet, python: Optional[str], pythonpath: Sequence[str]) -> FlagReport:
    """Today's check: SGLang's argparse under ``python`` where it imports, else the static table."""
    return check_launch(release.sglang, argv=flag_set.argv, python=python, pythonpath=pythonpath, **release.options)


def _catalogue(
    release: _Release,
    entries: Sequence[Entry],
    flag_set: FlagSet,
    prepared: _Prepared,
    resolved: Optional[dict[str, Any]],
    reserve: Optional[Mapping[str, Any]] = None,
) -> tuple[list[Verdict], dict[str, Any]]:
    """Every catalogue entry's verdict on the values SGLang resolved (else the typed flags), and the
    summary. ``reserve``: SGLang's own --mem-fraction-static for these flags without the operator's
    (server_args_check), where the flag was given and SGLang's ServerArgs ran."""
    ctx = Context(
        flags=prepared.typed,
        env=dict(flag_set.env),
        version=release.version,
        capability=release.capability,
        model=prepared.model_facts,
        draft=prepared.draft_facts,
        host=flag_set.host or release.host,
        model_class=release.model_class,
        registry=release.registry if prepared.draft_facts else None,
        release=read_release_data(release.sglang) if prepared.model_facts or prepared.draft_facts else None,
        planned_patches=list(release.planned_patches),
        acknowledged=["allow-topk-tree-on-mla"] if release.allow_topk_tree_on_mla else [],
        aliases=release.aliases,
        resolved=resolved,
        resolved_by=f"SGLang {release.version}'s ServerArgs",
        sglang_auto_fraction=(reserve or {}).get("auto_mem_fraction_static"),
        sglang_auto_unknown=str((reserve or {}).get("unknown") or ""),
    )
    verdicts = evaluate(entries, ctx)
    counts = {v: sum(1 for x in verdicts if x.verdict == v) for v in ("refused", "warning", "unknown", "ok", "n/a")}
    text = (
        f"start failures ({_shown_path(CATALOGUE)}, {len(verdicts)} entries, SGLang {release.version}, "
        f"capability {release.capability}, {ctx.flag_source}): " + ", ".join(f"{n} {v}" for v, n in counts.items())
    )
    if counts["unknown"]:
        text += " (unknown is not a pass: a fact it needs was not given)"
    summary = {
        "catalogue": str(CATALOGUE),
        "capability": release.capability,
        "capability_from": release.capability_from,
        "flag_values": "resolved" if resolved is not None else "typed",
        "env": dict(flag_set.env),
        "counts": counts,
        "summary": text,
    }
    return verdicts, summary


def _shown_path(path: Path) -> str:
    try:
        return str(path.relative_to(COLLECTION))
    except ValueError:
        return str(path)
