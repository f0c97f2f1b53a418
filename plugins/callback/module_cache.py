# Keeps the modules ansible-playbook builds (AnsiballZ payloads) from one run to the next, keyed by a
# fingerprint of every module source; the logic is plugins/plugin_utils/sglang_sm120_controller/module_cache.py.
# Enabled by the toolkit's ansible.cfg: callbacks_enabled = sm120.sglang.module_cache.
from __future__ import annotations

DOCUMENTATION = """
name: module_cache
type: aggregate
short_description: Reuse the modules ansible-playbook built in earlier runs (no AnsiballZ rebuild per run)
description:
  - ansible-playbook builds each module it runs (reads it, parses every module_utils file it imports, zips them) once
    per run, about 0.2 s of controller CPU per module; a converge that changes nothing runs 13 of the toolkit's modules.
  - Before the first task, copies the payloads built by earlier runs into the run's own cache; after the last, copies
    the payloads the run built into a store under O(path), one directory per fingerprint of every module source
    (ansible-core's version, its modules and module_utils, each collection's plugins/modules and plugins/module_utils,
    by path, size and modification time). Any edit selects a new, empty directory; the 4 newest are kept.
  - Only modules named by a collection (C(ansible_collections.*)) or ansible's own (C(ansible.modules.*)) are kept,
    never C(ansible.legacy.*) ones (a role's library/). A store not owned by this user, or writable by others, is not
    used (a warning says why) and the run builds its modules as usual.
options:
  path:
    description: Directory of the store; C(off) turns the cache off.
    type: str
    default: ~/.cache/sglang-sm120/ansiballz
    env:
      - name: SGLANG_MODULE_CACHE
    ini:
      - section: callback_module_cache
        key: path
requirements:
  - enabled in callbacks_enabled (the toolkit's ansible.cfg does)
"""

import os  # noqa: E402
from pathlib import Path  # noqa: E402

import ansible  # noqa: E402
from ansible import constants as C  # noqa: E402
from ansible.plugins.callback import CallbackBase  # noqa: E402
from ansible.release import __version__ as ansible_version  # noqa: E402
from ansible.utils.collection_loader import AnsibleCollectionConfig  # noqa: E402

from sglang_sm120_controller import module_cache  # noqa: E402


class CallbackModule(CallbackBase):
    """Restore the stored payloads at the start of a playbook, store the new ones at its end."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sm120.sglang.module_cache"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._store: Path | None = None

    def _run_cache(self) -> Path:
        # Ansible's per-run cache of built modules (executor/module_common.py: <DEFAULT_LOCAL_TMP>/ansiballz_cache)
        return Path(C.DEFAULT_LOCAL_TMP) / "ansiballz_cache"

    def v2_playbook_on_start(self, playbook) -> None:
        setting = str(self.get_option("path") or "off")
        if setting == "off" or self._store is not None:
            return
        try:
            sources = module_cache.module_source_dirs(
                Path(os.path.dirname(ansible.__file__)), [Path(p) for p in AnsibleCollectionConfig.collection_paths]
            )
            key = module_cache.fingerprint(sources, ansible_version)
            base = Path(os.path.expanduser(setting))
            self._store = module_cache.store_dir(base, key)
            module_cache.restore(self._store, self._run_cache())
            module_cache.prune(base, key)
        except (OSError, module_cache.StoreError) as exc:
            self._store = None
            self._display.warning(f"module_cache: not used ({exc}); modules are built as usual")

    def v2_playbook_on_stats(self, stats) -> None:
        if self._store is None:
            return
        try:
            module_cache.save(self._run_cache(), self._store)
        except OSError as exc:
            self._display.warning(f"module_cache: built modules not stored ({exc})")
