"""The start canary's tiny models for a release's launch flags: what plugins/modules/sglang_canary_models.py
does on the host, around tiny_models.ensure.

tiny_models.py is also run as a stand-alone script and imports nothing of this package, so its
TinyModelError is raised here as the package's own CanaryInputError (a ToolkitError)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from . import tiny_models
from .canary import DRAFT_FLAGS, MODEL_FLAGS, TP_FLAGS, CanaryArgvError, CanaryInputError, flag_value

UNKNOWN_ARCHITECTURE = ("fail", "skip")


def canary_models(
    dest: str,
    tokenizer_dir: str,
    argv: Sequence[str] = (),
    target: Optional[str] = None,
    draft: Optional[str] = None,
    tp_size: Optional[int] = None,
    check_mode: bool = False,
    unknown_architecture: str = "fail",
) -> dict[str, Any]:
    """Make (or find already made) in ``dest`` the tiny target and draft of the models the launch flags
    ``argv`` name (``target`` and ``draft`` given instead win), sharded for their --tp-size.

    Returns tiny_models.ensure's result with ``generated=True``; for an architecture the generator
    does not know, with ``unknown_architecture=skip``, ``generated=False`` with the reason. Raises
    CanaryArgvError for flags that name no model or a --tp-size that is not a number, and
    CanaryInputError for what tiny_models refuses (an unknown architecture with
    ``unknown_architecture=fail``: with ``unknown_architecture`` set to it in the error's result)."""
    target = target or flag_value(argv, MODEL_FLAGS)
    draft = draft or flag_value(argv, DRAFT_FLAGS)
    if not target:
        raise CanaryArgvError("argv: the launch flags have no --model-path, so the target's config.json cannot be read")
    try:
        tp = int(tp_size or flag_value(argv, TP_FLAGS) or 1)
    except ValueError:
        raise CanaryArgvError(f"argv: --tp-size must be a number, found {flag_value(argv, TP_FLAGS)!r}") from None
    try:
        result = tiny_models.ensure(dest, target, draft_dir=draft, tokenizer_dir=tokenizer_dir, tp_size=tp, check_mode=check_mode)
    except tiny_models.UnknownArchitectureError as exc:
        if unknown_architecture == "fail":
            raise CanaryInputError(
                f"{exc}; the canary cannot run (unknown_architecture=fail)", unknown_architecture=exc.architecture
            ) from exc
        return dict(changed=False, generated=False, unknown_architecture=exc.architecture, skipped_reason=f"{exc}; the canary is skipped")
    except tiny_models.TinyModelError as exc:
        raise CanaryInputError(str(exc)) from exc
    return dict(generated=True, **result)
