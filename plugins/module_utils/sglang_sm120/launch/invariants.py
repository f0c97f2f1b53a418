"""Generic invariants of the start gate: what SGLang checks only after it has loaded the target (or both models),
decided before the load from the flags, the two model configs and the release's own sources.

- the draft against the target (EAGLE / EAGLE-3): the dtype each resolves to (SGLang's ``_get_and_verify_dtype``
  with the one ``--dtype`` both get), the context length the draft is given (the target's, which
  ``ModelConfig._derive_context_length`` refuses above the draft's own unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN``),
  and, for EAGLE-3, that the draft's class is one the release's EAGLE-3 worker can drive (it calls ``set_embed`` and
  reads ``hot_token_id`` on the draft model unguarded);
- the quantization flags against the checkpoint's own quantization config (``ModelConfig._verify_quantization``'s
  ``compatible_quantization_methods``; a method whose ``get_config_filenames`` names a file needs that file or a
  ``quantization_config``, ``get_quant_config``'s "Cannot find the config file");
- every attention backend flag against the compute capability and KV-cache dtype its ServerArgs check or its
  registry constructor accepts in the release (``BACKEND_RULES``, keyed by release range).

What SGLang itself says is read from the release (a tree or a wheel: ``read_release_data``), not copied here: its
EAGLE-3 draft classes, its compatible-quantization table, each method's config files, its context-length keys.
Plain Python, no Ansible imports; the checks take the gate's Context and return (holds, evidence) as its conditions do.
"""

from __future__ import annotations

import ast
import contextlib
import re
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # the gate's own types; start_failures imports this module
    from .start_failures import Context, ModelFacts

Result = tuple[Optional[bool], str]


def outcome(wrong: list[str], unknown: list[str], passed: str) -> Result:
    """A check's result from what it found: refused (True) on anything wrong, else unknown (None) on anything it
    could not decide, else passed (False, with `passed` as the text)."""
    if wrong:
        return True, "; ".join(wrong)
    if unknown:
        return None, "; ".join(unknown)
    return False, passed


# SGLang's _STR_DTYPE_TO_TORCH_DTYPE (srt/configs/model_config.py, every release 0.5.9-0.5.23)
STR_DTYPES = {"half": "float16", "float16": "float16", "float": "float32", "float32": "float32", "bfloat16": "bfloat16"}
# SGLang's EnvBool (srt/environ.py): these are true; "false", "0", "no", "n" false; anything else raises
ENV_TRUE = ("true", "1", "yes", "y")
ENV_FALSE = ("false", "0", "no", "n")
CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
EAGLE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")


# --- what the release says -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseData:
    """What the gate reads from one SGLang release's sources; a field is None where the release does not say."""

    source: str
    eagle3_classes: Optional[frozenset[str]]  # EntryClass classes with set_embed(_and_head) and hot_token_id
    compatible_quantization: Optional[dict[str, list[str]]]  # --quantization -> checkpoint quant_methods it accepts
    quant_config_files: dict[str, list[str]]  # method -> its get_config_filenames() (empty: online, no file needed)
    context_length_keys: Optional[list[str]]  # CONTEXT_LENGTH_KEYS, in SGLang's order
    # BACKEND_RULES anchor -> "srt/arg_groups/overrides.py:1212", where the release raises it (absent: not found)
    backend_lines: dict[str, str] = field(default_factory=dict)
    moe: Optional[MoeRunnerFacts] = None  # MoeRunner's constructor and the fused functions (None: not read)


@dataclass(frozen=True)
class MoeRunnerFacts:
    """What MoeRunner.__init__ (srt/layers/moe/moe_runner/runner.py) does with a runner backend, without LoRA."""

    core: frozenset[str]  # runner backends it builds a runner core for
    fused_only: frozenset[str]  # runner backends it leaves to a fused function (runner_core None)
    fused_pairs: frozenset[tuple[str, str]]  # (a2a backend, runner backend) pairs a register_fused_func registers
    raise_line: Optional[str]  # "srt/layers/moe/moe_runner/runner.py:NNN": the "requires a fused func" raise
    sm90_only: frozenset[str] = frozenset()  # runner backends it refuses off capability major 9 (hpc_ops)


def _package_texts(sglang: str | Path, prefixes: tuple[str, ...]) -> dict[str, str]:
    """path below the sglang package (srt/models/llama.py) -> text, for the files under `prefixes`, from an unpacked
    tree (the package dir or the dir holding it) or a wheel."""
    path = Path(sglang)
    out: dict[str, str] = {}
    if path.is_file() and path.suffix == ".whl":
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                inner = name[len("sglang/") :] if name.startswith("sglang/") else None
                if inner and inner.endswith(".py") and inner.startswith(prefixes):
                    out[inner] = archive.read(name).decode("utf-8", "replace")
        return out
    if path.is_dir() and not (path / "srt").is_dir() and (path / "sglang" / "srt").is_dir():
        path = path / "sglang"
    for prefix in prefixes:
        base = path / prefix
        files = [base] if base.is_file() else sorted(base.rglob("*.py")) if base.is_dir() else []
        for file in files:
            out[file.relative_to(path).as_posix()] = file.read_text(encoding="utf-8", errors="replace")
    return out


def _parse(text: str) -> Optional[ast.Module]:
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _entry_classes(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            names += [v.id for v in values if isinstance(v, ast.Name)]
    return names


_CLASS = re.compile(r"^class\s+(\w+)\s*(?:\(([^)]*)\))?\s*:", re.MULTILINE)
_ENTRY = re.compile(r"^EntryClass\s*=\s*(\[[^\]]*\]|\(?[^\n]*)", re.MULTILINE)


def _class_bases(text: str) -> dict[str, list[str]]:
    """class name -> base names (the last dotted part), read with a regular expression: for the files with none of the
    members a check looks for, only their classes' bases matter, and parsing every model file costs ~1 s a release."""
    out: dict[str, list[str]] = {}
    for name, bases in _CLASS.findall(text):
        names = [b.strip().rsplit(".", 1)[-1] for b in bases.split(",") if b.strip() and "=" not in b]
        out.setdefault(name, [b for b in names if b.isidentifier()])
    return out


def _entry_names(text: str) -> list[str]:
    found = _ENTRY.search(text)
    return re.findall(r"\b[A-Za-z_]\w*\b", found.group(1)) if found else []


_METHOD_SET_EMBED = re.compile(r"^    (?:async\s+)?def set_embed(?:_and_head)?\s*\(", re.MULTILINE)
_STORE_HOT = re.compile(r"\bhot_token_id\s*(?::[^=\n]*)?=(?!=)")
_TOP_LEVEL = re.compile(r"^(?=\S)", re.MULTILINE)


def _class_blocks(text: str) -> dict[str, str]:
    """class name -> its source (from `class` to the next top-level line that is not a comment or decorator)."""
    out: dict[str, str] = {}
    for found in _CLASS.finditer(text):
        rest = text[found.end() :]
        stop = next((m.start() for m in _TOP_LEVEL.finditer(rest) if not rest.startswith(("#", ")"), m.start())), len(rest))
        out.setdefault(found.group(1), rest[:stop])
    return out


def eagle3_draft_classes(texts: dict[str, str]) -> Optional[frozenset[str]]:
    """The model classes (srt/models EntryClass) the EAGLE-3 worker can take as the draft: the class, or one of its
    bases in srt/models, defines set_embed or set_embed_and_head (a method of the class body) and assigns
    hot_token_id (eagle_worker / eagle_worker_v2 call draft.set_embed(embed) and read draft.hot_token_id without a
    guard; sglang #36528). Read with regular expressions (parsing every model file costs ~1 s a release); a test
    compares them with a full parse of every supported release."""
    traits: dict[str, tuple[list[str], bool, bool]] = {}
    entries: set[str] = set()
    for name, text in texts.items():
        if not name.startswith("srt/models/"):
            continue
        if "EntryClass" in text:
            entries.update(_entry_names(text))
        bases = _class_bases(text)
        blocks = _class_blocks(text) if ("set_embed" in text or "hot_token_id" in text) else {}
        for cls, cls_bases in bases.items():
            block = blocks.get(cls, "")
            traits.setdefault(cls, (cls_bases, bool(_METHOD_SET_EMBED.search(block)), bool(_STORE_HOT.search(block))))
    return eagle3_capable(traits, entries) if entries else None


def eagle3_capable(traits: dict[str, tuple[list[str], bool, bool]], entries: set[str]) -> frozenset[str]:
    """The entry classes that, themselves or through their bases, have both traits: (bases, set_embed, hot_token_id)."""

    def has(cls: str, index: int, seen: frozenset[str] = frozenset()) -> bool:
        if cls not in traits or cls in seen:
            return False
        bases, *flags = traits[cls]
        return bool(flags[index]) or any(has(b, index, seen | {cls}) for b in bases)

    return frozenset(c for c in entries if has(c, 0) and has(c, 1))


def _assigned_literal(text: str, name: str) -> Any:
    """The literal a plain assignment `name = {...}` / `[...]` anywhere in `text` holds; None when there is none."""
    tree = _parse(text)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return None
    return None


def quant_config_files(texts: dict[str, str]) -> dict[str, list[str]]:
    """method name -> the files its config class's get_config_filenames() returns, for the methods
    srt/layers/quantization/__init__.py maps to a class ("fp8": Fp8Config) whose return is a list literal."""
    init = texts.get("srt/layers/quantization/__init__.py", "")
    methods = dict(re.findall(r'^\s*"([\w-]+)"\s*:\s*([A-Z]\w*)\s*,', init, re.MULTILINE))
    returns: dict[str, list[str]] = {}
    bases: dict[str, list[str]] = {}
    for name, text in texts.items():
        if not name.startswith("srt/layers/quantization/") or "class " not in text:
            continue
        if "get_config_filenames" not in text:  # only its classes' bases matter (parsing every file: ~0.1 s)
            for cls, cls_bases in _class_bases(text).items():
                bases.setdefault(cls, cls_bases)
            continue
        tree = _parse(text)
        for node in tree.body if tree is not None else ():
            if not isinstance(node, ast.ClassDef):
                continue
            bases.setdefault(node.name, [b.id for b in node.bases if isinstance(b, ast.Name)])
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "get_config_filenames":
                    for ret in ast.walk(item):
                        if isinstance(ret, ast.Return) and isinstance(ret.value, ast.List):
                            with contextlib.suppress(ValueError):
                                returns.setdefault(node.name, [str(v) for v in ast.literal_eval(ret.value)])
                            break

    def files(cls: str, seen: frozenset[str] = frozenset()) -> Optional[list[str]]:
        if cls in returns:
            return returns[cls]
        for base in bases.get(cls, []):
            if base not in seen:
                found = files(base, seen | {cls})
                if found is not None:
                    return found
        return None

    out = {}
    for method, cls in methods.items():
        found = files(cls)
        if found is not None:
            out[method] = found
    return out


# --- attention backends: the capability and KV-cache dtype each accepts, by release ----------------------------

# SGLang's capability predicates (srt/utils/common.py, _check_cuda_device_version's device_capability_majors, every
# release 0.5.9-0.5.23; from 0.5.19 ServerArgs asks get_platform().is_sm100 ... which maps to the same functions)
CAPABILITY_PREDICATES = {
    "is_sm90_supported": (9,),
    "is_sm100_supported": (10,),
    "is_sm120_supported": (12,),
    "is_blackwell_supported": (10, 11, 12),
}
# The files the rules' raises and asserts are in (below the sglang package); the gate reads only these.
BACKEND_RULE_FILES = (
    "srt/server_args.py",
    "srt/arg_groups/overrides.py",
    "srt/arg_groups/attention_hook.py",
    "srt/layers/attention/attention_registry.py",
)


@dataclass(frozen=True)
class BackendRule:
    """One raise or assert of SGLang about an attention backend: in releases `releases` (both ends included; None: on),
    a backend named `backend` in the flags `reads` names needs a GPU major in `majors` (None: any; `mha_majors` also
    for a non-MLA model) and a --kv-cache-dtype in `kv` (None: any), and refuses the dtypes in `kv_refused` on the majors
    in `refused_on`. `anchor` is a regular expression on the message SGLang raises (the test finds it in every release
    of the range and in no other); `source` says where it is and what it tests."""

    backend: str
    reads: str  # "attention-or-decode" (attention_backend or decode_attention_backend is it), "any" of the three flags,
    # "prefill" (--prefill-attention-backend, else --attention-backend), "decode" (likewise)
    releases: tuple[str, Optional[str]]
    anchor: str
    source: str
    majors: Optional[tuple[int, ...]] = None
    mha_majors: tuple[int, ...] = ()
    kv: Optional[tuple[str, ...]] = None
    kv_refused: tuple[str, ...] = ()
    refused_on: tuple[int, ...] = ()


BLACKWELL = CAPABILITY_PREDICATES["is_blackwell_supported"]
SM90_SM100_SM120 = (9, 10, 12)
BACKEND_RULES = (
    BackendRule(
        "fa3",
        "any",
        ("0.5.9", None),
        r"FlashAttention v3 Backend requires SM>=80 and SM<=90",
        "layers/attention/attention_registry.py create_flashattention_v3_backend: assert capability major 9, or 8 "
        "for a non-MLA model (when the backend is created, after the load)",
        majors=(9,),
        mha_majors=(8,),
    ),
    BackendRule(
        "trtllm_mla",
        "attention-or-decode",
        ("0.5.9", None),
        r"TRTLLM MLA backend is only supported on Blackwell GPUs",
        "ServerArgs (server_args.py to 0.5.14, arg_groups/overrides.py _mla_kv_cache_dtype_checks from 0.5.15): "
        "raise unless is_blackwell_supported (majors 10, 11, 12)",
        majors=BLACKWELL,
    ),
    BackendRule(
        "trtllm_mla",
        "attention-or-decode",
        ("0.5.9", "0.5.20"),
        r"TensorRT-LLM MLA backend only supports kv-cache-dtype",
        "ServerArgs: raise unless kv_cache_dtype in [fp8_e4m3, fp4_e2m1, bf16, auto]",
        kv=("fp8_e4m3", "fp4_e2m1", "bf16", "auto"),
    ),
    BackendRule(
        "trtllm_mla",
        "attention-or-decode",
        ("0.5.21", None),
        r"TensorRT-LLM MLA backend only supports kv-cache-dtype",
        "arg_groups/overrides.py _mla_kv_cache_dtype_checks: raise unless kv_cache_dtype in [fp8_e4m3, bf16, auto]",
        kv=("fp8_e4m3", "bf16", "auto"),
    ),
    BackendRule(
        "tokenspeed_mla",
        "attention-or-decode",
        ("0.5.12", "0.5.22"),
        r"tokenspeed_mla backend is only supported on Blackwell",
        "ServerArgs: raise unless is_blackwell_supported (majors 10, 11, 12)",
        majors=BLACKWELL,
    ),
    BackendRule(
        "tokenspeed_mla",
        "attention-or-decode",
        ("0.5.12", "0.5.22"),
        r"tokenspeed_mla backend requires kv-cache-dtype=fp8_e4m3",
        "ServerArgs: raise unless kv_cache_dtype in [fp8_e4m3]",
        kv=("fp8_e4m3",),
    ),
    BackendRule(
        "cutedsl_mla",
        "any",
        ("0.5.13", None),
        r"CuteDSL MLA backend is only supported on Blackwell GPUs \(SM100\)",
        "ServerArgs (server_args.py to 0.5.14, arg_groups/overrides.py _cutedsl_prefill_backend_fill from 0.5.15): "
        "raise unless is_sm100_supported (major 10)",
        majors=CAPABILITY_PREDICATES["is_sm100_supported"],
    ),
    BackendRule(
        "cutedsl_mla",
        "any",
        ("0.5.13", None),
        r"CuteDSL MLA backend only supports kv-cache-dtype",
        "ServerArgs: raise unless kv_cache_dtype in [fp8_e4m3, bf16, bfloat16, auto]",
        kv=("fp8_e4m3", "bf16", "bfloat16", "auto"),
    ),
    BackendRule(
        "trtllm_mha",
        "any",
        ("0.5.9", "0.5.9"),
        r"TRTLLM MHA backend is only supported on Blackwell GPUs \(SM100\)",
        "server_args.py _handle_attention_backend_compatibility: raise unless is_sm100_supported (major 10), for "
        "--attention-backend, --prefill-attention-backend or --decode-attention-backend",
        majors=CAPABILITY_PREDICATES["is_sm100_supported"],
    ),
    BackendRule(
        "trtllm_mha",
        "prefill",
        ("0.5.10", "0.5.18"),
        r"TRTLLM MHA backend for prefill is only supported on Blackwell GPUs \(SM100\)",
        "server_args.py _handle_attention_backend_compatibility: the prefill backend raises unless is_sm100_supported (major 10)",
        majors=CAPABILITY_PREDICATES["is_sm100_supported"],
    ),
    BackendRule(
        "trtllm_mha",
        "prefill",
        ("0.5.19", None),
        r"TRTLLM MHA backend for prefill requires Hopper \(SM90\)",
        "arg_groups/attention_hook.py: the prefill backend raises unless is_sm90 / is_sm100 / is_sm120 (majors 9, 10, 12)",
        majors=SM90_SM100_SM120,
    ),
    BackendRule(
        "trtllm_mha",
        "prefill",
        ("0.5.19", None),
        r"TRTLLM FMHAv2 prefill on SM120 does not support",
        "arg_groups/attention_hook.py: the prefill backend on is_sm120 raises with kv_cache_dtype fp8_e4m3 (or skip-softmax)",
        kv_refused=("fp8_e4m3",),
        refused_on=(12,),
    ),
    BackendRule(
        "trtllm_mha",
        "decode",
        ("0.5.10", None),
        r"TRTLLM MHA backend for decode is only supported on Hopper \(SM90\)",
        "ServerArgs (server_args.py to 0.5.18, arg_groups/attention_hook.py from 0.5.19): the decode backend raises "
        "unless is_sm90 / is_sm100 / is_sm120 (majors 9, 10, 12)",
        majors=SM90_SM100_SM120,
    ),
)


def backend_rule_lines(texts: dict[str, str]) -> dict[str, str]:
    """Each rule's anchor -> "file:line" of its first match in BACKEND_RULE_FILES (one search a rule a file)."""
    out: dict[str, str] = {}
    for rule in BACKEND_RULES:
        if rule.anchor in out:
            continue
        for name in BACKEND_RULE_FILES:
            found = re.search(rule.anchor, texts.get(name, ""))
            if found:
                out[rule.anchor] = f"{name}:{texts[name].count(chr(10), 0, found.start()) + 1}"
                break
    return out


MOE_RUNNER = "srt/layers/moe/moe_runner/runner.py"
_FUSED = re.compile(r'^\s*@register_fused_func\(\s*"(\w+)"\s*,\s*"(\w+)"\s*\)', re.MULTILINE)
_IS_BACKEND = re.compile(r"runner_backend\.is_(\w+)\(\)")


def _runner_core_assignments(body: list[ast.stmt]) -> list[ast.expr]:
    """The values assigned to self.runner_core on the path without LoRA (an `if lora_enabled` takes its else)."""
    out: list[ast.expr] = []
    for node in body:
        if isinstance(node, ast.If) and "lora" in ast.unparse(node.test):
            out += _runner_core_assignments(node.orelse)
        elif isinstance(node, ast.If):
            out += _runner_core_assignments(node.body) + _runner_core_assignments(node.orelse)
        elif isinstance(node, ast.Assign) and any(ast.unparse(t) == "self.runner_core" for t in node.targets):
            out.append(node.value)
    return out


def moe_runner_facts(texts: dict[str, str]) -> Optional[MoeRunnerFacts]:
    """MoeRunner's constructor read from runner.py's if/elif chain on `runner_backend.is_<name>()` (one branch per
    backend: a runner core built, or None for a fused-only backend), the (a2a, runner) pairs every
    `@register_fused_func` under srt/layers/moe registers, and the lines where it raises; None when runner.py is
    not there or does not read as expected."""
    text = texts.get(MOE_RUNNER)
    tree = _parse(text) if text else None
    init = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.ClassDef) and node.name == "MoeRunner":
            init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None or text is None:
        return None
    core: set[str] = set()
    fused_only: set[str] = set()
    sm90: set[str] = set()
    raise_line = None
    for node in ast.walk(init):
        if isinstance(node, ast.Raise) and "requires a fused func" in ast.unparse(node):
            raise_line = f"{MOE_RUNNER}:{node.lineno}"
        if not isinstance(node, ast.If):
            continue
        names = _IS_BACKEND.findall(ast.unparse(node.test))
        if not names or "get_moe_runner_backend" in ast.unparse(node.test) or " not " in f" {ast.unparse(node.test)}":
            continue
        values = _runner_core_assignments(node.body)
        if not values:
            continue
        if all(isinstance(v, ast.Constant) and v.value is None for v in values):
            fused_only.update(names)
        else:
            core.update(names)
        if any(isinstance(n, ast.Raise) and "major" in ast.unparse(n) for stmt in node.body for n in ast.walk(stmt)):
            sm90.update(names)  # the branch raises on the capability it read (hpc_ops: major != 9)
    pairs = {(a2a, runner) for path, body in texts.items() if path.startswith("srt/layers/moe") for a2a, runner in _FUSED.findall(body)}
    if not (core or fused_only):
        return None
    return MoeRunnerFacts(frozenset(core), frozenset(fused_only - core), frozenset(pairs), raise_line, frozenset(sm90))


def _in_releases(version: str, releases: tuple[str, Optional[str]]) -> bool:
    low, high = releases
    return _version(low) <= _version(version) and (high is None or _version(version) <= _version(high))


@lru_cache(maxsize=8)
def _read_release_data(sglang: str) -> Optional[ReleaseData]:
    try:
        texts = _package_texts(
            sglang,
            (
                "srt/models",
                "srt/layers/quantization",
                "srt/configs/model_config.py",
                "srt/utils/hf_transformers/common.py",
                "srt/utils/hf_transformers_utils.py",
                "srt/layers/moe",
                *BACKEND_RULE_FILES,
            ),
        )
    except (OSError, zipfile.BadZipFile):
        return None
    if not texts:
        return None
    compatible = _assigned_literal(texts.get("srt/configs/model_config.py", ""), "compatible_quantization_methods")
    keys = None
    for name in ("srt/utils/hf_transformers/common.py", "srt/utils/hf_transformers_utils.py"):
        if name in texts:
            keys = _assigned_literal(texts[name], "CONTEXT_LENGTH_KEYS")
            if keys:
                break
    return ReleaseData(
        source=sglang,
        eagle3_classes=eagle3_draft_classes(texts),
        compatible_quantization={str(k): [str(v) for v in vs] for k, vs in compatible.items()} if isinstance(compatible, dict) else None,
        quant_config_files=quant_config_files(texts),
        context_length_keys=[str(k) for k in keys] if isinstance(keys, list) else None,
        backend_lines=backend_rule_lines(texts),
        moe=moe_runner_facts(texts),
    )


def read_release_data(sglang: str | Path) -> Optional[ReleaseData]:
    """What the invariants read from SGLang `sglang` (an unpacked tree or a wheel); None when nothing is there."""
    return _read_release_data(str(sglang))


# --- the model facts as SGLang resolves them ---------------------------------------------------------------------


def resolved_dtype(facts: ModelFacts, dtype_flag: Any) -> tuple[Optional[str], str]:
    """The dtype SGLang's _get_and_verify_dtype gives this model with --dtype `dtype_flag` (None: auto), and how."""
    flag = str(dtype_flag).lower() if dtype_flag not in (None, True, False) else "auto"
    written = facts.config_dtype
    config_dtype = STR_DTYPES.get(str(written).lower()) if written else None
    if flag != "auto":
        if flag not in STR_DTYPES:
            return None, f"--dtype {dtype_flag} is not one SGLang knows ({', '.join(STR_DTYPES)})"
        return STR_DTYPES[flag], f"--dtype {dtype_flag}"
    where = f"{facts.dtype_source}: {written}" if written else f"{facts.dtype_source}: not set, read as float32"
    if config_dtype in (None, "float32"):
        chosen = "bfloat16" if (facts.model_type or "").startswith("gemma") else "float16"
        return chosen, f"--dtype auto, {where} (SGLang runs float32 checkpoints as {chosen})"
    return config_dtype, f"--dtype auto, {where}"


def derived_context_length(facts: ModelFacts, keys: Optional[list[str]]) -> tuple[int, str]:
    """SGLang's get_context_length on the model's text config: the first of CONTEXT_LENGTH_KEYS that is set, times
    the rope_scaling factor unless the scaling names original_max_position_embeddings or is llama3; else 2048."""
    config = facts.text_config
    keys = keys or ["max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"]
    rope = config.get("rope_scaling")
    factor: Any = 1
    if isinstance(rope, dict) and rope:
        factor = rope.get("factor", 1)
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in keys:
        value = config.get(key)
        if value is not None:
            try:
                length = int(factor * value)
            except (TypeError, ValueError):
                continue
            scaled = f" x rope_scaling factor {factor}" if factor != 1 else ""
            return length, f"{facts.text_config_source}: {key} {value}{scaled}"
    return 2048, f"{facts.text_config_source}: none of {', '.join(keys)} set (SGLang's default 2048)"


def env_bool(env: dict[str, str], name: str) -> tuple[Optional[bool], str]:
    """SGLang's EnvBool: (value, text); None where SGLang would raise on the value."""
    if name not in env:
        return False, f"{name} not set"
    value = env[name].strip().lower()
    if value in ENV_TRUE:
        return True, f"{name}={env[name]}"
    if value in ENV_FALSE:
        return False, f"{name}={env[name]}"
    return None, f"{name}={env[name]} is neither true nor false to SGLang's EnvBool"


# --- the checks ---------------------------------------------------------------------------------------------------


def _version(text: Optional[str]) -> tuple[int, ...]:
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", text or "")
    return tuple(int(p) for p in match.groups()) if match else (0, 0, 0)


def _algorithm(ctx: Context) -> Optional[str]:
    given, value = ctx.flag("speculative-algorithm")
    return str(value).upper() if given and value not in (True, None) else None


def _both(ctx: Context) -> Optional[str]:
    if ctx.model is None or ctx.draft is None:
        missing = " and ".join(n for n, f in (("--model", ctx.model), ("--draft-model", ctx.draft)) if f is None)
        return f"no {missing} directory given"
    return None


def draft_dtype_check(ctx: Context) -> Result:
    """True when the draft resolves to another dtype than the target: both get the one --dtype, and with auto each
    takes its own config's; the draft then gets the target's hidden states and embedding in the target's dtype and
    its first forward (CUDA-graph capture) fails: "mat1 and mat2 must have the same dtype" (sglang #3431, #3824)."""
    missing = _both(ctx)
    if missing or ctx.model is None or ctx.draft is None:
        return None, f"{missing}: whether the draft's dtype matches the target's is unknown"
    _, flag = ctx.flag("dtype")
    target, target_how = resolved_dtype(ctx.model, flag)
    draft, draft_how = resolved_dtype(ctx.draft, flag)
    if target is None or draft is None:
        return None, target_how if target is None else draft_how
    text = f"target {target} ({target_how}{ctx.flag_note('dtype')}), draft {draft} ({draft_how})"
    return target != draft, text


def draft_context_check(ctx: Context) -> Result:
    """True when SGLang's ModelConfig refuses a context length: the target's --context-length above its own derived
    length, or the draft given the target's context length (every EAGLE worker passes it) above the draft's own,
    without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN. The draft's refusal comes after the target is loaded."""
    if ctx.model is None:
        return None, "no --model directory given: the context length is unknown"
    keys = ctx.release.context_length_keys if ctx.release is not None else None
    allowed, env_text = env_bool(ctx.env, CONTEXT_ENV)
    if allowed is None:
        return None, env_text
    target_own, target_how = derived_context_length(ctx.model, keys)
    given, raw = ctx.flag("context-length")
    wrong = []
    if given and raw is not True:
        try:
            target = int(raw)
        except (TypeError, ValueError):
            return None, f"--context-length {raw!r} is not an integer"
        target_text = f"--context-length {target}{ctx.flag_note('context-length')}"
        if target > target_own and not allowed:
            wrong.append(f"target: {target_text} > the target's own {target_own} ({target_how}), {env_text}")
    else:
        target, target_text = target_own, f"the target's own {target_own} ({target_how})"
    if ctx.draft is None or _algorithm(ctx) is None:
        if wrong:
            return True, "; ".join(wrong)
        why = "no --draft-model directory given" if ctx.draft is None else "no --speculative-algorithm"
        return (None if ctx.draft is None and _algorithm(ctx) else False), f"target context {target_text}; {why}"
    draft_own, draft_how = derived_context_length(ctx.draft, keys)
    if target > draft_own and not allowed:
        wrong.append(f"draft: given the target's context {target} ({target_text}) > the draft's own {draft_own} ({draft_how}), {env_text}")
    if wrong:
        return True, "; ".join(wrong)
    if target > draft_own:
        return False, f"target context {target} > the draft's {draft_own} ({draft_how}), allowed by {env_text}"
    return False, f"target context {target} ({target_text}) <= the draft's {draft_own} ({draft_how})"


def eagle3_architecture_check(ctx: Context) -> Result:
    """True when --speculative-algorithm EAGLE3 names a draft whose class the release's EAGLE-3 worker cannot drive
    (registered or not: a target-style LlamaForCausalLM loads, then has no hot_token_id; sglang #36528)."""
    if _algorithm(ctx) != "EAGLE3":
        return False, f"--speculative-algorithm {_algorithm(ctx) or 'not set'} (not EAGLE3)"
    if ctx.draft is None:
        return None, "no --draft-model directory given: its architecture is unknown"
    if ctx.release is None or ctx.release.eagle3_classes is None:
        return None, "this SGLang's model classes could not be read (no srt/models)"
    arch = ctx.draft.architectures[0] if ctx.draft.architectures else None
    known = sorted(ctx.release.eagle3_classes)
    text = f"draft {ctx.draft.path}/config.json architectures[0] {arch}; EAGLE-3 draft classes of SGLang {ctx.version}: {', '.join(known)}"
    return arch not in ctx.release.eagle3_classes, text


def _backed(facts: ModelFacts, method: str, option: str, release: ReleaseData, *, draft: bool) -> Optional[str]:
    """Why `method` given for this checkpoint fails in SGLang's ModelConfig / get_quant_config, or None when it does not."""
    checkpoint = facts.quantization
    # the quant_method SGLang compares with: config.json's as written; ModelOpt's hf_quant_config.json is "modelopt"
    raw = facts.quant_method or ("modelopt" if "hf_quant_config.json" in facts.quantization_source else None)
    if checkpoint:
        if method == checkpoint or (method == "modelopt" and raw == "modelopt"):  # "modelopt": SGLang picks fp8/fp4
            return None
        compatible = (release.compatible_quantization or {}).get(method, [])
        if raw and raw in compatible:
            return None
        if draft:  # SGLang takes the draft's own method then (a log line, not an error)
            return None
        return (
            f"{option} {method} against the checkpoint's {checkpoint} ({facts.quantization_source}): SGLang's "
            f"ModelConfig raises 'Quantization method specified in the model config ({raw or checkpoint}) does not match'"
            f" (compatible with {method}: {', '.join(compatible) or 'none'})"
        )
    files = release.quant_config_files.get(method)
    if not files:  # not a method the release maps, or one that quantizes online (fp8: no file)
        return None
    present = [f for f in files if f in facts.file_names]
    if present:
        return None
    return (
        f"{option} {method} on a checkpoint without a quantization config ({facts.quantization_source}): {method} "
        f"reads {', '.join(files)}, absent from {facts.path}; SGLang's get_quant_config raises 'Cannot find the config file for {method}'"
    )


def quantization_backed_check(ctx: Context) -> Result:
    """True when --quantization (target) or --speculative-draft-model-quantization (draft, where given) names a
    method the checkpoint does not back: another method than its quantization config's, or one that needs a
    config file the directory lacks. (The draft inheriting --quantization is the entries draft-inherits-*.)"""
    if ctx.release is None:
        return None, "this SGLang's quantization methods could not be read"
    wrong, right, unknown = [], [], []
    for option, facts, draft in (("--quantization", ctx.model, False), ("--speculative-draft-model-quantization", ctx.draft, True)):
        name = option[2:]
        given, value = ctx.flag(name)
        if draft and ctx.aliases.get(name, name) not in ctx.flags:  # inherited from --quantization: draft-inherits-*
            right.append(f"{option} not given (a draft inheriting --quantization is entry draft-inherits-target-quantization's)")
            continue
        if draft and _version(ctx.version) >= (0, 5, 18):
            right.append(f"{option} {value}: not decided here (from 0.5.18 SGLang may quantize the draft online)")
            continue
        if not given or value in (True, "unquant"):
            right.append(f"{option} {'not set' if not given else value}")
            continue
        if facts is None:
            unknown.append(f"{option} {value}: no {'--draft-model' if draft else '--model'} directory given")
            continue
        why = _backed(facts, str(value).lower(), option, ctx.release, draft=draft)
        if why:
            wrong.append(why + ctx.flag_note(name))
        else:
            right.append(f"{option} {value}{ctx.flag_note(name)} backed by {facts.quantization or 'online quantization'}")
    return outcome(wrong, unknown, "; ".join(right))


def _backend_uses(ctx: Context, rule: BackendRule) -> list[tuple[str, str]]:
    """(the flag as written for the evidence, its note) for each flag by which SGLang's check reads `rule.backend`."""
    names = {"attention": "attention-backend", "prefill": "prefill-attention-backend", "decode": "decode-attention-backend"}
    values = {role: ctx.flag(name) for role, name in names.items()}

    def named(role: str) -> bool:
        given, value = values[role]
        return given and str(value) == rule.backend

    if rule.reads in ("prefill", "decode"):  # SGLang's get_attention_backends: the role's own flag, else --attention-backend
        role = rule.reads if values[rule.reads][0] else "attention"
        roles = [role] if named(role) else []
    else:
        roles = [r for r in (("attention", "decode") if rule.reads == "attention-or-decode" else names) if named(r)]
    return [(f"--{names[r]} {rule.backend}", ctx.flag_note(names[r])) for r in roles]


def backend_capability_check(ctx: Context) -> Result:
    """True when an attention backend flag names a backend whose ServerArgs check or registry constructor, in this
    release (BACKEND_RULES), refuses the GPUs' compute capability or the --kv-cache-dtype: the table's rule, the
    release's source line and what it tests are the evidence."""
    if ctx.version is None:
        return None, "SGLang version unknown: which backend rules apply is unknown"
    given, kv_raw = ctx.flag("kv-cache-dtype")
    kv = str(kv_raw) if given and kv_raw is not True else "auto"
    kv_text = f"--kv-cache-dtype {kv}{ctx.flag_note('kv-cache-dtype')}" if given else "--kv-cache-dtype auto (not given)"
    major = int(ctx.capability.split(".")[0]) if ctx.capability else None
    cap_text = f"compute capability {ctx.capability}"
    lines = ctx.release.backend_lines if ctx.release is not None else {}
    wrong: list[str] = []
    unknown: list[str] = []
    right: list[str] = []
    for rule in BACKEND_RULES:
        if not _in_releases(ctx.version, rule.releases):
            continue
        for flag, note in _backend_uses(ctx, rule):
            where = f"SGLang {ctx.version} {lines.get(rule.anchor, '(source line not read)')}: {rule.source}"
            head = f"{flag}{note}"
            if rule.majors is not None:
                accepted = rule.majors + (rule.mha_majors if ctx.model is not None and not ctx.model.is_mla else ())
                if major is None:
                    unknown.append(f"{head}: GPU compute capability unknown ({where})")
                elif major in rule.mha_majors and ctx.model is None:
                    unknown.append(f"{head}: {cap_text} is accepted only for a non-MLA model and no --model directory is given ({where})")
                elif major not in accepted:
                    wrong.append(f"{head}: {cap_text}, SGLang accepts majors {', '.join(map(str, accepted))} ({where})")
                else:
                    right.append(f"{head}: {cap_text} accepted ({where})")
            if rule.kv is not None:
                if kv not in rule.kv:
                    wrong.append(f"{head} with {kv_text}: SGLang accepts {', '.join(rule.kv)} ({where})")
                else:
                    right.append(f"{head} with {kv_text} accepted ({where})")
            if rule.kv_refused:
                if kv not in rule.kv_refused:
                    right.append(f"{head} with {kv_text} ({where})")
                elif major is None:
                    unknown.append(f"{head} with {kv_text}: GPU compute capability unknown ({where})")
                elif major in rule.refused_on:
                    wrong.append(f"{head} with {kv_text} on {cap_text}: SGLang refuses it ({where})")
                else:
                    right.append(f"{head} with {kv_text} on {cap_text} ({where})")
    if not (wrong or unknown or right):
        return False, f"no attention backend flag names a backend with a capability or KV-dtype rule in SGLang {ctx.version}"
    return outcome(wrong, unknown, "; ".join(right))


def moe_runner_check(ctx: Context) -> Result:
    """True when --moe-runner-backend names a backend SGLang's MoeRunner refuses with this --moe-a2a-backend: one it
    builds no runner core for, whose (a2a, runner) pair no fused function registers (NotImplementedError "requires a
    fused func", e.g. flashinfer_trtllm with deepep), or one it refuses off capability major 9 (hpc_ops). Read from
    the release's MoeRunner and register_fused_func lines. Not judged: a runner left on auto (the quantization
    method chooses), LoRA (the unfused path), a backend the release's MoeRunner has no branch for (some layers,
    0.5.9's FP4 MoE with flashinfer_cutlass among them, do not go through MoeRunner), and the all-to-all `none`
    (the layers' own paths), a fused-only backend no fused function names at all."""
    if ctx.version is None:
        return None, "SGLang version unknown: what its MoeRunner accepts is unknown"
    given, runner = ctx.flag("moe-runner-backend")
    if not given or str(runner) == "auto":
        return False, f"--moe-runner-backend {runner or 'auto'}{ctx.flag_note('moe-runner-backend')}: the quantization method chooses"
    runner = str(runner)
    if ctx.flag("enable-lora")[0]:
        return False, "--enable-lora: MoeRunner takes the unfused path"
    a2a_given, a2a = ctx.flag("moe-a2a-backend")
    a2a = str(a2a) if a2a_given else "none"
    head = (
        f"--moe-runner-backend {runner}{ctx.flag_note('moe-runner-backend')} with --moe-a2a-backend {a2a}{ctx.flag_note('moe-a2a-backend')}"
    )
    if a2a == "none" and runner != "hpc_ops":
        return False, f"{head}: without an all-to-all backend MoeRunner refuses no runner by its pair"
    facts = ctx.release.moe if ctx.release is not None else None
    if facts is None:
        return None, f"SGLang {ctx.version}'s MoeRunner was not read (no release sources given)"
    where = facts.raise_line or MOE_RUNNER
    wrong: list[str] = []
    unknown: list[str] = []
    if runner in facts.sm90_only:
        major = int(ctx.capability.split(".")[0]) if ctx.capability else None
        if major is None:
            unknown.append(f"--moe-runner-backend {runner}: SGLang {ctx.version} needs capability major 9, the GPU's is unknown")
        elif major != 9:
            wrong.append(
                f"--moe-runner-backend {runner}: SGLang {ctx.version}'s MoeRunner refuses it off capability major 9 (here {ctx.capability})"
            )
    registered = sorted(p[0] for p in facts.fused_pairs if p[1] == runner)
    if runner in facts.fused_only and not registered and runner not in facts.sm90_only:
        # no fused function at all (0.5.17's cutlass: "the direct cutlass_moe_fp4 path"): its layers do not run it
        return False, f"{head}: no fused function of SGLang {ctx.version} names {runner} (its layers take another path)"
    if runner in facts.fused_only and a2a != "none" and (a2a, runner) not in facts.fused_pairs:
        wrong.append(
            f"{head}: SGLang {ctx.version}'s MoeRunner builds no runner core for {runner} and no fused function is "
            f"registered for ({a2a}, {runner}) (registered for {runner}: {', '.join(registered) or 'none'}; {where})"
        )
    elif runner not in facts.core | facts.fused_only | facts.sm90_only:
        return False, f"{head}: SGLang {ctx.version}'s MoeRunner has no branch for {runner} (its layers take another path)"
    return outcome(wrong, unknown, f"{head}: SGLang {ctx.version}'s MoeRunner accepts it ({where})")
