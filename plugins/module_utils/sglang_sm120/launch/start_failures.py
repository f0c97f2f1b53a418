"""The catalogue of known start failures (roles/sglang_launch/files/start-failures.yml) and its checks.

Every entry of the catalogue is evaluated against what a start will meet: the launch flags (the
values SGLang's own ServerArgs resolved where that check ran, ``Context.resolved``; else argv as
typed, SGLang's aliases and ``--flag=value`` both read), the server's environment, the SGLang version,
the GPUs' compute capability, and, when given, facts read from the model and draft directories
(config.json, the quantization config, the safetensors index, the auto_map modules) and the
host's facts (what preflight gathers: GPUs with memory and driver, PCIe-only topology, kernel
module, IOMMU and ACS, the JIT toolchain, the PCIe fabric's settings: nvidia_uvm's HMM, the ASPM
policy, power limits and BAR1). Each entry gets one verdict:

- ``refused``  the trigger holds and the entry's severity is refuse;
- ``warning``  the trigger holds and the severity is warn (unconfirmed evidence says so);
- ``ok``       a condition of the trigger does not hold (or a planned patch waives it);
- ``unknown``  no condition fails but a fact one needs is absent: never a pass;
- ``n/a``      the SGLang version is outside the entry's range.

Plain Python (PyYAML for the catalogue), no Ansible imports. sglang-flags drives it with
--model / --draft-model / --host-facts / --env; how to add an entry: docs/start-failures.md.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..errors import ToolkitError
from ..host.facts import FACT_KEYS, check_facts
from . import invariants, placement
from .flag_check import MLA_MODEL_CLASSES

GIB = 1024**3
MIB = 1024**2

VERDICTS = ("ok", "refused", "warning", "unknown", "n/a")
SEVERITIES = ("refuse", "warn")
EVIDENCE = ("confirmed", "unconfirmed")
# Where in a start the failure shows, in order (what the operator loses: before the load costs nothing).
PHASES = {
    "init": "at start, before the weights load (CUDA, NCCL or communicator set-up)",
    "argument-check": "at start, in SGLang's argument check",
    "load": "during the weights load",
    "backend-init": "after the weights load, when the attention/MoE backends and the KV cache are set up",
    "jit": "after the weights load, at the first use of a kernel compiled just in time",
    "cuda-graph-capture": "after the weights load, in CUDA-graph capture",
    "warm-up": "after the weights load, at SGLang's warm-up request",
    "first-request": "at the first request",
    "never": "never as an error: the server runs, but not as asked",
}
# Who can catch it before it costs a load of the real model: the start gate (from flags, the model
# directories and the host facts), only the start canary (the release's server on tiny models, on the
# real GPUs), or nothing here (only the real start on an SM120 host shows it; docs/start-failures.md).
CAUGHT_BY = ("gate", "canary", "none")
ENTRY_KEYS = {
    "id": "required",
    "title": "required",
    "row": "required",
    "versions": "required",
    "severity": "required",
    "evidence": "required",
    "message": "required",
    "fix": "required",
    "refs": "required",
    "trigger": "required",
    "phase": "required",
    "caught_by": "required",
    "unconfirmed": "optional",
    "waived_by_patches": "optional",
    "params": "optional",
    "acknowledged_by": "optional",
    "logs": "optional",
}
# Facts each condition kind may name, and the operators it takes.
MODEL_FACTS = (
    "is_mla",
    "kv_cache_quant_algo",
    "quantization",
    "quant_method",
    "architectures",
    "model_type",
    "auto_map_missing",
    "registered",
)
HOST_FACTS = (
    "nvidia_gpus",
    "pcie_only",
    "p2p_supported",
    "driver_version",
    "nvidia_kernel_module",
    "deep_gemm_importable",
    "triton_ptxas_knows_arch",
    "iommu_mode",
    "acs_redirect",
    "nvcc_version",
    "glibc_version",
    "gcc_version",
    "jit_tools_missing",
    "cuda_cccl_headers",
    "python_headers",
    "uvm_disable_hmm",
    "pcie_aspm_policy",
    "gpus_power_below_default",
    "gpus_bar1_below_memory",
)
CONDITIONS = {
    "flags": ("in", "gt", "given", "default"),
    "env": ("truthy", "in", "default"),
    "capability_major": (),
    "model": ("is", "in"),
    "draft": ("is", "in"),
    "host": ("is", "in", "lt", "ge"),
    "check": (),
}
CHECKS = (
    "memory",
    "memory_reserve",
    "draft_fits",
    "parallel_gpus",
    "draft_dtype",
    "draft_context",
    "eagle3_architecture",
    "quantization_backed",
    "backend_capability",
    "moe_runner",
)
INVARIANT_CHECKS = {
    "draft_dtype": invariants.draft_dtype_check,
    "draft_context": invariants.draft_context_check,
    "eagle3_architecture": invariants.eagle3_architecture_check,
    "quantization_backed": invariants.quantization_backed_check,
    "backend_capability": invariants.backend_capability_check,
    "moe_runner": invariants.moe_runner_check,
}
# Keys of a host-facts file: the preflight module's result (plugins/modules/sglang_preflight.py: gpus and
# the facts of plugins/module_utils/sglang_sm120/host/facts.py, and the keys Ansible adds to a module result) plus the
# facts only a later gatherer provides (deep_gemm_importable, triton_ptxas_knows_arch: the release venv's probes).
HOST_FACT_KEYS = {
    "gpus",
    "memory_gib",
    "disks",
    "problems",
    "changed",
    "failed",
    "msg",
    "invocation",
    "facts_saved",
    *FACT_KEYS,
    *HOST_FACTS,
}
GPU_KEYS = {"index": int, "name": str, "compute_cap": str, "driver_version": str, "memory_mib": int}
VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
ID_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class CatalogueError(ToolkitError, ValueError):
    """The catalogue file is not what start_failures.py reads (names the file, entry and field)."""


class FactsError(ToolkitError, ValueError):
    """A model directory or host-facts file cannot be read (names the file)."""


# --- the catalogue ---------------------------------------------------------------------------


def version_tuple(text: Optional[str]) -> Optional[tuple[int, int, int]]:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)) if match else None


@dataclass
class Entry:
    id: str
    title: str
    row: Optional[int]
    versions: tuple[str, Optional[str]]
    severity: str
    evidence: str
    message: str
    fix: str
    refs: list[str]
    trigger: list[dict[str, Any]]
    unconfirmed: str = ""
    waived_by_patches: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    acknowledged_by: str = ""
    phase: str = "first-request"
    caught_by: str = "gate"
    # The server-log signatures by which the start canary (and the health gate) name this failure at run time:
    # patterns (regular expressions, one log line each) and, optionally, the run phases they count in.
    logs: dict[str, list[str]] = field(default_factory=dict)

    @property
    def run_time_only(self) -> bool:
        """Nothing the gate can decide before a start: the canary or the real start names it from its log."""
        return not self.trigger

    def in_range(self, version: str) -> Optional[bool]:
        parsed = version_tuple(version)
        if parsed is None:
            return None
        low, high = self.versions
        return version_tuple(low) <= parsed and (high is None or parsed <= version_tuple(high))  # type: ignore[operator]

    @property
    def range_text(self) -> str:
        low, high = self.versions
        return f"{low}-{high}" if high else f"{low} and later"


def _check_condition(where: str, index: int, cond: Any) -> None:
    at = f"{where}: trigger[{index}]"
    if not isinstance(cond, dict) or not cond:
        raise CatalogueError(f"{at}: expected a mapping such as {{flags: [attention-backend], in: [fa3]}}, found {cond!r}")
    kinds = [k for k in cond if k in CONDITIONS]
    if len(kinds) != 1:
        raise CatalogueError(f"{at}: expected exactly one of {', '.join(CONDITIONS)}, found {sorted(cond)}")
    kind = kinds[0]
    extra = sorted(set(cond) - {kind, *CONDITIONS[kind]})
    if extra:
        raise CatalogueError(f"{at}: {kind} takes {', '.join(CONDITIONS[kind]) or 'no operator'}, found {extra}")
    value = cond[kind]
    if kind in ("flags", "env"):
        if not (isinstance(value, list) and value and all(isinstance(v, str) and v and not v.startswith("-") for v in value)):
            raise CatalogueError(f"{at}: {kind} must be a list of names without '--', found {value!r}")
        ops = [op for op in CONDITIONS[kind] if op in cond and op != "default"]
        if len(ops) != 1:
            want = "in, gt or given" if kind == "flags" else "truthy or in"
            raise CatalogueError(f"{at}: {kind} needs exactly one of {want}, found {ops or 'none'}")
        if "in" in cond and not (isinstance(cond["in"], list) and cond["in"]):
            raise CatalogueError(f"{at}: in must be a non-empty list, found {cond['in']!r}")
        if "gt" in cond and (isinstance(cond["gt"], bool) or not isinstance(cond["gt"], (int, float))):
            raise CatalogueError(f"{at}: gt must be a number, found {cond['gt']!r}")
        for op in ("given", "truthy"):
            if op in cond and not isinstance(cond[op], bool):
                raise CatalogueError(f"{at}: {op} must be true or false, found {cond[op]!r}")
    elif kind == "capability_major":
        if not (isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            raise CatalogueError(f"{at}: capability_major must be a list of integers such as [12], found {value!r}")
    elif kind in ("model", "draft", "host"):
        facts = HOST_FACTS if kind == "host" else MODEL_FACTS
        if value not in facts:
            raise CatalogueError(f"{at}: {kind} must name one of {', '.join(facts)}, found {value!r}")
        ops = [op for op in CONDITIONS[kind] if op in cond]
        if len(ops) != 1:
            raise CatalogueError(f"{at}: {kind} needs exactly one of {', '.join(CONDITIONS[kind])}, found {ops or 'none'}")
        if "is" in cond and not isinstance(cond["is"], bool):
            raise CatalogueError(f"{at}: is must be true or false, found {cond['is']!r}")
        if "in" in cond and not (isinstance(cond["in"], list) and cond["in"]):
            raise CatalogueError(f"{at}: in must be a non-empty list, found {cond['in']!r}")
        for op in ("lt", "ge"):
            if op in cond and not (isinstance(cond[op], str) and re.fullmatch(r"\d+(\.\d+)*", cond[op])):
                raise CatalogueError(f"{at}: {op} must be a quoted dotted version such as '575.57.08', found {cond[op]!r}")
    elif kind == "check" and value not in CHECKS:
        raise CatalogueError(f"{at}: check must be one of {', '.join(CHECKS)}, found {value!r}")


def _entry(source: str, index: int, raw: Any, seen: set[str]) -> Entry:
    where = f"{source}: entries[{index}]"
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: expected a mapping, found {type(raw).__name__}")
    if isinstance(raw.get("id"), str):
        where = f"{source}: entry {raw['id']!r}"
    missing = [k for k, need in ENTRY_KEYS.items() if need == "required" and k not in raw]
    if missing:
        raise CatalogueError(f"{where}: missing field(s) {', '.join(missing)}")
    unknown = sorted(set(raw) - set(ENTRY_KEYS))
    if unknown:
        raise CatalogueError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}; known: {', '.join(ENTRY_KEYS)}")
    if not (isinstance(raw["id"], str) and ID_RE.match(raw["id"])):
        raise CatalogueError(f"{where}: field id must be lower-case words joined by '-', found {raw['id']!r}")
    if raw["id"] in seen:
        raise CatalogueError(f"{where}: field id {raw['id']!r} is used by an earlier entry")
    seen.add(raw["id"])
    for key in ("title", "message", "fix"):
        if not (isinstance(raw[key], str) and raw[key].strip()):
            raise CatalogueError(f"{where}: field {key} must be non-empty text, found {raw[key]!r}")
    if raw["row"] is not None and (isinstance(raw["row"], bool) or not isinstance(raw["row"], int)):
        raise CatalogueError(f"{where}: field row must be the domain notes' row number or null, found {raw['row']!r}")
    versions = raw["versions"]
    if not (isinstance(versions, dict) and set(versions) == {"from", "to"}):
        raise CatalogueError(f"{where}: field versions must be {{from: X.Y.Z, to: X.Y.Z or null}}, found {versions!r}")
    for end in ("from", "to"):
        value = versions[end]
        if (end == "from" or value is not None) and not (isinstance(value, str) and VERSION_RE.match(value)):
            raise CatalogueError(f"{where}: field versions.{end} must be a quoted X.Y.Z version, found {value!r}")
    if versions["to"] is not None and version_tuple(versions["to"]) < version_tuple(versions["from"]):  # type: ignore[operator]
        raise CatalogueError(f"{where}: field versions: to {versions['to']} is before from {versions['from']}")
    if raw["severity"] not in SEVERITIES:
        raise CatalogueError(f"{where}: field severity must be one of {', '.join(SEVERITIES)}, found {raw['severity']!r}")
    if raw["phase"] not in PHASES:
        raise CatalogueError(f"{where}: field phase must be one of {', '.join(PHASES)}, found {raw['phase']!r}")
    if raw["caught_by"] not in CAUGHT_BY:
        raise CatalogueError(f"{where}: field caught_by must be one of {', '.join(CAUGHT_BY)}, found {raw['caught_by']!r}")
    if raw["evidence"] not in EVIDENCE:
        raise CatalogueError(f"{where}: field evidence must be one of {', '.join(EVIDENCE)}, found {raw['evidence']!r}")
    if raw["evidence"] == "unconfirmed":
        if raw["severity"] != "warn":
            raise CatalogueError(f"{where}: field severity must be warn when evidence is unconfirmed, found {raw['severity']!r}")
        if not (isinstance(raw.get("unconfirmed"), str) and raw["unconfirmed"].strip()):
            raise CatalogueError(f"{where}: field unconfirmed must say what is not proven when evidence is unconfirmed")
    elif "unconfirmed" in raw:
        raise CatalogueError(f"{where}: field unconfirmed is only for evidence: unconfirmed (found evidence {raw['evidence']!r})")
    refs = raw["refs"]
    if not (isinstance(refs, list) and refs and all(isinstance(r, str) and r.strip() for r in refs)):
        raise CatalogueError(f"{where}: field refs must be a non-empty list of references, found {refs!r}")
    patches = raw.get("waived_by_patches", [])
    if not (isinstance(patches, list) and all(isinstance(p, str) and p for p in patches)):
        raise CatalogueError(f"{where}: field waived_by_patches must be a list of patch ids, found {patches!r}")
    ack = raw.get("acknowledged_by", "")
    if not (isinstance(ack, str) and re.fullmatch(r"([a-z0-9-]+)?", ack)):
        raise CatalogueError(f"{where}: field acknowledged_by must name a sglang-flags switch without --, found {ack!r}")
    if ack and raw["severity"] != "refuse":
        raise CatalogueError(f"{where}: field acknowledged_by only applies to severity refuse, found {raw['severity']!r}")
    params = raw.get("params", {})
    if not isinstance(params, dict):
        raise CatalogueError(f"{where}: field params must be a mapping, found {params!r}")
    logs = raw.get("logs", {})
    if "logs" in raw and not (isinstance(logs, dict) and set(logs) <= {"patterns", "phases"} and "patterns" in logs):
        raise CatalogueError(f"{where}: field logs must be {{patterns: [regex...], phases: [run phase...]}}, found {logs!r}")
    for key in ("patterns", "phases") if logs else ():
        value = logs.get(key, [])
        if not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)) or (key == "patterns" and not value):
            raise CatalogueError(f"{where}: field logs.{key} must be a list of non-empty strings, found {value!r}")
    for pattern in logs.get("patterns", []):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise CatalogueError(f"{where}: field logs.patterns: {pattern!r} is not a regular expression ({exc})") from None
    unknown_phases = sorted(set(logs.get("phases", [])) - set(RUN_PHASES))
    if unknown_phases:
        raise CatalogueError(f"{where}: field logs.phases must name run phases ({', '.join(RUN_PHASES)}), found {unknown_phases}")
    trigger = raw["trigger"]
    if isinstance(trigger, list) and not trigger and not (raw["caught_by"] in ("canary", "none") and logs):
        raise CatalogueError(
            f"{where}: field trigger may be empty only for an entry the gate cannot decide (caught_by canary or none) "
            "that names its log signature (logs), found caught_by "
            f"{raw['caught_by']!r}{' and no logs' if not logs else ''}"
        )
    if not isinstance(trigger, list):
        raise CatalogueError(f"{where}: field trigger must be a list of conditions, found {trigger!r}")
    for number, cond in enumerate(trigger):
        _check_condition(where, number, cond)
    if any(c.get("check") == "memory" for c in trigger):
        for key in ("auto_reserved_mib", "auto_reserved_speculative_mib", "source"):
            if key not in params:
                raise CatalogueError(f"{where}: field params.{key} is needed by check: memory")
    return Entry(
        id=raw["id"],
        title=raw["title"].strip(),
        row=raw["row"],
        versions=(versions["from"], versions["to"]),
        severity=raw["severity"],
        evidence=raw["evidence"],
        message=" ".join(raw["message"].split()),
        fix=raw["fix"].strip(),
        refs=list(refs),
        trigger=[dict(c) for c in trigger],
        unconfirmed=str(raw.get("unconfirmed", "")).strip(),
        waived_by_patches=list(patches),
        params=dict(params),
        acknowledged_by=ack,
        phase=raw["phase"],
        caught_by=raw["caught_by"],
        logs={k: list(v) for k, v in logs.items()},
    )


def parse_catalogue(data: Any, source: str = "catalogue") -> list[Entry]:
    """The entries of a loaded catalogue; CatalogueError naming the file, the entry and the field."""
    if not isinstance(data, dict) or set(data) != {"schema", "entries"}:
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise CatalogueError(f"{source}: expected a mapping with schema and entries, found {found}")
    if data["schema"] != 1:
        raise CatalogueError(f"{source}: schema must be 1, found {data['schema']!r}")
    if not (isinstance(data["entries"], list) and data["entries"]):
        raise CatalogueError(f"{source}: entries must be a non-empty list")
    seen: set[str] = set()
    return [_entry(source, i, raw, seen) for i, raw in enumerate(data["entries"])]


# --- facts -----------------------------------------------------------------------------------


@dataclass
class ModelFacts:
    path: str
    architectures: list[str]
    model_type: Optional[str]
    is_mla: bool
    kv_cache_quant_algo: Optional[str]
    kv_cache_quant_source: str
    quantization: Optional[str]  # the checkpoint's method as SGLang names it (modelopt_fp4, fp8, ...); None: unquantized
    quantization_source: str
    quant_method: Optional[str]  # config.json's quantization_config.quant_method as written; None: none there
    total_size: Optional[int]
    total_size_source: str
    auto_map_modules: list[str]
    auto_map_missing: list[str]
    # sizes of the text model (a wrapper's text_config), for the draft-fits check
    hidden_size: Optional[int] = None
    input_hidden_size: Optional[int] = None  # a draft's target_hidden_size (SGLang's llama_eagle3), else hidden_size
    vocab_size: Optional[int] = None
    num_hidden_layers: Optional[int] = None
    aux_layer_ids: Optional[list[int]] = None  # an EAGLE-3 draft's eagle_config.eagle_aux_hidden_state_layer_ids
    # for the invariants (launch/invariants.py): the dtype its config names (SGLang reads the text config's dtype,
    # else torch_dtype), the text config SGLang derives the context length from, and the directory's file names
    config_dtype: Optional[str] = None
    dtype_source: str = ""
    text_config: dict[str, Any] = field(default_factory=dict)
    text_config_source: str = ""
    file_names: list[str] = field(default_factory=list)


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise FactsError(f"{path}: missing; {what}") from exc
    except OSError as exc:
        raise FactsError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise FactsError(f"{path}: not JSON: {exc}") from exc


def _kv_from_quant_config(config: Mapping[str, Any]) -> tuple[Optional[str], str]:
    """kv_cache_quant_algo as SGLang 0.5.9 derives it (ModelOptFp4Config.from_config): the flat
    config.json form first (kv_cache_scheme), then the nested hf_quant_config.json form."""
    if config.get("quant_algo") is not None:
        scheme = config.get("kv_cache_scheme")
        if isinstance(scheme, dict):
            if scheme.get("type") == "float" and scheme.get("num_bits") == 8:
                return "FP8", "quantization_config.kv_cache_scheme (float, 8 bits)"
            return None, f"quantization_config.kv_cache_scheme {scheme!r} (not FP8)"
        if isinstance(scheme, str):
            name = scheme.strip().upper()
            algo = "FP8" if name in ("FP8", "FLOAT8") else "NVFP4" if name in ("FP4", "FLOAT4", "NVFP4") else None
            return algo, f"quantization_config.kv_cache_scheme {scheme!r}"
        if isinstance(config.get("kv_cache_quant_algo"), str):
            return config["kv_cache_quant_algo"], "quantization_config.kv_cache_quant_algo"
        return None, "quantization_config has no kv_cache_scheme"
    nested = config.get("quantization")
    if isinstance(nested, dict):
        algo = nested.get("kv_cache_quant_algo")
        return (algo if isinstance(algo, str) else None), "quantization.kv_cache_quant_algo"
    algo = config.get("kv_cache_quant_algo")
    return (algo if isinstance(algo, str) else None), "kv_cache_quant_algo"


def _method_from_quant_config(config: Mapping[str, Any]) -> Optional[str]:
    """The quantization method SGLang takes from a checkpoint's quantization config when
    --quantization is not given: ModelOpt's exports (quant_method "modelopt", or the nested
    hf_quant_config.json form) become modelopt_fp4 / modelopt_fp8 by their quant_algo, as
    ModelOptFp4Config / ModelOptFp8Config.override_quantization_method decide; any other
    quant_method is SGLang's name as written (fp8, compressed-tensors, awq, ...)."""
    nested = config.get("quantization")
    algo = config.get("quant_algo")
    method = config.get("quant_method")
    if isinstance(nested, dict) and method is None:
        algo, method = nested.get("quant_algo"), "modelopt"
    method = str(method).lower() if isinstance(method, str) else None
    if method in ("modelopt", "modelopt_fp4", "modelopt_fp8") and isinstance(algo, str):
        name = algo.upper()
        if "FP4" in name:
            return "modelopt_fp4"
        if "FP8" in name:
            return "modelopt_fp8"
    return method


def read_model_dir(directory: str | Path, option: str = "--model") -> ModelFacts:
    """What the catalogue reads from a model (or draft) directory; FactsError naming the file."""
    path = Path(directory)
    if not path.exists():
        raise FactsError(f"{option} {path}: no such directory")
    if not path.is_dir():
        raise FactsError(f"{option} {path}: not a directory")
    try:
        names = set(os.listdir(path))
    except OSError as exc:
        raise FactsError(f"{option} {path}: cannot list it: {exc.strerror or exc}") from exc
    config = _read_json(path / "config.json", "a model directory holds config.json (architectures, model_type)")
    if not isinstance(config, dict):
        raise FactsError(f"{path / 'config.json'}: expected a JSON object, found {type(config).__name__}")
    archs = config.get("architectures") or []
    if not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise FactsError(f"{path / 'config.json'}: architectures must be a list of class names, found {archs!r}")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    inner_archs = [a for a in (text.get("architectures") or []) if isinstance(a, str)]
    is_mla = any(a in MLA_MODEL_CLASSES for a in archs + inner_archs) or any(c.get("kv_lora_rank") is not None for c in (config, text))
    kv_algo, kv_source = None, "no quantization config"
    method, method_source = None, f"no quantization_config in {path / 'config.json'} and no hf_quant_config.json"
    quant = config.get("quantization_config")
    written = quant.get("quant_method") if isinstance(quant, dict) and isinstance(quant.get("quant_method"), str) else None
    if isinstance(quant, dict):
        kv_algo, kv_source = _kv_from_quant_config(quant)
        kv_source = f"{path / 'config.json'}: {kv_source}"
        method = _method_from_quant_config(quant)
        method_source = (
            f"{path / 'config.json'}: quantization_config (quant_method {quant.get('quant_method')}, quant_algo {quant.get('quant_algo')})"
        )
    elif "hf_quant_config.json" in names:
        hf_quant = _read_json(path / "hf_quant_config.json", "")
        if not isinstance(hf_quant, dict):
            raise FactsError(f"{path / 'hf_quant_config.json'}: expected a JSON object, found {type(hf_quant).__name__}")
        kv_algo, kv_source = _kv_from_quant_config(hf_quant)
        kv_source = f"{path / 'hf_quant_config.json'}: {kv_source}"
        method = _method_from_quant_config(hf_quant)
        nested = hf_quant.get("quantization") if isinstance(hf_quant.get("quantization"), dict) else {}
        method_source = f"{path / 'hf_quant_config.json'}: quantization.quant_algo {nested.get('quant_algo')}"
    total_size, size_source = None, f"no model.safetensors.index.json in {path}"
    if "model.safetensors.index.json" in names:
        index_path = path / "model.safetensors.index.json"
        index = _read_json(index_path, "")
        size = index.get("metadata", {}).get("total_size") if isinstance(index, dict) and isinstance(index.get("metadata"), dict) else None
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise FactsError(f"{index_path}: expected metadata.total_size, the weights' size in bytes (a positive integer), found {size!r}")
        total_size, size_source = size, f"{index_path}: metadata.total_size"
    modules: list[str] = []
    for value in (config.get("auto_map") or {}).values():
        for ref in value if isinstance(value, list) else [value]:
            if isinstance(ref, str) and "." in ref:
                module = ref.split("--")[-1].rsplit(".", 1)[0]
                if module not in modules:
                    modules.append(module)
    missing = [m for m in modules if f"{m.replace('.', '/')}.py" not in names and f"{m}.py" not in names]
    sizes = text if text else config

    def number(key: str, where: Mapping[str, Any] = sizes) -> Optional[int]:
        value = where.get(key, config.get(key))
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    eagle = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    aux = eagle.get("eagle_aux_hidden_state_layer_ids")
    return ModelFacts(
        path=str(path),
        architectures=list(archs),
        model_type=config.get("model_type") if isinstance(config.get("model_type"), str) else None,
        is_mla=is_mla,
        kv_cache_quant_algo=kv_algo,
        kv_cache_quant_source=kv_source,
        quantization=method,
        quantization_source=method_source,
        quant_method=written,
        hidden_size=number("hidden_size"),
        input_hidden_size=number("target_hidden_size", config) or number("hidden_size"),
        vocab_size=number("vocab_size"),
        num_hidden_layers=number("num_hidden_layers"),
        aux_layer_ids=[int(i) for i in aux] if isinstance(aux, list) and all(isinstance(i, int) for i in aux) else None,
        total_size=total_size,
        total_size_source=size_source,
        auto_map_modules=modules,
        auto_map_missing=missing,
        file_names=sorted(names),
        **_text_config_facts(path, config, text),
    )


def _text_config_facts(path: Path, config: Mapping[str, Any], text: Mapping[str, Any]) -> dict[str, Any]:
    """What the invariants read from SGLang's hf_text_config (get_hf_text_config: a wrapper's text_config, else the
    config itself): the config and where it is, and the dtype its _get_and_verify_dtype reads (that config's dtype,
    else torch_dtype; the wrapper's where the text config names none)."""
    text_where = f"{path / 'config.json'}" + (": text_config" if text else "")
    facts = {"config_dtype": None, "dtype_source": f"{text_where} dtype/torch_dtype", "text_config": dict(text or config)}
    for where, label in ((text, text_where), (config, str(path / "config.json"))):
        dtype_key = next((k for k in ("dtype", "torch_dtype") if isinstance(where.get(k), str)), None)
        if where and dtype_key:
            facts.update(config_dtype=where[dtype_key], dtype_source=f"{label} {dtype_key}")
            break
    return {**facts, "text_config_source": text_where}


@dataclass
class HostFacts:
    source: str
    gpus: list[dict[str, Any]]
    pcie_only: Optional[bool] = None
    p2p_supported: Optional[bool] = None  # the driver reports every GPU pair's peer-to-peer reads OK
    nvidia_kernel_module: Optional[str] = None
    deep_gemm_importable: Optional[bool] = None
    triton_ptxas_knows_arch: Optional[bool] = None  # the ptxas Triton calls for these GPUs assembles for them
    iommu_mode: Optional[str] = None  # off / passthrough / translated
    acs_redirect: Optional[bool] = None
    nvcc_version: Optional[str] = None  # "13.0"
    glibc_version: Optional[str] = None  # "2.41"
    gcc_version: Optional[str] = None  # "12.2.0": nvcc's host compiler (gcc on PATH)
    jit_tools_missing: Optional[list[str]] = None  # of nvcc, ninja, gcc, c++
    cuda_cccl_headers: Optional[bool] = None
    python_headers: Optional[bool] = None
    uvm_disable_hmm: Optional[bool] = None  # nvidia_uvm's parameter: false leaves HMM on
    pcie_aspm_policy: Optional[str] = None  # off (pcie_aspm=off), default, performance, powersave, powersupersave
    gpus_power_below_default: Optional[list[str]] = None  # GPU<n> whose power limit is below its default
    gpus_bar1_below_memory: Optional[list[str]] = None  # GPU<n> whose BAR1 is smaller than its memory
    nvidia_module_version: Optional[str] = None
    unknown: dict[str, str] = field(default_factory=dict)  # fact -> why it is null (the file's facts_unknown)
    facts: dict[str, Any] = field(default_factory=dict)  # every other gathered fact (gpu_topology, iommu_cmdline, ...)

    @property
    def capability(self) -> Optional[str]:
        caps = sorted({g["compute_cap"] for g in self.gpus})
        return caps[0] if len(caps) == 1 else None

    @property
    def driver_version(self) -> Optional[str]:
        """The GPUs' driver when they agree; with no GPUs listed, the kernel module's version."""
        if not self.gpus:
            return self.nvidia_module_version
        drivers = sorted({g["driver_version"] for g in self.gpus})
        return drivers[0] if len(drivers) == 1 else None

    @property
    def memory_mib(self) -> Optional[int]:
        return min(g["memory_mib"] for g in self.gpus) if self.gpus else None

    @property
    def nvidia_gpus(self) -> bool:
        """Whether the facts list NVIDIA GPUs (a host checked without them, the lab's containers, lists none): the
        entries about the GPUs' PCIe fabric apply only where there are GPUs on it."""
        return bool(self.gpus)


def parse_host_facts(data: Any, source: str = "host facts") -> HostFacts:
    """Host facts as plugins/modules/sglang_preflight.py returns them (gpus: index, name, compute_cap,
    driver_version, memory_mib; the facts of plugins/module_utils/sglang_sm120/host/facts.py FACTS, null when unknown,
    with the reasons in facts_unknown), plus deep_gemm_importable where a gatherer provides it.
    Every fact may be absent (unknown)."""
    if not isinstance(data, dict):
        raise FactsError(f"{source}: expected a JSON object as the preflight module returns it, found {type(data).__name__}")
    unknown = sorted(set(data) - HOST_FACT_KEYS)
    if unknown:
        raise FactsError(f"{source}: unknown key(s) {', '.join(unknown)}; a host-facts file has {', '.join(sorted(HOST_FACT_KEYS))}")
    gpus = data.get("gpus", [])
    if not isinstance(gpus, list):
        raise FactsError(f"{source}: gpus must be a list, found {type(gpus).__name__}")
    for number, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            raise FactsError(f"{source}: gpus[{number}] must be an object, found {gpu!r}")
        for key, kind in GPU_KEYS.items():
            if not isinstance(gpu.get(key), kind) or isinstance(gpu.get(key), bool):
                raise FactsError(f"{source}: gpus[{number}].{key} must be {kind.__name__}, found {gpu.get(key)!r}")
        if not re.fullmatch(r"\d+\.\d+", gpu["compute_cap"]):
            raise FactsError(f"{source}: gpus[{number}].compute_cap should look like '12.0', found {gpu['compute_cap']!r}")
        if not re.fullmatch(r"\d+(\.\d+)*", gpu["driver_version"]):
            raise FactsError(f"{source}: gpus[{number}].driver_version should look like '580.82.07', found {gpu['driver_version']!r}")
    for probed in ("deep_gemm_importable", "triton_ptxas_knows_arch"):
        if data.get(probed) is not None and not isinstance(data[probed], bool):
            raise FactsError(f"{source}: {probed} must be true, false or null, found {data[probed]!r}")
    problems = check_facts(data)
    if problems:
        raise FactsError(f"{source}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    # the catalogue's host facts (driver_version comes from the GPUs) and what they fall back on
    typed = (set(HOST_FACTS) - {"driver_version", "nvidia_gpus"}) | {"nvidia_module_version", "facts_unknown"}
    return HostFacts(
        source,
        gpus,
        pcie_only=data.get("pcie_only"),
        p2p_supported=data.get("p2p_supported"),
        nvidia_kernel_module=data.get("nvidia_kernel_module"),
        deep_gemm_importable=data.get("deep_gemm_importable"),
        triton_ptxas_knows_arch=data.get("triton_ptxas_knows_arch"),
        iommu_mode=data.get("iommu_mode"),
        acs_redirect=data.get("acs_redirect"),
        nvcc_version=data.get("nvcc_version"),
        glibc_version=data.get("glibc_version"),
        gcc_version=data.get("gcc_version"),
        jit_tools_missing=data.get("jit_tools_missing"),
        cuda_cccl_headers=data.get("cuda_cccl_headers"),
        python_headers=data.get("python_headers"),
        uvm_disable_hmm=data.get("uvm_disable_hmm"),
        pcie_aspm_policy=data.get("pcie_aspm_policy"),
        gpus_power_below_default=data.get("gpus_power_below_default"),
        gpus_bar1_below_memory=data.get("gpus_bar1_below_memory"),
        nvidia_module_version=data.get("nvidia_module_version"),
        unknown=dict(data.get("facts_unknown") or {}),
        facts={k: v for k, v in data.items() if k in FACT_KEYS and k not in typed},
    )


def read_host_facts(path: str | Path) -> HostFacts:
    return parse_host_facts(_read_json(Path(path), "give the JSON file the preflight module's facts were saved to"), str(path))


def registered_architectures(sglang: str | Path) -> Optional[set[str]]:
    """The model classes of an SGLang (package dir, the dir holding it, or a wheel): the names in
    the ``EntryClass`` assignments of srt/models/*.py, which its ModelRegistry imports. None when
    no srt/models is found."""
    path = Path(sglang)
    if path.is_dir() and not (path / "srt").is_dir() and (path / "sglang" / "srt").is_dir():
        path = path / "sglang"
    texts: list[str] = []
    try:
        if path.is_file() and path.suffix == ".whl":
            with zipfile.ZipFile(path) as archive:
                texts = [
                    archive.read(n).decode("utf-8", "replace")
                    for n in archive.namelist()
                    if n.startswith("sglang/srt/models/") and n.endswith(".py")
                ]
        elif (path / "srt" / "models").is_dir():
            texts = [f.read_text(encoding="utf-8", errors="replace") for f in sorted((path / "srt" / "models").rglob("*.py"))]
    except (OSError, zipfile.BadZipFile):
        return None
    names: set[str] = set()
    for text in texts:
        for match in re.finditer(r"^EntryClass\s*=\s*(\[[^\]]*\]|\w+)", text, re.MULTILINE):
            names.update(re.findall(r"\b[A-Za-z_]\w*\b", match.group(1)))
    return names or None


# --- launch flags ----------------------------------------------------------------------------


def parse_argv(argv: Sequence[str], aliases: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """Canonical flag name (no --) -> value: the text, True for a flag without a value, a list for
    several values. ``aliases`` maps every name SGLang accepts to its canonical one (the flag
    table); ``--flag=value`` and ``--flag value`` both read."""
    aliases = aliases or {}
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--") or token == "--":
            continue
        name, eq, inline = token[2:].partition("=")
        values = [inline] if eq else []
        if not eq:
            while i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
        out[aliases.get(name, name)] = True if not values else values[0] if len(values) == 1 else values
    return out


def truthy(value: Optional[str]) -> bool:
    """SGLang's get_bool_env_var / EnvBool: 'true' or '1', any case."""
    return str(value).strip().lower() in ("true", "1")


# --- evaluation ------------------------------------------------------------------------------


@dataclass
class Context:
    flags: dict[str, Any]
    env: dict[str, str]
    version: Optional[str]
    capability: Optional[str]  # "12.0"
    model: Optional[ModelFacts] = None
    draft: Optional[ModelFacts] = None
    host: Optional[HostFacts] = None
    model_class: Optional[str] = None  # sglang-flags --model-class, when no model directory is given
    registry: Optional[set[str]] = None
    # what the invariants read from the release's sources (its EAGLE-3 draft classes, quantization tables, ...)
    release: Optional[invariants.ReleaseData] = None
    planned_patches: list[str] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)  # acknowledged_by names the operator gave
    aliases: dict[str, str] = field(default_factory=dict)  # every flag name SGLang accepts -> the key in flags
    # The values SGLang's own ServerArgs resolved (canonical flag name -> value), where that check
    # ran (plugins/plugin_utils/sglang_sm120_controller/flag_gate.py): the conditions read these instead of the typed flags. None:
    # the flags as typed.
    resolved: Optional[dict[str, Any]] = None
    resolved_by: str = "SGLang's ServerArgs"  # who resolved them, for the evidence
    # SGLang's own --mem-fraction-static for these flags without the operator's (its reserve for
    # activations, CUDA graphs and the draft), where its ServerArgs ran and the flag was given.
    sglang_auto_fraction: Optional[float] = None
    sglang_auto_unknown: str = ""  # why it was not computed, where that was tried

    def flag(self, name: str) -> tuple[bool, Any]:
        """(set, value) of a flag named as the catalogue names it (any of SGLang's names): the value
        SGLang resolved where it ran (set: not None and not False), else the typed one (set: given)."""
        key = self.aliases.get(name, name)
        if self.resolved is not None and key in self.resolved:
            value = self.resolved[key]
            return (value is not None and value is not False, value)
        return (key in self.flags, self.flags.get(key))

    def flag_note(self, name: str) -> str:
        """'' where the value read is the typed one; else how SGLang's value differs from it."""
        key = self.aliases.get(name, name)
        if self.resolved is None or key not in self.resolved:
            return ""
        value = self.resolved[key]
        if key not in self.flags:
            return "" if value is None or value is False else " (not given: the value SGLang resolved)"
        typed = self.flags[key]
        return "" if _same_value(typed, value) else f" (typed {typed}: the value SGLang resolved)"

    @property
    def flag_source(self) -> str:
        """Where the flag values the conditions read come from, one line of evidence."""
        if self.resolved is not None:
            return f"flags as {self.resolved_by} resolved them"
        return "flags as typed (SGLang's ServerArgs did not resolve them)"


def _same_value(typed: Any, value: Any) -> bool:
    """A typed flag value (text, True, a list of texts) and a resolved one (int, float, bool, ...) agree."""
    if isinstance(typed, list) or isinstance(value, list):
        typed_list = typed if isinstance(typed, list) else [typed]
        value_list = value if isinstance(value, list) else [value]
        return len(typed_list) == len(value_list) and all(_same_value(t, v) for t, v in zip(typed_list, value_list))
    if typed is True or isinstance(value, bool):
        return typed is True and value is True
    try:
        return float(typed) == float(value)
    except (TypeError, ValueError):
        return str(typed) == str(value)


def _shown(value: Any) -> str:
    """A flag value for the evidence: floats SGLang computed rounded (0.7523519433593749 -> 0.7524)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@dataclass
class Verdict:
    id: str
    title: str
    verdict: str
    severity: str
    evidence_status: str
    versions: str
    evidence: list[str]
    message: str = ""
    fix: str = ""
    refs: list[str] = field(default_factory=list)
    unconfirmed: str = ""
    phase: str = ""

    def text(self) -> str:
        head = f"{self.verdict}: [{self.id}] {self.title}"
        if self.verdict in ("refused", "warning"):
            out = f"{head}: {self.message}"
            if self.phase:
                out += f" (fails {PHASES[self.phase]})"
            if self.unconfirmed:
                out += f" (unconfirmed: {self.unconfirmed})"
            out += f"; evidence: {'; '.join(self.evidence)}; fix: {self.fix} [{', '.join(self.refs)}]"
            return out
        return f"{head}: {'; '.join(self.evidence)}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.text()}


Result = tuple[Optional[bool], str]


def _flag_condition(cond: Mapping[str, Any], ctx: Context) -> Result:
    names = cond["flags"]
    given = {n: ctx.flag(n)[1] for n in names if ctx.flag(n)[0]}
    shown = " / ".join(f"--{n}" for n in names)
    # typed: given or not; resolved: set (a value other than None / False) or not
    absent = "not set" if ctx.resolved is not None else "not given"

    def listed(items: Mapping[str, Any]) -> str:
        return ", ".join(f"--{n}" + ("" if v is True else f" {_shown(v)}") + ctx.flag_note(n) for n, v in items.items())

    if "given" in cond:
        found = bool(given)
        if not given:
            text = f"{shown} {absent}"
        else:
            text = ", ".join(f"--{n}" for n in given) + " given" if ctx.resolved is None else listed(given) + " (set)"
        return found == cond["given"], text
    values = dict(given)
    # where SGLang's ServerArgs resolved the flag, its default is already applied: a None there is
    # SGLang's own answer ("unquant" becomes None), not a flag left to its default
    resolved_none = ctx.resolved is not None and any(ctx.aliases.get(n, n) in ctx.resolved for n in names)
    if not values and "default" in cond and not resolved_none:
        values = {names[0]: cond["default"]}
        note = " (SGLang's default, not given)"
    else:
        note = ""
    if not values:
        return False, f"{shown} {absent}"
    if "in" in cond:
        wanted = {str(v) for v in cond["in"]}
        hits = {n: v for n, v in values.items() if str(v) in wanted}
        if hits:
            return True, listed(hits) + note
        return False, listed(values) + note + f" (not {'/'.join(sorted(wanted))})"
    unknown = []
    for name, value in values.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            unknown.append(f"--{name} {value!r} is not a number")
            continue
        if number > cond["gt"]:
            return True, listed({name: value}) + f" (> {cond['gt']})"
    if unknown:
        return None, "; ".join(unknown)
    return False, listed(values) + f" (not > {cond['gt']})"


def _env_condition(cond: Mapping[str, Any], ctx: Context) -> Result:
    names = cond["env"]
    set_ = {n: ctx.env[n] for n in names if n in ctx.env}
    if "in" in cond:  # a value SGLang reads as a choice, compared as written
        wanted = {str(v) for v in cond["in"]}
        hits = {n: v for n, v in set_.items() if str(v) in wanted}
        if hits:
            return True, ", ".join(f"{n}={v}" for n, v in hits.items())
        if set_:
            return False, ", ".join(f"{n}={v}" for n, v in set_.items()) + f" (not {'/'.join(sorted(wanted))})"
        return False, f"{' / '.join(names)} not set"
    if set_:
        on = {n: v for n, v in set_.items() if truthy(v)}
        text = ", ".join(f"{n}={v}" for n, v in (on or set_).items())
    elif "default" in cond:
        on = {names[0]: cond["default"]} if truthy(cond["default"]) else {}
        text = f"{names[0]} not set (SGLang's default: {cond['default']})"
    else:
        on, text = {}, f"{' / '.join(names)} not set"
    return bool(on) == cond["truthy"], text


def _model_condition(kind: str, cond: Mapping[str, Any], ctx: Context) -> Result:
    fact = cond[kind]
    facts = ctx.model if kind == "model" else ctx.draft
    option = "--model" if kind == "model" else "--draft-model"
    if fact == "registered":
        if facts is None:
            return None, f"no {option} directory given: its architectures are unknown"
        if ctx.registry is None:
            return None, "this SGLang's model registry could not be read (no srt/models)"
        known = [a for a in facts.architectures if a in ctx.registry]
        value: Any = bool(facts.architectures) and len(known) == len(facts.architectures)
        text = f"{kind} architectures {facts.architectures} " + ("registered" if value else "not all registered") + " in this SGLang"
    elif facts is None:
        if kind == "model" and fact == "is_mla" and ctx.model_class:
            value = ctx.model_class in MLA_MODEL_CLASSES
            text = f"model class {ctx.model_class} (--model-class) is {'' if value else 'not '}MLA"
        else:
            return None, f"no {option} directory given: {kind} {fact} unknown"
    elif fact == "is_mla":
        value = facts.is_mla
        text = f"{kind} {facts.path} is {'' if value else 'not '}MLA (architectures {facts.architectures})"
    elif fact == "kv_cache_quant_algo":
        value = (facts.kv_cache_quant_algo or "").upper() or None
        text = f"{kind} kv_cache_quant_algo {facts.kv_cache_quant_algo} ({facts.kv_cache_quant_source})"
    elif fact == "quantization":
        value = facts.quantization
        text = f"{kind} quantization {facts.quantization or 'none'} ({facts.quantization_source})"
    elif fact == "quant_method":
        value = facts.quant_method
        text = f"{kind} config.json quantization_config.quant_method {facts.quant_method or 'not set'}"
    elif fact == "auto_map_missing":
        value = bool(facts.auto_map_missing)
        text = (
            f"auto_map modules missing from {facts.path}: {', '.join(facts.auto_map_missing)}"
            if value
            else f"auto_map modules present in {facts.path}: {', '.join(facts.auto_map_modules) or 'none named'}"
        )
    elif fact == "architectures":
        value, text = facts.architectures, f"{kind} architectures {facts.architectures}"
    else:
        value, text = facts.model_type, f"{kind} model_type {facts.model_type}"
    if "is" in cond:
        return bool(value) == cond["is"], text
    wanted = {str(v).upper() for v in cond["in"]}
    values = value if isinstance(value, list) else [value]
    return any(str(v).upper() in wanted for v in values if v is not None), text


def _host_condition(cond: Mapping[str, Any], ctx: Context) -> Result:
    fact = cond["host"]
    if ctx.host is None:
        return None, f"no --host-facts given: host {fact} unknown"
    value = ctx.host.driver_version if fact == "driver_version" else getattr(ctx.host, fact)
    if value is None:
        if fact in ctx.host.unknown:
            why = ctx.host.unknown[fact]
        else:
            why = "the GPUs report different drivers or none" if fact == "driver_version" else "not in the file"
        return None, f"host {fact} unknown ({why}: {ctx.host.source})"
    if "lt" in cond or "ge" in cond:
        parts = tuple(int(p) for p in str(value).split("."))
        name = "driver" if fact == "driver_version" else f"host {fact}"
        if "ge" in cond:
            return parts >= tuple(int(p) for p in cond["ge"].split(".")), f"{name} {value} ({cond['ge']} or newer matches)"
        return parts < tuple(int(p) for p in cond["lt"].split(".")), f"{name} {value} (needs {cond['lt']} or newer)"
    if isinstance(value, list):  # jit_tools_missing, gpus_*: `in` matches any of them, `is: true` any at all
        text = f"host {fact}: {', '.join(_gpu_detail(fact, v, ctx.host.facts) for v in value) or 'none'}"
        if "is" in cond:
            return bool(value) == cond["is"], text
        return any(str(v) in {str(w) for w in cond["in"]} for v in value), text
    if "is" in cond:
        text = f"host {fact} {str(value).lower()}"
        bridges = ctx.host.facts.get("acs_redirect_bridges") if fact == "acs_redirect" else None
        if value and bridges:
            text += f" (bridges {', '.join(b.split()[0] for b in bridges)})"
        probe = ctx.host.facts.get(f"{fact}_from")  # a fact the release venv's probe gave, and what it saw
        if probe:
            text += f" ({probe})"
        return bool(value) == cond["is"], text
    return str(value) in {str(v) for v in cond["in"]}, f"host {fact} {value}"


def _gpu_detail(fact: str, gpu: str, facts: Mapping[str, Any]) -> str:
    """A GPU a gpus_* fact names, with the figures it was judged by where the file has them."""
    try:
        if fact == "gpus_power_below_default":
            return f"{gpu} {facts['power_limit_w'][gpu]:g} W (default {facts['power_default_limit_w'][gpu]:g} W)"
        if fact == "gpus_bar1_below_memory":
            return f"{gpu} BAR1 {facts['bar1_total_mib'][gpu]} MiB"
    except (KeyError, TypeError, ValueError):
        pass
    return gpu


def memory_check(entry: Entry, ctx: Context) -> Result:
    """Weights per GPU (index total_size, plus the draft's, / tp x pp) against the static memory
    (--mem-fraction-static as SGLang resolved it where its ServerArgs ran, else as typed, else the
    largest fraction SGLang picks by itself, x the smallest GPU).

    Assumes the weights shard evenly over the GPUs (replicated layers make a GPU's share larger)
    and counts nothing else inside the fraction: what is left of it is the KV cache, which must
    be more than nothing. Activations and CUDA graphs live outside the fraction."""
    missing = []
    if ctx.model is None:
        missing.append("no --model directory given: the weights' size is unknown")
    elif ctx.model.total_size is None:
        missing.append(f"weights' size unknown ({ctx.model.total_size_source})")
    if ctx.host is None:
        missing.append("no --host-facts given: GPU memory unknown")
    elif ctx.host.memory_mib is None:
        missing.append(f"no GPUs in {ctx.host.source}: GPU memory unknown")
    if missing:
        return None, "; ".join(missing)
    if ctx.model is None or ctx.host is None or ctx.model.total_size is None:  # ruled out above: the facts named as missing
        return None, "the model size or the host's GPU memory is unknown"
    parallel = 1
    shares = []
    for name in ("tp-size", "pp-size"):
        given, raw = ctx.flag(name)
        raw = raw if given else 1
        try:
            parallel *= int(raw)
        except (TypeError, ValueError):
            return None, f"--{name} {raw!r} is not an integer"
        shares.append(f"--{name} {raw}" + (ctx.flag_note(name) if given else " (default)"))
    draft_bytes = ctx.draft.total_size if ctx.draft is not None and ctx.draft.total_size else 0
    weights = (ctx.model.total_size + draft_bytes) / parallel
    gpu_mib = ctx.host.memory_mib
    given, raw = ctx.flag("mem-fraction-static")
    if given:
        try:
            fraction = float(raw)
        except (TypeError, ValueError):
            return None, f"--mem-fraction-static {raw!r} is not a number"
        # Where SGLang's ServerArgs ran, this is its own value (chosen for this model and device when
        # the flag is not given), not the approximation below.
        fraction_text = f"--mem-fraction-static {_shown(fraction)}{ctx.flag_note('mem-fraction-static')}"
    else:
        reserve = entry.params["auto_reserved_mib"]
        speculative = ctx.flag("speculative-algorithm")[1] not in (None, True, "NGRAM")
        reserve += entry.params["auto_reserved_speculative_mib"] if speculative else 0
        fraction = (gpu_mib - reserve) / gpu_mib
        fraction_text = (
            f"--mem-fraction-static not given: at most ({gpu_mib} MiB - {reserve} MiB reserved{' incl. the draft' if speculative else ''})"
            f" / {gpu_mib} MiB = {fraction:.3f}, the largest fraction SGLang picks itself ({entry.params['source']})"
        )
    budget = fraction * gpu_mib * MIB
    draft_text = f" + draft {draft_bytes:,} B ({ctx.draft.total_size_source})" if draft_bytes and ctx.draft else ""
    if ctx.draft is not None and not draft_bytes:
        draft_text = f" (draft not counted: {ctx.draft.total_size_source})"
    text = (
        f"weights per GPU = {ctx.model.total_size:,} B ({ctx.model.total_size_source}){draft_text} / ({' x '.join(shares)})"
        f" = {weights / GIB:.1f} GiB; static memory = {fraction_text} x {gpu_mib} MiB (smallest GPU in {ctx.host.source})"
        f" = {budget / GIB:.1f} GiB; "
    )
    if weights >= budget:
        return True, text + f"short by {(weights - budget) / GIB:.1f} GiB, nothing left for the KV cache"
    return False, text + f"{(budget - weights) / GIB:.1f} GiB left for the KV cache"


def memory_reserve_check(entry: Entry, ctx: Context) -> Result:
    """An explicit --mem-fraction-static against the fraction SGLang picks itself for the same flags
    and device: above it, less stays outside the static pool than SGLang's own heuristic keeps for
    activations (chunked prefill), CUDA graphs (cuda-graph-max-bs) and the draft."""
    name = "mem-fraction-static"
    if ctx.aliases.get(name, name) not in ctx.flags:
        return False, "--mem-fraction-static not given: SGLang sizes its own reserve for activations and CUDA graphs"
    if ctx.sglang_auto_fraction is None:
        return None, ctx.sglang_auto_unknown or (
            "SGLang's own reserve for these flags is known only where its ServerArgs ran (sglang-flags with the release's "
            "runtime, the deploy's check in the release's venv)"
        )
    _, raw = ctx.flag(name)
    try:
        fraction = float(raw)
    except (TypeError, ValueError):
        return None, f"--mem-fraction-static {raw!r} is not a number"
    auto = float(ctx.sglang_auto_fraction)
    gpu_mib = ctx.host.memory_mib if ctx.host is not None else None
    sizes = ""
    if gpu_mib:
        sizes = f" ({(1 - fraction) * gpu_mib / 1024:.1f} GiB against {(1 - auto) * gpu_mib / 1024:.1f} GiB of {gpu_mib} MiB)"
    text = (
        f"--mem-fraction-static {_shown(fraction)} leaves {1 - fraction:.3f} of each GPU outside the static pool; SGLang {ctx.version} "
        f"picks {_shown(auto)} itself for these flags, keeping {1 - auto:.3f} for activations, CUDA graphs and the draft{sizes}"
    )
    return fraction > auto + 1e-9, text


def draft_fits_check(ctx: Context) -> Result:
    """True when the draft does not fit the target: the hidden states it takes in (target_hidden_size,
    else hidden_size) against the target's hidden size, its vocabulary against the target's, and its
    auxiliary layer ids against the target's layer count (SGLang's llama_eagle3 fc takes target hidden
    x aux layers; a draft made for another target fails at the first forward, in CUDA-graph capture)."""
    if ctx.model is None or ctx.draft is None:
        missing = " and ".join(n for n, f in (("--model", ctx.model), ("--draft-model", ctx.draft)) if f is None)
        return None, f"no {missing} directory given: whether the draft fits the target is unknown"
    target, draft = ctx.model, ctx.draft
    pairs = (
        ("hidden size", "draft's target_hidden_size/hidden_size", draft.input_hidden_size, "target's hidden_size", target.hidden_size),
        ("vocabulary", "draft's vocab_size", draft.vocab_size, "target's vocab_size", target.vocab_size),
    )
    wrong, unknown, right = [], [], []
    for what, dname, dvalue, tname, tvalue in pairs:
        if dvalue is None or tvalue is None:
            unknown.append(f"{what}: {dname} {dvalue}, {tname} {tvalue}")
        elif dvalue != tvalue:
            wrong.append(f"{what}: {dname} {dvalue} ({draft.path}) != {tname} {tvalue} ({target.path})")
        else:
            right.append(f"{what} {dvalue}")
    if draft.aux_layer_ids is not None and target.num_hidden_layers is not None:
        beyond = [i for i in draft.aux_layer_ids if i >= target.num_hidden_layers]
        if beyond:
            wrong.append(
                f"auxiliary layers: the draft's eagle_aux_hidden_state_layer_ids {draft.aux_layer_ids} name layer(s) {beyond} "
                f"the target ({target.num_hidden_layers} layers, {target.path}) does not have"
            )
        else:
            right.append(f"auxiliary layers {draft.aux_layer_ids} of {target.num_hidden_layers}")
    return invariants.outcome(wrong, unknown, f"the draft fits the target ({', '.join(right)})")


def parallel_gpus_check(ctx: Context) -> Result:
    """True when SGLang would place a rank on a GPU the host does not have (SGLang's own placement, launch/placement.py);
    model_runner then calls set_device on it, which fails with "invalid device ordinal" after the processes start (or
    NCCL waits for a rank that never joins)."""
    sizes: dict[str, int] = {}
    shown = []
    for name, default in (("tp-size", 1), ("pp-size", 1), ("dp-size", 1), ("nnodes", 1), ("base-gpu-id", 0), ("gpu-id-step", 1)):
        given, raw = ctx.flag(name)
        raw = raw if given or raw not in (None, False) else default
        try:
            sizes[name] = int(raw)
        except (TypeError, ValueError):
            return None, f"--{name} {raw!r} is not an integer"
        if given:
            shown.append(f"--{name} {sizes[name]}{ctx.flag_note(name)}")
    if ctx.host is None:
        return None, "no --host-facts given: the host's GPU count is unknown"
    if not ctx.host.gpus:
        return None, f"no GPUs in {ctx.host.source}: the host's GPU count is unknown"
    used = placement.gpus(
        tp=sizes["tp-size"],
        pp=sizes["pp-size"],
        dp=sizes["dp-size"],
        nnodes=sizes["nnodes"],
        base=sizes["base-gpu-id"],
        step=sizes["gpu-id-step"],
        dp_attention=bool(ctx.flag("enable-dp-attention")[0]),
    )
    highest = used[-1]
    count = len(ctx.host.gpus)
    flags = ", ".join(shown) or "SGLang's defaults (one GPU)"
    if highest >= count:
        return True, f"{flags}: SGLang places a rank on GPU {highest}, the host facts list {count} GPUs ({ctx.host.source})"
    return False, f"{flags}: the highest GPU SGLang uses is {highest}, of {count} ({ctx.host.source})"


def _condition(entry: Entry, cond: Mapping[str, Any], ctx: Context) -> Result:
    if "flags" in cond:
        return _flag_condition(cond, ctx)
    if "env" in cond:
        return _env_condition(cond, ctx)
    if "capability_major" in cond:
        if ctx.capability is None:
            return None, "GPU compute capability unknown"
        major = int(ctx.capability.split(".")[0])
        return major in cond["capability_major"], f"compute capability {ctx.capability}"
    if "model" in cond:
        return _model_condition("model", cond, ctx)
    if "draft" in cond:
        return _model_condition("draft", cond, ctx)
    if "host" in cond:
        return _host_condition(cond, ctx)
    if cond.get("check") == "memory_reserve":
        return memory_reserve_check(entry, ctx)
    if cond.get("check") == "draft_fits":
        return draft_fits_check(ctx)
    if cond.get("check") == "parallel_gpus":
        return parallel_gpus_check(ctx)
    if cond.get("check") in INVARIANT_CHECKS:
        return INVARIANT_CHECKS[cond["check"]](ctx)
    return memory_check(entry, ctx)


def evaluate_entry(entry: Entry, ctx: Context) -> Verdict:
    def verdict(name: str, evidence: list[str]) -> Verdict:
        return Verdict(
            entry.id,
            entry.title,
            name,
            entry.severity,
            entry.evidence,
            entry.range_text,
            evidence,
            entry.message,
            entry.fix,
            entry.refs,
            entry.unconfirmed,
            entry.phase,
        )

    in_range = entry.in_range(ctx.version) if ctx.version else None
    if in_range is None:
        return verdict("unknown", [f"SGLang version unknown; the entry covers {entry.range_text}"])
    if not in_range:
        return verdict("n/a", [f"SGLang {ctx.version} is outside {entry.range_text}"])
    results = [_condition(entry, cond, ctx) for cond in entry.trigger]
    # Which flag values the conditions read: SGLang's resolved ones or the typed ones.
    source = [ctx.flag_source] if any("flags" in cond or "check" in cond for cond in entry.trigger) else []
    failed = [text for value, text in results if value is False]
    if failed:
        return verdict("ok", [*source, *failed])
    absent = [text for value, text in results if value is None]
    if absent:
        return verdict("unknown", [*source, *absent])
    evidence = [f"SGLang {ctx.version} (in {entry.range_text})", *source, *(text for _, text in results)]
    waived = [p for p in entry.waived_by_patches if p in ctx.planned_patches]
    if waived:
        return verdict("ok", [*evidence, f"waived: the release carries patch {', '.join(waived)}"])
    if entry.acknowledged_by and entry.acknowledged_by in ctx.acknowledged:
        return verdict("warning", [*evidence, f"acknowledged (--{entry.acknowledged_by}): a warning, not a refusal"])
    return verdict("refused" if entry.severity == "refuse" else "warning", evidence)


def evaluate(entries: Iterable[Entry], ctx: Context) -> list[Verdict]:
    """The gate's verdict on every entry it can decide (not the run-time-only ones: the canary names those)."""
    return [evaluate_entry(entry, ctx) for entry in entries if not entry.run_time_only]


# --- log signatures: the same entries, named at run time from a server's log ------------------

# The phases a failed run ends in, as the start canary and the health gate name them (serve/health.py PHASES
# and serve/canary.py PHASES): a signature listing phases counts only there.
RUN_PHASES = ("port closed", "no answer", "503", "healthy", "exited", "requests", "port in use", "not started")
# Lines that name an error SGLang caught and went on from (its model registry skipping a module).
NOT_A_CAUSE = re.compile(r"Ignore import error when loading")


def log_signatures(entries: Iterable[Entry], version: Optional[str]) -> list[dict[str, Any]]:
    """The log signatures of the entries that apply to SGLang `version` (all when it is unknown), as the start canary
    takes them: id, title, patterns, phases, message, fix, refs."""
    out = []
    for entry in entries:
        if not entry.logs or (version and entry.in_range(version) is False):
            continue
        out.append(
            {
                "id": entry.id,
                "title": entry.title,
                "patterns": list(entry.logs["patterns"]),
                "phases": list(entry.logs.get("phases", [])),
                "message": entry.message,
                "fix": entry.fix,
                "refs": list(entry.refs),
            }
        )
    return out


def match_log(lines: Sequence[str], phase: str, signatures: Iterable[Mapping[str, Any]]) -> Optional[dict[str, Any]]:
    """The catalogue entry whose signature a line of the log matches first (newest line first) in this phase:
    id, title, cause (the entry's message), fix, refs and the line; None when none does."""
    signatures = list(signatures)
    for line in reversed(lines):
        if NOT_A_CAUSE.search(line):
            continue
        for sig in signatures:
            if sig.get("phases") and phase not in sig["phases"]:
                continue
            if any(re.search(pattern, line) for pattern in sig["patterns"]):
                return {
                    "name": sig["id"],
                    "title": sig.get("title", ""),
                    "cause": sig["message"],
                    "fix": sig["fix"],
                    "refs": list(sig.get("refs", [])),
                    "line": line.strip()[:300],
                }
    return None


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    """KEY=VALUE strings -> mapping; ValueError naming the bad one."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"--env takes KEY=VALUE with KEY a variable name, found {pair!r}")
        env[key] = value
    return env
