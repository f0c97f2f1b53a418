# The sha256 of files on the controller (a wheel the launch role plans against), read in the
# controller's own process. Part of the collection sm120.sglang (plugins/lookup/).
from __future__ import annotations

DOCUMENTATION = """
name: sglang_file_sha256
short_description: The sha256 of files on the controller
description:
  - Returns the hex sha256 of each file named, read on the controller. A missing or unreadable file
    fails naming it. Used by the sglang_launch role to ask the host whether the wheel it plans against
    is there already (M(sm120.sglang.sglang_launch_plan) O(sm120.sglang.sglang_launch_plan#module:sglang_sha256))
    instead of copying it on every run.
options:
  _terms:
    description: Paths of files on the controller.
    required: true
"""

EXAMPLES = """
- name: Show the digest of a wheel
  ansible.builtin.debug:
    msg: "{{ lookup('sm120.sglang.sglang_file_sha256', '/srv/wheels/sglang-0.5.9-py3-none-any.whl') }}"
"""

RETURN = """
_list:
  description: One hex sha256 per term.
  type: list
  elements: str
"""

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402

from sglang_sm120.files import file_sha256  # noqa: E402


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        digests = []
        for term in terms:
            try:
                digests.append(file_sha256(str(term)))
            except OSError as exc:
                raise AnsibleLookupError(f"sglang_file_sha256: cannot read {term} on the controller: {exc}") from exc
        return digests
