"""What a running SGLang server shows of its optimisations, read as real SGLang prints and answers it.

Plain Python, standard library only, no Ansible imports: Ansible modules import it as
``ansible.module_utils.server_evidence`` (plugins/modules/sglang_health.py judges the start-up journal with
it), bench_report judges a benchmark's evidence with it, sglang-evidence wraps it, and pytest
imports it as ``server_evidence``.

ONE table, keyed by SGLang version range:

- ``PATTERNS``: log lines. Each entry: the optimisation it speaks of, the verdict it gives (``yes``:
  the server shows it working; ``no``: the server switched it off or refused it), its regex, the
  versions whose sources print it (``min``/``max`` inclusive), and where: the file inside the wheel
  and the string literals of the format string as written there (``fragments``, rendered in order
  they make the line; ``context``: more literals of that file that fix the placeholders' values on a
  CUDA server, e.g. ``"cuda": "CUDA graph",``). tests/unit/host/test_server_evidence.py reads every fragment
  from every cached wheel in the entry's range, so an upstream wording change fails a test.
- ``FIELDS``: /server_info fields (the server's resolved settings plus ``internal_states``), the same
  way: path, the test that gives the verdict, versions, the file that defines the field.
- ``MARKERS``: lines that say nothing about an optimisation but order a journal: the server args
  SGLang logs at start (read as a stand-in for /server_info when there is none) and "The server is
  fired up and ready to roll!" (the end of the start-up).

``judge()`` gives, per optimisation, ``yes`` only on positive evidence, ``no`` on negative evidence
(negative wins), else ``unknown`` with a note naming what was looked for; ``select_lines()`` picks
what the judge needs from a whole journal (every start-up line the table knows, whatever traffic
follows, plus the last N periodic traffic lines); ``redact()`` / ``redact_line()`` keep API keys
out of anything written or printed.

To add a release: unpack its wheel into the cache (``make sglang-wheels``), run
tests/unit/host/test_server_evidence.py; a failing fragment names the entry, file and version: widen the
entry's ``max`` where the wording is unchanged, or add an entry with the new file and literals.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from ..errors import ToolkitError

OPTIMISATIONS = ("cuda graphs", "speculative decoding", "mixed chunk", "flashinfer allreduce fusion", "torch symm-mem")
VERDICTS = ("yes", "no", "unknown")
VERSION_MIN, VERSION_MAX = "0.5.9", "0.5.23"
REDACTED = "<redacted>"

# The flag that asks for each optimisation (CUDA graphs are on unless switched off).
FLAGS: dict[str, tuple[str, ...]] = {
    "speculative decoding": ("--speculative-algorithm",),
    "mixed chunk": ("--enable-mixed-chunk",),
    "flashinfer allreduce fusion": ("--enable-flashinfer-allreduce-fusion", "--flashinfer-allreduce-fusion-backend"),
    "torch symm-mem": ("--enable-torch-symm-mem",),
    "cuda graphs": ("--cuda-graph-max-bs", "--cuda-graph-bs"),
}
# Flags that switch CUDA graphs (the decode graphs) off: --disable-cuda-graph in every release,
# the per-phase switches from 0.5.14 (server_args.py: disable_decode_cuda_graph, cuda_graph_backend_decode).
CUDA_GRAPHS_OFF = ("--disable-cuda-graph", "--disable-decode-cuda-graph")
TRAFFIC_TAIL = 50


class EvidenceError(ToolkitError):
    """Input that is not what SGLang writes; the message names the input, what was expected and found."""


@dataclass(frozen=True)
class Pattern:
    name: str
    verdict: str
    regex: str
    min: str
    max: str
    source: str
    fragments: tuple[str, ...]
    says: str
    sample: Mapping[str, str] = field(default_factory=dict)
    context: tuple[str, ...] = ()
    traffic: bool = False  # printed over and over while serving (Decode batch): only the last lines are kept


@dataclass(frozen=True)
class Field:
    name: str
    verdict: str
    path: str
    test: str  # "true", "false", "null", "positive", "graph", "disabled"
    min: str
    max: str
    source: str
    fragments: tuple[str, ...]
    says: str


@dataclass(frozen=True)
class Marker:
    kind: str  # "server_args" or "ready"
    regex: str
    min: str
    max: str
    source: str
    fragments: tuple[str, ...]
    sample: Mapping[str, str] = field(default_factory=dict)


# Placeholder values of a CUDA server, for rendering a format string into the line it prints.
_DECODE_HEAD = 'f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, {token_usage_msg}"'
_DECODE_SAMPLE = {"iter_msg": "", "token_usage_msg": "#token: 47, token usage: 0.00, ", "can_run_cuda_graph": "True"}
_ACCEPT = 'f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "'
_GRAPH_OLD = 'f"{graph_backend[self.device]}: {can_run_cuda_graph}, "'
_GRAPH_NEW = 'f"{self._graph_backend_label}: {can_run_cuda_graph}, "'
_LABEL = {"graph_backend[self.device]": "cuda graph", "self._graph_backend_label": "cuda graph"}
_MIXIN_0_5_9 = "sglang/srt/managers/scheduler_metrics_mixin.py"
_MIXIN_0_5_10 = "sglang/srt/observability/scheduler_metrics_mixin.py"
_REPORTER = "sglang/srt/managers/scheduler_components/metrics_reporter.py"
_FUSION = "sglang/srt/layers/flashinfer_comm_fusion.py"
_SYMM = "sglang/srt/distributed/device_communicators/torch_symm_mem.py"
_ARGS = "sglang/srt/server_args.py"

DECODE_CUDA_GRAPH = r"Decode batch\b.*\bcuda graph: True\b"
DECODE_ACCEPT = r"Decode batch\b.*(?<!block )\baccept len: \d"

CUDA_GRAPH_DISABLED = r"(?<![Pp]iecewise )\b[Cc](?:uda|UDA) graph (?:is|and server warmup are) disabled\b"
DRAFT_GRAPH_END = r"\bCapture draft (?:decode )?(?:cuda|CUDA) graph end\."
MIXED_OFF = r"\bMixed chunked prefill is disabled\b"
MIXED_OFF_NGRAM = r"\bmixed chunked prefill are disabled because of\b"
FUSION_WORKSPACE_OLD = r"\bFlashInfer workspace initialized for rank \d+, world_size \d+"
FUSION_NO_COMM = r"\bFlashInfer comm not available, skipping workspace initialization\b"
FUSION_FORCED_OFF = r"\bFlashInfer allreduce fusion is forcibly disabled\b"
FUSION_DETERMINISTIC = r"\bDisable --(?:enable-flashinfer-allreduce-fusion|flashinfer-allreduce-fusion-backend) because"
SERVER_ARGS_LINE = r"\bserver_args=(?:ServerArgs\(|\{)"
READY_LINE = r"The server is fired up and ready to roll!"
CUDA_GRAPH_END_OLD = r"\bCapture cuda graph end\. Time elapsed"
_RUNNER = "sglang/srt/model_executor/model_runner.py"
_SPEC_HOOK = "sglang/srt/arg_groups/speculative_hook.py"
_OVERRIDES = "sglang/srt/arg_groups/overrides.py"
_FIELDS_DIR = "sglang/srt/arg_groups/fields"


def _per_release(entry: Any, *ranges: tuple) -> tuple[Any, ...]:
    """The same entry once per range of releases: each range is (min, max, source), optionally with a
    dictionary of the fields that differ in it (fragments, says, sample, context). What stays the same
    across releases is written once; what moved (the file, the wording) is written where it moved."""
    out = []
    for first, last, source, *changes in ranges:
        out.append(replace(entry, min=first, max=last, source=source, **(changes[0] if changes else {})))
    return tuple(out)


_DECODE_GRAPH = {"fragments": (_DECODE_HEAD, _GRAPH_OLD), "context": ('lambda: "cuda graph",',)}
_DECODE_GRAPH_NEW = {"fragments": (_DECODE_HEAD, _GRAPH_NEW), "context": ('"cuda graph")',)}
_NGRAM_OLD = ('"The overlap scheduler and mixed chunked prefill are disabled because of "', '"using ngram speculative decoding."')
_WORKSPACE = 'f"FlashInfer workspace initialized for rank {rank}, "'
_DETERMINISTIC = ('"Disable --flashinfer-allreduce-fusion-backend because deterministic inference is enabled."',)

# fmt: off
PATTERNS: tuple[Pattern, ...] = (
    # ---- CUDA graphs: the target's decode graphs captured, used by decode batches, or switched off.
    *_per_release(
        Pattern(
            "cuda graphs", "yes", CUDA_GRAPH_END_OLD, "", "", _RUNNER,
            ('f"Capture {graph_backend[self.device]} end. Time elapsed: {time.perf_counter() - tic:.2f} s. "',),
            "the target's decode CUDA graphs captured (\"Capture cuda graph end\")", {"graph_backend[self.device]": "cuda graph"},
        ),
        ("0.5.9", "0.5.10", _RUNNER, {"context": ('lambda: "cuda graph",',)}),
        ("0.5.11", "0.5.13", _RUNNER, {"context": ('"cuda": "cuda graph",',)}),
    ),
    *_per_release(
        Pattern(
            "cuda graphs", "yes", r"\bCapture target (?:decode|verify) CUDA graph end\.", "", "", "", (),
            "the target's decode CUDA graphs captured (\"Capture target decode|verify CUDA graph end\")", {},
            ('capture_name = f"{role} decode"', 'capture_name = f"{role} verify"', '"cuda": "CUDA graph",'),
        ),
        ("0.5.14", "0.5.16", _RUNNER, {
            "fragments": ('f"Capture {capture_name} {graph_backend[self.device]} end. "',),
            "sample": {"capture_name": "target decode", "graph_backend[self.device]": "CUDA graph"},
        }),
        ("0.5.17", "0.5.23", "sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py", {
            "fragments": ('f"Capture {capture_name} {graph_backend[model_runner.device]} end. "',),
            "sample": {"capture_name": "target verify", "graph_backend[model_runner.device]": "CUDA graph"},
        }),
    ),
    *_per_release(
        Pattern(
            "cuda graphs", "yes", DECODE_CUDA_GRAPH, "", "", "", (),
            "decode batches run on CUDA graphs (\"Decode batch ... cuda graph: True\")", {**_DECODE_SAMPLE, **_LABEL}, traffic=True,
        ),
        ("0.5.9", "0.5.9", _MIXIN_0_5_9, _DECODE_GRAPH),
        ("0.5.10", "0.5.10", _MIXIN_0_5_10, _DECODE_GRAPH),
        ("0.5.11", "0.5.12", _MIXIN_0_5_10, _DECODE_GRAPH_NEW),
        ("0.5.13", "0.5.23", _REPORTER, _DECODE_GRAPH_NEW),
    ),
    *_per_release(
        Pattern(
            "cuda graphs", "no", CUDA_GRAPH_DISABLED, "", "", "",
            ('"Cuda graph is disabled because of using torch native attention backend"',),
            "SGLang switched CUDA graphs off (\"Cuda graph is disabled because ...\")",
        ),
        ("0.5.9", "0.5.18", _ARGS),
        ("0.5.19", "0.5.23", "sglang/srt/arg_groups/attention_hook.py"),
    ),
    # ---- speculative decoding: the draft worker captured its graphs, decode batches report an accept length.
    *_per_release(
        Pattern(
            "speculative decoding", "yes", DRAFT_GRAPH_END, "", "", "sglang/srt/speculative/eagle_worker_v2.py", (), "",
        ),
        ("0.5.9", "0.5.13", "sglang/srt/speculative/eagle_worker_v2.py", {
            "fragments": (
                'f"Capture draft cuda graph end. Time elapsed: {time.perf_counter() - tic:.2f} s. '
                'mem usage={(before_mem - after_mem):.2f} GB. avail mem={after_mem:.2f} GB."',
            ),
            "says": "the draft model's CUDA graphs captured (\"Capture draft cuda graph end\")",
        }),
        ("0.5.14", "0.5.23", "sglang/srt/speculative/eagle_worker_v2.py", {
            "fragments": ('"Capture draft decode CUDA graph end. "',),
            "says": "the draft model's CUDA graphs captured (\"Capture draft decode CUDA graph end\")",
        }),
    ),
    *_per_release(
        Pattern(
            "speculative decoding", "yes", DECODE_ACCEPT, "", "", "", (_DECODE_HEAD, _ACCEPT),
            "decode batches report a speculative accept length (\"Decode batch ... accept len: ...\")", _DECODE_SAMPLE, traffic=True,
        ),
        ("0.5.9", "0.5.9", _MIXIN_0_5_9),
        ("0.5.10", "0.5.12", _MIXIN_0_5_10),
        ("0.5.13", "0.5.23", _REPORTER),
    ),
    # ---- mixed chunked prefill: switched off at start when the speculative algorithm does not support it.
    *_per_release(
        Pattern(
            "mixed chunk", "no", MIXED_OFF, "", "", "",
            ('"Mixed chunked prefill is disabled because of using "', '"eagle speculative decoding."'),
            "SGLang switched mixed chunked prefill off (\"Mixed chunked prefill is disabled ...\")",
        ),
        ("0.5.9", "0.5.12", _ARGS),
        ("0.5.13", "0.5.18", _SPEC_HOOK),
        ("0.5.19", "0.5.23", _SPEC_HOOK, {
            "fragments": ('"Mixed chunked prefill is disabled: %s speculative decoding does "', '"not support it."'),
            "says": "SGLang switched mixed chunked prefill off (\"Mixed chunked prefill is disabled: ... does not support it\")",
            "sample": {"%s": "NGRAM"},
        }),
    ),
    *_per_release(
        Pattern("mixed chunk", "no", MIXED_OFF_NGRAM, "", "", "", _NGRAM_OLD, "SGLang switched mixed chunked prefill off for NGRAM"),
        ("0.5.9", "0.5.12", _ARGS),
        ("0.5.13", "0.5.13", _SPEC_HOOK),
        ("0.5.14", "0.5.23", _SPEC_HOOK, {
            "fragments": ('"The mixed chunked prefill are disabled because of "', '"using ngram speculative decoding."'),
        }),
    ),
    # ---- FlashInfer allreduce fusion: its workspace is created when the fusion runs; refusals and failures.
    *_per_release(
        Pattern(
            "flashinfer allreduce fusion", "yes", FUSION_WORKSPACE_OLD, "", "", "", (),
            "the fusion's workspace created (\"FlashInfer workspace initialized for rank ...\")", {"backend": "trtllm"},
        ),
        ("0.5.9", "0.5.9", _FUSION, {"fragments": (_WORKSPACE, 'f"world_size {world_size}"'), "sample": {}}),
        ("0.5.10", "0.5.12", _FUSION, {"fragments": (_WORKSPACE, 'f"world_size {world_size}, backend {backend}"')}),
        ("0.5.13", "0.5.13", _FUSION, {"fragments": (_WORKSPACE, 'f"world_size {world_size}, backend {backend}, "')}),
    ),
    Pattern(
        "flashinfer allreduce fusion", "yes", r"\bFlashInfer AllReduce Fusion enabled and workspace initialized\b", "0.5.14", "0.5.23",
        _FUSION, ('f"FlashInfer AllReduce Fusion enabled and workspace initialized: "',),
        "the fusion's workspace created (\"FlashInfer AllReduce Fusion enabled and workspace initialized\")",
    ),
    Pattern(
        "flashinfer allreduce fusion", "no", r"\bFlashInfer allreduce fusion requires SM90 or SM10X\b", "0.5.14", "0.5.23", _FUSION,
        ('"FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs."',),
        "SGLang refused the fusion on this GPU (\"FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs.\")",
    ),
    Pattern(
        "flashinfer allreduce fusion", "no", r"\bDisabling flashinfer allreduce fusion permanently\b", "0.5.10", "0.5.23", _FUSION,
        ('"Disabling flashinfer allreduce fusion permanently."',),
        "the workspace failed and SGLang switched the fusion off (\"... Disabling flashinfer allreduce fusion permanently.\")",
    ),
    Pattern(
        "flashinfer allreduce fusion", "no", r"\bFlashInfer workspace preflight probe failed\b.*\bSkipping allreduce fusion\b",
        "0.5.11", "0.5.23", _FUSION, ('"FlashInfer workspace preflight probe failed (%s). "', '"Skipping allreduce fusion."'),
        "the workspace's memory probe failed (\"... Skipping allreduce fusion.\")", {"%s": "CUDA error"},
    ),
    *_per_release(
        Pattern(
            "flashinfer allreduce fusion", "no", FUSION_NO_COMM, "", "", _FUSION,
            ('"FlashInfer comm not available, skipping workspace initialization"',),
            "flashinfer.comm is missing (\"FlashInfer comm not available, skipping workspace initialization\")",
        ),
        ("0.5.9", "0.5.9", _FUSION, {"fragments": ('"FlashInfer comm not available, skipping workspace "', '"initialization"')}),
        ("0.5.10", "0.5.23", _FUSION),
    ),
    *_per_release(
        Pattern(
            "flashinfer allreduce fusion", "no", FUSION_FORCED_OFF, "", "", "",
            ('"FlashInfer allreduce fusion is forcibly disabled "', '"via --enforce-disable-flashinfer-allreduce-fusion."'),
            "switched off by --enforce-disable-flashinfer-allreduce-fusion",
        ),
        ("0.5.10", "0.5.14", _ARGS),
        ("0.5.15", "0.5.23", _OVERRIDES),
    ),
    *_per_release(
        Pattern(
            "flashinfer allreduce fusion", "no", FUSION_DETERMINISTIC, "", "", "", _DETERMINISTIC,
            "switched off for deterministic inference",
        ),
        ("0.5.13", "0.5.13", _ARGS, {
            "fragments": ('"Disable --enable-flashinfer-allreduce-fusion because deterministic inference is enabled."',),
        }),
        ("0.5.14", "0.5.14", _ARGS),
        ("0.5.15", "0.5.23", _OVERRIDES),
    ),
    # ---- torch symmetric-memory all-reduce: SGLang logs only its refusals; nothing when it is on.
    Pattern(
        "torch symm-mem", "no", r"\bTorchSymmMemCommunicator: Device capability \S+ not supported\b", "0.5.9", "0.5.23", _SYMM,
        ('"TorchSymmMemCommunicator: Device capability %s not supported, "', '"communicator is not available."'),
        "the communicator refused this GPU (\"Device capability ... not supported, communicator is not available.\")", {"%s": "12"},
    ),
    Pattern(
        "torch symm-mem", "no", r"\bTorchSymmMemCommunicator: World size \d+ not supported\b", "0.5.9", "0.5.23", _SYMM,
        ('"TorchSymmMemCommunicator: World size %d not supported, "', '"communicator is not available."'),
        "the communicator refused the world size (\"World size ... not supported\")",
    ),
    Pattern(
        "torch symm-mem", "no", r"\bTorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported\b",
        "0.5.9", "0.5.23", _SYMM, ('"TorchSymmMemCommunicator: torch symmetric memory "', '"multicast operations are not supported."'),
        "no multicast (no NVSwitch): the communicator disabled itself (\"multicast operations are not supported.\")",
    ),
)

FIELDS: tuple[Field, ...] = (
    *_per_release(
        Field("cuda graphs", "no", "disable_cuda_graph", "true", "", "", "", ("disable_cuda_graph: ",), "CUDA graphs switched off"),
        ("0.5.9", "0.5.20", _ARGS),
        ("0.5.21", "0.5.23", f"{_FIELDS_DIR}/exec_.py"),
    ),
    Field(
        "cuda graphs", "no", "cuda_graph_config.decode.backend", "disabled", "0.5.14", "0.5.23",
        "sglang/srt/model_executor/cuda_graph_config.py", ('DISABLED = "disabled"',), "the decode phase's CUDA-graph backend is disabled",
    ),
    *_per_release(
        Field("cuda graphs", "yes", "internal_states[0].memory_usage.graph", "graph", "", "", "", (), ""),
        ("0.5.9", "0.5.16", "sglang/srt/managers/scheduler.py", {
            "fragments": ('"graph": round(self.tp_worker.model_runner.graph_mem_usage, 2),',),
            "says": "memory the captured CUDA graphs hold (GB)",
        }),
        ("0.5.17", "0.5.23", "sglang/srt/managers/scheduler_components/memory_usage.py", {
            "fragments": ('"graph": {',), "says": "memory the captured CUDA graphs hold, per phase (GB)",
        }),
    ),
    *_per_release(
        Field(
            "speculative decoding", "no", "speculative_algorithm", "null", "", "", "", ("speculative_algorithm: ",),
            "the server runs without a speculative algorithm",
        ),
        ("0.5.9", "0.5.20", _ARGS),
        ("0.5.21", "0.5.23", f"{_FIELDS_DIR}/spec.py"),
    ),
    *_per_release(
        Field(
            "speculative decoding", "yes", "internal_states[0].avg_spec_accept_length", "positive", "", "", "", (),
            "the scheduler measured an accept length",
        ),
        ("0.5.9", "0.5.22", "sglang/srt/managers/scheduler.py", {"fragments": ('ret["avg_spec_accept_length"] = (',)}),
        ("0.5.23", "0.5.23", "sglang/srt/managers/scheduler_components/internal_state.py", {
            "fragments": ('state["avg_spec_accept_length"] = accept_length',),
        }),
    ),
    *(
        Field("mixed chunk", verdict, "enable_mixed_chunk", value, first, last, source, ("enable_mixed_chunk: ",), f"resolved {state}")
        for first, last, source in (("0.5.9", "0.5.20", _ARGS), ("0.5.21", "0.5.23", f"{_FIELDS_DIR}/schedule.py"))
        for verdict, value, state in (("yes", "true", "on"), ("no", "false", "off"))
    ),
    Field(
        "flashinfer allreduce fusion", "no", "enable_flashinfer_allreduce_fusion", "false", "0.5.9", "0.5.13", _ARGS,
        ("enable_flashinfer_allreduce_fusion: ",), "resolved off",
    ),
    *_per_release(
        Field(
            "flashinfer allreduce fusion", "no", "flashinfer_allreduce_fusion_backend", "null", "", "", "",
            ("flashinfer_allreduce_fusion_backend: ",), "no fusion backend resolved (the deprecated flag maps to auto)",
        ),
        ("0.5.14", "0.5.20", _ARGS),
        ("0.5.21", "0.5.23", f"{_FIELDS_DIR}/exec_.py"),
    ),
    *_per_release(
        Field("torch symm-mem", "no", "enable_torch_symm_mem", "false", "", "", "", ("enable_torch_symm_mem: ",), "resolved off"),
        ("0.5.9", "0.5.20", _ARGS),
        ("0.5.21", "0.5.23", f"{_FIELDS_DIR}/exec_.py"),
    ),
)

MARKERS: tuple[Marker, ...] = (
    Marker(
        "server_args", SERVER_ARGS_LINE, "0.5.9", "0.5.18", "sglang/srt/entrypoints/engine.py", ('f"{server_args=}"',),
        {"server_args=": "server_args=ServerArgs(model_path='/models/target', disable_cuda_graph=False, enable_mixed_chunk=False)"},
    ),
    Marker(
        "server_args", SERVER_ARGS_LINE, "0.5.19", "0.5.21", "sglang/srt/entrypoints/engine.py",
        ('f"server_args={server_args.resolved_dict()}"',),
        {"server_args.resolved_dict()": "{'model_path': '/models/target', 'disable_cuda_graph': False}"},
    ),
    Marker(
        "server_args", SERVER_ARGS_LINE, "0.5.22", "0.5.23", "sglang/srt/entrypoints/engine.py",
        ('f"server_args={_server_args_for_logging(server_args)}"',),
        {"_server_args_for_logging(server_args)": "{'model_path': '/models/target', 'disable_cuda_graph': False}"},
    ),
    Marker(
        "ready", READY_LINE, "0.5.9", "0.5.23", "sglang/srt/entrypoints/http_server.py", ('"The server is fired up and ready to roll!"',),
    ),
)
# fmt: on


# SGLang's log format (configure_logger: "[%(asctime)s{maybe_ms}{prefix}] %(message)s", prefix e.g. " TP0").
LOG_PREFIX = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?(?: [^\]\n]{1,40})?\] ")
DECODE_NO_GRAPH = re.compile(r"Decode batch\b.*\bcuda graph: False\b")


# ------------------------------------------------------------------ versions


def parse_version(text: Any) -> Optional[tuple[int, int, int]]:
    """(0, 5, 9) for "0.5.9", "v0.5.9", "0.5.9.post1", "0.5.23rc0"; None when it is not a version."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:[.+\-]?[A-Za-z][\w.+\-]*)?", str(text or "").strip())
    return (int(match.group(1)), int(match.group(2)), int(match.group(3))) if match else None


def _in_range(version: tuple[int, int, int], low: str, high: str) -> bool:
    lo, hi = parse_version(low), parse_version(high)
    if lo is None or hi is None:
        raise ValueError(f"evidence table: a version range must be MAJOR.MINOR.PATCH, found {low!r}..{high!r}")
    return lo <= version <= hi


def known(version: Any) -> bool:
    """Whether the table covers this SGLang version."""
    parsed = parse_version(version)
    return parsed is not None and _in_range(parsed, VERSION_MIN, VERSION_MAX)


def patterns_for(version: Any) -> list[Pattern]:
    parsed = parse_version(version)
    return [p for p in PATTERNS if parsed is not None and _in_range(parsed, p.min, p.max)]


def fields_for(version: Any) -> list[Field]:
    parsed = parse_version(version)
    return [f for f in FIELDS if parsed is not None and _in_range(parsed, f.min, f.max)]


def markers_for(version: Any) -> list[Marker]:
    parsed = parse_version(version)
    return [m for m in MARKERS if parsed is not None and _in_range(parsed, m.min, m.max)]


# ------------------------------------------------------------------ format strings (for the tests and the docs)


def _split_placeholder(inner: str) -> tuple[str, str]:
    """expr and format spec of an f-string placeholder body, e.g. "(a - b):.2f" -> ("(a - b)", ".2f")."""
    depth = 0
    for i, ch in enumerate(inner):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and ch == "!" and inner[i + 1 : i + 2] != "=":
            spec = inner[i + 1 :].partition(":")[2]
            return inner[:i].strip(), spec
        elif depth == 0 and ch == ":":
            return inner[:i].strip(), inner[i + 1 :]
    return inner.strip(), ""


def _default_value(spec: str) -> str:
    if re.fullmatch(r"[<>^=]?[+\- ]?#?0?\d*[,_]?(?:\.\d+)?[eEfFgG%]", spec):
        return format(1.0, spec)
    return "1"


def render_literal(literal: str, sample: Mapping[str, str] = {}) -> str:
    """The text a Python string literal (an f-string, or a %-format string) prints, placeholders filled
    from ``sample`` (keyed by the expression, or "%s"/"%d"), else with 1 / 1.00. The closing quote may
    be missing (a fragment cut inside a literal)."""
    match = re.fullmatch(r"([rRfFbBuU]{0,2})(\"|')(.*?)(?:\2)?", literal.lstrip(), re.S)
    if not match:
        raise ValueError(f"not a string literal: {literal!r}")
    prefix, body = match.group(1).lower(), match.group(3)
    if "r" not in prefix:
        body = re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)
    if "f" not in prefix:
        return re.sub(r"%(?:\.(\d+))?([sdrf%])", lambda m: _percent(m, sample), body)
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch in "{}" and body[i + 1 : i + 2] == ch:
            out.append(ch)
            i += 2
            continue
        if ch != "{":
            out.append(ch)
            i += 1
            continue
        depth, j = 1, i + 1
        while j < len(body) and depth:
            depth += {"{": 1, "}": -1}.get(body[j], 0)
            j += 1
        expr, spec = _split_placeholder(body[i + 1 : j - 1])
        out.append(sample.get(expr, _default_value(spec)))
        i = j
    return "".join(out)


def _percent(match: re.Match[str], sample: Mapping[str, str]) -> str:
    kind = match.group(2)
    if kind == "%":
        return "%"
    if kind == "f":
        return f"{1.0:.{int(match.group(1) or 6)}f}"
    return sample.get(f"%{kind}", "1")


def render(fragments: Sequence[str], sample: Mapping[str, str] = {}) -> str:
    """The line a format string made of these literals prints."""
    return "".join(render_literal(f, sample) for f in fragments)


# ------------------------------------------------------------------ redaction


_SECRET_NAME = re.compile(r"(?:^|_)(?:api_key|secret|token|password)$")
_LINE_SECRETS = (
    # ServerArgs(... api_key='...') and {'api_key': '...'} (the server args SGLang logs at start)
    re.compile(r"(\b\w*(?:api_key|_secret|_token|_password)\b['\"]?\s*(?:=|:)\s*)('[^']*'|\"[^\"]*\")"),
    # --api-key VALUE / --admin-api-key=VALUE (a launch command line)
    re.compile(r"(--(?:admin-)?api-key(?:=|\s+))(?!<redacted>)(\S+)"),
)


def _secret(name: Any) -> bool:
    return isinstance(name, str) and bool(_SECRET_NAME.search(name))


def redact(info: Any) -> Any:
    """server_info with every key field (``api_key``, ``admin_api_key``, any ``*_api_key``, ``*_secret``,
    ``*_token``, ``*_password``) replaced by "<redacted>" when not null, at any depth (SGLang repeats
    its server args inside ``internal_states``, and ``decode``/``prefill`` lists when disaggregated),
    and the key in a ``launch_command`` string."""
    if isinstance(info, Mapping):
        out = {}
        for key, value in info.items():
            if _secret(key) and value is not None:
                out[key] = REDACTED
            elif isinstance(value, str):
                out[key] = redact_line(value)
            else:
                out[key] = redact(value)
        return out
    if isinstance(info, list):
        return [redact(v) for v in info]
    return info


def redact_line(line: str) -> str:
    """A log line with the key values SGLang may print (its server args, a command line) replaced."""
    for pattern in _LINE_SECRETS:
        line = pattern.sub(lambda m: m.group(1) + (f"'{REDACTED}'" if m.group(2)[:1] in "'\"" else REDACTED), line)
    return line


# ------------------------------------------------------------------ journal


def _message(line: str) -> str:
    """The line from its last SGLang prefix on (a tqdm bar before it is dropped), trimmed."""
    starts = [m.start() for m in LOG_PREFIX.finditer(line)]
    return (line[starts[-1] :] if starts else line).strip()[:300]


def _compiled(version: Any) -> list[tuple[re.Pattern[str], bool]]:
    entries: list[Any] = (patterns_for(version) + markers_for(version)) if known(version) else [*PATTERNS, *MARKERS]
    seen: dict[str, bool] = {}
    for entry in entries:
        seen[entry.regex] = seen.get(entry.regex, False) or getattr(entry, "traffic", False)
    return [(re.compile(rx), traffic) for rx, traffic in seen.items()]


def select_lines(lines: Iterable[str], version: Any = None, tail: int = TRAFFIC_TAIL) -> list[str]:
    """From the journal of one server run: every start-up line (up to and including "The server is
    fired up and ready to roll!", all of them when it never came) that a table entry of ``version``
    (of any version when it is unknown) matches, whatever traffic follows; after it, every matching
    line except the periodic ones (Decode batch), of which the last ``tail`` are kept. Redacted."""
    patterns = _compiled(version)
    ready = re.compile(next(m.regex for m in MARKERS if m.kind == "ready"))
    startup, tail_lines, other = [], [], []
    started = False
    for raw in lines:
        line = raw.rstrip("\n")
        hits = [traffic for rx, traffic in patterns if rx.search(line)]
        if not started:
            if hits:
                startup.append(line)
            started = bool(ready.search(line))
            continue
        if hits and all(hits):
            tail_lines.append(line)
        elif hits:
            other.append(line)
    kept = startup + other[-max(tail, 1) * 4 :] + (tail_lines[-tail:] if tail > 0 else [])
    return [redact_line(line) for line in kept]


def read_journal(path: str) -> list[str]:
    """The lines of a file holding what SGLang printed (``journalctl -o cat`` or the server's own
    stderr); EvidenceError when it is empty, binary, JSON, or has no line in SGLang's log format."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise EvidenceError(f"journal {path}: {exc.strerror or exc}") from exc
    expected = "expected SGLang's log (lines like '[2026-01-01 12:00:00] Load weight begin. ...')"
    if not data.strip():
        raise EvidenceError(f"journal {path} is empty: {expected}")
    if b"\0" in data:
        raise EvidenceError(f"journal {path} is binary (NUL bytes): {expected}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EvidenceError(f"journal {path} is not UTF-8 text ({exc.reason} at byte {exc.start}): {expected}") from exc
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, (dict, list)):
        raise EvidenceError(f"journal {path} is JSON ({type(parsed).__name__}), not a log: {expected}")
    lines = text.splitlines()
    if not any(LOG_PREFIX.search(line) for line in lines) and not any(rx.search(line) for line in lines for rx, _ in _compiled(None)):
        first = next((line for line in lines if line.strip()), "")[:80]
        raise EvidenceError(f"journal {path}: no line in SGLang's log format ({len(lines)} lines, the first: {first!r}): {expected}")
    return lines


def read_server_info(path: str) -> dict[str, Any]:
    """A saved /server_info (or /get_server_info) answer; EvidenceError when it is not a JSON object
    with SGLang's server-args fields (``model_path``, ``version``; a disaggregated answer's decode side)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise EvidenceError(f"server info {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise EvidenceError(f"server info {path} is not UTF-8 text: expected the JSON object SGLang's /server_info answers") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise EvidenceError(f"server info {path} is not JSON ({exc}): expected the JSON object SGLang's /server_info answers") from exc
    if not isinstance(data, dict):
        raise EvidenceError(f"server info {path}: expected a JSON object (SGLang's /server_info answer), found {type(data).__name__}")
    state = _state(data) or {}
    missing = [k for k in ("model_path", "version") if k not in state and k not in data]
    if missing:
        keys = ", ".join(sorted(data)[:8]) or "none"
        raise EvidenceError(
            f"server info {path}: no {' or '.join(missing)}: expected SGLang's /server_info fields (server args, version), "
            f"found keys: {keys}"
        )
    return redact(data)


# ------------------------------------------------------------------ the judge


def _state(info: Optional[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    """The /server_info answer of one server (its decode side when disaggregated)."""
    if not isinstance(info, Mapping):
        return None
    decode = info.get("decode")
    if isinstance(decode, list) and decode and isinstance(decode[0], Mapping):
        return decode[0]
    return info


_MISSING = object()


def lookup(state: Mapping[str, Any], path: str) -> Any:
    """A field by its path ("a.b", "a[0].b"), or _MISSING."""
    value: Any = state
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(value, list) or index >= len(value):
                return _MISSING
            value = value[index]
        elif isinstance(value, Mapping) and part in value:
            value = value[part]
        else:
            return _MISSING
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _passes(test: str, value: Any) -> bool:
    if value is _MISSING:
        return False
    if test == "true":
        return value is True
    if test == "false":
        return value is False
    if test == "null":
        return value is None
    if test == "positive":
        return _number(value) and value > 0
    if test == "disabled":
        return value == "disabled"
    if test == "graph":  # a number up to 0.5.16, {phase: GB} from 0.5.17 (the decode graphs: decode, target_verify)
        if isinstance(value, Mapping):
            return any(_number(v) and v > 0 for k, v in value.items() if k in ("decode", "target_verify"))
        return _number(value) and value > 0
    raise ValueError(f"unknown field test {test!r}")


def server_args_from_log(lines: Iterable[str], names: Optional[Sequence[str]] = None) -> Optional[dict[str, Any]]:
    """The top-level fields the table reads (or `names`), from the server args SGLang logs at start
    (``server_args=ServerArgs(a=1, ...)`` up to 0.5.18, ``server_args={'a': 1, ...}`` from 0.5.19)."""
    if names is None:
        names = sorted({f.path for f in FIELDS if re.fullmatch(r"\w+", f.path)} | {"tp_size"})
    marker = re.compile(next(m.regex for m in MARKERS if m.kind == "server_args"))
    for line in lines:
        if not marker.search(line):
            continue
        out: dict[str, Any] = {}
        for name in names:
            m = re.search(rf"(?:\b{name}=|'{name}': )(True|False|None|'[^']*'|\"[^\"]*\"|-?\d+(?:\.\d+)?)", line)
            if m:
                raw = m.group(1)
                if raw in ("True", "False", "None"):
                    out[name] = {"True": True, "False": False, "None": None}[raw]
                else:
                    out[name] = raw[1:-1] if raw[:1] in "'\"" else json.loads(raw)
        return out
    return None


def flag_value(argv: Sequence[str], flag: str) -> tuple[bool, Optional[str]]:
    """Whether ``flag`` is given (``--f v``, ``--f=v`` or a bare switch) and its value."""
    args = [str(a) for a in argv]
    for i, arg in enumerate(args):
        if arg == flag:
            nxt = args[i + 1] if i + 1 < len(args) else None
            return True, (nxt if nxt is not None and not nxt.startswith("--") else None)
        if arg.startswith(flag + "="):
            return True, arg.split("=", 1)[1]
    return False, None


def _requested(name: str, argv: Sequence[str]) -> tuple[bool, Optional[str], Optional[str]]:
    """Whether the flags ask for the optimisation, the flag that says so (None: CUDA graphs, on by default) and its value."""
    if name == "cuda graphs":
        for flag in CUDA_GRAPHS_OFF:
            given, value = flag_value(argv, flag)
            if given and (value is None or value.lower() not in ("false", "0")):
                return False, flag, value
        given, value = flag_value(argv, "--cuda-graph-backend-decode")
        if given and value == "disabled":
            return False, "--cuda-graph-backend-decode", value
        for flag in FLAGS[name]:
            given, value = flag_value(argv, flag)
            if given:
                return True, flag, value
        return True, None, None
    for flag in FLAGS[name]:
        given, value = flag_value(argv, flag)
        if given:
            return True, flag, value
    return False, FLAGS[name][0], None


def _looked_for(name: str, version: Any) -> str:
    wanted = [p.says for p in patterns_for(version) if p.name == name and p.verdict == "yes"]
    wanted += [f"/server_info {f.path}" for f in fields_for(version) if f.name == name and f.verdict == "yes"]
    return "; ".join(dict.fromkeys(wanted)) or "nothing: SGLang prints no line and answers no field that shows it on"


def judge(
    argv: Sequence[str],
    log_lines: Iterable[str] = (),
    server_info: Optional[Mapping[str, Any]] = None,
    version: Any = None,
    flag_warnings: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Per optimisation: {name, flag, value, verdict, evidence, note}.

    ``verdict`` is ``yes`` only on positive evidence (a line or /server_info field of this SGLang
    version that shows it working), ``no`` on negative evidence (a line or field that shows it off or
    refused, the flags switching it off, a flag-check warning calling the flag a no-op here), negative
    winning, else ``unknown`` with a note naming what was looked for. Listed: every optimisation the
    flags ask for, CUDA graphs always (on unless switched off), and one not asked for only where the
    server shows it on. Without /server_info the server args SGLang logs at start stand in for it.
    A version outside the table: no line or field is read, every such verdict is unknown."""
    lines = [str(line) for line in log_lines]
    in_table = known(version)
    patterns = patterns_for(version) if in_table else []
    fields = fields_for(version) if in_table else []
    state = _state(server_info)
    from_log = None if state is not None else server_args_from_log(lines)
    where = "/server_info" if state is not None else "server log (server_args)"
    values = state if state is not None else from_log
    compiled = [(p, re.compile(p.regex)) for p in patterns]
    hits: dict[int, str] = {}
    no_graph = ""
    for line in lines:
        for index, (pattern, rx) in enumerate(compiled):
            if rx.search(line) and (pattern.traffic or index not in hits):
                hits[index] = _message(line)
        if not no_graph and in_table and DECODE_NO_GRAPH.search(line):
            no_graph = _message(line)
    out = []
    for name in OPTIMISATIONS:
        requested, flag, value = _requested(name, argv)
        yes: list[str] = []
        no: list[str] = []
        if name == "cuda graphs" and not requested:
            no.append(f"flags: {flag}{' ' + value if value else ''}")
        for warning in map(str, flag_warnings):
            if any(warning.startswith(f + " ") for f in FLAGS[name]) and ("no-op" in warning or "never takes effect" in warning):
                no.append(f"flag check: {warning}")
        for index, (pattern, _) in enumerate(compiled):
            if pattern.name == name and index in hits:
                (yes if pattern.verdict == "yes" else no).append(f"server log: {hits[index]}")
        if values is not None:
            for entry in fields:
                if entry.name != name or (state is None and not re.fullmatch(r"\w+", entry.path)):
                    continue
                found = lookup(values, entry.path)
                if _passes(entry.test, found):
                    (yes if entry.verdict == "yes" else no).append(f"{where}: {entry.path}={json.dumps(found)}")
        yes, no = list(dict.fromkeys(yes)), list(dict.fromkeys(no))
        if not (requested or yes or name == "cuda graphs"):
            continue
        verdict = "no" if no else ("yes" if yes else "unknown")
        out.append(
            {
                "name": name,
                "flag": flag,
                "value": value,
                "verdict": verdict,
                "evidence": (no or yes)[:6],
                "note": _note(name, verdict, yes, version, in_table, state, from_log, lines, no_graph, values),
            }
        )
    return out


def _note(
    name: str,
    verdict: str,
    yes: list[str],
    version: Any,
    in_table: bool,
    state: Optional[Mapping[str, Any]],
    from_log: Optional[Mapping[str, Any]],
    lines: list[str],
    no_graph: str,
    values: Optional[Mapping[str, Any]],
) -> str:
    if verdict == "no":
        return f"negative evidence wins; also seen: {'; '.join(yes[:2])}" if yes else ""
    if verdict == "yes":
        return ""
    if not in_table:
        shown = f"SGLang {version}" if parse_version(version) else f"SGLang version {version!r}"
        return (
            f"{shown} is outside the versions the evidence table knows ({VERSION_MIN} to {VERSION_MAX}): "
            "no line or /server_info field was read"
        )
    parts = [f"nothing seen: looked for {_looked_for(name, version)}"]
    if name == "torch symm-mem":
        parts = ["SGLang logs nothing when torch symm-mem all-reduce is on (only its refusals) and no /server_info field says it is active"]
        if values is not None and values.get("tp_size") == 1:
            parts.append("tp_size is 1: there is no all-reduce for it to run")
    if name == "speculative decoding" and values is not None and values.get("speculative_algorithm"):
        parts.append(
            f"speculative_algorithm={values['speculative_algorithm']} but no accept length yet "
            "(internal_states[0].avg_spec_accept_length is folded in every 40 decode steps)"
        )
    if name == "cuda graphs" and no_graph:
        parts.append(
            f"decode batches without graphs were seen ({no_graph}): a batch above cuda_graph_max_bs runs eager: not proof they are off"
        )
    if name == "flashinfer allreduce fusion":
        parts.append("up to 0.5.13 the fusion runs only on SM90/SM100 and logs nothing where it is gated off")
    if state is None:
        parts.append("no /server_info answer was recorded" + (" (the server args logged at start were read)" if from_log else ""))
    if not lines:
        parts.append("no server log lines were recorded")
    return "; ".join(parts)


def findings(results: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The ``no`` verdicts as the start-up findings sglang_service records: {name, meaning, line}."""
    out = []
    for result in results:
        if result.get("verdict") != "no":
            continue
        first = str((result.get("evidence") or [""])[0])
        line = first.split(": ", 1)[1] if first.startswith(("server log: ", "/server_info: ", "server log (server_args): ")) else first
        out.append({"name": str(result["name"]), "meaning": f"{result['name']} off at start: {first}", "line": line[:300]})
    return out
