"""Role structure every maintainer relies on: declared entry points, flat polling."""

from __future__ import annotations

import re

import yaml

from conftest import ROOT

ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").is_file())
CALLER_GLOBS = ("playbooks/*.yml", "roles/*/tasks/*.yml", "molecule/*/*.yml", "molecule/*/tasks/*.yml")
CALLERS = sorted(path for pattern in CALLER_GLOBS for path in ROOT.glob(pattern))


def entry_points() -> dict[str, set[str]]:
    """role -> every entry point a playbook, role or scenario uses (main, and each tasks_from)."""
    found: dict[str, set[str]] = {role.name: {"main"} for role in ROLES}
    pattern = re.compile(r"name:\s*(\w+)\s*\n\s*tasks_from:\s*(\w+)")
    for path in CALLERS:
        for role, entry in pattern.findall(path.read_text()):
            found.setdefault(role, {"main"}).add(entry)
    return found


def test_every_role_entry_point_declares_its_arguments() -> None:
    missing = []
    for role, entries in sorted(entry_points().items()):
        spec_file = ROOT / "roles" / role / "meta" / "argument_specs.yml"
        specs = yaml.safe_load(spec_file.read_text())["argument_specs"] if spec_file.is_file() else {}
        missing += [f"{role}:{entry}" for entry in sorted(entries) if entry not in specs]
    assert missing == []


def test_no_task_file_includes_itself() -> None:
    """ansible-core aborts a self-including chain after about 250 levels and runs no always: then."""
    offenders = []
    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            stack = [task]
            while stack:
                item = stack.pop()
                if not isinstance(item, dict):
                    continue
                for key in ("block", "rescue", "always"):
                    stack += item.get(key) or []
                target = item.get("ansible.builtin.include_tasks") or item.get("include_tasks")
                if isinstance(target, dict):
                    target = target.get("file")
                if isinstance(target, str) and target.split("/")[-1] == path.name:
                    offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


class _AnyTagLoader(yaml.SafeLoader):
    """SafeLoader that reads a tagged scalar (!vault, !unsafe) as its text."""


_AnyTagLoader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node))
CONDITION_KEYS = ("that", "when", "failed_when", "changed_when", "until")


def _non_string_conditions(node: object) -> list[object]:
    found: list[object] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CONDITION_KEYS:
                found += [item for item in (value if isinstance(value, list) else [value]) if not isinstance(item, (str, bool))]
            found += _non_string_conditions(value)
    elif isinstance(node, list):
        for item in node:
            found += _non_string_conditions(item)
    return found


def test_every_condition_is_a_string() -> None:
    """A condition with an unquoted ': ' in it (a regex of the PLAY RECAP, say) is read by YAML as a mapping, which
    ansible-core refuses at run time ("Conditional expressions must be strings"), not when linted."""
    files = [p for top in ("playbooks", "roles", "molecule", "tests/playbooks") for p in sorted((ROOT / top).rglob("*.yml"))]
    bad = {}
    for path in files:
        for document in yaml.load_all(path.read_text(encoding="utf-8"), Loader=_AnyTagLoader):
            if found := _non_string_conditions(document):
                bad[str(path.relative_to(ROOT))] = found
    assert len(files) > 50 and not bad, bad
