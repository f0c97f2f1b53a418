"""The step of sglang_build_plan, shared by its module (plugins/modules/sglang_build_plan.py) and its
controller action (plugins/action/sglang_build_plan.py, which runs it in the controller's own
process): validate every build spec, order them and compute their cache keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .pipeline import plan

ARGUMENT_SPEC = dict(specs=dict(type="list", elements="raw", required=True), context=dict(type="dict", required=True))


def plan_step(p: Mapping[str, Any]) -> dict[str, Any]:
    """The module's result for the validated parameters ``p``: ``plan``, the artifacts in build order;
    raises BuildSpecError naming the artifact before anything is built."""
    return dict(changed=False, plan=[planned.to_dict() for planned in plan(p["specs"], p["context"])])
