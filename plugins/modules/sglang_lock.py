#!/usr/bin/python
"""Ansible module: take, give back or break the one-deploy-at-a-time lock of a host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_lock
short_description: One deploy at a time per host
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/release/lock.py. The lock file is a JSON record of its holder
    (run_id, user, controller, pid and start time of the controller's ansible-playbook process,
    playbook, since, renewed_at), written to a temporary file and hard-linked into place, so it is
    created exclusively and never seen empty.
  - C(present) takes the lock, re-enters a lock this run holds, or fails naming the run that holds
    it. A lock of a run started from the same controller is taken over only when I(holder_check)
    (the controller's verdict, from the sglang_lock_holder lookup) says its process is gone; a
    lock from another controller only when its holder has not renewed it (C(renewed_at), its
    heartbeat) for I(heartbeat_timeout_minutes). A lock is never taken over because of its age.
  - The holder renews the lock while it lives - each poll of a long wait (M(sm120.sglang.sglang_build),
    M(sm120.sglang.sglang_health), M(sm120.sglang.sglang_canary), M(sm120.sglang.sglang_async_wait) with their
    C(lock_renewal) option), and each call of this module with C(state=present) by the same run.
  - C(absent) gives the lock back if this run holds it; with I(force=true) it breaks the lock
    whoever holds it.
options:
  path:
    description: Lock file.
    type: path
    default: /opt/sglang/deploy.lock
  state:
    description: C(present) takes the lock, C(absent) gives it back (or breaks it, with I(force)).
    type: str
    choices: [present, absent]
    default: present
  holder:
    description:
      - This run, as the sglang_lock_holder lookup names it (run_id, user, controller, pid,
        playbook, controller_id, pid_start). C(absent) needs only run_id.
    type: dict
    required: true
  heartbeat_timeout_minutes:
    description:
      - A lock from another controller whose holder has not renewed it for this long is taken over
        (the take-over warning and a refusal print it). Independent of how long a build takes;
        keep it above the longest task of a deploy that does not renew the lock.
    type: float
    default: 15
  defer_same_controller:
    description:
      - When the lock is held by another run of this same controller and no I(holder_check)
        covers it, return C(blocked_by) instead of failing, so the controller can check whether
        that run's process still exists and call again with I(holder_check).
    type: bool
    default: false
  holder_check:
    description:
      - The controller's verdict on the current holder (run_id, since, dead, why). The lock is
        taken over only if it still is that exact lock and dead is true.
    type: dict
  break_hint:
    description: How an operator breaks the lock, quoted in the refusal; C({path}) is replaced.
    type: str
    default: remove {path} on the host
  force:
    description: With C(absent), remove the lock whoever holds it.
    type: bool
    default: false
attributes:
  check_mode:
    description: Reads the lock and fails exactly as a real run would; changes nothing.
    support: full
  diff_mode:
    description: No diff; the lock is run bookkeeping, not host configuration.
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.no_diff
"""

EXAMPLES = r"""
- name: Take the deploy lock
  sglang_lock:
    path: /opt/sglang/deploy.lock
    holder: "{{ lookup('sm120.sglang.sglang_lock_holder', 'self', playbook=ansible_play_name) }}"
    defer_same_controller: true
  register: deploy_lock

- name: Take over the lock of a dead run of this controller
  sglang_lock:
    path: /opt/sglang/deploy.lock
    holder: "{{ lookup('sm120.sglang.sglang_lock_holder', 'self', playbook=ansible_play_name) }}"
    holder_check: "{{ lookup('sm120.sglang.sglang_lock_holder', 'check', held=deploy_lock.blocked_by) }}"
  when: deploy_lock.blocked_by is defined

- name: Break the lock, whoever holds it
  sglang_lock:
    state: absent
    force: true
    holder: {run_id: operator}
"""

RETURN = r"""
acquired:
  description: Whether this call created the lock (or took it over).
  type: bool
  returned: when state is present
  sample: true
held:
  description: Whether this run holds the lock after the call (in check mode, would hold it).
  type: bool
  returned: when state is present
  sample: true
holder:
  description: The lock's record after the call.
  type: dict
  returned: when state is present
  sample: {run_id: 3fa2c1d09e4b, user: alice, controller: ctl-1, pid: 41234, playbook: "Build, release and start SGLang",
           since: 1767225600.5, renewed_at: 1767225600.5}
blocked_by:
  description: The record of another run of this controller that holds the lock (with I(defer_same_controller)).
  type: dict
  returned: when the controller must check that run's process
  sample: {run_id: 9b1e0c7a2d44, user: alice, controller: ctl-1, pid: 40001, since: 1767220000.0}
took_over:
  description: The record of the run, gone or silent past the heartbeat bound, whose lock was taken over.
  type: dict
  returned: when a lock was taken over
  sample: {run_id: 9b1e0c7a2d44, user: alice, controller: ctl-1, pid: 40001, since: 1767220000.0}
removed:
  description: Whether the lock was removed.
  type: bool
  returned: when state is absent
  sample: true
removed_holder:
  description: The record of the lock that was broken.
  type: dict
  returned: when state is absent, force is true and there was a lock
  sample: {run_id: 9b1e0c7a2d44, user: alice, controller: ctl-1, pid: 40001, since: 1767220000.0}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.release.lock import acquire, break_lock, describe, release

ARGUMENT_SPEC = dict(
    path=dict(type="path", default="/opt/sglang/deploy.lock"),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    holder=dict(type="dict", required=True),
    heartbeat_timeout_minutes=dict(type="float", default=15),
    defer_same_controller=dict(type="bool", default=False),
    holder_check=dict(type="dict"),
    break_hint=dict(type="str", default="remove {path} on the host"),
    force=dict(type="bool", default=False),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: lock(module, module.params))


def lock(module: AnsibleModule, p: dict) -> dict:
    if p["state"] == "absent":
        if p["force"]:
            removed = break_lock(p["path"], dry_run=module.check_mode)
            if removed is not None:
                module.warn(f"broke the deploy lock {p['path']} of {describe(removed)}")
            result = {"removed": removed is not None and not module.check_mode}
            return dict(changed=removed is not None, removed_holder=removed, **result)
        removed = False if module.check_mode else release(p["path"], str(p["holder"].get("run_id")))
        # The lock is bookkeeping of the run, not a change to the host's configuration.
        return dict(changed=False, removed=removed)
    result = acquire(
        p["path"],
        p["holder"],
        p["heartbeat_timeout_minutes"],
        holder_check=p["holder_check"],
        defer_same_controller=p["defer_same_controller"],
        break_hint=p["break_hint"],
        dry_run=module.check_mode,
    )
    message = result.pop("message", None)
    if message:
        module.warn(message.replace("took over", "would take over", 1) if module.check_mode else message)
    return dict(changed=False, **result)


if __name__ == "__main__":
    main()
