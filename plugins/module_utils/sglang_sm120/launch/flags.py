"""SGLang launch flags: the flag table read statically from a release's server_args.py, profile
validation, cross-checks, and the systemd ExecStart rendering.

Plain Python, standard library only, no Ansible imports; flag_check.py builds the checker on it.

The table comes from ``ServerArgs.add_cli_args``: every ``parser.add_argument("--name", "--alias",
type=..., choices=..., action=..., nargs=...)`` call, with ``choices`` given by name resolved from
module-level list constants, plus (0.5.2x) the annotated dataclass fields of ``srt/arg_groups/fields``
that ``add_cli_args_from_dataclass`` turns into flags. Nothing is imported, so this works where
torch is absent. Where the release's SGLang *can* be imported, flag_check.check_launch runs
SGLang's own parser with abbreviations refused, and its verdict wins; flag_check also holds the
hardware rules (what a version accepts but fails on with SM120 / PCIe / MLA).

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

from ..errors import ToolkitError

SERVER_ARGS = "srt/server_args.py"
TYPE_NAMES = {"str": "str", "int": "int", "float": "float", "nullable_str": "str", "loads": "json", "json_list_type": "json"}


class FlagError(ToolkitError):
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


def package_dir(sglang: str | Path) -> Path:
    """The sglang/ package directory of an installed package, an unpacked wheel's root, or a wheel."""
    path = Path(sglang)
    if path.is_dir() and not (path / SERVER_ARGS).is_file() and (path / "sglang" / SERVER_ARGS).is_file():
        return path / "sglang"
    return path


def flashinfer_pin(sglang: str | Path) -> Optional[str]:
    """The flashinfer-python version the release's METADATA pins (``==``), which its venv holds."""
    path = package_dir(sglang)
    text = ""
    try:
        if path.is_file():
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if re.fullmatch(r"sglang-[^/]+\.dist-info/METADATA", n)]
                text = archive.read(names[0]).decode("utf-8", "replace") if names else ""
        else:
            for info in sorted(path.resolve().parent.glob("sglang-*.dist-info")):
                if (info / "METADATA").is_file():
                    text = (info / "METADATA").read_text(encoding="utf-8", errors="replace")
    except (OSError, zipfile.BadZipFile):
        return None
    # e.g. "Requires-Dist: flashinfer_python==0.6.3" (0.5.9), "flashinfer_python[cu13]==0.7.2" (0.5.23)
    match = re.search(r"^Requires-Dist:\s*flashinfer[-_]python(?:\[[^\]]*\])?\s*==\s*([0-9][\w.]*)", text, re.MULTILINE | re.IGNORECASE)
    return match.group(1) if match else None


def read_server_args(sglang: str | Path) -> str:
    """server_args.py from an installed sglang/ directory (or the directory holding it) or from a wheel."""
    return read_sources(sglang, [SERVER_ARGS])[SERVER_ARGS]


def read_sources(sglang: str | Path, extra_prefixes: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """Path relative to the sglang package -> text: server_args.py (required) and every .py file under
    each of ``extra_prefixes`` (e.g. ``srt/arg_groups/``, where 0.5.2x declares its flags)."""
    path = package_dir(sglang)
    wanted = [SERVER_ARGS, *extra_prefixes]
    out: dict[str, str] = {}
    try:
        if path.is_file() and path.suffix == ".whl":
            with zipfile.ZipFile(path) as archive:
                for name in archive.namelist():
                    rel = name.removeprefix("sglang/")
                    if name.startswith("sglang/") and any(
                        rel == w or (w.endswith("/") and rel.startswith(w) and rel.endswith(".py")) for w in wanted
                    ):
                        out[rel] = archive.read(name).decode("utf-8")
        else:
            out[SERVER_ARGS] = (path / SERVER_ARGS).read_text(encoding="utf-8")
            for prefix in extra_prefixes:
                base = path / prefix
                if not prefix.endswith("/") and base.is_file():
                    out[prefix] = base.read_text(encoding="utf-8")
                elif base.is_dir():
                    for file in sorted(base.rglob("*.py")):
                        out[file.relative_to(path).as_posix()] = file.read_text(encoding="utf-8")
        if SERVER_ARGS not in out:
            raise KeyError(SERVER_ARGS)
    except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise FlagError(f"{path}: not an SGLang package or wheel with {SERVER_ARGS} ({exc})") from exc
    return out


def sglang_version(sglang: str | Path) -> Optional[str]:
    """The release version: the wheel's file name, else ``_version.py`` / ``version.py``, else a
    dist-info directory next to the package; None when none says."""
    path = package_dir(sglang)
    if path.is_file():
        match = re.match(r"sglang-([0-9][^-]*)-", path.name)
        return match.group(1) if match else None
    for name in ("_version.py", "version.py"):
        try:
            match = re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", (path / name).read_text(encoding="utf-8"))
        except OSError:
            continue
        if match:
            return match.group(1)
    for info in sorted(path.parent.glob("sglang-*.dist-info")):
        return info.name.removeprefix("sglang-").removesuffix(".dist-info")
    return None


ARG_GROUPS = "srt/arg_groups/"
# type_parser names of the dataclass form (0.5.2x) -> kind
PARSER_KINDS = {"json_list_type": "json", "loads": "json", "nullable_str": "str", "human_readable_int": "str"}
SCALAR_KINDS = {"str": "str", "int": "int", "float": "float", "bool": "switch"}


def _unwrap_type(node: ast.expr) -> ast.expr:
    """Optional[X], X | None, Union[X, None] -> X."""
    if isinstance(node, ast.Subscript) and getattr(node.value, "id", getattr(node.value, "attr", "")) in ("Optional",):
        return _unwrap_type(node.slice)
    if isinstance(node, ast.Subscript) and getattr(node.value, "id", getattr(node.value, "attr", "")) == "Union":
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        rest = [e for e in elts if not (isinstance(e, ast.Constant) and e.value is None)]
        return _unwrap_type(rest[0]) if len(rest) == 1 else node
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        for a, b in ((node.left, node.right), (node.right, node.left)):
            if isinstance(b, ast.Constant) and b.value is None:
                return _unwrap_type(a)
    return node


def _dataclass_flag(node: ast.AnnAssign, constants: Mapping[str, ast.expr]) -> list[Flag]:
    """The flag(s) ``add_cli_args_from_dataclass`` derives from one ``name: A[T, "help" | Arg(...)]`` field."""
    ann = node.annotation
    if not (isinstance(node.target, ast.Name) and isinstance(ann, ast.Subscript) and getattr(ann.value, "id", "") in ("A", "Annotated")):
        return []
    if not isinstance(ann.slice, ast.Tuple) or len(ann.slice.elts) < 2:
        return []
    raw, *meta = ann.slice.elts
    arg = next((m for m in meta if isinstance(m, ast.Call) and getattr(m.func, "id", "") == "Arg"), None)
    if arg is None and not any(isinstance(m, (ast.Constant, ast.JoinedStr, ast.BinOp)) for m in meta):
        return []
    kw = {k.arg: k.value for k in (arg.keywords if arg is not None else []) if k.arg}
    if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value is True:
        return []
    cli = kw["cli_name"].value if isinstance(kw.get("cli_name"), ast.Constant) else "--" + node.target.id.replace("_", "-")
    aliases = _literal_list(kw["aliases"], constants) if "aliases" in kw else []
    flag = Flag(name=str(cli).removeprefix("--"), aliases=[str(a).removeprefix("--") for a in aliases or []])
    if "choices" in kw:
        flag.choices = _literal_list(kw["choices"], constants)
    inner = _unwrap_type(raw)
    if "action" in kw:
        action = kw["action"]
        if getattr(action, "attr", "") == "BooleanOptionalAction":
            flag.kind = "switch"
            return [flag, Flag(name="no-" + flag.name, kind="off-switch")]
        flag.kind = "custom"
        return [flag]
    if isinstance(inner, ast.Subscript) and getattr(inner.value, "id", "") == "Literal":
        elts = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
        values = [e.value for e in elts if isinstance(e, ast.Constant)]
        flag.choices = flag.choices or values
        flag.kind = {bool: "switch", int: "int", float: "float"}.get(type(values[0]), "str") if values else "str"
    elif isinstance(inner, ast.Subscript) and getattr(inner.value, "id", "") in ("list", "List") and "type_parser" not in kw:
        flag.nargs = kw["nargs"].value if isinstance(kw.get("nargs"), ast.Constant) else "+"
        flag.kind = SCALAR_KINDS.get(getattr(inner.slice, "id", "str"), "custom")
    elif getattr(inner, "id", "") == "bool":
        flag.kind = "switch"
    else:
        if "type_parser" in kw:
            parser = kw["type_parser"]
            flag.kind = PARSER_KINDS.get(getattr(parser, "attr", getattr(parser, "id", "")), "custom")
        else:
            flag.kind = SCALAR_KINDS.get(getattr(inner, "id", ""), "custom")
        if isinstance(kw.get("nargs"), ast.Constant):
            flag.nargs = str(kw["nargs"].value)
        required = kw.get("required")
        flag.required = (isinstance(required, ast.Constant) and required.value is True) or (node.value is None and required is None)
    return [flag]


def flag_table_from_sources(sources: Mapping[str, str]) -> dict[str, Flag]:
    """Canonical name -> Flag from a release's sources: the ``add_argument`` calls of
    ``add_cli_args`` (every version) plus, where the release declares its flags as annotated
    dataclass fields (0.5.2x ``srt/arg_groups/fields``), those fields."""
    constants: dict[str, ast.expr] = {}
    trees: dict[str, ast.Module] = {}
    for rel, text in sources.items():
        try:
            trees[rel] = ast.parse(text)
        except SyntaxError as exc:
            if rel == SERVER_ARGS:
                raise FlagError(f"server_args.py does not parse: {exc}") from exc
            continue
        constants.update(_constants(trees[rel]))
    table: dict[str, Flag] = {}
    for rel, tree in trees.items():
        if not (rel == SERVER_ARGS or rel.startswith(ARG_GROUPS + "fields/")):
            continue
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            if rel == SERVER_ARGS and cls.name != "ServerArgs":
                continue
            for node in cls.body:
                if isinstance(node, ast.AnnAssign):
                    for flag in _dataclass_flag(node, constants):
                        table.setdefault(flag.name, flag)
    try:
        manual = flag_table(sources[SERVER_ARGS], constants)
    except FlagError:
        if not table:
            raise
        manual = {}
    table.update(manual)
    return table


def release_flag_table(sglang: str | Path) -> dict[str, Flag]:
    """The static flag table of the SGLang at ``sglang`` (package dir, unpacked wheel, or wheel)."""
    return flag_table_from_sources(read_sources(sglang, [ARG_GROUPS]))


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


def flag_table(source: str, extra_constants: Optional[Mapping[str, ast.expr]] = None) -> dict[str, Flag]:
    """Canonical name -> Flag, from server_args.py source (the ``add_argument`` calls)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise FlagError(f"server_args.py does not parse: {exc}") from exc
    constants = {**(extra_constants or {}), **_constants(tree)}
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


def flag_aliases(table: Mapping[str, Flag]) -> dict[str, str]:
    """Every name SGLang accepts for a flag (no --) -> the flag's canonical name."""
    return {name: flag.name for name, flag in _lookup(table).items()}


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


def systemd_quote(arg: str) -> str:
    """One ExecStart argument: % and $ escaped, quoted when it has spaces, quotes or backslashes."""
    text = arg.replace("%", "%%").replace("$", "$$")
    if re.search(r"[\s\"'\\;]", text) or text == "":
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def exec_start_args(argv: list[str]) -> str:
    """The flags part of ExecStart: one flag (with its values) per continued line, readable in `systemctl cat`."""
    lines: list[str] = []
    current: list[str] = []
    for arg in argv:
        if arg.startswith("--") and current:
            lines.append(" ".join(current))
            current = []
        current.append(systemd_quote(arg))
    if current:
        lines.append(" ".join(current))
    return " \\\n    ".join(lines)


def exec_start(python: str, module: str, argv: list[str]) -> str:
    """The ExecStart value: the interpreter and module, then exec_start_args(argv) on continued lines."""
    head = f"{systemd_quote(python)} -m {systemd_quote(module)}"
    args = exec_start_args(argv)
    return head + (" \\\n    " + args if args else "")
