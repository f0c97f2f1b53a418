"""Which GPUs a server started with a launch plan's flags uses, as SGLang places its ranks: one place for the
start gate (a rank on a GPU the host lacks), the fabric check (how many ranks the all-reduce needs) and the start
canary (which GPUs' memory it must find free).

SGLang's own placement (0.5.9-0.5.23 entrypoints/engine.py _launch_subprocesses, managers/data_parallel_controller.py):
on one node the rank of pipeline stage p and tensor rank t goes to GPU base_gpu_id + p x tp_per_node + t x
gpu_id_step, and each data-parallel replica (without --enable-dp-attention, which runs the dp groups inside the tp
ranks) starts tp x pp x gpu_id_step GPUs further.

Standard library only, no Ansible import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from ..errors import ToolkitError

# SGLang's spellings of the flags that place ranks (ServerArgs.add_cli_args, 0.5.9 to 0.5.23).
TP_FLAGS = ("--tp-size", "--tensor-parallel-size", "--tp")
PP_FLAGS = ("--pp-size", "--pipeline-parallel-size", "--pp")
DP_FLAGS = ("--dp-size", "--data-parallel-size", "--dp")
NNODES_FLAGS = ("--nnodes",)
BASE_FLAGS = ("--base-gpu-id",)
STEP_FLAGS = ("--gpu-id-step",)
DP_ATTENTION = "--enable-dp-attention"


class PlacementError(ToolkitError):
    """A flag that places ranks is not a whole number, or below its least value."""


def flag_of(arg: str, names: Sequence[str]) -> Optional[str]:
    """The name when arg is one of the flags (``--flag`` or ``--flag=value``), else None."""
    name = arg.split("=", 1)[0]
    return name if name in names and arg.startswith("--") else None


def flag_value(argv: Sequence[str], names: Sequence[str]) -> Optional[str]:
    """The last value of the flag in argv (argparse keeps the last), either spelling; None when absent."""
    args = [str(a) for a in argv]
    value = None
    for i, arg in enumerate(args):
        name = flag_of(arg, names)
        if name is not None:
            value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else None)
    return value


def sizes_of(argv: Sequence[str]) -> dict[str, Any]:
    """The placing flags of argv as gpus() takes them (those absent left to its defaults, SGLang's); PlacementError
    naming the flag when one is not a whole number or below its least value."""
    values: dict[str, Any] = {}
    for key, names, least in (
        ("tp", TP_FLAGS, 1),
        ("pp", PP_FLAGS, 1),
        ("dp", DP_FLAGS, 1),
        ("nnodes", NNODES_FLAGS, 1),
        ("base", BASE_FLAGS, 0),
        ("step", STEP_FLAGS, 1),
    ):
        raw = flag_value(argv, names)
        if raw is None:
            continue
        try:
            value = int(raw)
        except ValueError:
            raise PlacementError(f"{names[0]} must be a whole number, found {raw!r}") from None
        if value < least:
            raise PlacementError(f"{names[0]} must be at least {least}, found {value}")
        values[key] = value
    return {**values, "dp_attention": DP_ATTENTION in [str(a) for a in argv]}


def gpus(tp: int = 1, pp: int = 1, dp: int = 1, nnodes: int = 1, base: int = 0, step: int = 1, dp_attention: bool = False) -> list[int]:
    """The GPU indices (of those the process sees) SGLang's ranks on this node use, sorted; SGLang's defaults."""
    nnodes, step = max(nnodes, 1), max(step, 1)
    pp_here = max(pp // nnodes, 1)
    tp_here = max(tp // max(nnodes // max(pp, 1), 1), 1)
    replicas = 1 if dp_attention else max(dp, 1)
    used = {base + r * tp * pp * step + p * tp_here + t * step for r in range(replicas) for p in range(pp_here) for t in range(tp_here)}
    return sorted(used)
