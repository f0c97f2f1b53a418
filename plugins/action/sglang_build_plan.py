"""The sglang_build_plan module's step, run in the controller's own process (no module run); its options,
documentation and failures are the module's (plugins/modules/sglang_build_plan.py).
Why: plugins/plugin_utils/sglang_sm120_controller/in_process.py."""

from __future__ import annotations

from sglang_sm120.build.plan_step import ARGUMENT_SPEC, plan_step
from sglang_sm120_controller.in_process import step_action

ActionModule = step_action(ARGUMENT_SPEC, plan_step)
