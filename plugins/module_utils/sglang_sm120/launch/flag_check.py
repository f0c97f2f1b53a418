"""The launch-flag checker: SGLang's own parser where that SGLang imports, the static table of
server_flags.py otherwise, then the combinations a given SGLang version accepts but fails on, or
silently mis-runs on, this hardware (compute capability 12, PCIe, MLA targets).

One function, ``check_launch``, serves both sglang-flags (a command line) and
plugins/modules/sglang_launch_plan.py through plugins/module_utils/sglang_sm120/launch/plan.py (a profile mapping).
Plain Python, standard library only, no Ansible.

Upstream references are sgl-project/sglang issue / pull-request numbers (docs/domain-notes.md).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from .flags import Flag, FlagError, _lookup, package_dir, read_server_args, read_sources, release_flag_table, sglang_version, validate

# Target model classes (config.json "architectures") whose attention is MLA.
MLA_MODEL_CLASSES = frozenset(
    {
        "KimiK25ForConditionalGeneration",
        "KimiVLForConditionalGeneration",
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "MiniCPM3ForCausalLM",
    }
)
EAGLE_ALGORITHMS = ("EAGLE", "EAGLE3")
# Profile keys that are the toolkit's, not SGLang's: they start with "_" and are never rendered.
ACK_TOPK_TREE_ON_MLA = "_allow_topk_tree_on_mla"
TOOLKIT_KEYS = (ACK_TOPK_TREE_ON_MLA,)

# First releases where the behaviour changed, read from the releases' sources (domain notes):
# 0.5.14 turned the torch symm-mem KeyError: 12 into a logged disable (#24548); from 0.5.14
# --enable-flashinfer-allreduce-fusion becomes the fusion backend "auto", which raises at start off
# SM90/SM10X (0.5.9-0.5.13 ignore it; tests/unit/host/test_catalogue_sources.py proves both on the sources).
SYMM_MEM_NO_CRASH_FROM = (0, 5, 14)
FUSION_RAISES_FROM = (0, 5, 14)
FUSION_SOURCE = "srt/layers/flashinfer_comm_fusion.py"
FUSION_RAISE_MARKER = "requires SM90 or SM10X"

# The parsed values the rules read (argparse dest names).
RULE_DESTS = (
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "attention_backend",
    "decode_attention_backend",
    "enable_flashinfer_allreduce_fusion",
    "enable_torch_symm_mem",
)


@dataclass
class Finding:
    level: str  # error or warning
    message: str
    fix: str = ""
    reference: str = ""

    def text(self) -> str:
        out = f"{self.level}: {self.message}"
        if self.fix:
            out += f"; fix: {self.fix}"
        if self.reference:
            out += f" [{self.reference}]"
        return out


@dataclass
class FlagReport:
    sglang: str
    version: Optional[str]
    # "sglang" (its own parser imported), "static" (the table read from its sources) or
    # "server_args" (its own ServerArgs built and checked on a faked device: plugins/plugin_utils/sglang_sm120_controller/flag_gate.py)
    parser: str
    parser_reason: str
    argv: list[str]
    errors: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    flags_known: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def parser_line(self) -> str:
        if self.parser == "server_args":
            return "parser: sglang (imported; its ServerArgs built and checked: prepare_server_args, check_server_args)"
        return "parser: sglang (imported)" if self.parser == "sglang" else f"parser: static table ({self.parser_reason})"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ok=self.ok, parser_line=self.parser_line)
        out["errors"] = [{**asdict(f), "text": f.text()} for f in self.errors]
        out["warnings"] = [{**asdict(f), "text": f.text()} for f in self.warnings]
        return out


def version_tuple(version: Optional[str]) -> Optional[tuple[int, ...]]:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return tuple(int(g or 0) for g in match.groups()) if match else None


def split_profile(profile: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[Finding]]:
    """(SGLang flags, toolkit keys, errors): keys starting with "_" are the toolkit's."""
    flags: dict[str, Any] = {}
    keys: dict[str, Any] = {}
    errors: list[Finding] = []
    for raw, value in profile.items():
        name = str(raw)
        if name.startswith("_"):
            if name not in TOOLKIT_KEYS:
                errors.append(Finding("error", f"{name} is not a toolkit profile key", f"known: {', '.join(TOOLKIT_KEYS)}"))
            keys[name] = value
        else:
            flags[name] = value
    return flags, keys, errors


def render_generic(flags: Mapping[str, Any]) -> list[str]:
    """A profile as arguments without a table (for SGLang's own parser to judge)."""
    argv: list[str] = []
    for raw, value in flags.items():
        name = "--" + str(raw).removeprefix("--")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(name)
        elif isinstance(value, dict):
            argv += [name, json.dumps(value, sort_keys=True)]
        elif isinstance(value, (list, tuple)):
            argv += [name, *(json.dumps(v) if isinstance(v, (dict, list)) else str(v) for v in value)]
        else:
            argv += [name, str(value)]
    return argv


def profile_from_argv(table: Mapping[str, Flag], argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """A command line as a profile mapping (names as written), and what cannot be one."""
    by_name = _lookup(table)
    out: dict[str, Any] = {}
    errors: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--") or token == "--":
            errors.append(f"unexpected argument {token!r}: every flag starts with --")
            i += 1
            continue
        name, eq, inline = token[2:].partition("=")
        values = [inline] if eq else []
        j = i + 1
        if not eq:
            while j < len(argv) and not argv[j].startswith("--"):
                values.append(argv[j])
                j += 1
        flag = by_name.get(name)
        if flag is not None and flag.kind in ("switch", "off-switch"):
            if values:
                errors.append(f"--{name} is a switch and takes no value, found {' '.join(values)!r}")
            out[name] = True
        elif flag is not None and flag.nargs in ("+", "*"):
            out[name] = values
        elif flag is not None and len(values) != 1:
            errors.append(f"--{name} takes one value, found {len(values)}")
        else:
            out[name] = values[0] if len(values) == 1 else (values or True)
        i = j
    return out, errors


def static_values(table: Mapping[str, Flag], flags: Mapping[str, Any]) -> dict[str, Any]:
    """The rule inputs (dest -> value) from a profile, through the table's aliases."""
    by_name = _lookup(table)
    values: dict[str, Any] = {}
    for raw, value in flags.items():
        name = str(raw).removeprefix("--")
        flag = by_name.get(name)
        canonical = flag.name if flag else name
        for candidate in (canonical, *(flag.aliases if flag else [])):
            dest = candidate.replace("-", "_")
            if dest in RULE_DESTS:
                values[dest] = value
    return values


def _int(value: Any) -> Optional[int]:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _fusion_raises(version: Optional[str], fusion_source: Optional[str]) -> Optional[bool]:
    """Whether this SGLang raises at start on the allreduce-fusion flag off SM90/SM10X."""
    if fusion_source is not None and FUSION_RAISE_MARKER in fusion_source:
        return True
    parsed = version_tuple(version)
    if parsed is None:
        return None
    return parsed >= FUSION_RAISES_FROM


def hardware_rules(
    values: Mapping[str, Any],
    *,
    version: Optional[str],
    model_class: Optional[str],
    gpu_major: int,
    planned_patches: Sequence[str] = (),
    allow_topk_tree_on_mla: bool = False,
    fusion_source: Optional[str] = None,
) -> list[Finding]:
    """What SGLang ``version`` accepts but fails on, or mis-runs on, this hardware and model."""
    out: list[Finding] = []
    algorithm = values.get("speculative_algorithm")
    if algorithm in EAGLE_ALGORITHMS and not values.get("speculative_draft_model_path"):
        out.append(Finding("error", f"--speculative-algorithm {algorithm} needs a draft model", "add --speculative-draft-model-path DIR"))
    topk = _int(values.get("speculative_eagle_topk"))
    backends = {values.get("attention_backend"), values.get("decode_attention_backend")}
    if algorithm in EAGLE_ALGORITHMS and topk is not None and topk > 1 and "flashinfer" in backends:
        text = (
            f"--speculative-eagle-topk {topk} with --attention-backend flashinfer on an MLA target ({model_class}): "
            "the flashinfer MLA verify path drops the tree mask, so SGLang starts and drafts wrongly (no error)"
        )
        fix = (
            "use --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 (upstream recipe #19689), "
            "or --attention-backend triton for topk>1"
        )
        ref = "sglang #4218, #4425, #19689"
        if model_class is None:
            out.append(Finding("warning", f"model class not given: cannot tell whether topk {topk} with flashinfer is safe", fix, ref))
        elif model_class in MLA_MODEL_CLASSES:
            if allow_topk_tree_on_mla:
                out.append(Finding("warning", text + "; acknowledged (--allow-topk-tree-on-mla / _allow_topk_tree_on_mla)", fix, ref))
            else:
                out.append(Finding("error", text + "; refused unless acknowledged with --allow-topk-tree-on-mla", fix, ref))
    if gpu_major == 12 and values.get("enable_flashinfer_allreduce_fusion") is True:
        raises = _fusion_raises(version, fusion_source)
        if raises:
            out.append(
                Finding(
                    "error",
                    f"--enable-flashinfer-allreduce-fusion on compute capability 12: SGLang {version} fails at start "
                    "(ValueError: FlashInfer allreduce fusion requires SM90 or SM10X)",
                    "remove --enable-flashinfer-allreduce-fusion",
                    "sglang #18758, #32330",
                )
            )
        elif "flashinfer_allreduce_fusion_sm120" not in planned_patches:
            out.append(
                Finding(
                    "warning",
                    f"--enable-flashinfer-allreduce-fusion is a no-op on compute capability 12 in SGLang {version}: "
                    "the fusion is gated to SM90/SM100 (patch flashinfer_allreduce_fusion_sm120 is not planned)",
                    "remove --enable-flashinfer-allreduce-fusion",
                    "sglang #16283, #18758",
                )
            )
    if gpu_major == 12 and values.get("enable_torch_symm_mem") is True:
        parsed = version_tuple(version)
        crashes = parsed is None or parsed < SYMM_MEM_NO_CRASH_FROM
        if crashes and "torch_symm_mem_sm120" not in planned_patches:
            out.append(
                Finding(
                    "error",
                    f"--enable-torch-symm-mem on compute capability 12 raises KeyError: 12 at start in SGLang {version} "
                    "(fixed by a logged disable in 0.5.14)",
                    "remove --enable-torch-symm-mem, or plan the torch_symm_mem_sm120 patch",
                    "sglang #24548",
                )
            )
        else:
            out.append(
                Finding(
                    "warning",
                    "--enable-torch-symm-mem never takes effect on PCIe: without NVSwitch there is no multicast and the "
                    "communicator disables itself (NCCL is used)",
                    "remove --enable-torch-symm-mem",
                    "sglang #30364, #24548",
                )
            )
    return out


def release_rules(sglang: str | Path, **options: Any) -> Callable[[Mapping[str, Any]], list[Finding]]:
    """hardware_rules for the SGLang at ``sglang``, as a function of the flag values: ``options`` (version,
    model_class, gpu_major, planned_patches, allow_topk_tree_on_mla) and the release's fusion source, read
    here once (None where it cannot be read)."""
    fusion_source = None
    with contextlib.suppress(FlagError):
        fusion_source = read_sources(sglang, [FUSION_SOURCE]).get(FUSION_SOURCE)
    return functools.partial(hardware_rules, fusion_source=fusion_source, **options)


# Run with a Python whose environment has SGLang's dependencies, the SGLang to check first on
# PYTHONPATH: SGLang's own parser, abbreviations refused. Prints one JSON line.
IMPORT_CHECK = r"""
import argparse, difflib, json, sys
DESTS = __DESTS__
class Refused(Exception):
    pass
class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Refused(message)
try:
    import sglang
    from sglang.srt.server_args import ServerArgs
    parser = Parser(allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
except BaseException as exc:
    print(json.dumps({"mode": "static", "reason": ("cannot import SGLang's parser: %s: %s" % (type(exc).__name__, exc))[:300]}))
    sys.exit(0)
try:
    from sglang.version import __version__ as version
except BaseException:
    version = None
names = sorted(s for s in parser._option_string_actions if s.startswith("--"))
errors, ns, extra = [], None, []
try:
    ns, extra = parser.parse_known_args(sys.argv[1:])
except Refused as exc:
    errors.append(str(exc))
i = 0
while i < len(extra):
    token = extra[i]
    i += 1
    if not token.startswith("--"):
        errors.append("unexpected argument %r" % token)
        continue
    while i < len(extra) and not extra[i].startswith("--"):
        i += 1
    name = token.split("=", 1)[0]
    longer = sorted((n for n in names if n.startswith(name)), key=lambda n: (len(n), n))
    if longer:
        errors.append("%s is an abbreviation, which is refused; use %s" % (name, " or ".join(longer[:5])))
    else:
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.7)
        errors.append("%s is not a flag of this SGLang" % name + ("; did you mean %s?" % close[0] if close else ""))
values = {d: getattr(ns, d, None) for d in DESTS} if ns is not None else {}
print(json.dumps({"mode": "import", "ok": not errors, "errors": errors, "values": values,
                  "file": sglang.__file__, "version": version}, default=str))
""".replace("__DESTS__", repr(RULE_DESTS))


def cache_dir() -> Path:
    """Where unpacked wheels and compiled bytecode are kept between runs (never inside the tree checked)."""
    base = os.environ.get("SGLANG_FLAGS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sglang-flags"
    )
    return Path(base)


def _unpacked(wheel: Path) -> Path:
    """The wheel unpacked once (zipimport cannot import the namespace packages 0.5.9 has)."""
    stat = wheel.stat()
    key = hashlib.sha256(f"{wheel.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    target = cache_dir() / "wheels" / f"{wheel.stem}-{key}"
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(partial)
        try:
            partial.rename(target)
        except OSError:  # another run got there first
            shutil.rmtree(partial, ignore_errors=True)
    return target


def run_import_check(
    python: str, sglang: str | Path, argv: Sequence[str], pythonpath: Sequence[str] = (), timeout: int = 300
) -> dict[str, Any]:
    """SGLang's own parser on ``argv`` (mode import), or why it could not be used (mode static)."""
    path = package_dir(sglang).absolute()
    python = os.path.abspath(python) if os.sep in python else python  # it runs in a temporary directory
    try:
        entry = str(_unpacked(path)) if path.is_file() else str(path.parent)
    except (OSError, zipfile.BadZipFile) as exc:
        return {"mode": "static", "reason": f"cannot unpack {path.name}: {exc}"}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([entry, *pythonpath]),
        # Bytecode goes to the cache, not into the tree being checked.
        "PYTHONPYCACHEPREFIX": str(cache_dir() / "pycache"),
    }
    with tempfile.TemporaryDirectory(prefix="sglang-flags-") as tmp:
        try:
            proc = subprocess.run(
                [python, "-c", IMPORT_CHECK, *argv], capture_output=True, text=True, check=False, timeout=timeout, env=env, cwd=tmp
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"mode": "static", "reason": f"{python} did not run the import check: {exc}"[:300]}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"mode": "static", "reason": f"{python} gave no verdict: {(proc.stderr or 'no output').strip()[-300:]}"}


def check_launch(
    sglang: str | Path,
    *,
    argv: Optional[Sequence[str]] = None,
    profile: Optional[Mapping[str, Any]] = None,
    model_class: Optional[str] = None,
    gpu_major: int = 12,
    planned_patches: Sequence[str] = (),
    allow_topk_tree_on_mla: bool = False,
    python: Optional[str] = None,
    pythonpath: Sequence[str] = (),
) -> FlagReport:
    """Check a command line (``argv``) or a profile (mapping) against the SGLang at ``sglang``.

    SGLang's own parser decides whether the flags parse when ``python`` imports that SGLang (the
    same version); the static table otherwise. The hardware rules apply either way. For a profile,
    ``argv`` of the report is the rendered command line."""
    if (argv is None) == (profile is None):
        raise ValueError("give exactly one of argv and profile")
    version = sglang_version(sglang)
    errors: list[Finding] = []
    table: Optional[dict[str, Flag]] = None
    table_error = ""
    # Not SGLang (no sglang/srt/server_args.py in the directory or the wheel's archive): FlagError
    # here, before a wheel is unpacked for the import check.
    read_server_args(sglang)
    try:
        table = release_flag_table(sglang)
    except FlagError as exc:
        table_error = str(exc)
    if profile is not None:
        flags, keys, key_errors = split_profile(profile)
        errors += key_errors
        allow_topk_tree_on_mla = allow_topk_tree_on_mla or keys.get(ACK_TOPK_TREE_ON_MLA) is True
        candidate = render_generic(flags)
    else:
        candidate = list(argv or [])
        flags = {}
    static_errors: list[str] = []
    rendered = candidate
    if table is not None:
        if profile is None:
            flags, static_errors = profile_from_argv(table, candidate)
        result = validate(table, flags)
        static_errors += result.errors
        if profile is not None and not result.errors:
            rendered = result.argv
    parser, reason, values = "static", "no Python that may import SGLang was given", {}
    if python:
        verdict = run_import_check(python, sglang, candidate, pythonpath)
        if verdict.get("mode") == "import" and version and verdict.get("version") not in (None, version):
            reason = f"{python} imports SGLang {verdict.get('version')} from {verdict.get('file')}, not {version}"
        elif verdict.get("mode") == "import":
            parser, reason, values = "sglang", "", verdict.get("values") or {}
            errors += [Finding("error", f"SGLang's own parser refuses: {e}") for e in verdict.get("errors", [])]
        else:
            reason = str(verdict.get("reason", "no verdict"))
    if parser == "static":
        if table is None:
            raise FlagError(table_error)
        errors += [Finding("error", e) for e in static_errors]
        values = static_values(table, flags)
    rules = release_rules(
        sglang,
        version=version,
        model_class=model_class,
        gpu_major=gpu_major,
        planned_patches=planned_patches,
        allow_topk_tree_on_mla=allow_topk_tree_on_mla,
    )
    findings = rules(values)
    return FlagReport(
        sglang=str(sglang),
        version=version,
        parser=parser,
        parser_reason=reason,
        argv=list(rendered),
        errors=errors + [f for f in findings if f.level == "error"],
        warnings=[f for f in findings if f.level == "warning"],
        flags_known=len(table) if table else 0,
    )
