"""SGLang launch flags: the flag table read statically from a release's server_args.py, profile
validation, cross-checks, and the systemd ExecStart rendering.

Plain Python, standard library only, no Ansible imports; library/sglang_flags.py wraps it.

The table comes from ``ServerArgs.add_cli_args``: every ``parser.add_argument("--name", "--alias",
type=..., choices=..., action=..., nargs=...)`` call, with ``choices`` given by name resolved from
module-level list constants. Nothing is imported, so this works where torch is absent. Where the
release's SGLang *can* be imported, ``IMPORT_CHECK`` runs SGLang's own parser with abbreviations
refused, and its verdict wins.

A profile is a mapping of canonical flag name (without ``--``) to value: ``true`` is a switch,
``false`` / ``null`` omit the flag, lists are expanded for flags that take several values.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

SERVER_ARGS = "srt/server_args.py"
TYPE_NAMES = {"str": "str", "int": "int", "float": "float", "nullable_str": "str", "loads": "json", "json_list_type": "json"}


class FlagError(Exception):
    """The flag table cannot be read (not an SGLang server_args.py)."""


@dataclass
class Flag:
    name: str
    aliases: list[str] = field(default_factory=list)
    kind: str = "str"  # str, int, float, json, switch, off-switch, custom
    choices: Optional[list[Any]] = None
    nargs: Optional[str] = None
    required: bool = False


@dataclass
class Validation:
    argv: list[str]
    errors: list[str]
    warnings: list[str]

    @property
    def ok(self) -> bool:
        return not self.errors


def read_server_args(sglang: str | Path) -> str:
    """server_args.py from an installed sglang/ directory or from a wheel."""
    path = Path(sglang)
    try:
        if path.is_file() and path.suffix == ".whl":
            with zipfile.ZipFile(path) as archive:
                return archive.read(f"sglang/{SERVER_ARGS}").decode("utf-8")
        return (path / SERVER_ARGS).read_text(encoding="utf-8")
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise FlagError(f"{path}: not an SGLang package or wheel with {SERVER_ARGS} ({exc})") from exc


def _constants(tree: ast.Module) -> dict[str, ast.expr]:
    out: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
    return out


def _literal_list(node: ast.expr, constants: Mapping[str, ast.expr], depth: int = 0) -> Optional[list[Any]]:
    if depth > 5:
        return None
    if isinstance(node, (ast.List, ast.Tuple)):
        values = []
        for elt in node.elts:
            if not isinstance(elt, ast.Constant):
                return None
            values.append(elt.value)
        return values
    if isinstance(node, ast.Name) and node.id in constants:
        return _literal_list(constants[node.id], constants, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_list(node.left, constants, depth + 1), _literal_list(node.right, constants, depth + 1)
        return left + right if left is not None and right is not None else None
    return None


def _find_add_cli_args(tree: ast.Module) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "add_cli_args":
            return node
    raise FlagError("no add_cli_args function in server_args.py")


def flag_table(source: str) -> dict[str, Flag]:
    """Canonical name -> Flag, from server_args.py source."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise FlagError(f"server_args.py does not parse: {exc}") from exc
    constants = _constants(tree)
    table: dict[str, Flag] = {}
    for node in ast.walk(_find_add_cli_args(tree)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        names = [a.value[2:] for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")]
        if not names:
            continue
        flag = Flag(name=names[0], aliases=names[1:])
        for kw in node.keywords:
            if kw.arg == "type":
                ident = kw.value.attr if isinstance(kw.value, ast.Attribute) else getattr(kw.value, "id", "")
                flag.kind = TYPE_NAMES.get(ident, "custom")
            elif kw.arg == "action":
                action = kw.value.value if isinstance(kw.value, ast.Constant) else None
                flag.kind = {"store_true": "switch", "store_false": "off-switch"}.get(str(action), "custom")
            elif kw.arg == "choices":
                flag.choices = _literal_list(kw.value, constants)
            elif kw.arg == "nargs" and isinstance(kw.value, ast.Constant):
                flag.nargs = str(kw.value.value)
            elif kw.arg == "required" and isinstance(kw.value, ast.Constant):
                flag.required = bool(kw.value.value)
        table[flag.name] = flag
    if not table:
        raise FlagError("add_cli_args declares no --flags")
    return table


def _lookup(table: Mapping[str, Flag]) -> dict[str, Flag]:
    by_name: dict[str, Flag] = {}
    for flag in table.values():
        for name in (flag.name, *flag.aliases):
            by_name[name] = flag
    return by_name


def _convert(flag: Flag, value: Any) -> tuple[Optional[str], Optional[str]]:
    """(argument text, error) for one value of a valued flag."""
    if flag.kind == "int":
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"-?\d+", value))):
            return None, f"--{flag.name} takes an integer, found {value!r}"
        value = int(value)
    elif flag.kind == "float":
        try:
            if isinstance(value, bool):
                raise ValueError
            value = float(value)
        except (TypeError, ValueError):
            return None, f"--{flag.name} takes a number, found {value!r}"
    elif flag.kind == "json":
        if isinstance(value, (dict, list)):
            return json.dumps(value, sort_keys=True), None
        try:
            json.loads(str(value))
        except ValueError:
            return None, f"--{flag.name} takes JSON, found {value!r}"
    elif isinstance(value, (dict, list, bool)) or value is None:
        return None, f"--{flag.name} takes a single value, found {value!r}"
    if flag.choices is not None and value not in flag.choices and str(value) not in [str(c) for c in flag.choices]:
        close = difflib.get_close_matches(str(value), [str(c) for c in flag.choices], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return None, f"--{flag.name} must be one of {', '.join(map(str, flag.choices))}; found {value!r}{hint}"
    if isinstance(value, float) and value.is_integer() and flag.kind == "float":
        return repr(value), None
    return str(value), None


def validate(table: Mapping[str, Flag], profile: Mapping[str, Any]) -> Validation:
    """Check a profile against the table; argv in the profile's order, or the errors with suggestions."""
    by_name = _lookup(table)
    argv: list[str] = []
    errors: list[str] = []
    given: set[str] = set()
    for raw_name, value in profile.items():
        name = str(raw_name)[2:] if str(raw_name).startswith("--") else str(raw_name)
        flag = by_name.get(name)
        if flag is None:
            longer = sorted((n for n in by_name if n.startswith(name)), key=lambda n: (len(n), n))
            if longer:
                errors.append(f"--{name} is an abbreviation, which is refused; use {' or '.join('--' + n for n in longer[:5])}")
            else:
                close = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.7)
                errors.append(f"--{name} is not a flag of this SGLang" + (f"; did you mean --{close[0]}?" if close else ""))
            continue
        given.add(flag.name)
        if value is None or (value is False and flag.kind in ("switch", "off-switch")):
            continue
        if flag.kind in ("switch", "off-switch"):
            if value is not True:
                errors.append(f"--{flag.name} is a switch: give true (or false to leave it out), found {value!r}")
                continue
            argv.append(f"--{name}")
            continue
        if flag.kind == "custom":
            errors.append(
                f"--{flag.name} uses a custom argparse action or type this toolkit does not check; set it through the import check"
            )
            continue
        values = list(value) if isinstance(value, (list, tuple)) and flag.nargs in ("+", "*") else [value]
        if isinstance(value, (list, tuple)) and flag.nargs not in ("+", "*"):
            errors.append(f"--{flag.name} takes one value, found the list {list(value)!r}")
            continue
        texts = []
        for item in values:
            text, error = _convert(flag, item)
            if error:
                errors.append(error)
            else:
                texts.append(str(text))
        if len(texts) == len(values):
            argv += [f"--{name}", *texts]
    missing = [f"--{f.name}" for f in table.values() if f.required and f.name not in given]
    if missing:
        errors.append(f"required by SGLang and missing: {', '.join(missing)}")
    return Validation(argv=argv, errors=errors, warnings=[])


def cross_check(profile: Mapping[str, Any], applied_patches: list[str], gpu_major: int) -> tuple[list[str], list[str]]:
    """(errors, warnings) that need more than one flag, or the patch state, to see."""
    flags = {str(k).removeprefix("--"): v for k, v in profile.items()}
    errors: list[str] = []
    warnings: list[str] = []
    algorithm = flags.get("speculative-algorithm")
    if algorithm in ("EAGLE", "EAGLE3") and not flags.get("speculative-draft-model-path"):
        errors.append(f"--speculative-algorithm {algorithm} needs --speculative-draft-model-path")
    if gpu_major == 12 and flags.get("enable-torch-symm-mem") is True and "torch_symm_mem_sm120" not in applied_patches:
        errors.append("--enable-torch-symm-mem on compute capability 12 raises KeyError: 12 without the torch_symm_mem_sm120 patch")
    if (
        gpu_major == 12
        and flags.get("enable-flashinfer-allreduce-fusion") is True
        and "flashinfer_allreduce_fusion_sm120" not in applied_patches
    ):
        warnings.append(
            "--enable-flashinfer-allreduce-fusion is a no-op on SM120: SGLang 0.5.9 gates it to SM90/SM100 "
            "(patch flashinfer_allreduce_fusion_sm120 is off)"
        )
    return errors, warnings


def systemd_quote(arg: str) -> str:
    """One ExecStart argument: % and $ escaped, quoted when it has spaces, quotes or backslashes."""
    text = arg.replace("%", "%%").replace("$", "$$")
    if re.search(r"[\s\"'\\;]", text) or text == "":
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def exec_start(python: str, module: str, argv: list[str]) -> str:
    """The ExecStart value, one flag (with its values) per continued line, readable in `systemctl cat`."""
    lines = [f"{systemd_quote(python)} -m {systemd_quote(module)}"]
    current: list[str] = []
    for arg in argv:
        if arg.startswith("--") and current:
            lines.append(" ".join(current))
            current = []
        current.append(systemd_quote(arg))
    if current:
        lines.append(" ".join(current))
    return " \\\n    ".join(lines)


# Run with the release's Python: SGLang's own parser, abbreviations refused. Prints one JSON line.
IMPORT_CHECK = r"""
import argparse, json, sys
try:
    from sglang.srt.server_args import ServerArgs
except Exception as exc:
    print(json.dumps({"mode": "static", "reason": f"{type(exc).__name__}: {exc}"[:300]}))
    sys.exit(0)
parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
ServerArgs.add_cli_args(parser)
try:
    parser.parse_args(sys.argv[1:])
except (argparse.ArgumentError, SystemExit) as exc:
    print(json.dumps({"mode": "import", "ok": False, "error": str(exc)}))
    sys.exit(0)
print(json.dumps({"mode": "import", "ok": True}))
"""
