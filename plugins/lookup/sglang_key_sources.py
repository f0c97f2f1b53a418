# Where each API key comes from, read on the controller: whether it is written in plain text in a file
# Ansible read variables from, and whether a vaulted one can be opened by this run. Part of the collection
# sm120.sglang (plugins/lookup/); the logic is plugins/plugin_utils/sglang_sm120_controller/secret_sources.py.
from __future__ import annotations

DOCUMENTATION = """
name: sglang_key_sources
short_description: Whether each named key is vaulted, and where a plain one is written
description:
  - For each variable named, resolves its value on the controller and reads, as they are on disk, the
    files Ansible read variables from - everything under a directory inventory source, an inventory
    file with the C(host_vars)/C(group_vars) beside it, the playbook directory's C(host_vars)/C(group_vars),
    each C(-e @file), and the file Ansible recorded as the value's origin where it records one.
  - A file starting with C($ANSIBLE_VAULT;) is vault-encrypted (opened with this run's vault password
    only to name the definition); any other file is searched for the key in plain text and parsed for
    definitions of the variable (C(!vault) inline, a template, a plain value).
  - Returns, per variable, a dictionary - C(name), C(status) (C(unset), C(vaulted), C(indirect),
    C(plain-in-file), C(plain-on-command-line), C(undecryptable)), C(refused), C(message) (how to vault
    it, or how to give the vault password), C(warnings), C(definitions) (path:line and form) and
    C(plaintext_in) (path:line). Never the key. Warnings are also shown as Ansible warnings.
  - Each variable named in O(also_open) (e.g. a dictionary of secrets) is only checked to open with this
    run's vault password; it gets an entry of its own, with C(status) C(undecryptable) or C(opened).
options:
  _terms:
    description: Names of the variables holding keys.
    required: true
  also_open:
    description: Names of more variables whose vaulted values this run must be able to open.
    type: list
    elements: str
    default: []
"""

EXAMPLES = """
- name: Refuse a key written in plain text
  ansible.builtin.assert:
    that: lookup('sm120.sglang.sglang_key_sources', 'sglang_service_api_key', wantlist=True) | selectattr('refused') | list | length == 0
"""

RETURN = """
_list:
  description: One dictionary per variable.
  type: list
  elements: dict
"""

from ansible import context  # noqa: E402
from ansible.errors import AnsibleError, AnsibleLookupError  # noqa: E402
from ansible.parsing.vault import AnsibleVaultError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402
from ansible.utils.display import Display  # noqa: E402

from sglang_sm120_controller import secret_sources  # noqa: E402

display = Display()


def _origin_path(value):
    """The file ansible-core (2.19+) recorded as the value's origin; a hint of where to look only."""
    try:
        from ansible._internal._datatag._tags import Origin
    except ImportError:
        return None
    origin = Origin.get_tag(value)
    return origin.path if origin is not None else None


def _is_vault_error(error):
    """Whether a templating error comes from a vaulted value that cannot be decrypted (Ansible wraps it)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, AnsibleVaultError) or "Vault" in type(error).__name__:
            return True
        error = error.__cause__ or error.__context__
    return False


class LookupModule(LookupBase):
    def _decrypt(self, path):
        try:
            return str(self._loader.get_text_file_contents(path))
        except AnsibleError:
            return None

    def _resolve(self, name, raw):
        """(value, why it cannot be decrypted). Any other error names the variable, never its value."""
        try:
            value = self._templar.template(raw)
            return ("" if value is None else str(value)), ""
        except AnsibleError as error:
            if _is_vault_error(error):
                text = str(error)
                return None, text.splitlines()[0] if text else type(error).__name__
            raise AnsibleLookupError(f"sglang_key_sources: {name} cannot be resolved ({type(error).__name__})") from None

    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        self.set_options(var_options=variables, direct=kwargs)
        extra_vars = [str(arg) for arg in (context.CLIARGS.get("extra_vars") or ())]
        command_line = [arg for arg in extra_vars if not arg.startswith("@")]
        resolved = {}
        origins = []
        for name in terms:
            raw = variables.get(name, "")
            origins.append(_origin_path(raw))
            resolved[name] = self._resolve(name, raw)
        candidates = secret_sources.candidate_files(
            [str(s) for s in variables.get("ansible_inventory_sources") or ()],
            variables.get("playbook_dir"),
            extra_vars,
            [o for o in origins if o],
        )
        files = [f for f in (secret_sources.read_vars_file(path, kind, self._decrypt) for path, kind in candidates) if f is not None]
        out = []
        for name in terms:
            value, undecryptable = resolved[name]
            verdict = secret_sources.classify_key(name, value, files, command_line, undecryptable)
            for warning in verdict.warnings:
                display.warning(warning)
            out.append(verdict.as_dict())
        for name in self.get_option("also_open"):
            _, undecryptable = self._resolve(name, variables.get(name, ""))
            out.append(secret_sources.classify_opened(name, undecryptable).as_dict())
        return out
