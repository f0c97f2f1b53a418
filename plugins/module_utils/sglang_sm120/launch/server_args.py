"""SGLang's own validation of a launch, on a faked device: ``ServerArgs`` built as the launcher builds it.

Run UNDER the Python of an environment where the SGLang release imports (the runtime environment
``make sglang-runtime`` builds, or the release's own venv on the host), with the release's tree first
on the path (``--sglang DIR``)::

    python plugins/module_utils/sglang_sm120/launch/server_args.py --sglang .cache/sglang/0.5.9 \\
        --capability 12.0 --gpu-memory-mib 97887 --gpu-count 8 -- --model-path DIR --tp-size 8 ...
    python plugins/module_utils/sglang_sm120/launch/server_args.py --batch request.json     # several flag sets, one import

What it does, for each flag set, is what that release's launcher does before it starts a process:

- 0.5.9 (``__post_init__`` resolution): ``sglang.srt.server_args.prepare_server_args(argv)``, the very
  function ``python -m sglang.launch_server`` calls (SGLang's own argparse, its ``--config`` merge,
  then ``ServerArgs(...)`` whose ``__post_init__`` resolves and validates), then
  ``check_server_args()`` (0.5.9's engine calls it before starting any process);
- 0.5.2x (``ServerArgs.resolve_once``; 0.5.23): ``prepare_server_args(argv)`` (argparse, ``--config``
  merge, the raw record: its ``__post_init__`` does nothing), then ``server_args.resolve_once()``
  (``launch_server.run_server`` and ``Engine._launch_subprocesses`` call it: the resolution pipeline
  of ``sglang.srt.arg_groups``, which declares each decision beside the record and leaves the input
  as given), then ``check_server_args()`` (the engine's next step). The resolved values are read as
  SGLang reads them, ``sglang.srt.arg_groups.overrides.resolution_result`` (the last declaration,
  else the input, else the field's fallback), and each change names the resolution step whose
  declaration is in effect (``source``). Deprecated switches (``--enable-dp-attention``,
  ``--disable-cuda-graph``) go through SGLang's own deprecation actions; their warnings are in ``log``.

Nothing else of SGLang runs: no server, no scheduler, no weights. The model directory needs only its config files (and, with
``--trust-remote-code`` and an ``auto_map``, the config's Python module, as on the host).

The device is faked where SGLang reads it, in torch (``torch.cuda.is_available``, ``device_count``,
``get_device_capability``, ``get_device_name``, ``get_device_properties``, ``mem_get_info``,
``current_device``): SGLang's own ``is_cuda``, ``is_sm90_supported``, ``is_sm100_supported``,
``is_sm120_supported``, ``is_blackwell_supported``, ``is_hopper_with_cuda_12_3``, ``get_device_sm``,
``get_device`` all derive from these and run unchanged (their ``lru_cache`` is cleared per check). The
one device fact SGLang takes from elsewhere, the memory (``get_nvgpu_memory_capacity`` runs
``nvidia-smi``), is patched in ``sglang.srt.utils.common`` and in every SGLang module that imported it
by name (0.5.2x's resolution hooks, imported with SGLang for that reason). FlashInfer's presence is the environment's
own unless ``flashinfer_version`` is given (the runtime environment of the tests has no FlashInfer;
the release's venv on the host has the version SGLang pins): then ``is_flashinfer_available`` and
``check_pkg_version_at_least("flashinfer-python", ...)`` answer from it.

SGLang is imported on the real (CPU) torch before the fakes go in: some of its modules register
kernels at import when they see CUDA, which a CPU environment cannot do. ``ServerArgs`` reads the
device only when it is built, so it sees the faked one.

Output (JSON on stdout; SGLang's own logging goes to stderr): per flag set ``verdict`` ``ok`` or
``refused``; on refusal SGLang's exception (type, message, the file:line and function that raised it,
the innermost SGLang frame, the stage: ``parse``, ``post_init`` (0.5.9), ``resolve`` (0.5.2x) or
``check_server_args``); on success
``changes``: every field whose value SGLang changed, named by its flag (``rewritten``: the flag was
given and SGLang uses another value; ``chosen``: the flag was not given and SGLang chose a value other
than the flag's default); ``warnings``: one sentence per rewrite and per choice among the fields the
toolkit's rules read (``WATCHED_FIELDS``); ``resolved``: the values of those fields; ``values``: every
``ServerArgs`` field as SGLang resolved it (the report's ``field_flags`` names each field's flag);
``abbreviations``: options typed as a prefix of one of SGLang's (its argparse expands them; the
toolkit refuses them); ``log``: what SGLang logged while it resolved; ``env_set_by_sglang``: the
variables it set in its environment.
Exit status 0 all accepted, 1 one refused, 2 bad request (nothing imported when the request itself is
wrong), 3 SGLang does not import in this Python (nothing checked).

The controller side (no torch, no SGLang) calls :func:`run_checks`, which runs this file under the
runtime's Python and returns the parsed report.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import copy
import dataclasses
import functools
import hashlib
import importlib
import inspect
import io
import json
import linecache
import logging
import os
import pkgutil
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

# The fields the toolkit's rules read (plugins/module_utils/sglang_sm120/launch/flag_check.py), reported for every accepted check.
WATCHED_FIELDS = (
    "attention_backend",
    "decode_attention_backend",
    "prefill_attention_backend",
    "speculative_algorithm",
    "speculative_eagle_topk",
    "speculative_num_steps",
    "speculative_num_draft_tokens",
    "speculative_draft_model_path",
    "kv_cache_dtype",
    "moe_runner_backend",
    "mem_fraction_static",
    "cuda_graph_max_bs",
    "enable_dp_attention",
    "attn_dp_size",  # 0.5.2x: the attention-DP width (--enable-dp-attention resolves into it)
    "dp_size",
    "tp_size",
    "page_size",
    "quantization",
    "device",
)
# Values SGLang's choices offer as a word for "none", which its ServerArgs turns into None: that is
# what they mean, not a rewrite of the operator's value.
MEANS_NONE = {"speculative_draft_model_quantization": "unquant"}
DEFAULT_GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
FLASHINFER_PACKAGES = ("flashinfer-python", "flashinfer_python")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# 0.5.2x: modules its resolution imports lazily, imported with SGLang (on the real torch) so that
# the faked device reaches every name they bind and a check does not pay for their import.
RESOLUTION_MODULES = (
    "sglang.srt.arg_groups",
    "sglang.srt.arg_groups.model_overrides",
    "sglang.srt.utils.server_args_config_parser",
    "sglang.srt.sampling.watermarking.core",
    "sglang.srt.speculative.spec_info",
    "sglang.srt.configs.model_config",
)


# Temporary directories a check made, removed before the process ends (see the end of the file).
_SCRATCH: list[str] = []


class CheckUsageError(Exception):
    """A request that cannot be checked (bad device facts, a missing model directory, ...)."""


class CheckRunError(Exception):
    """The check could not run in the given Python (SGLang does not import, the output is not JSON)."""


@dataclasses.dataclass(frozen=True)
class Device:
    """The device facts SGLang reads, as the host would report them."""

    capability: tuple[int, int]
    memory_mib: float
    count: int
    name: str = DEFAULT_GPU_NAME
    cuda_version: Optional[str] = None  # torch.version.cuda as SGLang sees it; None: the runtime torch's own
    flashinfer_version: Optional[str] = None  # None: whether FlashInfer imports in this environment

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Device:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise CheckUsageError(f"device: unknown keys {unknown}, expected some of {sorted(known)}")
        missing = [k for k in ("capability", "memory_mib", "count") if k not in data]
        if missing:
            raise CheckUsageError(f"device: missing {missing} (found keys {sorted(data)})")
        return cls(
            capability=parse_capability(data["capability"]),
            memory_mib=_positive(data["memory_mib"], "device memory_mib", float),
            count=int(_positive(data["count"], "device count", int)),
            name=str(data.get("name") or DEFAULT_GPU_NAME),
            cuda_version=None if data.get("cuda_version") is None else str(data["cuda_version"]),
            flashinfer_version=None if data.get("flashinfer_version") is None else str(data["flashinfer_version"]),
        )

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["capability"] = f"{self.capability[0]}.{self.capability[1]}"
        return out


def parse_capability(value: Any) -> tuple[int, int]:
    """``12.0`` / ``"12.0"`` / ``[12, 0]`` -> (12, 0)."""
    pair = isinstance(value, (list, tuple)) and len(value) == 2
    parts = [str(v) for v in value] if pair else str(value).strip().split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise CheckUsageError(f"device capability: expected MAJOR.MINOR such as 12.0, found {value!r}")
    return int(parts[0]), int(parts[1])


def _positive(value: Any, what: str, kind: type) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise CheckUsageError(f"{what}: expected a positive number, found {value!r}") from None
    if number <= 0:
        raise CheckUsageError(f"{what}: expected a positive number, found {value!r}")
    return number


@dataclasses.dataclass
class CheckRequest:
    argv: list[str]
    device: Device
    model: Optional[str] = None  # replaces the value of --model-path (the directory of config files)
    draft_model: Optional[str] = None  # replaces the value of --speculative-draft-model-path
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    label: Optional[str] = None


# --------------------------------------------------------------------------------------------------
# Controller side: run the check in the runtime's Python.


def run_checks(
    python: str | Path,
    sglang: Optional[str | Path],
    device: Mapping[str, Any],
    checks: Sequence[Mapping[str, Any]],
    timeout: float = 300,
    warm: float = 0,
    warm_dir: Optional[Path] = None,
) -> dict[str, Any]:
    """Run this file under ``python`` with the SGLang tree ``sglang`` (the directory holding ``sglang/``;
    None: the SGLang installed in that Python, as in a release's venv) on the flag sets ``checks`` (each
    ``{"argv": [...], "model": DIR, "draft_model": DIR, "env": {...}, "label": str}``) and return the
    parsed report (``{"results": [...], ...}``).

    ``warm`` > 0 (seconds) with ``warm_dir``: ask the warm checker of that Python and tree (a process
    that keeps SGLang imported, answering on a unix socket in ``warm_dir`` until ``warm`` seconds pass
    without a request), starting it when none answers; its report has ``warm`` (pid, when SGLang was
    imported, how many checks it answered)."""
    request = {"sglang": str(sglang) if sglang else None, "device": dict(device), "checks": [dict(c) for c in checks]}
    if warm > 0 and warm_dir is not None:
        return _run_warm(python, sglang, request, timeout, warm, Path(warm_dir))
    with tempfile.TemporaryDirectory(prefix="server-args-check-") as scratch:
        path = Path(scratch) / "request.json"
        path.write_text(json.dumps(request), encoding="utf-8")
        proc = subprocess.run(
            [str(python), str(_script(Path(scratch))), "--batch", str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stderr or "").strip().splitlines()[-15:]
        raise CheckRunError(
            f"{python} {Path(__file__).name} exited {proc.returncode} without a JSON report on stdout; "
            f"expected one. Its stderr ends:\n" + "\n".join(tail)
        ) from None
    if "error" in report and "results" not in report:
        raise CheckRunError(f"{python}: {report['error']}")
    return report


def _script(scratch: Path) -> Path:
    """This file as a script ``python`` can run: itself where it is a file, else (an Ansible module's
    module_utils, imported from a zip) its source written into ``scratch``."""
    here = Path(__file__)
    if here.is_file():
        return here.resolve()
    copy = scratch / "server_args_check.py"
    copy.write_text(inspect.getsource(sys.modules[__name__]), encoding="utf-8")
    return copy


def warm_socket(python: str | Path, sglang: Optional[str | Path], warm_dir: Path) -> Path:
    """Where the warm checker of this Python (its venv, resolved) and SGLang tree answers: one per
    pair and per source of this file (a changed checker starts a new one)."""
    venv = Path(python).absolute().parent.parent.resolve()
    source = inspect.getsource(sys.modules[__name__])
    key = json.dumps([str(python), str(venv), str(Path(sglang).resolve()) if sglang else None, source])
    return warm_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.sock"


def _ask(path: Path, request: Mapping[str, Any], timeout: float) -> Optional[dict[str, Any]]:
    """The warm checker's report, or None when nothing answers at ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        conn.sendall(json.dumps(request).encode())
        conn.shutdown(socket.SHUT_WR)
        data = _read_all(conn)
    try:
        report = json.loads(data)
    except json.JSONDecodeError:
        raise CheckRunError(f"the warm checker at {path} answered {len(data)} bytes that are not a JSON report") from None
    if "error" in report and "results" not in report:
        raise CheckRunError(f"the warm checker at {path}: {report['error']}")
    return report


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _run_warm(
    python: str | Path, sglang: Optional[str | Path], request: Mapping[str, Any], timeout: float, idle: float, warm_dir: Path
) -> dict[str, Any]:
    warm_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = warm_socket(python, sglang, warm_dir)
    report = _ask(path, request, timeout)
    if report is not None:
        return report
    log = path.with_suffix(".log")
    with tempfile.TemporaryDirectory(prefix="server-args-check-") as scratch, log.open("wb") as out:
        argv = [str(python), str(_script(Path(scratch))), "--serve", str(path), "--idle", str(idle)]
        if sglang:
            argv += ["--sglang", str(sglang)]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not path.exists():  # it appears once SGLang is imported (bound under another name, then renamed)
            if proc.poll() is not None or time.monotonic() > deadline:
                if proc.poll() is None:
                    proc.kill()
                tail = log.read_text(errors="replace").strip().splitlines()[-15:]
                raise CheckRunError(
                    f"the warm checker ({python} {Path(__file__).name} --serve) did not start within {timeout:.0f} s "
                    f"(exit status {proc.poll()}); its log {log} ends:\n" + "\n".join(tail)
                )
            time.sleep(0.2)
    report = _ask(path, request, timeout)
    if report is None:
        raise CheckRunError(f"the warm checker started at {path} does not answer")
    return report


# --------------------------------------------------------------------------------------------------
# Controller side: the device shown to SGLang and its verdict in the toolkit's words (sglang-flags
# through plugins/plugin_utils/sglang_sm120_controller/flag_gate.py, the deploy through plugins/module_utils/sglang_sm120/launch/plan.py).

# The device shown to SGLang when no host facts are given: the target host (docs/domain-notes.md
# "The target host": 8x RTX PRO 6000 Blackwell), 97887 MiB per GPU as nvidia-smi reports that card.
TARGET_GPU_COUNT = 8
TARGET_GPU_MEMORY_MIB = 97887
DEFAULT_CAPABILITY = "12.0"


def device_for(
    host: Any,
    gpu_cc: Optional[str],
    flashinfer_version: Optional[str],
    version: Optional[str],
    gpu_cc_from: str = "--gpu-cc",
    facts_from: str = "--host-facts",
) -> tuple[dict[str, Any], list[str]]:
    """The device SGLang is shown (``Device``'s keys) and where each fact came from. ``host``: the host's
    facts as start_failures.HostFacts reads them (``capability``, ``gpus``, ``memory_mib``, ``source``)."""
    if gpu_cc:
        capability, cap_from = gpu_cc, gpu_cc_from
    elif host is not None and host.capability:
        capability, cap_from = host.capability, f"{facts_from} {host.source}"
    else:
        capability, cap_from = DEFAULT_CAPABILITY, "the default"
    capability = capability if "." in capability else f"{capability}.0"
    if host is not None and host.gpus:
        names = sorted({str(g["name"]) for g in host.gpus})
        memory, count, name = host.memory_mib, len(host.gpus), names[0] if len(names) == 1 else DEFAULT_GPU_NAME
        memory_from = f"{count} x {memory} MiB (the smallest GPU) {name}, from {facts_from} {host.source}"
    else:
        memory, count = TARGET_GPU_MEMORY_MIB, TARGET_GPU_COUNT
        name = DEFAULT_GPU_NAME if capability.startswith("12.") else f"a GPU of compute capability {capability}"
        memory_from = f"{count} x {memory} MiB {name}, the target host's (give {facts_from} for this host's)"
    if flashinfer_version:
        flashinfer_from = f"FlashInfer {flashinfer_version}, the version SGLang {version} pins (its METADATA)"
    else:
        flashinfer_from = "FlashInfer as the runtime environment has it (the release pins no version)"
    device = {"capability": capability, "memory_mib": memory, "count": count, "name": name, "flashinfer_version": flashinfer_version}
    return device, [f"compute capability {capability} ({cap_from})", memory_from, flashinfer_from]


def resolved_flags(values: Mapping[str, Any], field_flags: Mapping[str, str], aliases: Mapping[str, str]) -> dict[str, Any]:
    """ServerArgs field values as the catalogue names flags: canonical flag name (no --) -> value."""
    out: dict[str, Any] = {}
    for name, option in field_flags.items():
        if name in values:
            flag = option.removeprefix("--")
            out[aliases.get(flag, flag)] = values[name]
    return out


def refusal_text(result: Mapping[str, Any], version: Optional[str]) -> str:
    """SGLang's refusal in one line: its exception, message and where it was raised."""
    error = result["error"]
    frame = error.get("sglang_frame")
    if result["stage"] == "parse":  # argparse's own error line, raised through sys.exit in argparse.py
        message = re.sub(r"^\S+: error: ", "", error["message"] or "")
        text = f"SGLang {version}'s parser refuses the flags: {message}"
        if frame:
            text += f"; in SGLang at {frame['at']} in {frame['function']}: `{frame['source']}`"
        return text
    text = f"SGLang {version} refuses the flags ({result['stage']}): {error['type']}: {error['message'] or '(no message)'}"
    if error.get("raised_at"):
        text += f"; raised at {error['raised_at']}"
        if error.get("function"):
            text += f" in {error['function']}"
        if error.get("source"):
            text += f": `{error['source']}`"
    if frame and frame.get("at") != error.get("raised_at"):
        text += f"; SGLang's frame {frame['at']} in {frame['function']}: `{frame['source']}`"
    return text


@dataclasses.dataclass
class Accepted:
    """SGLang's accepted verdict as the toolkit reads it (sglang-flags and the deploy alike)."""

    values: dict[str, Any]  # every ServerArgs field, the typed model paths in place of the config dirs SGLang read
    resolved: dict[str, Any]  # the same by canonical flag name (what the catalogue reads)
    rewritten: list[str]  # one sentence per value SGLang rewrote (rewrite_text)
    chosen: list[str]  # "--flag value" for the watched fields SGLang chose that were not given


def accepted(
    result: Mapping[str, Any],
    field_flags: Mapping[str, str],
    aliases: Mapping[str, str],
    host_paths: Mapping[str, str],
    version: Optional[str],
) -> Accepted:
    """Read one accepted result of a check: ``host_paths`` maps the local config dirs SGLang was
    given back to the paths typed in the flags."""
    values = {k: host_paths.get(v, v) if isinstance(v, str) else v for k, v in result["values"].items()}
    return Accepted(
        values=values,
        resolved=resolved_flags(values, field_flags, aliases),
        rewritten=[rewrite_text(c, result["log"], version) for c in result["changes"] if c["kind"] == "rewritten"],
        chosen=[
            f"{c['flag'] or c['field']} {shown_value(values.get(c['field'], c['resolved']))}"
            for c in result["changes"]
            if c["kind"] == "chosen" and c["field"] in WATCHED_FIELDS
        ],
    )


def shown_value(value: Any) -> str:
    """A resolved value for the output: floats SGLang computed rounded (0.7523519433593749 -> 0.7524)."""
    return f"{value:.4g}" if isinstance(value, float) else json.dumps(value, default=str)


def rewrite_text(change: Mapping[str, Any], log: Sequence[str], version: Optional[str]) -> str:
    """A value SGLang rewrote: the flag, the value given, the value SGLang uses, and SGLang's own log line."""
    flag = change["flag"] or change["field"]
    text = (
        f"{flag} {json.dumps(change['given'])}: SGLang {version} uses {json.dumps(change['resolved'])} instead "
        f"({change['field']}, silently)"
    )
    said = [line for line in log if change["field"] in line or (change["flag"] and change["flag"] in line)]
    if said:
        text += f"; SGLang logs: {said[0]}"
    return text


# --------------------------------------------------------------------------------------------------
# Runtime side: everything below runs in the Python where SGLang imports.


class _FakeCuda:
    """The torch.cuda answers for the current device; installed once, switched per check."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.device: Optional[Device] = None
        self.real_cuda_version = torch.version.cuda

    def install(self) -> None:
        cuda = self.torch.cuda
        cuda.is_available = self.is_available
        cuda.device_count = self.device_count
        cuda.get_device_capability = self.get_device_capability
        cuda.get_device_name = self.get_device_name
        cuda.get_device_properties = self.get_device_properties
        cuda.mem_get_info = self.mem_get_info
        cuda.current_device = lambda: 0
        cuda.set_device = lambda device: None

    def use(self, device: Device) -> None:
        self.device = device
        version = device.cuda_version or self.real_cuda_version or "12.8"
        self.torch.version.cuda = version

    def _dev(self) -> Device:
        if self.device is None:
            raise RuntimeError("server_args_check: no faked device selected")
        return self.device

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self._dev().count

    def _index(self, device: Any) -> None:
        index = getattr(device, "index", device)
        if isinstance(index, int) and not 0 <= index < self._dev().count:
            raise AssertionError(f"Invalid device id {index} (the faked host has {self._dev().count} GPUs)")

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        self._index(device)
        return self._dev().capability

    def get_device_name(self, device: Any = None) -> str:
        self._index(device)
        return self._dev().name

    def get_device_properties(self, device: Any = None) -> Any:
        self._index(device)
        dev = self._dev()
        return types.SimpleNamespace(
            name=dev.name,
            major=dev.capability[0],
            minor=dev.capability[1],
            total_memory=int(dev.memory_mib * 1024 * 1024),
            multi_processor_count=188,
            is_integrated=False,
        )

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        self._index(device)
        total = int(self._dev().memory_mib * 1024 * 1024)
        return total, total


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("sglang"):
            message = _ANSI.sub("", record.getMessage())
            self.lines.append(f"{record.levelname} {Path(record.pathname).name}:{record.lineno}: {message}")


class Checker:
    """Imports one SGLang tree once and checks flag sets against it."""

    def __init__(self, sglang: Optional[str] = None) -> None:
        if sglang:
            root = Path(sglang)
            if not (root / "sglang" / "srt" / "server_args.py").is_file():
                raise CheckUsageError(f"--sglang {sglang}: expected the directory holding sglang/srt/server_args.py, found none there")
            sys.path.insert(0, str(root.resolve()))
        # Offline, and the remote-code module cache out of $HOME: read before transformers imports.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        if "HF_MODULES_CACHE" not in os.environ:
            modules_cache = tempfile.mkdtemp(prefix="server-args-check-modules-")
            os.environ["HF_MODULES_CACHE"] = modules_cache
            atexit.register(shutil.rmtree, modules_cache, True)
            _SCRATCH.append(modules_cache)
        started = time.monotonic()
        with contextlib.redirect_stdout(sys.stderr):
            import sglang
            import sglang.srt.server_args as server_args_module
            import sglang.srt.utils.common as common
            import torch

            # Modules ServerArgs imports lazily while it resolves: imported now, on the real torch.
            for name in ("sglang.srt.configs.model_config", "sglang.srt.layers.moe.utils", "sglang.srt.server_args_config_parser"):
                with contextlib.suppress(ImportError):
                    __import__(name)
            self.resolves_once = hasattr(server_args_module.ServerArgs, "resolve_once")
            if self.resolves_once:
                _import_resolution_modules()
            # What SGLang's DeepGEMM switch asks of this environment (0.5.9
            # layers/deep_gemm_wrapper/configurer.py: `import deep_gemm`, ImportError = absent).
            self.deep_gemm = _probe_deep_gemm()
        self._ptxas: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.last_ptxas: dict[str, Any] = {}
        self.import_seconds = round(time.monotonic() - started, 2)
        self.torch = torch
        self.sa = server_args_module
        self.common = common
        self.version = _sglang_version(sglang)
        if self.resolves_once:
            from sglang.srt.arg_groups import arg_utils, overrides

            self.record_fields = arg_utils.record_fields
            self.overrides = overrides
        else:
            self.record_fields = dataclasses.fields
            self.overrides = None
        self.sglang_file = str(Path(sglang.__file__).resolve().parent)
        self.fake = _FakeCuda(torch)
        self.fake.install()
        self._memory_mib: float = 0.0
        # Patched in every SGLang module that holds them (0.5.2x's resolution hooks import them by
        # name), so each reader sees the faked device.
        self._real_flashinfer = common.is_flashinfer_available
        self._real_pkg_check = common.check_pkg_version_at_least
        self._bound: dict[str, Any] = {}
        self._patch("get_nvgpu_memory_capacity", lambda: self._memory_mib)
        self.parser_dest_flags = self._flag_names()

    def _patch(self, name: str, replacement: Any) -> None:
        """Replace the utils.common function ``name`` wherever an SGLang module bound it."""
        current = self._bound.get(name, getattr(self.common, name))
        for module_name, module in list(sys.modules.items()):
            if module is None or not module_name.startswith("sglang"):
                continue
            with contextlib.suppress(Exception):
                if vars(module).get(name) is current:
                    setattr(module, name, replacement)
        self._bound[name] = replacement

    # -- device --------------------------------------------------------------------------------
    def _probe_ptxas(self, capability: tuple[int, int]) -> None:
        """Triton's ptxas asked for this capability, with the check's environment (the unit's
        TRITON_PTXAS_* when it sets them); once per capability and setting."""
        key = (capability, os.environ.get("TRITON_PTXAS_PATH"), os.environ.get("TRITON_PTXAS_BLACKWELL_PATH"))
        if key not in self._ptxas:
            self._ptxas[key] = _probe_triton_ptxas(capability)
        self.last_ptxas = self._ptxas[key]

    def environment(self) -> dict[str, Any]:
        """What the release's venv says about this host beyond SGLang's verdict: deep_gemm's import
        and, for the last check's device, Triton's ptxas."""
        return {**self.deep_gemm, **self.last_ptxas}

    def _use_device(self, device: Device) -> None:
        self.fake.use(device)
        self._memory_mib = float(device.memory_mib)
        # SGLang caches its device answers (is_cuda, is_sm100_supported, ... are lru_cache wrappers of
        # functools.partial objects, so they carry no __module__ of their own): cleared for each device.
        prefixes = ("sglang.srt.utils", "sglang.srt.runtime_context", "sglang.srt.arg_groups")
        modules = [m for n, m in list(sys.modules.items()) if m is not None and (n.startswith(prefixes) or n == self.sa.__name__)]
        for module in modules:
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):
                    value.cache_clear()
        if device.flashinfer_version is None:
            flashinfer, pkg_check = self._real_flashinfer, self._real_pkg_check
        else:
            fake_version = device.flashinfer_version
            real_check = self._real_pkg_check

            def flashinfer() -> bool:
                return True

            def pkg_check(pkg: str, min_version: str) -> bool:
                if pkg in FLASHINFER_PACKAGES:
                    from packaging.version import Version

                    return Version(fake_version) >= Version(min_version)
                return real_check(pkg, min_version)

        self._patch("is_flashinfer_available", flashinfer)
        self._patch("check_pkg_version_at_least", pkg_check)

    # -- flags ---------------------------------------------------------------------------------
    def _parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="server_args_check")
        self.sa.ServerArgs.add_cli_args(parser)
        return parser

    def _flag_names(self) -> dict[str, str]:
        """ServerArgs field -> its long flag (the option whose name is the field's, else the action's dest)."""
        out: dict[str, str] = {}
        fields = {f.name for f in self.record_fields(self.sa.ServerArgs)}
        for action in self._parser()._actions:
            longs = [o for o in action.option_strings if o.startswith("--")]
            if not longs:
                continue
            for option in longs:
                name = option[2:].replace("-", "_")
                if name in fields:
                    out.setdefault(name, option)
            if action.dest in fields:
                out.setdefault(action.dest, longs[0])
        return out

    def _given_fields(self, argv: list[str]) -> set[str]:
        """The ServerArgs fields whose flag is on the command line, by SGLang's own parser."""
        parser = self._parser()
        for action in parser._actions:
            action.default = argparse.SUPPRESS
            action.required = False
        # Quietly: this second parse is the check's own, so SGLang's deprecation actions (0.5.2x's
        # --enable-dp-attention logs a warning when parsed) must not log again.
        with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit), _logging_disabled():
            namespace = parser.parse_known_args(argv)[0]
            dests = set(vars(namespace))
            given: set[str] = set()
            flag_of_dest = {a.dest: a.option_strings for a in parser._actions}
            for dest in dests:
                given.add(dest)
                for option in flag_of_dest.get(dest, []):
                    if option.startswith("--"):
                        given.add(option[2:].replace("-", "_"))
            return given
        return set()

    def _abbreviations(self, argv: list[str]) -> list[dict[str, str]]:
        """The options on the command line that are not option strings of SGLang's parser but prefixes
        of one (argparse's allow_abbrev, on in SGLang's launcher, expands them)."""
        options = sorted((o for o in self._parser()._option_string_actions if o.startswith("--")), key=lambda o: (len(o), o))
        out = []
        for token in argv:
            name = token.split("=", 1)[0]
            if not name.startswith("--") or name == "--" or name in options:
                continue
            longer = [o for o in options if o.startswith(name)]
            if longer:
                out.append({"typed": name, "option": longer[0], "candidates": longer[:5]})
        return out

    def _substitute(self, argv: list[str], dest: str, value: str, what: str) -> list[str]:
        options = next((a.option_strings for a in self._parser()._actions if a.dest == dest), [])
        out, found = [], False
        skip = False
        for i, arg in enumerate(argv):
            if skip:
                skip = False
                continue
            if arg in options and i + 1 < len(argv):
                out += [arg, value]
                skip = found = True
            elif any(arg.startswith(o + "=") for o in options):
                out.append(arg.split("=", 1)[0] + "=" + value)
                found = True
            else:
                out.append(arg)
        if not found:
            raise CheckUsageError(f"{what} {value} given, but the flags hold none of {options} to point at it (flags: {argv})")
        return out

    # -- one check -----------------------------------------------------------------------------
    def check(self, request: CheckRequest, reserve: bool = True) -> dict[str, Any]:
        argv = list(request.argv)
        fraction_given = False  # --mem-fraction-static among the flags SGLang accepted (then its own reserve is computed)
        if request.model:
            _require_config_dir(request.model, "model")
            argv = self._substitute(argv, "model_path", str(request.model), "model directory")
        if request.draft_model:
            _require_config_dir(request.draft_model, "draft model")
            argv = self._substitute(argv, "speculative_draft_model_path", str(request.draft_model), "draft model directory")
        result: dict[str, Any] = {"label": request.label, "argv": request.argv, "argv_checked": argv, "device": request.device.to_json()}
        self._use_device(request.device)
        saved_env = dict(os.environ)
        os.environ.update(request.env)
        env_before = dict(os.environ)
        self._probe_ptxas(request.device.capability)
        capture = _LogCapture()
        sglang_logger = logging.getLogger("sglang")
        old_level = sglang_logger.level
        # On SGLang's logger, not the root's: 0.5.2x's prepare_server_args resets the root's handlers.
        sglang_logger.addHandler(capture)
        sglang_logger.setLevel(logging.INFO)
        snapshots: list[dict[str, Any]] = []
        server_args_cls = self.sa.ServerArgs
        original_post_init = server_args_cls.__post_init__

        def recording_post_init(instance: Any) -> None:
            if not snapshots:
                snapshots.append({f.name: _copy(getattr(instance, f.name)) for f in self.record_fields(type(instance))})
            original_post_init(instance)

        # The argv SGLang's parser really parsed (after its --config merge), for which flags were given.
        parsed_argv: list[list[str]] = []
        original_parse_args = argparse.ArgumentParser.parse_args

        def recording_parse_args(parser: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
            if not parsed_argv and args is not None:
                parsed_argv.append([str(a) for a in args])
            return original_parse_args(parser, args, namespace)

        stage = "parse"
        started = time.monotonic()
        parse_errors = io.StringIO()
        try:
            if not self.resolves_once:
                server_args_cls.__post_init__ = recording_post_init
            argparse.ArgumentParser.parse_args = recording_parse_args  # type: ignore[method-assign]
            with contextlib.redirect_stdout(sys.stderr), _tee_stderr(parse_errors):
                try:
                    server_args = self.sa.prepare_server_args(argv)
                    if self.resolves_once:
                        # 0.5.2x: prepare_server_args returns the operator's input; the launcher
                        # (launch_server.run_server, Engine._launch_subprocesses) resolves it, then
                        # checks it. Resolution declares its decisions beside the record, which
                        # keeps the input as given.
                        snapshots.append({f.name: _copy(getattr(server_args, f.name)) for f in self.record_fields(type(server_args))})
                        stage = "resolve"
                        server_args.resolve_once()
                    stage = "check_server_args"
                    if hasattr(server_args, "check_server_args"):
                        server_args.check_server_args()
                finally:
                    if not self.resolves_once:
                        server_args_cls.__post_init__ = original_post_init
                    argparse.ArgumentParser.parse_args = original_parse_args  # type: ignore[method-assign]
        except SystemExit as exc:  # argparse: a bad flag or value
            message = parse_errors.getvalue().strip().splitlines()
            result.update(
                verdict="refused",
                stage="parse",
                error={
                    "type": "SystemExit",
                    "message": message[-1] if message else f"exit {exc.code}",
                    **_location(exc, self.sglang_file),
                },
            )
        except Exception as exc:
            if stage == "parse" and snapshots and not self.resolves_once:
                stage = "post_init"
            result.update(
                verdict="refused",
                stage=stage,
                error={"type": _type_name(exc), "message": str(exc), **_location(exc, self.sglang_file)},
            )
        else:
            before = snapshots[0] if snapshots else {}
            given = self._given_fields(parsed_argv[0] if parsed_argv else argv)
            result.update(verdict="ok", stage=None, error=None)
            changes = self._changes(before, server_args, given)
            result["changes"] = changes
            result["warnings"] = [_warning(c) for c in changes if c["kind"] == "rewritten" or c["field"] in WATCHED_FIELDS]
            result["resolved"] = {f: _jsonable(self._resolved(server_args, f)) for f in WATCHED_FIELDS if hasattr(server_args, f)}
            result["values"] = {f.name: _jsonable(self._resolved(server_args, f.name)) for f in self.record_fields(type(server_args))}
            fraction_given = "mem_fraction_static" in given
        finally:
            sglang_logger.removeHandler(capture)
            sglang_logger.setLevel(old_level)
            env_after = dict(os.environ)
            os.environ.clear()
            os.environ.update(saved_env)
        result["env_set_by_sglang"] = {k: v for k, v in env_after.items() if env_before.get(k) != v}
        result["abbreviations"] = self._abbreviations(parsed_argv[0] if parsed_argv else argv)
        result["log"] = capture.lines
        result["seconds"] = round(time.monotonic() - started, 3)
        if reserve and fraction_given and result["verdict"] == "ok":
            # after this check's environment and log capture are put back: a second resolution
            reserve_argv = _without_option(request.argv, "--mem-fraction-static")
            result["sglang_reserve"] = (
                self._reserve(dataclasses.replace(request, argv=reserve_argv))
                if reserve_argv is not None
                else {"unknown": "--mem-fraction-static is not on the command line (given in --config): SGLang's own choice not computed"}
            )
        return result

    def _reserve(self, request: CheckRequest) -> dict[str, Any]:
        """What SGLang itself keeps outside --mem-fraction-static (activations, CUDA graphs, the draft)
        for these flags and this device: the fraction it resolves when the flag is left out, by its
        own heuristic for that release (0.5.9: ServerArgs._handle_gpu_memory_settings)."""
        auto = self.check(request, reserve=False)
        if auto["verdict"] != "ok":
            return {"unknown": f"SGLang refused the flags without --mem-fraction-static: {auto['error']['message']}"}
        return {"auto_mem_fraction_static": auto["resolved"].get("mem_fraction_static")}

    def _changes(self, before: Mapping[str, Any], server_args: Any, given: set[str]) -> list[dict[str, Any]]:
        defaults = {f.name: _field_default(f) for f in self.record_fields(type(server_args))}
        sources = {}  # 0.5.2x: field -> the resolution step whose declaration is in effect
        for source, declared in getattr(server_args, "_resolved_overrides", None) or ():
            for name in declared:
                sources[name] = source
        out = []
        for name, old in before.items():
            new = self._resolved(server_args, name)
            if _same(old, new):
                continue
            flag = self.parser_dest_flags.get(name)
            was_given = name in given
            if was_given and new is None and MEANS_NONE.get(name) == old:
                continue
            out.append(
                {
                    "flag": flag,
                    "field": name,
                    "kind": "rewritten" if was_given else "chosen",
                    "given": _jsonable(old) if was_given else None,
                    "default": _jsonable(defaults.get(name)),
                    "resolved": _jsonable(new),
                    **({"source": sources[name]} if name in sources else {}),
                }
            )
        return out

    def _resolved(self, server_args: Any, name: str) -> Any:
        """The value SGLang uses: the field (0.5.9 writes its decisions into the record), or 0.5.2x's
        resolution result (its last declaration, else the input, else the field's fallback)."""
        if self.overrides is not None:
            return self.overrides.resolution_result(server_args, name)
        return getattr(server_args, name, None)


def _without_option(argv: Sequence[str], option: str) -> Optional[list[str]]:
    """argv without ``option`` and its value (``--opt V`` or ``--opt=V``); None when it is not there."""
    out: list[str] = []
    found = False
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            found, skip = True, True
        elif arg.startswith(option + "="):
            found = True
        else:
            out.append(arg)
    return out if found else None


def _warning(change: Mapping[str, Any]) -> str:
    flag = change["flag"] or change["field"]
    if change["kind"] == "rewritten":
        return f"{flag} {json.dumps(change['given'])}: SGLang uses {json.dumps(change['resolved'])} instead ({change['field']})"
    return f"{flag} not given (default {json.dumps(change['default'])}): SGLang uses {json.dumps(change['resolved'])} ({change['field']})"


def _require_config_dirs(requests: Sequence[CheckRequest]) -> None:
    """Every model and draft directory of a batch, before any of it is checked."""
    for request in requests:
        if request.model:
            _require_config_dir(request.model, "model")
        if request.draft_model:
            _require_config_dir(request.draft_model, "draft model")


def _require_config_dir(path: str, what: str) -> None:
    directory = Path(path)
    if not directory.is_dir():
        raise CheckUsageError(f"{what} directory {path}: expected a directory holding config.json, found no directory")
    if not (directory / "config.json").is_file():
        raise CheckUsageError(f"{what} directory {path}: expected config.json in it, found {sorted(p.name for p in directory.iterdir())}")


@contextlib.contextmanager
def _logging_disabled() -> Iterator[None]:
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


@contextlib.contextmanager
def _tee_stderr(buffer: io.StringIO) -> Iterator[None]:
    """Copy what is written to stderr (argparse's error line) into ``buffer`` as well."""
    real = sys.stderr

    class Tee(io.TextIOBase):
        def write(self, text: str) -> int:
            buffer.write(text)
            return real.write(text)

        def flush(self) -> None:
            real.flush()

    sys.stderr = Tee()
    try:
        yield
    finally:
        sys.stderr = real


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _short_path(filename: str, sglang_dir: str) -> str:
    path = str(Path(filename).resolve()) if os.path.isabs(filename) else filename
    parent = str(Path(sglang_dir).parent) + os.sep
    if path.startswith(parent):
        return path[len(parent) :]
    marker = os.sep + "site-packages" + os.sep
    if marker in path:
        return path.split(marker, 1)[1]
    return path


def _location(exc: BaseException, sglang_dir: str) -> dict[str, Any]:
    """Where the exception was raised (innermost frame) and the innermost frame in SGLang's code."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return {"raised_at": None, "function": None, "source": None, "sglang_frame": None}

    def describe(frame: traceback.FrameSummary) -> dict[str, Any]:
        return {
            "at": f"{_short_path(frame.filename, sglang_dir)}:{frame.lineno}",
            "function": frame.name,
            "source": (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip(),
        }

    inner = describe(frames[-1])
    own = [f for f in frames if str(Path(f.filename).resolve()).startswith(sglang_dir + os.sep)]
    return {
        "raised_at": inner["at"],
        "function": inner["function"],
        "source": inner["source"],
        "sglang_frame": describe(own[-1]) if own else None,
    }


def _field_default(field: Any) -> Any:
    """The default of a dataclass field or a msgspec Struct field (0.5.2x's ServerArgs)."""
    default = getattr(field, "default", dataclasses.MISSING)
    if default is not dataclasses.MISSING and not _no_default(default):
        return default
    factory = getattr(field, "default_factory", dataclasses.MISSING)
    if factory is not dataclasses.MISSING and not _no_default(factory):
        with contextlib.suppress(Exception):
            return factory()
    return None


def _no_default(value: Any) -> bool:
    return type(value).__name__ in ("NoDefault", "_NoDefault") or repr(value) == "NODEFAULT"


def _copy(value: Any) -> Any:
    try:
        return copy.deepcopy(value)
    except Exception:
        return value


def _same(a: Any, b: Any) -> bool:
    try:
        return (bool(a == b) and type(a) is type(b)) or (a is None and b is None)
    except Exception:
        return a is b


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    enum_value = getattr(value, "value", None)
    if isinstance(enum_value, (str, int)):
        return enum_value
    return repr(value)


def _probe_deep_gemm() -> dict[str, Any]:
    """Whether ``deep_gemm`` imports here, as SGLang tries it: ``deep_gemm_importable`` true, false
    (ImportError) or None (it raised something else, which SGLang would not catch either)."""
    try:
        importlib.import_module("deep_gemm")
    except ImportError as exc:
        return {"deep_gemm_importable": False, "deep_gemm_note": f"ImportError: {exc}"}
    except Exception as exc:  # reported, never raised: the check goes on
        return {"deep_gemm_importable": None, "deep_gemm_note": f"{_type_name(exc)}: {exc}"}
    return {"deep_gemm_importable": True, "deep_gemm_note": "import deep_gemm succeeded"}


PTX_PROBE = ".version {major}.{minor}\n.target {target}\n.address_size 64\n\n.visible .entry probe()\n{{\n\tret;\n}}\n"


def _probe_triton_ptxas(capability: tuple[int, int]) -> dict[str, Any]:
    """Whether the ptxas Triton calls for a GPU of this capability assembles for it, asked as Triton
    asks (its backends/nvidia/compiler.py): ``get_ptxas(arch)`` picks the tool (from Triton 3.6 the
    bundled ptxas-blackwell for capability 10 and up, the bundled ptxas below; TRITON_PTXAS_BLACKWELL_PATH
    / TRITON_PTXAS_PATH when they name a working ptxas), ``sm_arch_from_capability`` the target (sm_120a
    on 12.0), ``ptx_get_version`` the PTX version it writes for that ptxas. A one-instruction kernel is
    assembled with ``--gpu-name`` as Triton passes it: ``triton_ptxas_knows_arch`` true, false (the
    ptxas refused it, as the first Triton kernel of the server would be), or None (no Triton here, or
    the probe could not run: unknown)."""
    arch = capability[0] * 10 + capability[1]
    try:
        compiler = importlib.import_module("triton.backends.nvidia.compiler")
        try:
            tool = compiler.get_ptxas(arch)
        except TypeError:  # a Triton with one ptxas for every GPU: get_ptxas()
            tool = compiler.get_ptxas()
        target = compiler.sm_arch_from_capability(arch)
        ptx = int(compiler.ptx_get_version(tool.version))
    except Exception as exc:  # reported, never raised: the check goes on
        return {"triton_ptxas_knows_arch": None, "triton_ptxas_note": f"Triton's ptxas could not be asked: {_type_name(exc)}: {exc}"}
    with tempfile.TemporaryDirectory(prefix="triton-ptxas-probe-") as tmp:
        source = Path(tmp) / "probe.ptx"
        source.write_text(PTX_PROBE.format(major=ptx // 10, minor=ptx % 10, target=target), encoding="utf-8")
        argv = [tool.path, f"--gpu-name={target}", str(source), "-o", str(Path(tmp) / "probe.cubin")]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return {"triton_ptxas_knows_arch": None, "triton_ptxas_note": f"{tool.path} could not run: {exc}"}
    said = (done.stderr or done.stdout).strip().splitlines()
    what = f"{tool.path} (CUDA {tool.version}) --gpu-name={target}, PTX {ptx // 10}.{ptx % 10}"
    if done.returncode == 0:
        return {"triton_ptxas_knows_arch": True, "triton_ptxas_note": f"{what}: assembled"}
    return {"triton_ptxas_knows_arch": False, "triton_ptxas_note": f"{what}: exit {done.returncode}: {said[0] if said else 'no output'}"}


def _import_resolution_modules() -> None:
    for name in RESOLUTION_MODULES:
        try:
            package = importlib.import_module(name)
        except Exception:  # a hook that cannot import fails the check that reaches it, with its error
            continue
        for info in pkgutil.iter_modules(getattr(package, "__path__", None) or []):
            with contextlib.suppress(Exception):
                importlib.import_module(f"{name}.{info.name}")


def _sglang_version(module: Any) -> Optional[str]:
    version = getattr(module, "__version__", None)
    if version:
        return str(version)
    with contextlib.suppress(Exception):
        from sglang.version import __version__

        return str(__version__)
    return None


# --------------------------------------------------------------------------------------------------
# Command line


def _requests_from_batch(data: Mapping[str, Any]) -> tuple[Optional[str], list[CheckRequest]]:
    if not isinstance(data, Mapping) or not isinstance(data.get("checks"), list):
        keys = sorted(data) if isinstance(data, Mapping) else "-"
        raise CheckUsageError(f"batch: expected an object with a list 'checks', found {type(data).__name__} with keys {keys}")
    base = data.get("device") or {}
    out = []
    for index, item in enumerate(data["checks"]):
        if not isinstance(item, Mapping) or not isinstance(item.get("argv"), list):
            raise CheckUsageError(f"batch check {index}: expected an object with a list 'argv', found {item!r}")
        device = Device.from_mapping({**base, **(item.get("device") or {})})
        env = item.get("env") or {}
        if not isinstance(env, Mapping):
            raise CheckUsageError(f"batch check {index}: 'env' must map names to values, found {env!r}")
        out.append(
            CheckRequest(
                argv=[str(a) for a in item["argv"]],
                device=device,
                model=item.get("model"),
                draft_model=item.get("draft_model"),
                env={str(k): str(v) for k, v in env.items()},
                label=item.get("label"),
            )
        )
    return data.get("sglang"), out


def _parse_env(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair or pair.startswith("="):
            raise CheckUsageError(f"--env {pair!r}: expected KEY=VALUE")
        key, value = pair.split("=", 1)
        out[key] = value
    return out


def _report(checker: Checker, results: Optional[list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "sglang_version": checker.version,
        "sglang_dir": checker.sglang_file,
        "python": sys.executable,
        "import_seconds": checker.import_seconds,
        "field_flags": checker.parser_dest_flags,
        "environment": checker.environment(),
        "results": results,
    }


def _serve(path: Path, sglang_dir: Optional[str], idle: float) -> int:
    """The warm checker: SGLang imported once, then one batch request per connection on the unix
    socket ``path`` (mode 0600, made visible only once SGLang imported), answered in order, until
    ``idle`` seconds pass without one. A request that cannot be checked gets ``{"error": ...}``."""
    checker = Checker(sglang_dir)
    started = time.time()
    answered = 0
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = path.with_name(f".{path.name}.{os.getpid()}")
    server.bind(str(bound))
    os.chmod(bound, 0o600)
    os.replace(bound, path)
    inode = path.stat().st_ino
    server.listen(8)
    server.settimeout(idle)
    print(
        f"server_args_check: warm checker pid {os.getpid()} on {path}, SGLang {checker.version} imported in {checker.import_seconds} s",
        file=sys.stderr,
        flush=True,
    )
    try:
        while True:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                return 0
            with conn:
                conn.settimeout(None)
                try:
                    request_sglang, requests = _requests_from_batch(json.loads(_read_all(conn)))
                    if request_sglang and sglang_dir and Path(request_sglang).resolve() != Path(sglang_dir).resolve():
                        raise CheckUsageError(f"this warm checker holds SGLang from {sglang_dir}, the request names {request_sglang}")
                    _require_config_dirs(requests)
                    report = _report(checker, [checker.check(request) for request in requests])
                    answered += len(requests)
                    report["warm"] = {"pid": os.getpid(), "since": round(started, 3), "checks": answered}
                except (CheckUsageError, ValueError) as exc:
                    report = {"error": str(exc)}
                conn.sendall(json.dumps(report, default=repr).encode())
    finally:
        with contextlib.suppress(OSError):
            if path.stat().st_ino == inode:  # still ours, not a newer checker's
                path.unlink()
        server.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    flags: list[str] = []
    if "--" in args_in:
        cut = args_in.index("--")
        args_in, flags = args_in[:cut], args_in[cut + 1 :]
    parser = argparse.ArgumentParser(
        prog="server_args_check",
        description="Build SGLang's ServerArgs from launch flags on a faked device; print the verdict as JSON.",
    )
    parser.add_argument("--sglang", help="directory holding the sglang/ package to check (put first on sys.path)")
    parser.add_argument(
        "--batch", help="JSON request file ('-' for stdin): {sglang, device, checks: [{argv, model, draft_model, env, label}]}"
    )
    parser.add_argument("--capability", help="compute capability to fake, e.g. 12.0")
    parser.add_argument("--gpu-memory-mib", type=float, help="memory of one GPU in MiB, e.g. 97887")
    parser.add_argument("--gpu-count", type=int, help="number of GPUs")
    parser.add_argument("--gpu-name", default=DEFAULT_GPU_NAME)
    parser.add_argument("--cuda-version", help="torch.version.cuda as SGLang sees it (default: the runtime torch's)")
    parser.add_argument("--flashinfer-version", help="FlashInfer version the release has (default: whether it imports here)")
    parser.add_argument("--model", help="model directory (config files); replaces the value of --model-path")
    parser.add_argument("--draft-model", help="draft model directory; replaces the value of --speculative-draft-model-path")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment of the server")
    parser.add_argument("--serve", metavar="SOCKET", help="keep SGLang imported and answer batch requests on this unix socket")
    parser.add_argument("--idle", type=float, default=600, help="with --serve: seconds without a request before it exits")
    args = parser.parse_args(args_in)
    if args.serve:
        return _serve(Path(args.serve), args.sglang, args.idle)
    try:
        if args.batch:
            if flags:
                raise CheckUsageError("--batch takes its flag sets from the file; found flags after --")
            text = sys.stdin.read() if args.batch == "-" else Path(args.batch).read_text()
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise CheckUsageError(f"--batch {args.batch}: expected JSON, {exc}") from None
            sglang_dir, requests = _requests_from_batch(data)
            sglang_dir = args.sglang or sglang_dir
        else:
            missing = [n for n in ("capability", "gpu_memory_mib", "gpu_count") if getattr(args, n) is None]
            if missing:
                named = ", ".join("--" + m.replace("_", "-") for m in missing)
                raise CheckUsageError(f"expected --capability, --gpu-memory-mib and --gpu-count (missing {named})")
            if not flags:
                raise CheckUsageError("expected the launch flags after --, e.g. -- --model-path DIR --tp-size 8")
            device = Device.from_mapping(
                {
                    "capability": args.capability,
                    "memory_mib": args.gpu_memory_mib,
                    "count": args.gpu_count,
                    "name": args.gpu_name,
                    "cuda_version": args.cuda_version,
                    "flashinfer_version": args.flashinfer_version,
                }
            )
            requests = [CheckRequest(argv=flags, device=device, model=args.model, draft_model=args.draft_model, env=_parse_env(args.env))]
            sglang_dir = args.sglang
        _require_config_dirs(requests)  # before anything is imported
        try:
            checker = Checker(sglang_dir)
        except CheckUsageError:
            raise
        except Exception as exc:  # SGLang does not import here: nothing can be checked
            where = _location(exc, str(Path(sglang_dir).resolve() / "sglang") if sglang_dir else "")["raised_at"]
            message = (
                f"SGLang from {sglang_dir or 'sys.path'} does not import under {sys.executable}: "
                f"{_type_name(exc)}: {exc} (raised at {where}); use the Python of an environment built for that release"
            )
            print(json.dumps({"error": message, "stage": "import"}), flush=True)
            print(f"server_args_check: {message}", file=sys.stderr)
            return 3
        results = [checker.check(request) for request in requests]
    except CheckUsageError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        print(f"server_args_check: {exc}", file=sys.stderr)
        return 2
    report = _report(checker, results if args.batch else None)
    if not args.batch:
        report = {**report, **results[0]}
        del report["results"]
    print(json.dumps(report, indent=1, default=repr), flush=True)
    return 0 if all(r["verdict"] == "ok" for r in results) else 1


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The report is written: the interpreter's own teardown with torch and SGLang loaded takes
    # seconds (about 4 of a 15 s check here) and writes nothing, so it is skipped, its one useful
    # atexit job (the remote-code module cache) done here.
    for scratch in _SCRATCH:
        shutil.rmtree(scratch, ignore_errors=True)
    os._exit(status)
