"""The fabric check as the deploy runs it (module sglang_fabric_check): how many GPUs the launch plan uses, the
all-reduce across them with the plan's NCCL environment (host/fabric.py, bounded in time), the figures judged against
thresholds kept as data with their source, optional candidate NCCL environments measured and the fastest kept, the
host facts that explain a hang, and the record the release keeps (reused while what decided it holds).

Standard library only, no Ansible import; the worker script is host/fabric.py itself, written beside the record.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import ToolkitError
from ..launch import placement
from . import fabric

# The host facts a fabric report carries (preflight's host-facts file), so two reports say why they differ.
SNAPSHOT_FACTS = (
    "uvm_disable_hmm",
    "iommu_mode",
    "acs_redirect",
    "pcie_aspm_policy",
    "pcie_port_pm",
    "p2p_supported",
    "pcie_only",
    "nvidia_registry_dwords",
    "cpu_sockets",
    "gpu_numa_nodes",
    "persistence_mode",
    "power_limit_w",
    "bar1_total_mib",
)

POLICIES = ("refuse", "warn", "off")


class FabricCheckError(ToolkitError):
    """The check was asked wrongly (a flag that is not a number, a threshold without its source), or it refused."""


@dataclass
class CheckRequest:
    """What one fabric check is asked (the module's options, resolved)."""

    python: str
    argv: Sequence[str]
    env: Mapping[str, str]
    record: str
    env_file: str
    host_facts: Optional[str] = None
    pythonpath: Sequence[str] = ()
    backend: str = "nccl"
    ranks: int = 0
    timeout: float = 120.0
    sizes: Sequence[int] = fabric.DEFAULT_SIZES
    iters: int = 20
    warmup: int = 5
    thresholds: Sequence[Mapping[str, Any]] = ()
    candidates: Sequence[Mapping[str, Any]] = ()
    tune: bool = False
    policy: str = "refuse"
    serving: bool = False
    boot_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def plan_gpus(argv: Sequence[str]) -> int:
    """GPUs a server started with `argv` uses on this host, as SGLang places its ranks (launch/placement.py): tp x pp,
    times dp unless --enable-dp-attention (which runs the dp groups inside the tp ranks). SGLang's defaults are 1 each."""
    try:
        return len(placement.gpus(**placement.sizes_of(argv)))
    except placement.PlacementError as exc:
        raise FabricCheckError(f"launch plan: {exc}") from None


def thresholds_for(thresholds: Sequence[Mapping[str, Any]], gpus: int) -> Optional[dict[str, Any]]:
    """The thresholds that apply to `gpus` ranks (each entry names its `gpus` and its `source`); None if none."""
    for entry in thresholds:
        if not entry.get("source"):
            raise FabricCheckError(f"fabric thresholds: every entry names its source, found {dict(entry)}")
        if int(entry.get("gpus", 0)) == gpus:
            return dict(entry)
    return None


def read_host_facts(path: Optional[str]) -> tuple[dict[str, Any], str]:
    """The preflight's host-facts file as a dict (its `__payload__` wrapper unwrapped), and why it is empty if so."""
    if not path:
        return {}, "no host facts file given"
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {}, f"{path} does not exist (run preflight first)"
    except (OSError, json.JSONDecodeError) as exc:
        return {}, f"{path}: {exc}"
    if isinstance(data, dict) and isinstance(data.get("__payload__"), dict):
        data = data["__payload__"]
    return (data, "") if isinstance(data, dict) else ({}, f"{path}: not a JSON object")


def snapshot(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The host facts a fabric report carries; a fact preflight could not read is `unknown` with its reason."""
    unknown = facts.get("facts_unknown") or {}
    shown: dict[str, Any] = {}
    for name in SNAPSHOT_FACTS:
        value = facts.get(name)
        shown[name] = value if value is not None else f"unknown: {unknown.get(name, 'not in the host facts')}"
    shown["gpus"] = len(facts.get("gpus") or [])
    return shown


def explain(facts: Mapping[str, Any]) -> list[str]:
    """The host facts the operators of this hardware found to hang or lock up NCCL, where they hold here."""
    reasons = []
    if facts.get("uvm_disable_hmm") is False:
        reasons.append("nvidia_uvm runs with HMM on (uvm_disable_hmm=0): set host_tuning_uvm_disable_hmm")
    if facts.get("iommu_mode") == "translated":
        reasons.append("the IOMMU translates DMA (iommu_mode translated): set host_tuning_iommu: off")
    if facts.get("acs_redirect") is True:
        reasons.append("ACS redirect is on for bridges on the GPUs' path (acs_redirect): peer traffic goes up to the root")
    if facts.get("pcie_aspm_policy") not in (None, "off", "performance"):
        reasons.append(f"PCIe ASPM policy {facts.get('pcie_aspm_policy')}: set host_tuning_pcie_aspm_off")
    if facts.get("p2p_supported") is False:
        reasons.append("the driver reports no peer-to-peer access between the GPUs (p2p_supported false)")
    return reasons


def request_key(req: CheckRequest, gpus: int, facts: Mapping[str, Any]) -> str:
    """What decides a check's outcome: the release's Python, the ranks, the environment, the sizes, the thresholds
    and candidates, the host facts of the fabric, and the boot (a reboot can change the fabric)."""
    decided = {
        "python": req.python,
        "pythonpath": list(req.pythonpath),
        "backend": req.backend,
        "gpus": gpus,
        "env": fabric.nccl_env(req.env),
        "sizes": list(req.sizes),
        "iters": req.iters,
        "thresholds": [dict(t) for t in req.thresholds],
        "candidates": [dict(c) for c in req.candidates] if req.tune else [],
        "facts": snapshot(facts),
        "boot_id": req.boot_id,
    }
    return hashlib.sha256(json.dumps(decided, sort_keys=True, default=str).encode()).hexdigest()


def worker_script(directory: str) -> str:
    """host/fabric.py written into `directory` (the worker each rank runs with the release's Python); its path."""
    path = os.path.join(directory, "fabric_worker.py")
    source = inspect.getsource(fabric)
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == source:
                return path
    except FileNotFoundError:
        pass
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(source)
    return path


def faster(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether result `a` beats `b`: higher bus bandwidth, then lower small-message latency."""
    key_a = (a.get("large_busbw_gbs") or 0.0, -(a.get("small_latency_us") or float("inf")))
    key_b = (b.get("large_busbw_gbs") or 0.0, -(b.get("small_latency_us") or float("inf")))
    return key_a > key_b


Runner = Callable[..., fabric.FabricResult]


def run(req: CheckRequest, check_mode: bool = False, runner: Optional[Runner] = None) -> dict[str, Any]:
    """Check the fabric as `req` asks; the record (also written to req.record unless in check mode, reused while its
    key holds). Raises FabricCheckError for a hang or a failure when the policy refuses."""
    if req.policy not in POLICIES:
        raise FabricCheckError(f"policy: expected one of {', '.join(POLICIES)}, found {req.policy!r}")
    facts, facts_missing = read_host_facts(req.host_facts)
    planned = plan_gpus(req.argv)
    gpus = req.ranks or planned
    record: dict[str, Any] = {
        "status": "unchecked",
        "planned_gpus": planned,
        "world_size": gpus,
        "backend": req.backend,
        "env": fabric.nccl_env(req.env),
        "host": snapshot(facts),
        "host_facts_missing": facts_missing,
        "serving": req.serving,
        "shortfalls": [],
        "explained_by": [],
        "candidates": [],
        "chosen": {},
        "reused": False,
        "ran": False,
        **req.extra,
    }
    if req.policy == "off":
        return {**record, "message": "fabric check off (sglang_fabric_policy: off)"}
    if req.backend == "nccl" and facts and not facts.get("gpus"):
        return {**record, "message": "no NVIDIA GPU in the host facts: nothing to all-reduce across"}
    listed = len(facts.get("gpus") or [])
    if req.backend == "nccl" and listed and gpus > listed:
        record.update(status="failed", message=f"the plan uses {gpus} GPUs (tp x pp x dp) but the host facts list {listed}: not started")
        if not check_mode:
            _write(req, record)
        if req.policy == "refuse":
            raise FabricCheckError(f"fabric check refused the deploy before the canary and the load: {record['message']}", fabric=record)
        return record
    key = request_key(req, gpus, facts)
    record["key"] = key
    previous = _read_record(req.record)
    if previous.get("key") == key and previous.get("status") in ("ok", "short"):
        return {**previous, "reused": True, "ran": False}
    if check_mode:
        return {**record, "status": "would-check", "message": f"would all-reduce across {gpus} {_what(req)} (check mode)"}
    run_one = runner or fabric.run_check
    script = worker_script(os.path.dirname(req.record))
    env = dict(req.env)
    if req.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(req.pythonpath)
    result = run_one(req.python, gpus, req.timeout, env, req.sizes, req.iters, req.warmup, req.backend, (), script).as_dict()
    record.update({k: result[k] for k in ("status", "seconds", "sizes", "small_latency_us", "large_busbw_gbs", "message", "errors")})
    record.update(ran=True, answered=result["answered"], missing=result["missing"])
    limits = thresholds_for(req.thresholds, gpus)
    record["thresholds"] = limits or {}
    if result["status"] == "ok":
        record["shortfalls"] = fabric.judge(fabric.FabricResult(**{**result, "sizes": []}), limits or {})
        if req.tune and req.candidates and gpus > 1:
            _tune(req, gpus, env, record, run_one, script)
        if record["shortfalls"]:
            record["status"] = "short"
    else:
        record["explained_by"] = explain(facts)
        if req.serving and "out of memory" in json.dumps(result.get("errors", {})).lower():
            record["status"] = "unchecked"
            record["message"] = f"not measured: a current release holds the GPUs' memory ({result['message']})"
    _write(req, record)
    if record["status"] in ("timeout", "failed") and req.policy == "refuse":
        because = "; ".join(record["explained_by"]) or "no host fact explains it (compare the report's host facts with a good host's)"
        raise FabricCheckError(
            f"fabric check refused the deploy before the canary and the load: {record['message']}. The host facts that "
            f"explain it: {because}. Nothing was switched; the record is {req.record}",
            fabric=record,
        )
    return record


def _what(req: CheckRequest) -> str:
    return "GPUs" if req.backend == "nccl" else f"{req.backend} ranks"


def _tune(req: CheckRequest, gpus: int, env: Mapping[str, str], record: dict[str, Any], run_one: Runner, script: str) -> None:
    """Measure each candidate environment on top of the plan's; keep the fastest if it beats the plan's own."""
    best: Mapping[str, Any] = {"name": "plan", "large_busbw_gbs": record["large_busbw_gbs"], "small_latency_us": record["small_latency_us"]}
    for candidate in req.candidates:
        name, extra = str(candidate.get("name", "")), {str(k): str(v) for k, v in (candidate.get("env") or {}).items()}
        if not name or not extra:
            raise FabricCheckError(f"fabric candidates: each names itself and sets an env, found {dict(candidate)}")
        result = run_one(req.python, gpus, req.timeout, {**env, **extra}, req.sizes, req.iters, req.warmup, req.backend, (), script)
        entry = {
            "name": name,
            "env": extra,
            "status": result.status,
            "large_busbw_gbs": result.large_busbw_gbs,
            "small_latency_us": result.small_latency_us,
            "message": result.message,
        }
        record["candidates"].append(entry)
        if result.status == "ok" and faster(entry, best):
            best = entry
    if best["name"] != "plan":
        record["chosen"] = dict(best)
        record["shortfalls"] = fabric.judge(
            fabric.FabricResult(
                "ok", gpus, req.backend, 0.0, small_latency_us=best["small_latency_us"], large_busbw_gbs=best["large_busbw_gbs"]
            ),
            record["thresholds"],
        )


def _read_record(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def env_file_text(record: Mapping[str, Any]) -> str:
    """The release's fabric.env: the chosen candidate's variables (systemd EnvironmentFile syntax), or a comment."""
    chosen = record.get("chosen") or {}
    lines = ["# Written by the toolkit's fabric check (sglang_fabric_tune): the fastest NCCL environment it measured."]
    if not chosen:
        lines.append("# None beat the launch plan's own environment: nothing is set here.")
    for key, value in sorted((chosen.get("env") or {}).items()):
        escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{key}="{escaped}"')
    return "\n".join(lines) + "\n"


def _write(req: CheckRequest, record: Mapping[str, Any]) -> None:
    with open(req.record, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
    if req.tune:
        with open(req.env_file, "w", encoding="utf-8") as handle:
            handle.write(env_file_text(record))
    elif os.path.exists(req.env_file):
        os.remove(req.env_file)  # tuning switched off: the release runs the plan's own environment again
