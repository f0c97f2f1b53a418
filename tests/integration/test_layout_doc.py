"""docs/reference.md's "Layout" section cannot drift from the tree: it names every role, every module, every
plugin of plugins/{lookup,vars,action,callback,doc_fragments}, every file and sub-package of the host package
(plugins/module_utils/sglang_sm120) and of the controller package (plugins/plugin_utils/sglang_sm120_controller),
and every console script of pyproject.toml; and every path it gives under plugins/ or roles/ exists."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

from conftest import ROOT

PAGE = ROOT / "docs" / "reference.md"
PLUGIN_KINDS = ("lookup", "vars", "action", "callback", "doc_fragments")
PACKAGES = (ROOT / "plugins/module_utils/sglang_sm120", ROOT / "plugins/plugin_utils/sglang_sm120_controller")
# A path under plugins/ or roles/ as the page writes one (a trailing "/" for a directory); "<name>" and "*"
# stand for any name, so a path holding one is not checked.
PATH = re.compile(r"(?<![\w./<>*-])((?:plugins|roles)/[\w./<>*-]*)")


def layout() -> str:
    """The text between the "## Layout" heading and the next "## " heading."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Layout")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(lines[start + 1 : end])


def named(name: str, text: str) -> bool:
    """Whether `name` is in `text` as a whole name: `sglang_build` is not found inside `sglang_build_plan`,
    `flags` not inside `sglang-flags`."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def python_files(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.py") if p.stem != "__init__")


def expected_names() -> dict[str, list[str]]:
    """What the layout must name, by kind, read from the tree and pyproject.toml."""
    expected = {
        "role": sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))),
        "module": python_files(ROOT / "plugins/modules"),
    }
    for kind in PLUGIN_KINDS:
        expected[f"{kind} plugin"] = python_files(ROOT / "plugins" / kind)
    for package in PACKAGES:
        files = sorted({p.stem for p in package.rglob("*.py") if p.stem != "__init__" and "__pycache__" not in p.parts})
        packages = sorted(p.parent.name for p in package.rglob("__init__.py") if p.parent != package)
        expected[f"{package.name} file"] = files
        expected[f"{package.name} sub-package"] = packages
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    expected["console script"] = sorted(scripts)
    return expected


def test_the_layout_names_every_role_module_plugin_package_file_and_console_script() -> None:
    text = layout()
    expected = expected_names()
    assert all(expected.values()), f"nothing found for {[kind for kind, names in expected.items() if not names]}"
    missing = {kind: [name for name in names if not named(name, text)] for kind, names in expected.items()}
    missing = {kind: names for kind, names in missing.items() if names}
    assert missing == {}, "docs/reference.md, Layout, does not name:\n" + "\n".join(
        f"  {kind}: {', '.join(names)}" for kind, names in missing.items()
    )


def test_every_path_the_layout_gives_under_plugins_or_roles_exists() -> None:
    paths = {match.rstrip(".") for match in PATH.findall(layout())}
    checked = sorted(path for path in paths if not re.search(r"[<>*]", path))
    assert checked, "the Layout gives no path under plugins/ or roles/"
    gone = [path for path in checked if not (ROOT / path).exists()]
    assert gone == [], f"docs/reference.md, Layout, names paths that do not exist: {', '.join(gone)}"


def test_the_checks_can_fail() -> None:
    """Neither check is vacuous: a name inside a longer one is not found, a made-up path is caught."""
    assert named("sglang_build_plan", "  sglang_build_plan  validated")
    assert not named("sglang_build", "  sglang_build_plan  validated")
    assert not named("flags", "sglang-flags and .venv/bin/sglang-flags")
    assert named("paths", "  paths.py  the collection's data paths")
    assert PATH.findall("plugins/lookup/nothing_here.py, roles/<role>/files/ and roles/sglang_launch/.") == [
        "plugins/lookup/nothing_here.py",
        "roles/<role>/files/",
        "roles/sglang_launch/.",
    ]
    assert not (ROOT / "plugins/lookup/nothing_here.py").exists()
