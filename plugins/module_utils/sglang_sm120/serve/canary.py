"""Start canary: serve the new release's own SGLang on tiny models, send it a few requests, stop it.

Plain Python, standard library only, no Ansible imports; it runs on the GPU host (plugins/modules/sglang_canary.py
wraps it). The canary runs the release's own server (its venv's python, ``-m <launch module>``, its
launch flags and environment) with the model paths replaced by the tiny models of plugins/module_utils/sglang_sm120/serve/tiny_models.py,
on its own port and a small memory fraction (canary_argv), and judges it by what it does (run_canary):

  1. the port must be free (something answering there would be judged instead of the canary);
  2. the server starts as a child in its own process group, stdout and stderr to the log file only;
  3. GET /health is probed as the health gate probes it (service_health.probe) every 0.5 s until 200,
     the server exits, or the start timeout: the phase it stopped in is the probe's ("port closed",
     "503", "no answer", "HTTP <n>") or "exited" with the exit status;
  4. once healthy: one streamed request, then `concurrency` concurrent ones (bench_client.stream_one and
     bench_client.run, 32 tokens each, the API key when the server has one); all must complete, else
     the phase is "requests" ("exited" when the server died meanwhile);
  5. always (also on failure or an exception): SIGTERM to the group, up to 60 s, then SIGKILL; nothing
     of the group is left. The keys are then replaced by <redacted> in the log file.

The result never holds a key: every string in it is redacted with the key values given and with
bench_client.redact_line (an ``api_key='...'`` field, ``--api-key VALUE``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ..errors import ToolkitError
from ..launch import placement
from ..launch.placement import flag_of, flag_value
from ..launch.start_failures import match_log
from . import bench_client
from . import evidence as server_evidence
from . import health as service_health

# The flags canary_argv replaces, with SGLang's aliases (ServerArgs.add_cli_args, 0.5.9 to 0.5.23).
MODEL_FLAGS = ("--model-path", "--model")
DRAFT_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model")
TOKENIZER_FLAGS = ("--tokenizer-path",)
PORT_FLAGS = ("--port",)
HOST_FLAGS = ("--host",)
MEM_FLAGS = ("--mem-fraction-static",)
KV_DTYPE_FLAGS = ("--kv-cache-dtype",)
TP_FLAGS = placement.TP_FLAGS
PP_FLAGS = placement.PP_FLAGS
CANARY_HOST = "127.0.0.1"

PHASES = {
    **service_health.PHASES,
    "exited": "the server exited before it was healthy (or while it served the canary's requests)",
    "requests": "the server was healthy but did not complete every canary request",
    "port in use": "something already answers on the canary's port: the canary was not started",
    "not started": "the server could not be started (its python or working directory is missing)",
    "served": "healthy, and every canary request completed",
}
DEFAULT_PROMPTS = (
    "The capital of France is",
    "Write a short poem about a graphics card.",
    "Explain speculative decoding in one sentence.",
    "List three prime numbers:",
)
OUTPUT_LEN = 32
POLL_INTERVAL = 0.5
PROBE_TIMEOUT = 30.0
STOP_GRACE = 60.0
LOG_TAIL = 25


class CanaryArgvError(ToolkitError):
    """The launch flags cannot be turned into the canary's."""


class CanaryInputError(ToolkitError):
    """What the canary reads on the host cannot be used: nvidia-smi's answer, the API-keys file, the
    models the tiny ones are made from (the stand-alone scripts' own KeysFileError and TinyModelError
    are raised as this one)."""


@dataclass
class CanaryResult:
    ok: bool
    phase: str
    seconds: float
    message: str
    url: str = ""
    healthy_at: Optional[float] = None
    port_open_at: Optional[float] = None
    first_503_at: Optional[float] = None
    phases: list[list[Any]] = field(default_factory=list)  # [phase, seconds when first seen], in order
    requests: dict[str, Any] = field(default_factory=dict)
    exit_status: Optional[int] = None
    pid: Optional[int] = None  # the server's (and its process group's) id; gone once run_canary returns
    stopped: str = ""
    log: str = ""
    log_tail: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    server_info: Optional[dict[str, Any]] = None  # /server_info (or /get_server_info) while healthy, redacted
    evidence: dict[str, Any] = field(default_factory=dict)  # canary_evidence: backends and optimisations it showed
    # the start-failure catalogue entry whose log signature matched (start_failures.match_log): name (its id), title,
    # cause, fix, refs and the log line; None when none did
    known_cause: Optional[dict[str, Any]] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------ the canary's flags


def _replace(argv: list[str], names: Sequence[str], value: str) -> bool:
    """Every occurrence of the flag gets value (as it was spelt: ``--f v`` or ``--f=v``); whether any was found."""
    found = False
    i = 0
    while i < len(argv):
        name = flag_of(argv[i], names)
        if name is None:
            i += 1
            continue
        found = True
        if "=" in argv[i]:
            argv[i] = f"{name}={value}"
            i += 1
        elif i + 1 < len(argv):
            argv[i + 1] = value
            i += 2
        else:
            raise CanaryArgvError(f"{argv[i]} has no value in the launch flags")
    return found


REASONING_PARSER_FLAGS = ("--reasoning-parser",)


def canary_argv(
    plan_argv: Sequence[str], target: str, draft: Optional[str], port: int, mem_fraction: float, kv_cache_dtype: Optional[str] = None
) -> list[str]:
    """The release's launch flags with the model paths replaced by the tiny models' (``--model-path``,
    ``--speculative-draft-model-path``, ``--tokenizer-path`` when present: the tiny target holds the
    tokenizer's files), ``--port`` port, ``--host`` 127.0.0.1, ``--mem-fraction-static`` mem_fraction;
    every other flag kept exactly, in its place (TP size, backends, speculative settings, --config).
    A flag absent from the plan is appended. A plan with a draft needs a tiny draft; a draft without a
    draft flag in the plan is not added (the release does not speculate). kv_cache_dtype (the tiny
    models' launch hint: the real checkpoint declares an fp8 KV cache that SGLang's "auto" would pick)
    is passed only where the plan leaves --kv-cache-dtype unset or "auto".
    ``--reasoning-parser`` is left out: from it SGLang 0.5.12-0.5.16 constrain reasoning with the parser's think-end
    token and stop at start unless the model's tokenizer encodes it as exactly one token ("</think>" for kimi_k2),
    which the real Kimi tokenizer does and the tiny models' small tokenizer cannot (seen on a real 0.5.13 server,
    tests/data/real-server/0.5.13-h100-drain/README section)."""
    if not 0.0 < mem_fraction < 1.0:
        raise CanaryArgvError(f"mem_fraction must be between 0 and 1, found {mem_fraction}")
    if not 0 < int(port) < 65536:
        raise CanaryArgvError(f"port must be 1-65535, found {port}")
    argv = _drop_list_flag([str(a) for a in plan_argv], REASONING_PARSER_FLAGS)
    replacements: list[tuple[Sequence[str], str, bool]] = [
        (MODEL_FLAGS, str(target), True),
        (TOKENIZER_FLAGS, str(target), False),
        (PORT_FLAGS, str(int(port)), True),
        (HOST_FLAGS, CANARY_HOST, True),
        (MEM_FLAGS, str(mem_fraction), True),
    ]
    if flag_value(argv, DRAFT_FLAGS) is not None:
        if not draft:
            raise CanaryArgvError("the launch flags have --speculative-draft-model-path but no tiny draft was given")
        replacements.append((DRAFT_FLAGS, str(draft), False))
    if kv_cache_dtype and (flag_value(argv, KV_DTYPE_FLAGS) or "auto") == "auto":
        replacements.append((KV_DTYPE_FLAGS, str(kv_cache_dtype), True))
    missing = [[names[0], value] for names, value, append in replacements if not _replace(argv, names, value) and append]
    for pair in missing:  # appended after every replacement, so that no appended value is taken for one
        argv += pair
    return argv


# ------------------------------------------------------------------ CUDA graphs, trimmed

# Most of a canary's start is CUDA-graph capture for batch sizes it never sends (SGLang 0.5.13 with
# EAGLE-3 captures bs 1-8 for the target and again for the draft, and piecewise prefill graphs for 42
# token counts). The canary keeps capturing (capture failures are start failures) but only the sizes
# its requests use. The flags, read from each release's own argument parser:
#   0.5.9-0.5.19   --cuda-graph-bs (decode, target and draft) and --piecewise-cuda-graph-tokens /
#                  --piecewise-cuda-graph-max-tokens (prefill; off by default before 0.5.11, on after)
#   0.5.20-        --cuda-graph-bs-decode (the per-phase settings; prefill graphs are left as planned)
GRAPH_LEGACY_UNTIL = (0, 5, 20)
GRAPH_BS_FLAGS = ("--cuda-graph-bs",)
GRAPH_MAX_BS_FLAGS = ("--cuda-graph-max-bs",)
GRAPH_BS_DECODE_FLAGS = ("--cuda-graph-bs-decode",)
GRAPH_MAX_BS_DECODE_FLAGS = ("--cuda-graph-max-bs-decode",)
PIECEWISE_TOKEN_FLAGS = ("--piecewise-cuda-graph-tokens",)
PIECEWISE_MAX_FLAGS = ("--piecewise-cuda-graph-max-tokens",)
CANARY_PIECEWISE_TOKENS = (64, 256)  # the canary's prompts are a few tokens each, four at a time at most
NO_GRAPH_FLAGS = ("--disable-cuda-graph",)


def _drop_list_flag(argv: list[str], names: Sequence[str]) -> list[str]:
    """argv without the flag and the values that follow it (a list flag: ``--f 1 2 4`` or ``--f=1``)."""
    out: list[str] = []
    skipping = False
    for arg in argv:
        if flag_of(arg, names) is not None:
            skipping = "=" not in arg
            continue
        if skipping and not arg.startswith("-"):
            continue
        skipping = False
        out.append(arg)
    return out


def _set_list_flag(argv: list[str], names: Sequence[str], values: Sequence[int]) -> list[str]:
    return [*_drop_list_flag(argv, names), names[0], *[str(v) for v in values]]


def trim_cuda_graphs(argv: Sequence[str], batch_sizes: Sequence[int], sglang_version: Optional[str]) -> tuple[list[str], str]:
    """The canary's flags with CUDA graphs captured only for batch_sizes (and the piecewise prefill
    graphs for CANARY_PIECEWISE_TOKENS where the release has them), in the flags that release's parser
    knows; and what was traded, in words. Unchanged (and said why) when batch_sizes is empty, the plan
    turns CUDA graphs off, or the version is unknown."""
    out = [str(a) for a in argv]
    sizes = sorted({int(b) for b in batch_sizes})
    if not sizes:
        return out, "CUDA graphs as the launch plan captures them (sglang_canary_graph_batch_sizes is empty)"
    if any(b < 1 for b in sizes):
        raise CanaryArgvError(f"sglang_canary_graph_batch_sizes must be positive batch sizes, found {list(batch_sizes)}")
    if any(flag_of(a, NO_GRAPH_FLAGS) for a in out):
        return out, "no CUDA graphs to trim: the launch plan has --disable-cuda-graph"
    version = server_evidence.parse_version(sglang_version)
    if version is None:
        return out, f"CUDA graphs as planned: the SGLang version ({sglang_version or 'unknown'}) does not say which flags trim them"
    shown = " ".join(str(b) for b in sizes)
    if version < GRAPH_LEGACY_UNTIL:
        out = _set_list_flag(out, GRAPH_BS_FLAGS, sizes)
        _replace(out, GRAPH_MAX_BS_FLAGS, str(sizes[-1]))
        out = _set_list_flag(out, PIECEWISE_TOKEN_FLAGS, CANARY_PIECEWISE_TOKENS)
        if not _replace(out, PIECEWISE_MAX_FLAGS, str(max(CANARY_PIECEWISE_TOKENS))):
            out += [PIECEWISE_MAX_FLAGS[0], str(max(CANARY_PIECEWISE_TOKENS))]
        prefill = f"piecewise prefill graphs for {' and '.join(str(t) for t in CANARY_PIECEWISE_TOKENS)} tokens"
    else:
        out = _set_list_flag(out, GRAPH_BS_DECODE_FLAGS, sizes)
        _replace(out, GRAPH_MAX_BS_DECODE_FLAGS, str(sizes[-1]))
        prefill = "prefill graphs as planned"
    return out, (
        f"CUDA graphs captured for batch sizes {shown} only, {prefill}: a capture failure shows, "
        "one that only a larger batch size meets does not"
    )


# ------------------------------------------------------------------ redaction


def _secret_forms(keys: Optional[Mapping[str, str]]) -> list[str]:
    forms: set[str] = set()
    for value in (keys or {}).values():
        if value:
            forms.update({value, repr(value)[1:-1], repr(value + '"')[1:-2], json.dumps(value)[1:-1]})
    return sorted((f for f in forms if f), key=len, reverse=True)


def _redact(value: Any, forms: Sequence[str]) -> Any:
    if isinstance(value, str):
        for form in forms:
            value = value.replace(form, "<redacted>")
        return bench_client.redact_line(value)
    if isinstance(value, Mapping):
        return {k: _redact(v, forms) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v, forms) for v in value]
    return value


# ------------------------------------------------------------------ the unit's environment


class EnvFileError(ToolkitError):
    """An EnvironmentFile the canary must read cannot be read."""


def _unquote(value: str) -> str:
    """A value as systemd reads it: "double" (backslash escapes) or 'single' quoted, else as written."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        out, i, inner = [], 0, value[1:-1]
        while i < len(inner):
            if inner[i] == "\\" and i + 1 < len(inner):
                nxt = inner[i + 1]
                out.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
                i += 2
            else:
                out.append(inner[i])
                i += 1
        return "".join(out)
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1]
    return value


def read_env_file(path: str) -> dict[str, str]:
    """An EnvironmentFile= as systemd reads what this toolkit writes: KEY=VALUE lines, # and ;
    comments, blank lines, values plain or quoted. A leading "-" on the path (as in the unit) makes a
    missing file empty. Raises EnvFileError naming the file and line for anything else."""
    optional = path.startswith("-")
    path = path[1:] if optional else path
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        if optional:
            return {}
        raise EnvFileError(f"{path}: the environment file of the release is missing") from None
    except OSError as exc:
        raise EnvFileError(f"{path}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # not UTF-8
        raise EnvFileError(str(exc)) from exc
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise EnvFileError(f"{path} line {number}: expected KEY=VALUE, found {line[:60]!r}")
        env[name] = _unquote(value.strip())
    return env


def read_api_keys(path: Optional[str], error: type[ToolkitError] = CanaryInputError) -> dict[str, str]:
    """The service's API-keys file as bench_client.read_keys reads it; ``error`` (a ToolkitError) for its KeysFileError."""
    try:
        return bench_client.read_keys(path)
    except (bench_client.KeysFileError, ValueError) as exc:  # ValueError: not UTF-8
        raise error(str(exc)) from exc


def _as_user(user: Optional[str]) -> dict[str, Any]:
    """Popen's arguments that run the child as `user` with its primary group and no other group."""
    if not user:
        return {}
    import pwd

    entry = pwd.getpwnam(user)  # KeyError: no such user
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


# ------------------------------------------------------------------ where it runs


GPU_QUERY = ["nvidia-smi", "--query-gpu=index,memory.total,memory.used,memory.free", "--format=csv,noheader,nounits"]
POLICIES = ("auto", "beside", "switch-window", "off")


@dataclass(frozen=True)
class GpuMemory:
    index: int
    total_mib: int
    used_mib: int
    free_mib: int


def parse_gpu_memory(text: str) -> list[GpuMemory]:
    """What GPU_QUERY prints (one "index, total, used, free" line per GPU, MiB); CanaryArgvError
    naming the line for anything else."""
    gpus = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        cells = [c.strip() for c in raw.split(",")]
        if len(cells) != 4 or not all(c.isdigit() for c in cells):
            raise CanaryArgvError(
                f"nvidia-smi line {number}: expected 'index, memory.total, memory.used, memory.free' in MiB, found {raw!r}"
            )
        gpus.append(GpuMemory(*(int(c) for c in cells)))
    return gpus


def query_gpu_memory() -> list[GpuMemory]:
    """Each GPU's memory as nvidia-smi reports it now (GPU_QUERY); CanaryInputError when it cannot be read."""
    if shutil.which(GPU_QUERY[0]) is None:
        raise CanaryInputError(
            "gpu_query: nvidia-smi is not on PATH, so the GPUs' free memory cannot be read (gpu_query=false on a host without GPUs)"
        )
    try:
        out = subprocess.run(GPU_QUERY, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise CanaryInputError(f"{' '.join(GPU_QUERY)} failed: {exc}") from exc
    return parse_gpu_memory(out)


def canary_gpus(argv: Sequence[str], env: Mapping[str, str]) -> list[int]:
    """The physical GPU indices the server of these flags uses, as SGLang places its ranks (launch/placement.py: tp x pp
    from --base-gpu-id, each dp replica further), through CUDA_VISIBLE_DEVICES when it lists indices."""
    try:
        sizes = placement.sizes_of(argv)
    except placement.PlacementError as exc:
        raise CanaryArgvError(f"argv: {exc}") from exc
    logical = placement.gpus(**sizes)
    base = sizes.get("base", 0)
    visible = str(env.get("CUDA_VISIBLE_DEVICES") or "").strip()
    if not visible:
        return logical
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if not all(i.isdigit() for i in ids):
        raise CanaryArgvError(f"CUDA_VISIBLE_DEVICES={visible!r}: the canary reads GPU indices only (not UUIDs)")
    if logical and logical[-1] >= len(ids):
        raise CanaryArgvError(
            f"the flags use GPUs {logical[0]}-{logical[-1]} (--base-gpu-id {base}, {len(logical)} in all), "
            f"but CUDA_VISIBLE_DEVICES={visible!r} makes {len(ids)} visible"
        )
    return [int(ids[i]) for i in logical]


@dataclass
class Placement:
    """Where the canary runs: ``beside`` the serving server, in the ``switch-window`` (after the
    serving server stopped, GPUs free), or ``off``; with its --mem-fraction-static, why, and the GPUs read."""

    mode: str
    mem_fraction: float
    reason: str
    gpus: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def place(policy: str, gpus: Optional[Sequence[GpuMemory]], used: Sequence[int], mem_fraction: float, min_free_mib: int) -> Placement:
    """Decide where the canary runs.

    SGLang (0.5.9 to 0.5.23) sizes a server's memory from what is FREE when it starts, not from the
    whole GPU: its KV pool gets what is free after the weights load minus (1 - --mem-fraction-static)
    of the memory that was free before the load (0.5.9 profile_max_num_token(min_per_gpu_memory);
    0.5.10-0.5.15 _profile_available_bytes(pre_model_load_memory); 0.5.23 kv_cache_configurator), so
    beside a serving server the canary at mem_fraction takes about mem_fraction of what is free, plus
    its CUDA graphs and activations. What stays free is also the serving server's room for its own
    activations, so the canary runs beside it only where every GPU it uses has min_free_mib free.
    gpus None: memory not read (no GPU required here), beside.
    Policies: off; switch-window (always after the serving server stopped); beside (refused with the
    reason when memory does not allow: CanaryArgvError); auto (beside when memory allows, else the
    switch window)."""
    if policy not in POLICIES:
        raise CanaryArgvError(f"sglang_canary_policy: expected one of {', '.join(POLICIES)}, found {policy!r}")
    if policy == "off":
        return Placement("off", mem_fraction, "sglang_canary_policy is off")
    if policy == "switch-window":
        return Placement("switch-window", mem_fraction, "sglang_canary_policy is switch-window: the serving server is stopped first")
    if gpus is None:
        return Placement("beside", mem_fraction, "GPU memory not read (no GPU required on this host): beside the serving server")
    by_index = {g.index: g for g in gpus}
    missing = [i for i in used if i not in by_index]
    if missing:
        raise CanaryArgvError(f"the canary needs GPUs {list(used)}, but nvidia-smi lists {sorted(by_index)}")
    short, rows = [], []
    for index in used:
        g = by_index[index]
        rows.append({"index": index, "total_mib": g.total_mib, "used_mib": g.used_mib, "free_mib": g.free_mib})
        if g.free_mib < min_free_mib:
            short.append(f"GPU {index} has {g.free_mib} MiB free of {g.total_mib}")
    if not short:
        room = f"every GPU it uses has at least {min_free_mib} MiB free (sglang_canary_min_free_mib): beside the serving server"
        return Placement("beside", mem_fraction, room, rows)
    why = f"{'; '.join(short)}, below sglang_canary_min_free_mib {min_free_mib}"
    if policy == "beside":
        raise CanaryArgvError(
            f"sglang_canary_policy beside: {why}; nothing was switched: free the memory, "
            "or set sglang_canary_policy to auto or switch-window"
        )
    return Placement("switch-window", mem_fraction, f"{why}: in the switch window, after the serving server stopped", rows)


# ------------------------------------------------------------------ what it showed

# The resolved choices a start failure on this hardware depends on, as SGLang reports them in
# /server_info (top level up to 0.5.2x, internal_states[0] too) and in its logged server_args.
BACKEND_FIELDS = (
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "speculative_draft_attention_backend",
    "speculative_attention_mode",
    "sampling_backend",
    "moe_runner_backend",
    "moe_a2a_backend",
    "fp8_gemm_runner_backend",
    "fp4_gemm_runner_backend",
    "grammar_backend",
    "kv_cache_dtype",
    "page_size",
    "disable_cuda_graph",
    "cuda_graph_max_bs",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "tp_size",
    "mem_fraction_static",
)


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().splitlines()
    except OSError:
        return []


def backends(server_info: Optional[Mapping[str, Any]], log_lines: Sequence[str]) -> dict[str, Any]:
    """BACKEND_FIELDS as the server resolved them: /server_info when it answered, else the server args
    it logged at start; only the fields that version has."""
    if isinstance(server_info, Mapping):
        states = server_info.get("internal_states")
        inner = states[0] if isinstance(states, list) and states and isinstance(states[0], Mapping) else {}
        found = {k: server_info[k] for k in BACKEND_FIELDS if k in server_info}
        found.update({k: inner[k] for k in BACKEND_FIELDS if k in inner and k not in found})
        if found:
            return {"source": "/server_info", "values": found}
    logged = server_evidence.server_args_from_log(log_lines, BACKEND_FIELDS)
    if logged is not None:
        return {"source": "server log (server_args)", "values": {k: logged[k] for k in BACKEND_FIELDS if k in logged}}
    return {"source": "none: no /server_info answer and no server_args line in the log", "values": {}}


def canary_evidence(
    log_lines: Sequence[str], argv: Sequence[str], server_info: Optional[Mapping[str, Any]], sglang_version: Optional[str]
) -> dict[str, Any]:
    """What the canary showed, judged as the report judges the serving server: the backends it
    resolved, and server_evidence.judge's verdict per optimisation (CUDA graphs always)."""
    lines = [str(x) for x in log_lines]
    return {
        "backends": backends(server_info, lines),
        "optimisations": [
            {k: r[k] for k in ("name", "verdict", "evidence", "note")}
            for r in server_evidence.judge(argv, lines, server_info, sglang_version or None)
        ],
        "sglang_version": sglang_version or "",
    }


# ------------------------------------------------------------------ the process


def _port_answers(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> str:
    """SIGTERM to the server's process group, up to `grace` seconds for all of it to end, then SIGKILL
    to what is left; the leader is reaped. How it ended, in words."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group's id
    exited_before = proc.poll() is not None
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return "exited by itself"
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, so that a zombie does not count as alive
        if proc.returncode is not None and not _group_alive(pgid):
            return "exited by itself" if exited_before else "SIGTERM"
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL does not end (uninterruptible sleep)
        return f"SIGKILL after {grace:g} s, the leader still not gone"
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return f"SIGKILL after {grace:g} s"


def _tail(path: str, count: int = LOG_TAIL) -> list[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 256 * 1024))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-count:]


def _requests(url: str, prompts: Sequence[str], api_key: Optional[str], concurrency: int, timeout: float) -> dict[str, Any]:
    """One streamed request, then `concurrency` at once; what each did, no text."""
    streamed = bench_client.stream_one(url, prompts[0], OUTPUT_LEN, api_key, timeout)
    batch = [prompts[i % len(prompts)] for i in range(max(1, concurrency))]
    record = bench_client.run(url, batch, OUTPUT_LEN, len(batch), "canary", api_key, None, timeout)
    together = record["requests"]
    accept, note = bench_client.requests_accept_length([streamed, *together])
    errors = [r["error"] for r in [streamed, *together] if not r["ok"] and r["error"]]
    return {
        "streamed_ok": bool(streamed["ok"]),
        "streamed": {
            k: streamed.get(k) for k in ("ok", "output_tokens", "ttft_s", "latency_s", "completion_tokens", "spec_verify_ct", "error")
        },
        "concurrent_ok": sum(1 for r in together if r["ok"]),
        "concurrent_total": len(together),
        "output_len": OUTPUT_LEN,
        "accept_length": accept,
        "accept_source": bench_client.ACCEPT_SOURCE_REQUESTS,
        "accept_note": note,
        "errors": errors[:5],
    }


# A Python exception's last line ("ImportError: Can not import FA3 in sgl_kernel. ..."), as SGLang's
# scheduler prints it before it kills its process tree (whose lines then end the log).
ERROR_LINE = re.compile(r"^(?:\[[^\]]*\] )?(?:[\w.]+\.)?(\w*(?:Error|Exception|Interrupt)|AssertionError)(?:: .*)?$")


def error_line(lines: Sequence[str]) -> str:
    """The last exception line of the log's tail, without its timestamp; "" when none."""
    for line in reversed(lines):
        text = line.strip()
        if ERROR_LINE.match(text):
            return re.sub(r"^\[[^\]]*\] ", "", text)
    return ""


def _message(result: CanaryResult, start_timeout: float, detail: str) -> str:
    text = _phase_message(result, start_timeout, detail)
    cause = result.known_cause
    if cause and not result.ok:
        text += f"; start-failure catalogue entry [{cause['name']}]: {cause['cause']}; fix: {cause['fix']} (log: {cause['line']})"
    return text


def _phase_message(result: CanaryResult, start_timeout: float, detail: str) -> str:
    last = result.log_tail[-1] if result.log_tail else "(the log is empty)"
    error = error_line(result.log_tail)
    if error and error != last.strip():
        last = f"{last}; error: {error}"
    phase = result.phase
    r = result.requests
    if result.ok:
        return (
            f"canary served: healthy at {result.healthy_at} s, the streamed request and "
            f"{r.get('concurrent_ok')}/{r.get('concurrent_total')} concurrent requests completed"
        )
    if detail:
        return f"canary failed in phase {phase}: {detail}" + (f"; last log line: {last}" if result.log_tail else "")
    if phase == "exited":
        when = f"after it was healthy at {result.healthy_at} s" if result.healthy_at is not None else "before it was healthy"
        status = result.exit_status
        return f"canary failed in phase exited: the server exited with status {status} {when} ({result.seconds} s); last log line: {last}"
    if phase == "requests":
        why = "; ".join(r.get("errors") or []) or "no error reported"
        return (
            f"canary failed in phase requests: healthy at {result.healthy_at} s, but the streamed request "
            f"{'completed' if r.get('streamed_ok') else 'failed'} and {r.get('concurrent_ok')}/{r.get('concurrent_total')} "
            f"concurrent requests completed ({why}); last log line: {last}"
        )
    meaning = PHASES.get(phase, f"GET /health answered {phase}")
    return f"canary failed in phase {phase}: not healthy within {start_timeout:g} s ({meaning}); last log line: {last}"


def _watch_start(
    proc: subprocess.Popen[bytes], url: str, result: CanaryResult, t0: float, start_timeout: float, probe_timeout: float
) -> None:
    """Probe /health every POLL_INTERVAL until 200, the server exits, or start_timeout; into result."""
    while True:
        status, phase, _took = service_health.probe(url + "/health", probe_timeout)
        t = round(time.monotonic() - t0, 2)
        if not result.phases or result.phases[-1][0] != phase:
            result.phases.append([phase, t])
        if status is not None and result.port_open_at is None:
            result.port_open_at = t
        if status == 503 and result.first_503_at is None:
            result.first_503_at = t
        result.phase = phase
        if proc.poll() is not None:
            result.phase = "exited"
            return
        if status == 200:
            result.healthy_at = t
            return
        if t >= start_timeout:
            return
        time.sleep(min(POLL_INTERVAL, max(0.05, start_timeout - t)))


def run_canary(
    python: str,
    module: str,
    argv: Sequence[str],
    env: Optional[Mapping[str, str]],
    log_path: str,
    start_timeout: float,
    request_timeout: float,
    prompts: Optional[Sequence[str]] = None,
    keys: Optional[Mapping[str, str]] = None,
    concurrency: int = 4,
    cwd: Optional[str] = None,
    probe_timeout: float = PROBE_TIMEOUT,
    stop_grace: float = STOP_GRACE,
    user: Optional[str] = None,
    sglang_version: Optional[str] = None,
    known_causes: Sequence[Mapping[str, Any]] = (),
) -> CanaryResult:
    """Start ``python -m module argv`` (env added to this process's environment, PYTHONUNBUFFERED=1
    unless set), wait for /health on argv's --host/--port, send the requests, stop it; see the module
    docstring. keys: the service's keys by flag name (bench_client.read_keys); "api-key" is sent.
    user: run the server as this user and its primary group, no other groups (as the unit's User=;
    only root can), else as this process. sglang_version: the version whose lines canary_evidence reads.
    known_causes: the start-failure catalogue's log signatures (the launch plan's log_signatures), which name a failure.
    Never raises for what the server does; the server is stopped whatever happens."""
    prompts = [str(p) for p in (prompts or ()) if str(p)] or list(DEFAULT_PROMPTS)
    forms = _secret_forms(keys)
    api_key = (keys or {}).get("api-key") or None
    host = flag_value(argv, HOST_FLAGS) or CANARY_HOST
    host = CANARY_HOST if host in ("0.0.0.0", "::", "") else host
    port = int(flag_value(argv, PORT_FLAGS) or 30000)
    url = f"http://{host}:{port}"
    command = [str(python), "-m", str(module), *[str(a) for a in argv]]
    result = CanaryResult(ok=False, phase="not started", seconds=0.0, message="", url=url, log=str(log_path), command=command)
    detail = ""
    t0 = time.monotonic()
    proc: Optional[subprocess.Popen[bytes]] = None
    try:
        if _port_answers(host, port):
            result.phase = "port in use"
            detail = f"something already answers on {host}:{port}; the canary needs a port of its own and was not started"
        else:
            child_env = {**os.environ, **{str(k): str(v) for k, v in (env or {}).items()}}
            child_env.setdefault("PYTHONUNBUFFERED", "1")
            os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
            with open(log_path, "wb") as log:
                try:
                    proc = subprocess.Popen(
                        command,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=child_env,
                        cwd=cwd,
                        start_new_session=True,  # its own process group: stop() ends all of it
                        **_as_user(user),
                    )
                except (OSError, KeyError) as exc:
                    detail = f"{command[0]}: {exc.strerror if isinstance(exc, OSError) else 'no such user ' + str(user)}"
            if proc is not None:
                result.pid = proc.pid
                _watch_start(proc, url, result, t0, start_timeout, probe_timeout)
            if proc is not None and result.healthy_at is not None:
                result.server_info = bench_client.server_info(url, api_key)[0]
                result.requests = _requests(url, prompts, api_key, concurrency, request_timeout)
                served = result.requests["streamed_ok"] and result.requests["concurrent_ok"] == result.requests["concurrent_total"]
                if proc.poll() is not None:
                    result.phase = "exited"
                elif served:
                    result.ok, result.phase = True, "served"
                else:
                    result.phase = "requests"
    except Exception as exc:  # the server must still be stopped, and the caller told why
        result.ok = False
        detail = f"{type(exc).__name__}: {exc}"
    finally:
        result.seconds = round(time.monotonic() - t0, 2)
        if proc is not None:
            exited_first = proc.poll() is not None
            result.stopped = stop(proc, stop_grace)
            result.exit_status = proc.returncode
            if exited_first:
                result.stopped = "exited by itself"
            if forms:
                bench_client.redact_keys_in_file(str(log_path), forms)
            result.log_tail = _tail(str(log_path))
            try:
                result.evidence = canary_evidence(_lines(str(log_path)), argv, result.server_info, sglang_version)
            except Exception as exc:  # evidence is a report's, never a reason to leave the result unsaid
                result.evidence = {"error": f"{type(exc).__name__}: {exc}"}
    if not result.ok:
        result.known_cause = match_log(result.log_tail, result.phase, known_causes)
    result.message = _message(result, start_timeout, detail)
    return CanaryResult(**_redact(result.to_dict(), forms))
