"""Every module in plugins/modules/ documents its check/diff support truthfully and samples each return value."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

MODULES = sorted((ROOT / "plugins" / "modules").glob("*.py"))
SUPPORT = ("full", "partial", "none")


def documentation(path: Path) -> dict:
    """DOCUMENTATION as Ansible reads it: its extends_documentation_fragment (sm120.sglang.sglang_sm120) resolved
    through the collection loader, as ansible-doc does."""
    from ansible.plugins.loader import fragment_loader, init_plugin_loader
    from ansible.utils.plugin_docs import get_docstring

    # The collection loader, as ansible-doc sets it up, finds sm120.sglang (the checkout, on ansible.cfg's path).
    init_plugin_loader([str(ROOT / ".collections")])
    return get_docstring(str(path), fragment_loader, is_module=True)[0]


def doc_strings(path: Path) -> dict[str, str]:
    """DOCUMENTATION, EXAMPLES and RETURN of a module, read without importing it."""
    strings = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
                    strings[target.id] = node.value.value
    return strings


def test_modules_found() -> None:
    assert len(MODULES) >= 2


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_attributes(path: Path) -> None:
    doc = documentation(path)
    assert doc["module"] == path.stem
    attributes = doc.get("attributes")
    assert isinstance(attributes, dict), f"{path.name}: DOCUMENTATION has no attributes"
    for name in ("check_mode", "diff_mode"):
        assert isinstance(attributes.get(name), dict), f"{path.name}: attributes has no {name}"
        assert attributes[name].get("support") in SUPPORT, f"{path.name}: {name}.support must be one of {SUPPORT}"
    if attributes["check_mode"]["support"] == "partial":
        assert attributes["check_mode"].get("details"), f"{path.name}: partial check_mode needs details"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_check_mode_matches_code(path: Path) -> None:
    support = documentation(path)["attributes"]["check_mode"]["support"]
    declared = re.search(r"supports_check_mode\s*=\s*True", path.read_text()) is not None
    assert declared == (support != "none"), (
        f"{path.name}: check_mode support is {support} but the module {'sets' if declared else 'does not set'} supports_check_mode=True"
    )


def sampled(entry: object) -> bool:
    """A sample of its own, or (a dict such as sglang_launch_plan's plan) a sample for every key it contains."""
    if not isinstance(entry, dict):
        return False
    if "sample" in entry:
        return True
    contains = entry.get("contains")
    return isinstance(contains, dict) and bool(contains) and all(sampled(sub) for sub in contains.values())


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_return_samples(path: Path) -> None:
    returns = yaml.safe_load(doc_strings(path).get("RETURN") or "") or {}
    missing = [name for name, entry in returns.items() if not sampled(entry)]
    assert not missing, f"{path.name}: RETURN values without a sample: {', '.join(missing)}"
