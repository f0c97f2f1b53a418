# The toolkit's hint when a vars file vaulted whole (host_vars/<host>/vault.yml) meets a run without a
# vault password, or with none that opens it. Ansible loads such a file before the first task of a play and stops with its generic
# "Attempting to decrypt but no vault secrets found"; this vars plugin, found by Ansible next to the
# playbooks (plugins/vars/) and run before host_group_vars reads the same files, says what to
# do instead. It reads no variables and returns none.
from __future__ import annotations

DOCUMENTATION = """
name: sglang_vault_hint
short_description: Name the vars file vaulted whole that this run cannot open, and how to give its password
description:
  - For each host and group, looks at the files Ansible's host_group_vars plugin will read
    (C(host_vars/<host>), C(group_vars/<group>), as files or directories); when one is vault-encrypted and
    the run was given no vault password, fails naming the file and the ways to give the password
    (C(--ask-vault-pass), C(--vault-password-file), C(--vault-id), C(ANSIBLE_VAULT_PASSWORD_FILE)).
  - With vault passwords given, opens each such file once; one that none of them opens fails naming the file and
    how to check which password file the run reads, instead of Ansible's bare C(Decryption failed).
  - Returns no variables. With no vaulted file, it does nothing.
# No settings; declared, so Ansible reads this documentation once per run, not at every task.
options: {}
"""

from ansible.errors import AnsibleError  # noqa: E402
from ansible.plugins.vars import BaseVarsPlugin  # noqa: E402

from sglang_sm120_controller import secret_sources  # noqa: E402


class VarsModule(BaseVarsPlugin):
    def __init__(self):
        super().__init__()
        self._seen = {}

    def get_vars(self, loader, path, entities, cache=True):
        vault = getattr(loader, "_vault", None)
        if vault is None:
            return {}  # this Ansible keeps the vault elsewhere: Ansible opens the files
        given = bool(getattr(vault, "secrets", None))
        if not isinstance(entities, list):
            entities = [entities]
        for entity in entities:
            subdir = "host_vars" if entity.__class__.__name__ == "Host" else "group_vars"
            key = (path, subdir, entity.name, given)
            if key not in self._seen:
                self._seen[key] = self._problem(vault, given, secret_sources.vars_files_of(path, subdir, entity.name))
            if self._seen[key]:
                raise AnsibleError(self._seen[key])
        return {}

    @staticmethod
    def _problem(vault, given, paths):
        """The hint for the first vaulted file of `paths` this run cannot open ("" when it can, or none is vaulted)."""
        for candidate in paths:
            found = secret_sources.first_vault_encrypted([candidate])
            if found is None:
                continue
            if not given:
                return secret_sources.no_password_message(found)
            try:
                vault.decrypt(found.read_bytes())
            except AnsibleError as exc:
                return secret_sources.wrong_password_message(found, str(exc).splitlines()[0])
        return ""
