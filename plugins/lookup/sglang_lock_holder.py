# Names this run for the deploy lock, and checks on the controller whether the process of a lock's
# holder still runs. Part of the collection sm120.sglang (plugins/lookup/).
from __future__ import annotations

DOCUMENTATION = """
name: sglang_lock_holder
short_description: This run's deploy-lock record, and whether a lock's holder process still runs here
description:
  - C(self) returns this run's holder record for the sglang_lock module, read on the controller
    (plugins/module_utils/sglang_sm120/release/lock.py) - C(user) (the controller's real user, from the password database),
    C(controller) (hostname), C(controller_id) (hostname, /etc/machine-id, pid namespace), C(pid)
    (the ansible-playbook process; lookups run in a worker forked from it), C(pid_start) (boot id and
    start time of that process, so a reused pid is not mistaken for it), C(playbook) and C(run_id)
    (a hash of controller_id, pid and pid_start, the same for every task of the run).
  - C(check) returns the controller's verdict on the lock record O(held) - C(dead) is true only if it
    was taken from this controller and its process no longer exists (or its pid now belongs to a
    later process); C(state) is running, gone, reused, unknown (the host then goes by the lock's
    heartbeat) or elsewhere (another controller, where only the heartbeat can tell); C(why) says which.
options:
  _terms:
    description: C(self) or C(check).
    required: true
  playbook:
    description: Name of the play, recorded in the lock.
    type: str
    default: "?"
  held:
    description: The lock record to check (C(check)).
    type: dict
"""

EXAMPLES = """
- name: Show who this run is
  ansible.builtin.debug:
    msg: "{{ lookup('sm120.sglang.sglang_lock_holder', 'self', playbook=ansible_play_name) }}"
"""

RETURN = """
_list:
  description: One dictionary per term.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402

from sglang_sm120.release import lock as deploy_lock  # noqa: E402


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        me = deploy_lock.run_holder(playbook=str(self.get_option("playbook")))
        out = []
        for term in terms:
            if term == "self":
                out.append(me)
            elif term == "check":
                held = self.get_option("held")
                if not held:
                    raise AnsibleLookupError("sglang_lock_holder: check needs held=<the lock's record>")
                out.append(deploy_lock.check_holder(dict(held), me))
            else:
                raise AnsibleLookupError(f"sglang_lock_holder: expected the term self or check, got {term!r}")
        return out
