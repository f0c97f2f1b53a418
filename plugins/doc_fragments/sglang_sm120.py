"""Documentation shared by the modules in plugins/modules/ (extends_documentation_fragment).

A module's own entries win over a fragment's, key by key (Ansible merges each attribute's mapping),
so a module names a fragment and gives only what differs, e.g. its own check_mode description.
"""

from __future__ import annotations


class ModuleDocFragment:
    # Every module (sglang_sm120): the author and the platform.
    DOCUMENTATION = r"""
attributes:
  platform:
    description: Linux, on the hosts the toolkit manages (or the controller, where a task is delegated to it).
    support: full
    platforms: posix
author: SGLang SM120 toolkit maintainers (@sm120)
"""

    # A module that only reads, computes or checks (sglang_sm120.read_only).
    READ_ONLY = r"""
attributes:
  check_mode:
    description: Reads only; a check-mode run does and returns exactly what a real run does.
    support: full
  diff_mode:
    description: No diff; nothing is changed.
    support: none
"""

    # A module that returns no diff (sglang_sm120.no_diff); it says its check_mode support itself.
    NO_DIFF = r"""
attributes:
  diff_mode:
    description: No diff.
    support: none
"""

    # The patch manifest and its values (sglang_sm120.patch_manifest): sglang_patch, sglang_patch_render.
    PATCH_MANIFEST = r"""
options:
  manifest:
    description: The parsed C(roles/sglang_patches/files/patches/manifest.yml).
    type: dict
    required: true
  values:
    description: Template variables, overriding the manifest's defaults.
    type: dict
    default: {}
"""

    # The start gate's catalogue (sglang_sm120.start_failures): sglang_launch_plan, sglang_launch_verify.
    START_FAILURES = r"""
options:
  start_failures:
    description: The catalogue of known start failures (roles/sglang_launch/files/start-failures.yml, parsed); empty runs no start gate.
    type: dict
    default: {}
"""

    # Renewing the deploy lock on each poll (sglang_sm120.lock_renewal): sglang_build, sglang_health, sglang_canary, sglang_async_wait.
    LOCK_RENEWAL = r"""
options:
  lock_renewal:
    description:
      - The deploy lock this run holds - each call renews its heartbeat (C(renewed_at)) before it
        polls, so a long wait keeps the lock alive (plugins/module_utils/sglang_sm120/release/lock.py, renew).
        The call fails, naming the lock's holder now, if this run no longer holds it (broken by hand,
        or taken over once its heartbeat stopped).
      - Omitted or empty, nothing is renewed. Nothing is renewed in check mode.
    type: dict
    suboptions:
      path:
        description: The lock file.
        type: path
        required: true
      run_id:
        description: This run's run_id (the sglang_lock_holder lookup's).
        type: str
        required: true
"""
