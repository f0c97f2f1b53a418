# Where one of the collection's own files is, on the controller: a file one role ships that another role
# reads (the patch manifest the launch plan names), or a file of the toolkit's Python that a role copies to
# a host (the benchmark client). The paths are named once, in sglang_sm120_controller.paths.
from __future__ import annotations

DOCUMENTATION = """
name: sglang_toolkit_path
short_description: The path on the controller of one of the collection's own files
description:
  - Returns, for each name, the absolute path on the controller of that file of the collection
    (the checkout, or the installed collection's directory). An unknown name fails, listing the known ones.
  - C(manifest) the patch manifest (role sglang_patches), C(patches) its directory, C(catalogue) the
    start-failure catalogue (role sglang_launch), C(bench_client) the benchmark client the host runs
    (the host package's serve/bench_client.py), C(tokenizer) the canary's tokenizer (role sglang_canary),
    C(prompts) the benchmark's prompts (role sglang_benchmark), C(cache) the controller's download cache
    (C($SGLANG_TOOLKIT_CACHE), else C(.cache) in the collection's directory), C(locks) the directory of the
    locks of each SGLang release's Python closure (role toolkit_defaults, C(scripts/lock_release.py)).
options:
  _terms:
    description: Names of files.
    required: true
"""

EXAMPLES = """
- name: Show where the patch manifest is
  ansible.builtin.debug:
    msg: "{{ lookup('sm120.sglang.sglang_toolkit_path', 'manifest') }}"
"""

RETURN = """
_list:
  description: One absolute path per name.
  type: list
  elements: str
"""

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402

from sglang_sm120_controller import paths  # noqa: E402


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        known = paths.named()
        found = []
        for term in terms:
            if term not in known:
                raise AnsibleLookupError(f"sglang_toolkit_path: expected one of {', '.join(sorted(known))}, found {term!r}")
            found.append(str(known[term]))
        return found
