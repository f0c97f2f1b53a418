"""Which attributes SGLang's speculative-decoding path needs on the target model, and whether a model class has them.

Plain Python, no Ansible imports, never imports sglang or torch: everything is read with ``ast`` from an
installed ``sglang/`` directory or straight out of a wheel. Used by ``bin/sglang-audit``.

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
import json
import re
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Optional

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
    """.split()  # noqa: SIM905 - a word list reads better than 70 quoted strings
)
NN_MODULE_BASES = frozenset({"Module", "nn.Module", "torch.nn.Module"})

EXECUTOR_DIR = "srt/model_executor"
SPECULATIVE_DIR = "srt/speculative"
MODELS_DIR = "srt/models"
SPEC_INFO = "srt/speculative/spec_info.py"
REQUIRED_FILES = ("srt/model_executor/model_runner.py", SPEC_INFO)
_CATCHES_ATTRIBUTE_ERROR = frozenset({"AttributeError", "Exception", "BaseException"})
_CLASS_LINE = re.compile(r"^class\s+(\w+)\s*[(:]", re.MULTILINE)


class SglangAuditError(Exception):
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
        if path.is_file():
            self._zip = _open_wheel(path)
            self._names = sorted(n[len("sglang/") :] for n in self._zip.namelist() if n.startswith("sglang/") and n.endswith(".py"))
            self.origin = str(path)
        elif path.is_dir():
            root = path if (path / "srt").is_dir() or not (path / "sglang").is_dir() else path / "sglang"
            self._root = root
            self._names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")) if (root / "srt").is_dir() else []
            self.origin = str(root)
        else:
            raise SglangAuditError(f"{path} does not exist")
        missing = [name for name in REQUIRED_FILES if name not in set(self._names)]
        if missing:
            raise SglangAuditError(f"{path} is not an SGLang package: no sglang/{missing[0]}")

    def files_under(self, directory: str, recursive: bool = False) -> list[str]:
        prefix = directory.rstrip("/") + "/"
        return [n for n in self._names if n.startswith(prefix) and (recursive or "/" not in n[len(prefix) :])]

    def has(self, name: str) -> bool:
        return name in self._texts or name in set(self._names)

    def text(self, name: str) -> str:
        if name not in self._texts:
            data = self._zip.read("sglang/" + name) if self._zip else (self._root / name).read_bytes()
            self._texts[name] = data.decode("utf-8", errors="replace")
        return self._texts[name]

    def tree(self, name: str) -> ast.Module:
        if name not in self._trees:
            try:
                self._trees[name] = ast.parse(self.text(name), filename=name)
            except SyntaxError as exc:
                raise SglangAuditError(f"sglang/{name} does not parse: {exc}") from exc
        return self._trees[name]


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
        for node in ast.walk(source.tree(name)):
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


@dataclass(frozen=True)
class Reference:
    """A place that calls or names a function/class: how its body gets reached."""

    key: tuple
    conds: tuple[Cond, ...]
    function: Optional[tuple]


@dataclass
class PathFacts:
    uses: list[Use] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    assignments: list[tuple[str, bool, tuple[Cond, ...]]] = field(default_factory=list)  # attr, truthy, conds
    classes: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # name -> (file, base names)


def _is_target(node: ast.AST, file: str, cls: Optional[str], aliases: set[str]) -> bool:
    chain = _dotted(node)
    if not chain:
        return False
    if len(chain) == 1:
        return chain[0] in aliases
    if chain[-1] != "model" or any("draft" in part or "mtp" in part for part in chain):
        return False
    if file.startswith(SPECULATIVE_DIR + "/"):
        return any("target" in part for part in chain[:-1])
    if chain == ["self", "model"]:
        return cls is not None and "ModelRunner" in cls
    return chain[-2] == "model_runner"


class _Walker:
    """Records, for one file, every use of the target model with the conditions around it."""

    def __init__(self, file: str, facts: PathFacts):
        self.file = file
        self.facts = facts
        self.cls: Optional[str] = None
        self.function: Optional[tuple] = None
        self.aliases: set[str] = set()

    def module(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self.facts.classes.setdefault(node.name, (self.file, [".".join(_dotted(b) or ["?"]) for b in node.bases]))
                for base in node.bases:
                    if isinstance(base, ast.Name):
                        self.facts.references.append(Reference(("class", base.id), (), None))
                self.cls = node.name
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.function_body(item, (self.file, node.name, item.name))
                self.cls = None
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.function_body(node, (self.file, None, node.name))
            else:
                self.statements([node], (), False)

    def function_body(self, node: ast.AST, key: tuple) -> None:
        self.function, self.aliases = key, set()
        self.statements(node.body, (), False)
        self.function, self.aliases = None, set()

    def statements(self, body: list[ast.stmt], conds: tuple[Cond, ...], guarded: bool) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                self.expression(stmt.test, conds, guarded)
                self.statements(stmt.body, (*conds, Cond(stmt.test, True)), guarded)
                self.statements(stmt.orelse, (*conds, Cond(stmt.test, False)), guarded)
                if stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Raise)) and not stmt.orelse:
                    conds = (*conds, Cond(stmt.test, False))
            elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
                catches = any(_catches_attribute_error(h) for h in stmt.handlers)
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
                self.statements(stmt.body, conds, guarded)
                self.statements(getattr(stmt, "orelse", []), conds, guarded)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.statements(stmt.body, conds, guarded)
            else:
                self.simple_statement(stmt, conds, guarded)

    def simple_statement(self, stmt: ast.stmt, conds: tuple[Cond, ...], guarded: bool) -> None:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name) and _is_target(stmt.value, self.file, self.cls, self.aliases):
                    self.aliases.add(target.id)
                elif isinstance(target, ast.Name):
                    self.aliases.discard(target.id)
                if isinstance(target, ast.Attribute):
                    truthy = not (isinstance(stmt.value, ast.Constant) and not stmt.value.value)
                    self.facts.assignments.append((target.attr, truthy, conds))
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.expr):
                self.expression(child, conds, guarded)

    def expression(self, node: ast.expr, conds: tuple[Cond, ...], guarded: bool) -> None:
        if isinstance(node, ast.IfExp):
            self.expression(node.test, conds, guarded)
            self.expression(node.body, (*conds, Cond(node.test, True)), guarded)
            self.expression(node.orelse, (*conds, Cond(node.test, False)), guarded)
            return
        if isinstance(node, ast.BoolOp):
            for index, value in enumerate(node.values):
                before = tuple(Cond(v, isinstance(node.op, ast.And)) for v in node.values[:index])
                self.expression(value, (*conds, *before), guarded)
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
            args = node.args
            named = len(args) >= 2 and isinstance(args[1], ast.Constant) and isinstance(args[1].value, str)
            if named and _is_target(args[0], self.file, self.cls, self.aliases):
                soft = node.func.id == "hasattr" or len(args) >= 3
                self.use(args[1].value, node.lineno, conds, guarded or soft)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _is_target(node.value, self.file, self.cls, self.aliases):
            self.use(node.attr, node.lineno, conds, guarded)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _dotted(node.value) == ["self"] and self.cls:
            self.facts.references.append(Reference(("method", node.attr), conds, self.function))
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            self.facts.references.append(Reference(("class", node.id), conds, self.function))
            self.facts.references.append(Reference(("function", node.id), conds, self.function))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expression(child, conds, guarded)
            elif isinstance(child, ast.comprehension):
                for part in (child.iter, child.target, *child.ifs):
                    self.expression(part, conds, guarded)
            elif isinstance(child, ast.keyword):
                self.expression(child.value, conds, guarded)

    def use(self, name: str, line: int, conds: tuple[Cond, ...], guarded: bool) -> None:
        guarded = guarded or any(c.holds and _mentions_guard(c.test, name) for c in conds)
        self.facts.uses.append(Use(name, self.file, line, conds, guarded, self.function or (self.file, None, "<module>")))


def _catches_attribute_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((_dotted(n) or [""])[-1] in _CATCHES_ATTRIBUTE_ERROR for n in names)


def _mentions_guard(test: ast.expr, name: str) -> bool:
    for node in ast.walk(test):
        is_probe = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
        if is_probe and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == name:
            return True
    return False


def speculative_path_files(source: SglangSource, predicates: dict[str, bool]) -> list[str]:
    """The model executor plus the speculative modules this algorithm's workers live in (and the helpers)."""
    executor = source.files_under(EXECUTOR_DIR)
    speculative = [f for f in source.files_under(SPECULATIVE_DIR) if f != SPEC_INFO]
    create = next((n for n in ast.walk(source.tree(SPEC_INFO)) if isinstance(n, ast.FunctionDef) and n.name == "create_worker"), None)
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
        for node in ast.walk(source.tree(pending.pop())):
            if isinstance(node, ast.ImportFrom) and node.module and _module_file(node.module) in every - chosen:
                chosen.add(_module_file(node.module))
                pending.append(_module_file(node.module))
    return executor + [f for f in speculative if f not in every or f in chosen]


def _module_file(module: str) -> str:
    return "/".join(module.split(".")[1:]) + ".py" if module.startswith("sglang.") else module.replace(".", "/") + ".py"


def _evaluate(test: ast.expr, predicates: dict[str, bool], attributes: dict[str, bool], self_is_algorithm: bool = False) -> Optional[bool]:
    """True/False when the algorithm decides the condition, None when something else (a feature) does."""
    if isinstance(test, ast.BoolOp):
        values = [_evaluate(v, predicates, attributes, self_is_algorithm) for v in test.values]
        return _tri_and(values) if isinstance(test.op, ast.And) else _tri_or(values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _evaluate(test.operand, predicates, attributes, self_is_algorithm)
        return None if inner is None else not inner
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr in predicates:
        receiver = ".".join(_dotted(test.func.value) or [])
        if "spec" in receiver or "algorithm" in receiver or (self_is_algorithm and receiver == "self"):
            return predicates[test.func.attr]
    if isinstance(test, (ast.Attribute, ast.Name)):
        name = test.attr if isinstance(test, ast.Attribute) else test.id
        return attributes.get(name)
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

    def __init__(self, facts: PathFacts, predicates: dict[str, bool], attributes: dict[str, bool]):
        self.facts, self.predicates, self.attributes = facts, predicates, attributes
        self.memo: dict[tuple, tuple[bool, list[str]]] = {}
        self.by_key: dict[tuple, list[Reference]] = {}
        for ref in facts.references:
            self.by_key.setdefault(ref.key, []).append(ref)

    def conds(self, conds: tuple[Cond, ...]) -> tuple[bool, list[str]]:
        """(reachable, features) for a chain of conditions."""
        features = []
        for cond in conds:
            verdict = _evaluate(cond.test, self.predicates, self.attributes)
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
            refs = [r for r in self.by_key.get(("method", name), []) if r.function and r.function[1] in family and r.function != key]
        if not refs and name != "__init__" and file.startswith(EXECUTOR_DIR + "/"):
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
        related = {cls}
        related.update(b.split(".")[-1] for b in self.facts.classes.get(cls, ("", []))[1])
        related.update(name for name, (_, bases) in self.facts.classes.items() if cls in {b.split(".")[-1] for b in bases})
        return related


# --------------------------------------------------------------------------- what the model provides


class ModelIndex:
    """Every class under srt/models by name (found by text, parsed only when asked for)."""

    def __init__(self, source: SglangSource):
        self.source = source
        self.where: dict[str, list[str]] = {}
        for name in source.files_under(MODELS_DIR, recursive=True):
            for match in _CLASS_LINE.finditer(source.text(name)):
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
                for sub in ast.walk(item):
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
    facts = PathFacts()
    for file in speculative_path_files(source, predicates):
        _Walker(file, facts).module(source.tree(file))
    return facts


def target_uses(source: SglangSource, algorithm: str) -> Iterator[tuple[Use, str, list[str]]]:
    """(use, 'required' | 'conditional' | 'guarded', features) for each use of the target model on the path."""
    predicates = algorithm_predicates(source, algorithm)
    facts = path_facts(source, predicates)
    reach = _Reach(facts, predicates, algorithm_attributes(facts, predicates))
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


def audit(sglang: str | Path | SglangSource, model_class: Optional[str] = None, algorithm: str = "EAGLE3", model_dir=None) -> AuditResult:
    """Audit one model class against the speculative path of one SGLang package."""
    source = sglang if isinstance(sglang, SglangSource) else SglangSource(sglang)
    index = ModelIndex(source)
    if model_class is None:
        if model_dir is None:
            raise SglangAuditError("name a model class or a model directory")
        model_class = model_class_from_dir(model_dir, index)
    provided = index.provided(model_class)
    if "__getattr__" in provided:  # a class of SGLang's own that delegates unknown attributes provides them all
        provided = provided | {"*"}
    required: dict[str, list[str]] = {}
    sites: dict[str, set[str]] = {}
    conditional: dict[tuple[str, str], Conditional] = {}
    guarded: set[str] = set()
    for use, kind, features in target_uses(source, algorithm):
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
