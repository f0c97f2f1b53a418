"""Which attributes SGLang's speculative-decoding path needs on the target model, and whether a model class has them.

Plain Python, no Ansible imports, never imports sglang or torch: everything is read with ``ast`` from an
installed ``sglang/`` directory or straight out of a wheel. Used by ``sglang-audit``.

* The speculative path is the model runner and graph runners (``srt/model_executor/*.py``) plus the
  speculative workers the algorithm selects (``SpeculativeAlgorithm.create_worker`` in
  ``srt/speculative/spec_info.py``) and the speculative helpers.
* The target model is written ``self.model`` inside a ``*ModelRunner*`` class, ``model_runner.model`` in
  the model executor, and any ``<...target...>.model`` chain in the speculative workers (the workers
  themselves run the draft model: their own ``self.model_runner.model`` is the draft).
* Each use is *required* (reached with the algorithm on and nothing else), *conditional* (only behind an
  ``if`` the algorithm does not decide; the feature is that condition) or *guarded* (``hasattr``,
  ``getattr`` with a default, or a ``try`` that catches the AttributeError).
* The model class is found by name under ``srt/models``; its bases are followed by name across modules;
  ``torch.nn.Module``'s own attributes and everything ``__init__`` assigns to ``self`` count as provided.
"""

from __future__ import annotations

import ast
import bisect
import gc
import json
import os
import re
import zipfile
from collections import deque
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, NamedTuple, Optional

from ..errors import ToolkitError

if TYPE_CHECKING:
    from collections.abc import Iterator

ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")

# Public attributes every torch.nn.Module has.
NN_MODULE_ATTRS = frozenset(
    """
    forward parameters named_parameters buffers named_buffers children named_children modules named_modules to
    cuda cpu xpu ipu mtia half float double bfloat16 type to_empty eval train requires_grad_ zero_grad state_dict
    load_state_dict register_buffer register_parameter register_module add_module get_submodule set_submodule
    get_parameter get_buffer get_extra_state set_extra_state apply share_memory extra_repr register_forward_hook
    register_forward_pre_hook register_full_backward_hook register_full_backward_pre_hook register_backward_hook
    register_state_dict_pre_hook register_state_dict_post_hook register_load_state_dict_pre_hook
    register_load_state_dict_post_hook compile training dump_patches call_super_init T_destination __call__
    __class__ __dict__ __init__ __repr__ __setattr__ __delattr__ __dir__ __setstate__ __getstate__
    _modules _parameters _buffers _non_persistent_buffers_set _forward_hooks _forward_pre_hooks _backward_hooks
    _state_dict_hooks _load_state_dict_pre_hooks _apply _call_impl _get_name _named_members
    """.split()  # noqa: SIM905 - a word list reads better than 70 quoted strings
)
NN_MODULE_BASES = frozenset({"Module", "nn.Module", "torch.nn.Module"})

EXECUTOR_DIR = "srt/model_executor"
SPECULATIVE_DIR = "srt/speculative"
MODELS_DIR = "srt/models"
SPEC_INFO = "srt/speculative/spec_info.py"
MANAGERS_DIR = "srt/managers"
# The scheduler and its workers drive the runners at every start (0.5.17+: init_all_attention_backends).
MANAGER_PREFIXES = ("scheduler", "tp_worker")
LOADER_DIR = "srt/model_loader"
# Where a target handed to a function may lead; models and layers are the target's own code.
_FOLLOW_PREFIXES = ("srt/model_executor/", "srt/speculative/", "srt/managers/", "srt/model_loader/")
MAX_BINDING_ROUNDS = 8
REQUIRED_FILES = ("srt/model_executor/model_runner.py", SPEC_INFO)
_CATCHES_ATTRIBUTE_ERROR = frozenset({"AttributeError", "Exception", "BaseException"})
_ATTRIBUTE_ASSIGNMENT = re.compile(r"^[ \t]+(\w+)\.\w+\s*=[^=]", re.MULTILINE)
# ^class ... in MULTILINE mode, spelled as "\nclass" to be run over "\n" + text: a literal prefix is found much faster.
_CLASS_LINE = re.compile(r"\nclass\s+(\w+)\s*[(:]")
_STATEMENT_NODES = (ast.stmt, ast.excepthandler, ast.match_case)


class SglangAuditError(ToolkitError):
    """The input is not an SGLang package, names no known model class, or cannot be read; the text says how."""


@dataclass(frozen=True)
class Conditional:
    name: str
    feature: str
    present: bool


@dataclass
class AuditResult:
    sglang_version: str
    model_class: str
    algorithm: str
    missing_required: list[str]
    call_sites: dict[str, list[str]]
    conditional: list[Conditional]
    guarded: list[str]
    ok: bool
    required: list[str] = field(default_factory=list)
    # Attributes the model loader assigns to every model it builds ({name: "file:line"}).
    assigned_by_loader: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- reading the package


class SglangSource:
    """The files of one ``sglang`` package, from a directory or a wheel; parsed trees are cached."""

    def __init__(self, path: str | Path):
        path = Path(path)
        self._zip: Optional[zipfile.ZipFile] = None
        self._texts: dict[str, str] = {}
        self._trees: dict[str, ast.Module] = {}
        self._imports: dict[str, dict[str, str]] = {}
        self.path_cache: dict[str, tuple] = {}
        if path.is_file():
            self._zip = _open_wheel(path)
            self._names = sorted(n[len("sglang/") :] for n in self._zip.namelist() if n.startswith("sglang/") and n.endswith(".py"))
            self.origin = str(path)
        elif path.is_dir():
            root = path if (path / "srt").is_dir() or not (path / "sglang").is_dir() else path / "sglang"
            self._root = root
            self._names = _python_files(root) if (root / "srt").is_dir() else []
            self.origin = str(root)
        else:
            raise SglangAuditError(f"{path} does not exist")
        self._name_set = frozenset(self._names)
        missing = [name for name in REQUIRED_FILES if name not in self._name_set]
        if missing:
            raise SglangAuditError(f"{path} is not an SGLang package: no sglang/{missing[0]}")

    def files_under(self, directory: str, recursive: bool = False) -> list[str]:
        prefix = directory.rstrip("/") + "/"
        return [n for n in self._names if n.startswith(prefix) and (recursive or "/" not in n[len(prefix) :])]

    def has(self, name: str) -> bool:
        return name in self._texts or name in self._name_set

    def text(self, name: str) -> str:
        if name not in self._texts:
            data = self._zip.read("sglang/" + name) if self._zip else (self._root / name).read_bytes()
            self._texts[name] = data.decode("utf-8", errors="replace")
        return self._texts[name]

    def imports(self, name: str) -> dict[str, str]:
        """{local name: module file} for every ``from sglang.x import y`` in the file (at any depth)."""
        if name not in self._imports:
            self._imports[name] = {
                alias.asname or alias.name: _module_file(node.module)
                for node in _walk_statements(self.tree(name))
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang.")
                for alias in node.names
            }
        return self._imports[name]

    def tree(self, name: str) -> ast.Module:
        if name not in self._trees:
            try:
                self._trees[name] = ast.parse(self.text(name), filename=name)
            except SyntaxError as exc:
                raise SglangAuditError(f"sglang/{name} does not parse: {exc}") from exc
        return self._trees[name]


def _python_files(root: Path) -> list[str]:
    """Every ``*.py`` under root, relative and sorted (what ``root.rglob("*.py")`` finds, listed faster)."""
    found: list[str] = []
    for directory, dirnames, filenames in os.walk(root):
        relative = os.path.relpath(directory, root)
        prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
        found.extend(prefix + name for name in (*dirnames, *filenames) if name.endswith(".py"))
    return sorted(found)


def _walk_statements(tree: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` restricted to statements (and except handlers, match cases), in the same order.

    Expressions never contain statements, so imports, definitions, assignments, returns and raises are
    all found without visiting the expressions, which make up most of a module's nodes."""
    pending = deque([tree])
    while pending:
        node = pending.popleft()
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                pending.extend(item for item in value if isinstance(item, _STATEMENT_NODES))
        yield node


def _open_wheel(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise SglangAuditError(f"{path} is neither a directory nor a wheel: {exc}") from exc


def sglang_version(source: SglangSource) -> str:
    """``__version__`` as assigned in sglang/version.py or the generated sglang/_version.py, read without importing."""
    for name in ("_version.py", "version.py"):
        if not source.has(name):
            continue
        for node in _walk_statements(source.tree(name)):
            if _assigns_version(node):
                return node.value.value
    return "unknown"


def _assigns_version(node: ast.AST) -> bool:
    """``__version__ = version = '0.5.9'``."""
    return (
        isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
    )


# --------------------------------------------------------------------------- the algorithm


def _dotted(node: ast.AST) -> Optional[list[str]]:
    """['self', 'target_worker', 'model_runner', 'model'] for a pure Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    if isinstance(node, ast.Call):  # get_global_server_args().flag
        inner = _dotted(node.func)
        return None if inner is None else [*inner[:-1], inner[-1] + "()", *parts[::-1]]
    return None


def algorithm_predicates(source: SglangSource, algorithm: str) -> dict[str, bool]:
    """{'is_eagle': True, 'is_eagle3': True, 'is_ngram': False, ...} from SpeculativeAlgorithm's one-line predicates."""
    algorithm = algorithm.upper()
    if algorithm not in ALGORITHMS:
        raise SglangAuditError(f"unknown algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
    enum = next((n for n in source.tree(SPEC_INFO).body if isinstance(n, ast.ClassDef) and n.name == "SpeculativeAlgorithm"), None)
    if enum is None:
        raise SglangAuditError(f"sglang/{SPEC_INFO} defines no SpeculativeAlgorithm")
    members = {t.id for n in enum.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    if algorithm not in members and algorithm == "NEXTN" and "EAGLE" in members:
        algorithm = "EAGLE"  # server_args rewrites NEXTN to EAGLE when the enum has no NEXTN
    if algorithm not in members:
        raise SglangAuditError(f"this SGLang has no speculative algorithm {algorithm} (it has {', '.join(sorted(members))})")
    bodies = {
        n.name: n.body[-1].value
        for n in enum.body
        if isinstance(n, ast.FunctionDef) and len(n.args.args) == 1 and n.body and isinstance(n.body[-1], ast.Return) and n.body[-1].value
    }

    def value(node: ast.AST, seen: frozenset) -> Optional[bool]:
        if isinstance(node, ast.BoolOp):
            values = [value(v, seen) for v in node.values]
            return _tri_and(values) if isinstance(node.op, ast.And) else _tri_or(values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = value(node.operand, seen)
            return None if inner is None else not inner
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.left, ast.Name) and node.left.id == "self":
            right = node.comparators[0]
            names = [right] if not isinstance(right, (ast.Tuple, ast.List, ast.Set)) else right.elts
            hit = any(isinstance(n, ast.Attribute) and n.attr == algorithm for n in names)
            if isinstance(node.ops[0], (ast.Eq, ast.In, ast.Is)):
                return hit
            if isinstance(node.ops[0], (ast.NotEq, ast.NotIn, ast.IsNot)):
                return not hit
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _dotted(node.func) == ["self", node.func.attr]:
            name = node.func.attr
            if name in bodies and name not in seen:
                return value(bodies[name], seen | {name})
        return None

    table = {name: value(body, frozenset({name})) for name, body in bodies.items()}
    return {name: result for name, result in table.items() if result is not None}


def _tri_and(values: list[Optional[bool]]) -> Optional[bool]:
    if any(v is False for v in values):
        return False
    return True if all(v is True for v in values) else None


def _tri_or(values: list[Optional[bool]]) -> Optional[bool]:
    if any(v is True for v in values):
        return True
    return False if all(v is False for v in values) else None


# --------------------------------------------------------------------------- walking the speculative path


@dataclass(frozen=True)
class Cond:
    test: ast.expr
    holds: bool  # True inside the if-body, False inside the else / after an early return
    probes: frozenset = frozenset()  # names the test probes on the target (hasattr(model, "x")): the class decides

    def text(self) -> str:
        flags = [
            ".".join(d[-2:])
            for d in map(_dotted, ast.walk(self.test))
            if d and len(d) >= 2 and d[-2].startswith(("server_args", "get_global_server_args"))
        ]
        if flags:
            return flags[0].replace("get_global_server_args()", "server_args")
        code = ast.unparse(self.test)
        text = code if self.holds else f"not ({code})"
        return text if len(text) <= 100 else text[:97] + "..."


@dataclass(frozen=True)
class Use:
    name: str
    file: str
    line: int
    conds: tuple[Cond, ...]
    guarded: bool
    function: tuple  # (file, class or None, function name)


_new_tuple = tuple.__new__  # Reference(...) without the generated __new__'s extra call: ~100k are made per audit


class Reference(NamedTuple):
    """A place that calls or names a function/class: how its body gets reached."""

    key: tuple
    conds: tuple[Cond, ...]
    function: Optional[tuple]
    called: bool = True  # False: only named (a callback or handler registered for later)
    foreign: bool = False  # <something>.name(...) on an object other than self


@dataclass
class PathFacts:
    uses: list[Use] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    assignments: list[tuple[str, bool, tuple[Cond, ...]]] = field(default_factory=list)  # attr, truthy, conds
    classes: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # name -> (file, base names)
    # function key -> positional parameter names (self dropped) and whether it takes **kwargs
    signatures: dict[tuple, list[str]] = field(default_factory=dict)
    # a target handed to a callee: (callee descriptor, position or keyword, calling file)
    passes: list[tuple[tuple, object, str]] = field(default_factory=list)
    # self.<attr> = <target> inside a class: (class, attr)
    self_bindings: set[tuple[str, str]] = field(default_factory=set)
    nodes: dict[tuple, ast.AST] = field(default_factory=dict)  # function key -> its def, to walk it again

    def signature_keys(self, by: int, value: Optional[str]) -> list[tuple]:
        """The keys of ``signatures`` whose file (by=0) or function name (by=2) is value, in ``signatures`` order.

        Indexed on demand, again whenever ``signatures`` has grown (keys are only ever added)."""
        index = self.__dict__.get("_signature_index")
        if index is None or index[0] != len(self.signatures):
            by_file: dict[Optional[str], list[tuple]] = {}
            by_name: dict[Optional[str], list[tuple]] = {}
            for key in self.signatures:
                by_file.setdefault(key[0], []).append(key)
                by_name.setdefault(key[2], []).append(key)
            index = self.__dict__["_signature_index"] = (len(self.signatures), {0: by_file, 2: by_name})
        return index[1][by].get(value, [])


@dataclass
class Bindings:
    """Where the target lives besides the spelled-out chains: parameters and self attributes bound to it."""

    params: dict[tuple, set[str]] = field(default_factory=dict)
    self_attrs: dict[str, set[str]] = field(default_factory=dict)

    def size(self) -> int:
        return sum(map(len, self.params.values())) + sum(map(len, self.self_attrs.values()))


def _is_target(node: ast.AST, file: str, cls: Optional[str], aliases: set[str], self_attrs: frozenset = frozenset()) -> bool:
    chain = _dotted(node)
    if not chain:
        return False
    if len(chain) == 1:
        return chain[0] in aliases
    if len(chain) == 2 and chain[0] == "self" and chain[1] in self_attrs:
        return True
    if chain[-1] != "model" or any("draft" in part or "mtp" in part for part in chain):
        return False
    if file.startswith(SPECULATIVE_DIR + "/"):
        return any("target" in part for part in chain[:-1])
    if chain == ["self", "model"]:
        return cls is not None and "ModelRunner" in cls
    return chain[-2] == "model_runner"


class _Walker:
    """Records, for one file, every use of the target model with the conditions around it."""

    def __init__(self, file: str, facts: PathFacts, bindings: Optional[Bindings] = None, text: Optional[str] = None):
        self.file = file
        self.facts = facts
        self.bindings = bindings or Bindings()
        self.cls: Optional[str] = None
        self.function: Optional[tuple] = None
        self.aliases: set[str] = set()
        self.self_attrs: frozenset = frozenset()
        self.called: set[int] = set()
        self.probe_cache: dict[int, tuple] = {}
        # With the file's text: the lines that spell hasattr (or getattr); a condition spanning none of them has
        # no probe (guard) to look for.
        self.probe_lines = _lines_with(text, ("hasattr",))
        self.guard_lines = _lines_with(text, ("hasattr", "getattr"))

    def is_target(self, node: ast.AST) -> bool:
        kind = type(node)
        if kind is ast.Name:
            return node.id in self.aliases
        if kind is ast.Attribute:
            if node.attr != "model":  # only a self attribute bound to the target can be it
                value = node.value
                return type(value) is ast.Name and value.id == "self" and node.attr in self.self_attrs
            return _is_target(node, self.file, self.cls, self.aliases, self.self_attrs)
        return False  # a call's chain ends in "name()", anything else has no chain

    def module(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self.facts.classes.setdefault(node.name, (self.file, [".".join(_dotted(b) or ["?"]) for b in node.bases]))
                for base in node.bases:
                    if isinstance(base, ast.Name):
                        self.facts.references.append(Reference(("class", base.id), (), None))
                self.cls = node.name
                self.self_attrs = frozenset(self.bindings.self_attrs.get(node.name, ()))
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.function_body(item, (self.file, node.name, item.name))
                self.cls, self.self_attrs = None, frozenset()
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.function_body(node, (self.file, None, node.name))
            else:
                self.statements([node], (), False)

    def again(self, node: ast.AST, key: tuple) -> None:
        """Walk one function again (its bindings grew)."""
        self.cls = key[1]
        self.self_attrs = frozenset(self.bindings.self_attrs.get(key[1], ())) if key[1] else frozenset()
        self.function_body(node, key)
        self.cls, self.self_attrs = None, frozenset()

    def function_body(self, node: ast.AST, key: tuple) -> None:
        args = node.args
        positional = [a.arg for a in (*args.posonlyargs, *args.args)]
        is_static = any((_dotted(d) or [""])[-1] == "staticmethod" for d in node.decorator_list)
        if key[1] is not None and not is_static and positional:
            positional = positional[1:]  # self / cls
        self.facts.signatures[key] = [*positional, *(a.arg for a in args.kwonlyargs)]
        self.facts.nodes[key] = node
        self.function, self.aliases = key, set(self.bindings.params.get(key, ()))
        self.statements(node.body, (), False)
        self.function, self.aliases = None, set()

    def statements(self, body: list[ast.stmt], conds: tuple[Cond, ...], guarded: bool) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                self.expression(stmt.test, conds, guarded)
                self.statements(stmt.body, (*conds, self.cond(stmt.test, True)), guarded)
                self.statements(stmt.orelse, (*conds, self.cond(stmt.test, False)), guarded)
                if stmt.body and isinstance(stmt.body[-1], ast.Raise) and not stmt.orelse and self.cond(stmt.test, True).probes:
                    pass  # `if not hasattr(model, "x"): raise`: without x the start fails, so what follows is needed
                elif stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Raise)) and not stmt.orelse:
                    conds = (*conds, self.cond(stmt.test, False))
            elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
                # a handler that can re-raise does not guard: the AttributeError still stops the start
                catches = any(_catches_attribute_error(h) and not _reraises(h) for h in stmt.handlers)
                self.statements(stmt.body, conds, guarded or catches)
                for handler in stmt.handlers:
                    self.statements(handler.body, conds, guarded)
                self.statements(stmt.orelse, conds, guarded)
                self.statements(stmt.finalbody, conds, guarded)
            elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
                for child in ast.iter_child_nodes(stmt):
                    if isinstance(child, ast.expr):
                        self.expression(child, conds, guarded)
                    elif isinstance(child, ast.withitem):
                        self.expression(child.context_expr, conds, guarded)
                        if isinstance(child.optional_vars, ast.Name) and self.is_target(child.context_expr):
                            self.aliases.add(child.optional_vars.id)
                self.statements(stmt.body, conds, guarded)
                self.statements(getattr(stmt, "orelse", []), conds, guarded)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.statements(stmt.body, conds, guarded)
            else:
                self.simple_statement(stmt, conds, guarded)

    def simple_statement(self, stmt: ast.stmt, conds: tuple[Cond, ...], guarded: bool) -> None:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            value_is_target = self.is_target(stmt.value)
            for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                if isinstance(target, ast.Name) and value_is_target:
                    self.aliases.add(target.id)
                elif isinstance(target, ast.Name):
                    self.aliases.discard(target.id)
                if isinstance(target, ast.Attribute):
                    truthy = not (isinstance(stmt.value, ast.Constant) and not stmt.value.value)
                    self.facts.assignments.append((target.attr, truthy, conds))
                    chain = _dotted(target) or []
                    if value_is_target and self.cls and len(chain) == 2 and chain[0] == "self" and "draft" not in chain[1]:
                        self.facts.self_bindings.add((self.cls, chain[1]))
        self.children(stmt, conds, guarded)

    def expression(self, node: ast.expr, conds: tuple[Cond, ...], guarded: bool) -> None:
        # Dispatched on the exact node type (the parser makes no subclasses): names and attribute chains,
        # most of a module's expressions, take the short ways.
        kind = type(node)
        if kind is ast.Name:
            if type(node.ctx) is ast.Load:
                called = id(node) in self.called
                self.facts.references.append(_new_tuple(Reference, (("class", node.id), conds, self.function, called, False)))
                self.facts.references.append(_new_tuple(Reference, (("function", node.id), conds, self.function, called, False)))
            return
        if kind is ast.Constant:
            return
        if kind is ast.Attribute:
            if type(node.ctx) is ast.Load:
                value = node.value
                target = self.is_target(value)
                if target:
                    self.use(node.attr, node.lineno, conds, guarded)
                if type(value) is ast.Name and value.id == "self" and self.cls:
                    called = id(node) in self.called
                    self.facts.references.append(_new_tuple(Reference, (("method", node.attr), conds, self.function, called, False)))
                elif not target and id(node) in self.called:
                    self.facts.references.append(Reference(("method", node.attr), conds, self.function, True, foreign=True))
            self.expression(node.value, conds, guarded)
            return
        if kind is ast.Call:
            func = node.func
            self.called.add(id(func))
            self.call(node)
            if type(func) is ast.Name and func.id in ("hasattr", "getattr"):
                args = node.args
                named = len(args) >= 2 and isinstance(args[1], ast.Constant) and isinstance(args[1].value, str)
                if named and self.is_target(args[0]):
                    soft = func.id == "hasattr" or len(args) >= 3
                    self.use(args[1].value, node.lineno, conds, guarded or soft)
            self.expression(func, conds, guarded)
            for arg in node.args:
                self.expression(arg, conds, guarded)
            for keyword in node.keywords:
                self.expression(keyword.value, conds, guarded)
            return
        if kind is ast.IfExp:
            self.expression(node.test, conds, guarded)
            self.expression(node.body, (*conds, self.cond(node.test, True)), guarded)
            self.expression(node.orelse, (*conds, self.cond(node.test, False)), guarded)
            return
        if kind is ast.BoolOp:
            for index, value in enumerate(node.values):
                before = tuple(self.cond(v, isinstance(node.op, ast.And)) for v in node.values[:index])
                self.expression(value, (*conds, *before), guarded)
            return
        if kind is ast.NamedExpr and self.is_target(node.value):
            self.aliases.add(node.target.id)
        self.children(node, conds, guarded)

    def children(self, node: ast.AST, conds: tuple[Cond, ...], guarded: bool) -> None:
        """``expression`` on each child expression, in ``ast.iter_child_nodes`` order (comprehension parts and
        keyword values included)."""
        for name in _child_fields(type(node)):
            value = getattr(node, name, None)
            for child in value if type(value) is list else (value,):
                if isinstance(child, ast.expr):
                    self.expression(child, conds, guarded)
                elif isinstance(child, ast.comprehension):
                    for part in (child.iter, child.target, *child.ifs):
                        self.expression(part, conds, guarded)
                elif isinstance(child, ast.keyword):
                    self.expression(child.value, conds, guarded)

    def cond(self, test: ast.expr, holds: bool) -> Cond:
        cached = self.probe_cache.get(id(test))
        if cached is not None and cached[0] is test:
            return Cond(test, holds, cached[1])
        if not _spans_any(test, self.probe_lines):
            self.probe_cache[id(test)] = (test, frozenset())
            return Cond(test, holds, frozenset())
        probes = frozenset(
            n.args[1].value
            for n in ast.walk(test)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id == "hasattr"
            and len(n.args) == 2
            and isinstance(n.args[1], ast.Constant)
            and isinstance(n.args[1].value, str)
            and self.is_target(n.args[0])
        )
        self.probe_cache[id(test)] = (test, probes)
        return Cond(test, holds, probes)

    def call(self, node: ast.Call) -> None:
        """A target handed to a function or method: remember which parameter receives it."""
        hits: list[object] = [i for i, a in enumerate(node.args) if not isinstance(a, ast.Starred) and self.is_target(a)]
        hits += [k.arg for k in node.keywords if k.arg and self.is_target(k.value)]
        if not hits:
            return
        chain = _dotted(node.func) or []
        if len(chain) == 1:
            callee: tuple = ("name", chain[0])
        elif len(chain) == 2 and chain[0] == "self" and self.cls:
            callee = ("method", self.cls, chain[1])
        else:
            return
        for hit in hits:
            self.facts.passes.append((callee, hit, self.file))

    def use(self, name: str, line: int, conds: tuple[Cond, ...], guarded: bool) -> None:
        guarded = guarded or any(c.holds and _spans_any(c.test, self.guard_lines) and _mentions_guard(c.test, name) for c in conds)
        self.facts.uses.append(Use(name, self.file, line, conds, guarded, self.function or (self.file, None, "<module>")))


def _lines_with(text: Optional[str], words: tuple[str, ...]) -> Optional[list[int]]:
    """Sorted numbers of the lines that contain one of the words; None (any line may) without the text or when a
    lone carriage return could make the numbering differ from the parser's."""
    if text is None or "\r" in text:
        return None
    lines: set[int] = set()
    for word in words:
        line, counted, start = 1, 0, text.find(word)
        while start >= 0:
            line += text.count("\n", counted, start)
            lines.add(line)
            counted, start = start, text.find(word, start + 1)
    return sorted(lines)


def _spans_any(node: ast.AST, lines: Optional[list[int]]) -> bool:
    """Whether one of the (sorted) lines lies within the node's source."""
    if lines is None:
        return True
    index = bisect.bisect_left(lines, node.lineno)
    return index < len(lines) and lines[index] <= (node.end_lineno or node.lineno)


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
# Fields that never hold an expression, a comprehension or a keyword.
_LEAF_FIELDS = frozenset({"ctx", "op", "ops", "id", "attr", "arg", "kind", "conversion", "type_comment", "names", "level", "module"})


def _child_fields(kind: type) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _CHILD_FIELDS[kind] = tuple(name for name in kind._fields if name not in _LEAF_FIELDS)
    return fields


def _catches_attribute_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((_dotted(n) or [""])[-1] in _CATCHES_ATTRIBUTE_ERROR for n in names)


def _reraises(handler: ast.ExceptHandler) -> bool:
    return any(isinstance(node, ast.Raise) for stmt in handler.body for node in _walk_statements(stmt))


def _mentions_guard(test: ast.expr, name: str) -> bool:
    for node in ast.walk(test):
        is_probe = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
        if is_probe and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == name:
            return True
    return False


def speculative_path_files(source: SglangSource, predicates: dict[str, bool]) -> list[str]:
    """The model executor, the scheduler and its workers, and the speculative modules this algorithm's workers
    live in (and the helpers), each directory with its subpackages."""
    executor = source.files_under(EXECUTOR_DIR, recursive=True)
    executor += [f for f in source.files_under(MANAGERS_DIR) if PurePosixPath(f).name.startswith(MANAGER_PREFIXES)]
    speculative = [f for f in source.files_under(SPECULATIVE_DIR, recursive=True) if f != SPEC_INFO]
    statements = _walk_statements(source.tree(SPEC_INFO))
    create = next((n for n in statements if isinstance(n, ast.FunctionDef) and n.name == "create_worker"), None)
    if create is None:
        return executor + speculative
    every: set[str] = set()
    chosen: set[str] = set()

    def collect(body: list[ast.stmt], live: bool) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                verdict = _evaluate(stmt.test, predicates, {}, self_is_algorithm=True)
                collect(stmt.body, live and verdict is not False)
                collect(stmt.orelse, live and verdict is not True)
                if verdict is True and stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Raise)):
                    live = False  # the rest of the function is the else branch
            elif isinstance(stmt, ast.ImportFrom) and stmt.module:
                path = _module_file(stmt.module)
                every.add(path)
                if live:
                    chosen.add(path)
            else:
                for child in ast.iter_child_nodes(stmt):
                    if isinstance(child, ast.stmt):
                        collect([child], live)

    collect(create.body, True)
    pending = list(chosen)
    while pending:  # a chosen worker may subclass another worker module (StandaloneWorker -> EAGLEWorker)
        for node in _walk_statements(source.tree(pending.pop())):
            if isinstance(node, ast.ImportFrom) and node.module and _module_file(node.module) in every - chosen:
                chosen.add(_module_file(node.module))
                pending.append(_module_file(node.module))
    return executor + [f for f in speculative if f not in every or f in chosen]


def _module_file(module: str) -> str:
    return "/".join(module.split(".")[1:]) + ".py" if module.startswith("sglang.") else module.replace(".", "/") + ".py"


def _evaluate(
    test: ast.expr,
    predicates: dict[str, bool],
    attributes: dict[str, bool],
    self_is_algorithm: bool = False,
    probes: frozenset = frozenset(),
    provided: Optional[set] = None,
) -> Optional[bool]:
    """True/False when the algorithm (or, for hasattr probes on the target, the model class) decides the
    condition, None when something else (a feature) does."""
    if (
        provided is not None
        and isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "hasattr"
        and len(test.args) == 2
        and isinstance(test.args[1], ast.Constant)
        and test.args[1].value in probes
    ):
        return test.args[1].value in provided or "*" in provided
    if isinstance(test, ast.BoolOp):
        values = [_evaluate(v, predicates, attributes, self_is_algorithm, probes, provided) for v in test.values]
        return _tri_and(values) if isinstance(test.op, ast.And) else _tri_or(values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _evaluate(test.operand, predicates, attributes, self_is_algorithm, probes, provided)
        return None if inner is None else not inner
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr in predicates:
        receiver = ".".join(_dotted(test.func.value) or [])
        if "spec" in receiver or "algorithm" in receiver or (self_is_algorithm and receiver == "self"):
            return predicates[test.func.attr]
    if isinstance(test, (ast.Attribute, ast.Name)):
        name = test.attr if isinstance(test, ast.Attribute) else test.id
        return attributes.get(name)
    if (  # self.draft_worker is not None: set (to a worker) or left None by the algorithm
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.Is, ast.IsNot))
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
        and isinstance(test.left, (ast.Attribute, ast.Name))
    ):
        inner = _evaluate(test.left, predicates, attributes, self_is_algorithm)
        return None if inner is None else inner == isinstance(test.ops[0], ast.IsNot)
    return None


def algorithm_attributes(facts: PathFacts, predicates: dict[str, bool]) -> dict[str, bool]:
    """Attributes only set truthy under algorithm checks (``self.eagle_use_aux_hidden_state``): on or off for this algorithm."""
    decided: dict[str, list[tuple[bool, tuple[Cond, ...]]]] = {}
    for attr, truthy, conds in facts.assignments:
        decided.setdefault(attr, []).append((truthy, conds))
    result: dict[str, bool] = {}
    for attr, assignments in decided.items():
        verdicts = [[_evaluate(c.test, predicates, {}) for c in conds] for _, conds in assignments]
        if not any(v is not None for vs in verdicts for v in vs):
            continue
        live = [
            truthy and all((v is None) or (v == c.holds) for v, c in zip(vs, conds)) for (truthy, conds), vs in zip(assignments, verdicts)
        ]
        result[attr] = any(live)
    return result


# --------------------------------------------------------------------------- classifying


class _Reach:
    """Whether a function body runs with the algorithm on: 'required', or the features it waits for."""

    def __init__(self, facts: PathFacts, predicates: dict[str, bool], attributes: dict[str, bool], provided: Optional[set] = None):
        self.facts, self.predicates, self.attributes, self.provided = facts, predicates, attributes, provided
        self.memo: dict[tuple, tuple[bool, list[str]]] = {}
        self.by_key: dict[tuple, list[Reference]] = {}
        for ref in facts.references:
            self.by_key.setdefault(ref.key, []).append(ref)

    def conds(self, conds: tuple[Cond, ...]) -> tuple[bool, list[str]]:
        """(reachable, features) for a chain of conditions."""
        features = []
        for cond in conds:
            verdict = _evaluate(cond.test, self.predicates, self.attributes, False, cond.probes, self.provided)
            if verdict is None:
                features.append(cond.text())
            elif verdict != cond.holds:
                return False, []
        return True, features

    def function(self, key: Optional[tuple], seen: frozenset = frozenset()) -> tuple[bool, list[str]]:
        """(reachable, features): features empty means it runs whenever the algorithm is on."""
        if key is None or key[2] == "<module>":
            return True, []
        if key in self.memo:
            return self.memo[key]
        if key in seen:
            return False, []
        file, cls, name = key
        if cls is None:
            refs = [r for r in self.by_key.get(("function", name), []) if r.function != key]
        elif name == "__init__":
            refs = [r for r in self.by_key.get(("class", cls), []) if r.function is None or r.function[1] != cls]
        else:
            family = self.family(cls)
            refs = [
                r
                for r in self.by_key.get(("method", name), [])
                if r.function != key and (r.foreign or (r.function and r.function[1] in family))
            ]
        if refs and not any(r.called for r in refs) and name != "__init__":
            # only registered (a request handler, a callback): runs when that request or event comes
            result = (
                any(self.function(r.function, seen | {key})[0] for r in refs),
                [f"{cls + '.' if cls else ''}{name}() is a handler or callback"],
            )
        elif not refs and name != "__init__" and file.startswith(EXECUTOR_DIR + "/"):
            # a runner API nothing on the path calls (weight updates, EPLB, ...): runs only when something else asks
            result = (True, [f"{cls + '.' if cls else ''}{name}() called from outside the speculative path"])
        elif not refs:  # constructed or driven by the scheduler whenever the algorithm is on
            result = (True, [])
        else:
            reachable, features = False, []
            for ref in refs:
                live, own = self.conds(ref.conds)
                if not live:
                    continue
                caller_live, caller = self.function(ref.function, seen | {key})
                if not caller_live:
                    continue
                reachable = True
                if not own and not caller:
                    features = []
                    break
                features = features or [*caller, *own]
            result = (reachable, features)
        self.memo[key] = result
        return result

    def family(self, cls: str) -> set[str]:
        return self.family_of(self.facts, cls)

    @staticmethod
    def family_of(facts: PathFacts, cls: str) -> set[str]:
        related = {cls}
        related.update(b.split(".")[-1] for b in facts.classes.get(cls, ("", []))[1])
        related.update(name for name, (_, bases) in facts.classes.items() if cls in {b.split(".")[-1] for b in bases})
        return related


# --------------------------------------------------------------------------- what the model provides


class ModelIndex:
    """Every class under srt/models by name (found by text, parsed only when asked for)."""

    def __init__(self, source: SglangSource):
        self.source = source
        self.where: dict[str, list[str]] = {}
        for name in source.files_under(MODELS_DIR, recursive=True):
            for match in _CLASS_LINE.finditer("\n" + source.text(name)):
                self.where.setdefault(match.group(1), []).append(name)

    def class_def(self, name: str, near: Optional[str] = None) -> Optional[tuple[str, ast.ClassDef]]:
        files = self.where.get(name, [])
        if near in files:
            files = [near]
        elif near is not None:
            imported = self._imported_from(near, name)
            files = [imported] if imported in files else files
        for file in files:
            for node in self.source.tree(file).body:
                if isinstance(node, ast.ClassDef) and node.name == name:
                    return file, node
        return None

    def _imported_from(self, file: str, name: str) -> Optional[str]:
        for node in self.source.tree(file).body:
            if isinstance(node, ast.ImportFrom) and node.module and any((a.asname or a.name) == name for a in node.names):
                return _module_file(node.module)
        return None

    def provided(self, name: str) -> set[str]:
        """Attribute names an instance of the class has: its own, its SGLang bases', torch.nn.Module's."""
        found = self.class_def(name)
        if found is None:
            raise SglangAuditError(f"no class {name} under sglang/{MODELS_DIR}")
        names: set[str] = set()
        pending, seen = [found], set()
        while pending:
            file, node = pending.pop()
            if (file, node.name) in seen:
                continue
            seen.add((file, node.name))
            names |= _class_attributes(node)
            for base in node.bases:
                dotted = ".".join(_dotted(base) or [])
                if dotted in NN_MODULE_BASES:
                    names |= NN_MODULE_ATTRS
                    continue
                parent = self.class_def(dotted.split(".")[-1], near=file) if dotted else None
                if parent is not None:
                    pending.append(parent)
        return names


def _class_attributes(node: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(item.name)
            if item.name == "__init__":
                for sub in _walk_statements(item):
                    if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                        for target in sub.targets if isinstance(sub, ast.Assign) else [sub.target]:
                            for leaf in ast.walk(target):
                                if isinstance(leaf, ast.Attribute) and _dotted(leaf.value) == ["self"]:
                                    names.add(leaf.attr)
        elif isinstance(item, ast.Assign):
            names.update(leaf.id for t in item.targets for leaf in ast.walk(t) if isinstance(leaf, ast.Name))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
    return names


# --------------------------------------------------------------------------- the audit


def model_class_from_dir(model_dir: str | Path, index: Optional[ModelIndex] = None) -> str:
    """The architecture a model directory's config.json names (the first one SGLang knows, when given the index)."""
    config = Path(model_dir) / "config.json"
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError) as exc:
        raise SglangAuditError(f"cannot read {config}: {exc}") from exc
    architectures = data.get("architectures") if isinstance(data, dict) else None
    if not isinstance(architectures, list) or not architectures or not all(isinstance(a, str) for a in architectures):
        raise SglangAuditError(f"{config} has no 'architectures' list naming the model class")
    if index is not None:
        known = [a for a in architectures if a in index.where]
        if known:
            return known[0]
    return architectures[0]


def path_facts(source: SglangSource, predicates: dict[str, bool]) -> PathFacts:
    """Walk the path until the target's bindings settle.

    Each round records where a target is handed to a function (``configure_aux_hidden_state_capture(model=
    self.model)``, ``resolve_target_embed_and_head(target_model)``) or stored on ``self``; the next round
    treats that parameter or attribute as the target too. A callee imported from another module of the
    executor, speculative, scheduler or loader code joins the path (recursively)."""
    files = list(speculative_path_files(source, predicates))
    bindings = Bindings()
    facts = PathFacts()
    for file in files:
        _Walker(file, facts, bindings, source.text(file)).module(source.tree(file))
    walked = len(files)
    done_passes = 0
    for _ in range(MAX_BINDING_ROUNDS):
        changed: set[tuple] = set()
        for cls, attr in list(facts.self_bindings):
            if attr not in bindings.self_attrs.setdefault(cls, set()):
                bindings.self_attrs[cls].add(attr)
                changed.update(key for key in facts.nodes if key[1] == cls)
        for callee, hit, file in facts.passes[done_passes:]:
            for key in _callees(source, facts, callee, file, files):
                params = facts.signatures.get(key)
                if params is None:
                    continue
                name = params[hit] if isinstance(hit, int) and hit < len(params) else hit if hit in params else None
                if isinstance(name, str) and name not in bindings.params.setdefault(key, set()):
                    bindings.params[key].add(name)
                    changed.add(key)
        done_passes = len(facts.passes)
        if not changed and walked == len(files):
            break
        for file in files[walked:]:  # modules the target was handed into
            _Walker(file, facts, bindings, source.text(file)).module(source.tree(file))
        walked = len(files)
        # calls into a newly added module were seen before its functions were known: look at them again
        done_passes = 0
        seen = set(facts.uses)
        for key in changed:
            delta = PathFacts()
            _Walker(key[0], delta, bindings, source.text(key[0])).again(facts.nodes[key], key)
            facts.uses.extend(u for u in delta.uses if u not in seen)
            seen.update(delta.uses)
            facts.passes.extend(p for p in delta.passes if p not in facts.passes)
            facts.self_bindings |= delta.self_bindings
    return facts


def _callees(source: SglangSource, facts: PathFacts, callee: tuple, file: str, files: list[str]) -> list[tuple]:
    """Function keys a call may run; adds the module a called name is imported from to ``files``."""
    if callee[0] == "method":
        _, cls, name = callee
        family = _Reach.family_of(facts, cls)
        return [key for key in facts.signature_keys(2, name) if key[1] in family]
    name = callee[1]
    local = [key for key in facts.signature_keys(0, file) if key[2] in (name, "__init__") and (key[1] is None or key[1] == name)]
    local = [key for key in local if (key[1] is None and key[2] == name) or (key[1] == name and key[2] == "__init__")]
    if local:
        return local
    origin = _imported_module(source, file, name)
    if origin and origin not in files and source.has(origin) and origin.startswith(_FOLLOW_PREFIXES):
        files.append(origin)
        return []
    return [
        key for key in facts.signature_keys(0, origin) if (key[1] is None and key[2] == name) or (key[1] == name and key[2] == "__init__")
    ]


def _imported_module(source: SglangSource, file: str, name: str) -> Optional[str]:
    return source.imports(file).get(name)


def loader_assignments(source: SglangSource) -> dict[str, str]:
    """Attributes the model loader sets on every model it builds: ``model.X = ...`` unconditionally (at the top
    level of the function body, or in a ``with``) on the name the function returns. {name: "file:line"}."""
    found: dict[str, str] = {}
    for file in source.files_under(LOADER_DIR, recursive=True):
        text = source.text(file)
        names = {m.group(1) for m in _ATTRIBUTE_ASSIGNMENT.finditer(text)}
        if not any(f"return {name}\n" in text for name in names):
            continue  # parse only the files that could hold such a function
        for func in _walk_statements(source.tree(file)):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            returned = {n.value.id for n in _walk_statements(func) if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)}
            body = list(func.body)
            while body:
                stmt = body.pop(0)
                if isinstance(stmt, (ast.With, ast.AsyncWith)):
                    body[:0] = stmt.body
                    continue
                if isinstance(stmt, ast.Assign):
                    for target in stmt.targets:
                        chain = _dotted(target) or []
                        if len(chain) == 2 and chain[0] in returned:
                            found.setdefault(chain[1], f"{file}:{stmt.lineno}")
    return found


def target_uses(source: SglangSource, algorithm: str, provided: Optional[set] = None) -> Iterator[tuple[Use, str, list[str]]]:
    """(use, 'required' | 'conditional' | 'guarded', features) for each use of the target model on the path.

    With ``provided`` (the model class's attributes), ``hasattr(model, "x")`` tests are decided by the class."""
    cached = source.path_cache.get(algorithm.upper())
    if cached is None:  # the path does not depend on the model class: walked once per source and algorithm
        predicates = algorithm_predicates(source, algorithm)
        facts = path_facts(source, predicates)
        cached = source.path_cache[algorithm.upper()] = (predicates, facts, algorithm_attributes(facts, predicates))
    predicates, facts, attributes = cached
    reach = _Reach(facts, predicates, attributes, provided)
    for use in facts.uses:
        live, own = reach.conds(use.conds)
        if not live:
            continue
        caller_live, inherited = reach.function(use.function)
        if not caller_live:
            continue
        if use.guarded:
            yield use, "guarded", []
        elif own or inherited:
            yield use, "conditional", [*inherited, *own]
        else:
            yield use, "required", []


@contextmanager
def _without_cycle_collector() -> Iterator[None]:
    """Parsing and walking create millions of AST nodes and small tuples, none of them cyclic garbage; the cycle
    collector would traverse all of them again and again (a third of the time). Paused, then restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def audit(sglang: str | Path | SglangSource, model_class: Optional[str] = None, algorithm: str = "EAGLE3", model_dir=None) -> AuditResult:
    """Audit one model class against the speculative path of one SGLang package."""
    with _without_cycle_collector():
        return _audit(sglang, model_class, algorithm, model_dir)


def _audit(sglang: str | Path | SglangSource, model_class: Optional[str], algorithm: str, model_dir) -> AuditResult:
    source = sglang if isinstance(sglang, SglangSource) else SglangSource(sglang)
    index = ModelIndex(source)
    if model_class is None:
        if model_dir is None:
            raise SglangAuditError("name a model class or a model directory")
        model_class = model_class_from_dir(model_dir, index)
    provided = index.provided(model_class)
    by_loader = loader_assignments(source)
    provided = provided | set(by_loader)
    if "__getattr__" in provided:  # a class of SGLang's own that delegates unknown attributes provides them all
        provided = provided | {"*"}
    required: dict[str, list[str]] = {}
    sites: dict[str, set[str]] = {}
    conditional: dict[tuple[str, str], Conditional] = {}
    guarded: set[str] = set()
    for use, kind, features in target_uses(source, algorithm, provided):
        if use.name.startswith("__") and use.name.endswith("__"):
            continue  # every Python object has these
        present = use.name in provided or "*" in provided
        sites.setdefault(use.name, set()).add(f"{use.file}:{use.line}")
        if kind == "required":
            required.setdefault(use.name, [])
        elif kind == "conditional":
            conditional.setdefault((use.name, features[-1]), Conditional(use.name, features[-1], present))
        else:
            guarded.add(use.name)
    missing = sorted(name for name in required if name not in provided and "*" not in provided)
    return AuditResult(
        sglang_version=sglang_version(source),
        model_class=model_class,
        algorithm=algorithm.upper(),
        missing_required=missing,
        call_sites={name: sorted(sites[name], key=_site_order) for name in missing},
        conditional=sorted((c for c in conditional.values() if c.name not in required), key=lambda c: (c.name, c.feature)),
        guarded=sorted(guarded - set(required)),
        ok=not missing,
        required=sorted(required),
        assigned_by_loader={name: site for name, site in sorted(by_loader.items()) if name in required or name in sites},
    )


def _site_order(site: str) -> tuple[str, int]:
    file, _, line = site.rpartition(":")
    return file, int(line)


def format_table(result: AuditResult) -> str:
    """A short human-readable report."""
    lines = [
        f"SGLang {result.sglang_version}, {result.algorithm}, target model {result.model_class}: {'OK' if result.ok else 'MISSING'}",
        f"  required ({len(result.required)}): {', '.join(result.required) or '-'}",
    ]
    for name in result.missing_required:
        lines.append(f"  MISSING {name}")
        lines.extend(f"      {PurePosixPath('sglang') / site}" for site in result.call_sites[name])
    for item in result.conditional:
        lines.append(f"  conditional {item.name:<36} {'present' if item.present else 'absent ':<8} when {item.feature}")
    lines.append(f"  guarded: {', '.join(result.guarded) or '-'}")
    return "\n".join(lines)


def audit_key(sglang_dir: str | Path, model_class: Optional[str], algorithm: str, model_dir: Optional[str] = None) -> str:
    """Key of an audit of an unpacked sglang package: the question asked (class or model config,
    algorithm), this auditor's own source, and every file of the package by path, size and mtime
    (bytecode caches aside: an import writes them and they are not what the audit reads).
    A release venv's sglang changes only through a patch or an install, which change these."""
    import hashlib
    import inspect
    import sys

    digest = hashlib.sha256()
    config = (Path(model_dir) / "config.json").read_bytes() if model_dir else b""
    own = inspect.getsource(sys.modules[__name__])
    digest.update(json.dumps({"class": model_class, "algorithm": algorithm, "config": config.hex(), "auditor": own}).encode())
    root = Path(sglang_dir)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            digest.update(f"\0{os.path.relpath(path, root)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return digest.hexdigest()


def read_audit_proof(stamp: str | Path, key: str) -> Optional[dict]:
    """The report of an earlier audit that passed with this key, or None."""
    try:
        data = json.loads(Path(stamp).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("audit"), dict) or not data["audit"].get("ok"):
        return None
    return data["audit"]


def write_audit_proof(stamp: str | Path, key: str, report: dict) -> None:
    """Record a passed audit atomically; a failure to write only costs the next audit."""
    path = Path(stamp)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps({"key": key, "audit": report}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass
