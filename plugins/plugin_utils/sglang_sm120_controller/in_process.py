"""Controller actions that run a module's step in the controller's own process.

A module delegated to localhost costs a process, a Python start and the module's payload every run
(about 0.35 s each on the lab, make bench); the controller-only steps (sglang_build_plan,
sglang_patch_render) need none of that. Their action plugins (plugins/action/) are ``step_action``
of the step's own ARGUMENT_SPEC and function, which the module in plugins/modules/ shares, so both
validate the same options and fail the same way: the toolkit's errors (``ToolkitError``) and
``OSError`` become ``failed`` with the error's message and fields, as ``run_module`` makes them in
a module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.plugins.action import ActionBase

from sglang_sm120.errors import ToolkitError


def run_step(
    action: ActionBase,
    task_vars: Mapping[str, Any] | None,
    argument_spec: Mapping[str, Any],
    step: Callable[[Mapping[str, Any]], Mapping[str, Any]],
) -> dict[str, Any]:
    """The task's result: the step's result for the task's arguments validated against
    ``argument_spec`` (an invalid argument fails the task, naming it, before the step runs)."""
    result: dict[str, Any] = ActionBase.run(action, task_vars=dict(task_vars or {}))
    _, params = action.validate_argument_spec(argument_spec=dict(argument_spec))
    try:
        result.update(step(params))
    except ToolkitError as exc:
        result.update(failed=True, msg=str(exc), **exc.result)
    except OSError as exc:
        result.update(failed=True, msg=str(exc))
    return result


def step_action(argument_spec: Mapping[str, Any], step: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> type[ActionBase]:
    """The action plugin class (an action plugin file's ``ActionModule``) that runs ``step`` in the
    controller's own process; it supports check mode (the steps compute and change nothing)."""

    class StepAction(ActionBase):
        _supports_check_mode = True
        _supports_async = False

        def run(self, tmp: Any = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
            return run_step(self, task_vars, argument_spec, step)

    return StepAction
