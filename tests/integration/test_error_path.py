"""One error path: every exception the toolkit raises on purpose is a ToolkitError, and a module in
plugins/modules/ reaches fail_json only through sglang_sm120.errors.run_module, which turns a ToolkitError
(or an OSError) into fail_json."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import sglang_sm120
import sglang_sm120_controller
from conftest import ROOT
from sglang_sm120.errors import ToolkitError, run_module

# Also run as stand-alone scripts (copied as one file): they import nothing of the package, so
# their exceptions cannot derive from ToolkitError; the package converts those that reach a module.
STANDALONE = (
    "sglang_sm120.launch.server_args",
    "sglang_sm120.serve.tiny_models",
    "sglang_sm120.serve.bench_client",
    "sglang_sm120.host.fabric",
)
LIBRARY = sorted((ROOT / "plugins" / "modules").glob("*.py"))


def package_modules() -> list[str]:
    names = []
    for package in (sglang_sm120, sglang_sm120_controller):
        names += [info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return sorted(names)


def exception_classes(names: list[str]) -> dict[str, type]:
    """Every exception class defined in those modules, by module.Class."""
    found = {}
    for name in names:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{attr}"] = value
    return found


def test_every_toolkit_exception_is_a_toolkit_error() -> None:
    names = package_modules()
    assert set(STANDALONE) <= set(names), "a stand-alone script moved: update STANDALONE"
    classes = exception_classes([n for n in names if n not in STANDALONE])
    assert len(classes) >= 30, sorted(classes)
    assert not [name for name, cls in classes.items() if not issubclass(cls, ToolkitError)]


def test_the_standalone_scripts_import_nothing_of_the_package() -> None:
    for name in STANDALONE:
        path = ROOT / "plugins" / "module_utils" / (name.replace(".", "/") + ".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0 and not (node.module or "").startswith("sglang_sm120"), f"{path.name}:{node.lineno}"
            elif isinstance(node, ast.Import):
                assert not [a.name for a in node.names if a.name.startswith("sglang_sm120")], f"{path.name}:{node.lineno}"


def toolkit_exception_names() -> set[str]:
    """The names of every exception class of module_utils, the stand-alone scripts' included, and the
    builtins a handler would catch a ToolkitError with."""
    names = {cls.__name__ for cls in exception_classes(package_modules()).values()}
    return names | {cls.__name__ for cls in ToolkitError.__mro__ if cls is not object}


def handler_names(handler: ast.ExceptHandler) -> list[str]:
    if handler.type is None:
        return ["<bare except>"]
    nodes = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return [n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else ast.dump(n) for n in nodes]


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.stem)
def test_a_module_catches_no_toolkit_exception(path: Path) -> None:
    toolkit = toolkit_exception_names()
    caught = [
        f"{path.name}:{node.lineno} except {name}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ExceptHandler)
        for name in handler_names(node)
        if name in toolkit or name == "<bare except>"
    ]
    assert not caught


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.stem)
def test_a_module_ends_only_through_run_module(path: Path) -> None:
    tree = ast.parse(path.read_text())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    direct = [
        f"{path.name}:{c.lineno} {c.func.attr}"
        for c in calls
        if isinstance(c.func, ast.Attribute) and c.func.attr in ("fail_json", "exit_json")
    ]
    assert not direct, "call run_module(module, work) instead"
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors"
        for alias in node.names
    }
    assert "run_module" in imported
    assert [c for c in calls if isinstance(c.func, ast.Name) and c.func.id == "run_module"], f"{path.name} never calls run_module"


class FakeModule:
    """What run_module uses of an AnsibleModule; records the calls (the real ones exit)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def fail_json(self, **kwargs: object) -> None:
        self.calls.append(("fail_json", kwargs))

    def exit_json(self, **kwargs: object) -> None:
        self.calls.append(("exit_json", kwargs))


def raising(exc: BaseException):
    def work() -> dict:
        raise exc

    return work


def test_run_module_exits_with_the_work_s_result() -> None:
    module = FakeModule()
    run_module(module, lambda: {"changed": True, "release": "0004-9f8e7d6c"})
    assert module.calls == [("exit_json", {"changed": True, "release": "0004-9f8e7d6c"})]


def test_run_module_turns_a_toolkit_error_into_fail_json_with_its_fields() -> None:
    error = ToolkitError("expected sm_120 machine code, found none", audit={"ok": False}, cached=False)
    assert str(error) == "expected sm_120 machine code, found none" and error.result == {"audit": {"ok": False}, "cached": False}
    module = FakeModule()
    run_module(module, raising(error))
    assert module.calls == [("fail_json", {"msg": "expected sm_120 machine code, found none", "audit": {"ok": False}, "cached": False})]


def test_run_module_adds_the_partial_result_under_the_error_s_own_fields() -> None:
    from sglang_sm120.release.install import InstallError

    partial = {"imports": [], "cached": False}
    module = FakeModule()
    run_module(module, raising(InstallError("no Python at /nowhere", cached=True)), partial=partial)
    assert module.calls == [("fail_json", {"msg": "no Python at /nowhere", "imports": [], "cached": True})]
    module = FakeModule()
    run_module(module, raising(FileNotFoundError(2, "No such file or directory", "/proc/meminfo")), partial=partial)
    assert module.calls == [("fail_json", {"msg": "[Errno 2] No such file or directory: '/proc/meminfo'", "imports": [], "cached": False})]


def test_run_module_reads_the_partial_result_when_the_error_comes() -> None:
    result: dict = {}

    def work() -> dict:
        result["argv"] = ["pip", "install"]
        raise ToolkitError("pip install of the verified wheels failed (1): no space left")

    module = FakeModule()
    run_module(module, work, partial=result)
    assert module.calls == [
        ("fail_json", {"msg": "pip install of the verified wheels failed (1): no space left", "argv": ["pip", "install"]})
    ]


def test_run_module_leaves_other_exceptions_alone() -> None:
    module = FakeModule()
    with pytest.raises(KeyError):
        run_module(module, raising(KeyError("a bug is a traceback")))
    assert module.calls == []
