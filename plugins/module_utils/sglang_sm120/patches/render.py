"""The step of sglang_patch_render, shared by its module (plugins/modules/sglang_patch_render.py) and its
controller action (plugins/action/sglang_patch_render.py, which runs it in the controller's own
process): render the selected patch templates and, given the targets' pristine bytes, lint the
patched files. Runs on the controller (jinja2, pyflakes); standard library otherwise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .engine import pristine_originals, prove_rendered, render_selected
from .manifest import load_manifest

ARGUMENT_SPEC = dict(
    manifest=dict(type="dict", required=True),
    template_dir=dict(type="path", required=True),
    only=dict(type="list", elements="str"),
    values=dict(type="dict", default={}),
    pristine=dict(type="dict"),
)


def render(p: Mapping[str, Any]) -> dict[str, Any]:
    """The module's result for the validated parameters ``p``: ``rendered`` and ``linted``; raises the
    toolkit's errors (a patch that does not render, or adds a pyflakes message)."""
    linted = []
    rendered = render_selected(load_manifest(p["manifest"], p["template_dir"]), p["only"], p["values"])
    if p["pristine"]:
        originals = pristine_originals(p["pristine"])
        linted = prove_rendered(load_manifest(p["manifest"], rendered=rendered), originals, p["only"], p["values"])
    return dict(changed=False, rendered=rendered, linted=linted)
