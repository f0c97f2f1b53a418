"""Where an API key comes from, and whether it sits in plain text in a file (the sglang_key_sources lookup).

Ansible users keep a secret in one of three ways, all of which the toolkit accepts: an inline-vaulted
value (``ansible-vault encrypt_string``, a ``!vault`` tag in a plain vars file), a vars file encrypted
as a whole (``ansible-vault create``/``encrypt``, e.g. ``host_vars/gpu-01/vault.yml``) or a vaulted
extra-vars file (``-e @secrets.yml``). Once Ansible has loaded them the three look alike (and like a
plain value), so the question is asked of the files themselves: the files Ansible reads variables from
(the inventory sources with their ``host_vars``/``group_vars``, the playbook directory's
``host_vars``/``group_vars``, every ``-e @file``) are read as they are on disk; a file that starts with
``$ANSIBLE_VAULT;`` is vault-encrypted and cannot hold the key in plain text; any other file is searched
for the key's plaintext (as one token) and parsed as YAML for a definition of the variable.

Refused: the key's value found in plain text in a file, or a vaulted key that cannot be opened (no
vault password given). Warned about: the key given in plain text on the command line (``-e name=...``:
the process list and the shell's history show it), and a plain non-empty value written for the
variable in a file that another definition overrides (a key in plain text all the same).

Nothing here returns or prints a key: findings are file paths and line numbers. Plain Python (PyYAML),
no Ansible imports; the lookup (plugins/lookup/sglang_key_sources.py) gathers the inputs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

VAULT_HEADER = "$ANSIBLE_VAULT;"
# What Ansible's host_group_vars plugin reads in host_vars/ and group_vars/ (plus files with no extension).
VARS_EXTENSIONS = ("", ".yml", ".yaml", ".json")
MAX_FILE_BYTES = 4 * 1024 * 1024
PASSWORD_HINT = (
    "give the vault password it was encrypted with: --ask-vault-pass, --vault-password-file FILE, --vault-id, or "
    "ANSIBLE_VAULT_PASSWORD_FILE=FILE (e.g. make deploy INVENTORY=... ARGS=--ask-vault-pass)"
)


def how_to_vault(name: str) -> str:
    """The two ways of vaulting a key, as the messages give them."""
    return (
        f"vault it either inline (ansible-vault encrypt_string --name {name}, pasted in place of the plain value) "
        f"or as a whole file (move it to a vars file of its own, e.g. host_vars/<host>/vault.yml, and run ansible-vault encrypt on it), "
        f"then {PASSWORD_HINT}"
    )


@dataclass(frozen=True)
class VarsFile:
    """One file Ansible reads variables from, as it is on disk."""

    path: str
    kind: str  # inventory, playbook-vars or extra-vars
    text: str  # the file's text; for a vault-encrypted file the ciphertext
    decrypted: Optional[str] = None  # a vault-encrypted file's text when this run could open it

    @property
    def encrypted(self) -> bool:
        return is_vault_encrypted(self.text)


@dataclass(frozen=True)
class Definition:
    """A definition of the variable in a vars file: how its value is written there."""

    path: str
    line: int
    form: str  # inline-vault, whole-file-vault, template, empty, plain


@dataclass
class KeySource:
    """The verdict on one key. ``status``: unset, vaulted, indirect (a template or lookup; no file
    holds it in plain text), plain-in-file, undecryptable, plain-on-command-line. Refused when it has
    problems."""

    name: str
    status: str
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    definitions: list[Definition] = field(default_factory=list)
    plaintext_in: list[str] = field(default_factory=list)  # path:line of each plain occurrence

    @property
    def refused(self) -> bool:
        return bool(self.problems)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "refused": self.refused,
            "message": "; ".join(self.problems),
            "warnings": list(self.warnings),
            "definitions": [f"{d.path}:{d.line} ({d.form})" for d in self.definitions],
            "plaintext_in": list(self.plaintext_in),
        }


def is_vault_encrypted(text: str) -> bool:
    """Whether a file's text is an Ansible vault (what ansible-vault create/encrypt writes)."""
    return text.lstrip("\ufeff").startswith(VAULT_HEADER)


def _vars_files_under(directory: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or os.path.splitext(name)[1] not in VARS_EXTENSIONS:
                continue
            found.append(Path(root) / name)
    return found


def candidate_files(
    inventory_sources: Iterable[str], playbook_dir: Optional[str], extra_vars: Iterable[str], origins: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """(path, kind) of every file Ansible may have read variables from, each once: everything under a
    directory inventory source; an inventory file with the host_vars/group_vars beside it; the
    playbook directory's host_vars/group_vars; each ``-e @file``; and any file Ansible itself recorded
    as a value's origin."""
    seen: dict[str, str] = {}

    def add(path: Path, kind: str) -> None:
        resolved = str(path.resolve())
        if path.is_file() and resolved not in seen:
            seen[resolved] = kind

    for source in inventory_sources:
        if not source or ("," in source and not os.path.exists(source)):
            continue  # a host list (-i host1,host2) holds no variables
        path = Path(source).expanduser()
        if path.is_dir():
            for found in _vars_files_under(path):
                add(found, "inventory")
        elif path.is_file():
            add(path, "inventory")
            for sub in ("host_vars", "group_vars"):
                for found in _vars_files_under(path.parent / sub):
                    add(found, "inventory")
    if playbook_dir:
        for sub in ("host_vars", "group_vars"):
            for found in _vars_files_under(Path(playbook_dir) / sub):
                add(found, "playbook-vars")
    for arg in extra_vars:
        if arg.startswith("@"):
            add(Path(arg[1:]).expanduser(), "extra-vars")
    for origin in origins:
        if origin and os.path.isabs(origin):
            add(Path(origin), "origin")
    return [(path, kind) for path, kind in seen.items()]


def plaintext_lines(text: str, secret: str) -> list[int]:
    """Line numbers (from 1) where the secret stands as one token (not inside a longer word)."""
    if not secret:
        return []
    pattern = re.compile(r"(?<![\w\-])" + re.escape(secret) + r"(?![\w\-])")
    return [number for number, line in enumerate(text.splitlines(), start=1) if pattern.search(line)]


class _InlineVault(str):
    """A !vault value as written: its ciphertext, never decrypted here."""


class _Unsafe(str):
    """A !unsafe value (Ansible does not template it)."""


class _VarsLoader(yaml.SafeLoader):
    """PyYAML's safe loader with Ansible's two tags, keeping each mapping key's line."""


def _vault_node(loader: yaml.SafeLoader, node: yaml.Node) -> _InlineVault:
    return _InlineVault(loader.construct_scalar(node))  # type: ignore[arg-type]


def _unsafe_node(loader: yaml.SafeLoader, node: yaml.Node) -> _Unsafe:
    return _Unsafe(loader.construct_scalar(node))  # type: ignore[arg-type]


_VarsLoader.add_constructor("!vault", _vault_node)
_VarsLoader.add_constructor("!unsafe", _unsafe_node)


def _form_of(value: Any) -> str:
    if isinstance(value, _InlineVault):
        return "inline-vault"
    if value is None or value == "":
        return "empty"
    if isinstance(value, str) and not isinstance(value, _Unsafe) and ("{{" in value or "{%" in value):
        return "template"
    return "plain"


def definitions_in(text: str, name: str, path: str, whole_file_vault: bool = False) -> list[tuple[Definition, Any]]:
    """Each definition of ``name`` in a YAML vars or inventory file (at any depth, so an inventory's
    ``hosts: h: name: ...`` counts) with its value as written. Text that is not YAML (an INI
    inventory) gives none; the plaintext search still reads it."""
    try:
        root = yaml.compose(text, Loader=_VarsLoader)
    except yaml.YAMLError:
        return []
    if root is None:
        return []
    found: list[tuple[Definition, Any]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == name:
                    try:
                        loaded = _construct(value)
                    except yaml.YAMLError:
                        loaded = None
                    form = "whole-file-vault" if whole_file_vault and _form_of(loaded) == "plain" else _form_of(loaded)
                    found.append((Definition(path, key.start_mark.line + 1, form), loaded))
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return sorted(found, key=lambda item: item[0].line)


def _construct(node: yaml.Node) -> Any:
    loader = _VarsLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def classify_key(
    name: str,
    value: Optional[str],
    files: Sequence[VarsFile],
    command_line: Sequence[str] = (),
    undecryptable: str = "",
) -> KeySource:
    """The verdict on one key. ``value``: the key as Ansible resolved it (None or "" when unset);
    ``command_line``: the literal (not @file) ``-e`` arguments; ``undecryptable``: Ansible's reason when
    the value could not be decrypted."""
    if undecryptable:
        problem = f"{name}: the key is vaulted but this run cannot open it ({undecryptable}); {PASSWORD_HINT}"
        return KeySource(name, "undecryptable", [problem])
    definitions: list[Definition] = []
    stale_plain: list[Definition] = []
    plaintext_in: list[str] = []
    for vars_file in files:
        if vars_file.encrypted:
            if vars_file.decrypted is not None:
                definitions.extend(d for d, _ in definitions_in(vars_file.decrypted, name, vars_file.path, whole_file_vault=True))
            continue
        plaintext_in.extend(f"{vars_file.path}:{line}" for line in plaintext_lines(vars_file.text, value or ""))
        for definition, loaded in definitions_in(vars_file.text, name, vars_file.path):
            definitions.append(definition)
            if definition.form == "plain" and str(loaded) != (value or ""):
                stale_plain.append(definition)
    if not value:
        return KeySource(name, "unset", definitions=definitions)
    source = KeySource(name, "indirect", definitions=definitions, plaintext_in=plaintext_in)
    source.warnings = [
        f"{name}: {d.path}:{d.line} holds a plain value for it that another definition overrides, a key in plain text all the same; "
        f"remove it, or {how_to_vault(name)}"
        for d in stale_plain
    ]
    if plaintext_in:
        source.status = "plain-in-file"
        source.problems.append(f"{name}: the key is written in plain text in {', '.join(plaintext_in)}; {how_to_vault(name)}")
    elif any(plaintext_lines(arg, value) for arg in command_line):
        source.status = "plain-on-command-line"
        source.warnings.append(
            f"{name}: the key was given in plain text on the command line (-e), where the process list and the shell's history show it; "
            "keep it in a vaulted extra-vars file instead (ansible-vault encrypt secrets.yml, then -e @secrets.yml)"
        )
    elif any(d.form in ("inline-vault", "whole-file-vault") for d in definitions):
        source.status = "vaulted"
    if re.search(r"[\s\x00-\x1f]", value):
        source.problems.append(f"{name}: the key holds whitespace or a control character; expected one word (e.g. openssl rand -hex 32)")
    return source


def classify_opened(name: str, undecryptable: str) -> KeySource:
    """A variable that only has to open (a dictionary of secrets): refused when it holds a vaulted value
    this run cannot decrypt, with the toolkit's hint."""
    if undecryptable:
        return KeySource(name, "undecryptable", [f"{name}: holds a vaulted value this run cannot open ({undecryptable}); {PASSWORD_HINT}"])
    return KeySource(name, "opened")


def vars_files_of(directory: str | os.PathLike[str], subdir: str, name: str) -> list[Path]:
    """The files Ansible's host_group_vars plugin reads for one host (``subdir`` host_vars) or group
    (group_vars) under an inventory or playbook directory: ``<subdir>/<name>`` with no extension, .yml,
    .yaml or .json, and every such file under ``<subdir>/<name>/``."""
    base = Path(directory) / subdir
    found = [base / f"{name}{ext}" for ext in VARS_EXTENSIONS if (base / f"{name}{ext}").is_file()]
    if (base / name).is_dir():
        found += _vars_files_under(base / name)
    return found


def first_vault_encrypted(paths: Iterable[Path]) -> Optional[Path]:
    """The first of the files that is vault-encrypted (read: its first bytes only)."""
    for path in paths:
        try:
            with open(path, "rb") as handle:
                head = handle.read(len(VAULT_HEADER) + 3)
        except OSError:
            continue
        if head.lstrip(b"\xef\xbb\xbf").startswith(VAULT_HEADER.encode()):
            return path
    return None


def no_password_message(path: Path | str) -> str:
    """The toolkit's hint for a vars file vaulted whole that a run without a vault password reaches."""
    return f"{path} is vault-encrypted (ansible-vault encrypt) and this run was given no vault password; {PASSWORD_HINT}"


def wrong_password_message(path: Path | str, reason: str) -> str:
    """The toolkit's hint for a vars file vaulted whole that none of the run's vault passwords opens."""
    return (
        f"{path} is vault-encrypted (ansible-vault encrypt) and none of the vault passwords this run was given opens it "
        f"({reason}); check which password file the run reads (--vault-password-file, ANSIBLE_VAULT_PASSWORD_FILE, "
        f"--vault-id) and that {path} was encrypted with it (ansible-vault view {path})"
    )


def read_vars_file(path: str, kind: str, decrypt: Optional[Any] = None) -> Optional[VarsFile]:
    """A file as a VarsFile; ``decrypt(path) -> str`` opens a vault-encrypted one (None when it cannot).
    A file too large or not text is skipped."""
    file = Path(path)
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            return None
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    decrypted = decrypt(path) if decrypt is not None and is_vault_encrypted(text) else None
    return VarsFile(path, kind, text, decrypted)
