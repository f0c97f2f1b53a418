"""The sglang_patch_render module's step, run in the controller's own process (no module run); its options,
documentation and failures are the module's (plugins/modules/sglang_patch_render.py).
Why: plugins/plugin_utils/sglang_sm120_controller/in_process.py."""

from __future__ import annotations

from sglang_sm120.patches.render import ARGUMENT_SPEC, render
from sglang_sm120_controller.in_process import step_action

ActionModule = step_action(ARGUMENT_SPEC, render)
