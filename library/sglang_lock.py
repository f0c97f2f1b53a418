#!/usr/bin/python
"""Ansible module: take or give back the one-deploy-at-a-time lock of a host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_lock
short_description: One deploy at a time per host
description:
  - Thin wrapper around module_utils/deploy_lock.py. C(present) creates the lock file or fails
    fast naming the run that holds it; C(absent) removes it if this run holds it.
options:
  path:
    description: Lock file.
    type: path
    default: /opt/sglang/deploy.lock
  state:
    description: present takes the lock, absent gives it back.
    type: str
    choices: [present, absent]
    default: present
  holder:
    description: Who holds it (run_id, user, controller, playbook).
    type: dict
    required: true
  stale_minutes:
    description: A lock older than this is taken over (its holder died).
    type: float
    default: 240
author: sglang-sm120 toolkit
"""

EXAMPLES = r"""
- name: Take the deploy lock
  sglang_lock:
    holder: {run_id: "{{ sglang_run_id }}", user: "{{ lookup('env', 'USER') }}"}
"""

RETURN = r"""
holder:
  description: The lock's holder after the call.
  type: dict
  returned: when present
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.deploy_lock import LockError, acquire, read, release


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/opt/sglang/deploy.lock"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            holder=dict(type="dict", required=True),
            stale_minutes=dict(type="float", default=240),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "absent":
        removed = False if module.check_mode else release(p["path"], str(p["holder"].get("run_id")))
        module.exit_json(changed=False, removed=removed)
    if module.check_mode:
        # Read-only: a check-mode run still refuses to look at a host another run is changing.
        held = read(p["path"]) if os.path.exists(p["path"]) else None
        if (
            held
            and held.get("run_id") != p["holder"].get("run_id")
            and (time.time() - float(held.get("since", 0))) / 60 < p["stale_minutes"]
        ):
            module.fail_json(msg=f"another deploy holds {p['path']} (run_id={held.get('run_id')}, user={held.get('user', '?')})")
        module.exit_json(changed=False, holder=p["holder"])
    try:
        result = acquire(p["path"], p["holder"], p["stale_minutes"])
    except LockError as exc:
        module.fail_json(msg=str(exc))
    # The lock is bookkeeping of the run, not a change to the host's configuration.
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
