# The build specs with each artifact's package-index wheel judged on the controller: taken as the
# prebuilt wheel where it fits the GPU host (CUDA 13, SM120 code, by the spec's own verify rules),
# left to the wheelhouse or the source build where it does not. Part of the collection sm120.sglang (plugins/lookup/).
from __future__ import annotations

DOCUMENTATION = """
name: sglang_artifact_choices
short_description: The build specs with the package index's own wheels taken where they fit the GPU host
description:
  - For every spec that names C(index) (a requirement such as C(torch==2.11.0)), downloads the package
    index's wheel of it for the GPU host's Python and platform once (into C($SGLANG_TOOLKIT_CACHE/index-wheels))
    and judges it with the spec's own C(verify) rules and the CUDA libraries of O(cuda_components)
    (plugins/plugin_utils/sglang_sm120_controller/index_wheels.py). A wheel that fits becomes the spec's prebuilt
    wheel (verified again on the host, the source build behind it); one that does not leaves the spec as it
    was. An C(optional) spec with no fitting wheel is dropped unless named in O(build_optional).
  - Judgements are kept by wheel sha256 and memoised per process; with O(enabled) false the specs pass unchanged.
options:
  _terms:
    description: The build specs (one list).
    required: true
  cuda_components:
    description: The CUDA toolkit's component versions (stack_cuda_components), for the soname each library has.
    type: dict
    required: true
  build_optional:
    description: Names of optional specs to build from source when no wheel fits.
    type: list
    elements: str
    default: []
  enabled:
    description: Judge the index's wheels (false, pass the specs unchanged and download nothing).
    type: bool
    default: true
"""

EXAMPLES = """
- name: Show what the deploy builds
  ansible.builtin.debug:
    msg: "{{ lookup('sm120.sglang.sglang_artifact_choices', sglang_build_specs_wanted,
      cuda_components=stack_cuda_components) | map(attribute='name') }}"
"""

RETURN = """
_raw:
  description: The build specs, each index wheel that fits set as its prebuilt wheel.
  type: list
  elements: dict
"""

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402

from sglang_sm120.build.pipeline import find_cuobjdump  # noqa: E402
from sglang_sm120_controller.index_wheels import IndexWheelError, apply_choices, soname_majors  # noqa: E402
from sglang_sm120_controller.pinned_stack import ReleaseStackError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
_MEMO: dict[str, list] = {}


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        specs = terms[0] if len(terms) == 1 and isinstance(terms[0], list) else terms
        specs = [dict(s) for s in specs]
        if not self.get_option("enabled"):
            return [[{k: v for k, v in s.items() if k not in ("index", "optional")} for s in specs]]
        cache = Path(os.environ.get("SGLANG_TOOLKIT_CACHE") or ROOT / ".cache") / "index-wheels"
        components = dict(self.get_option("cuda_components") or {})
        optional = list(self.get_option("build_optional") or [])
        memo_key = json.dumps([specs, components, optional, str(cache)], sort_keys=True, default=str)
        if memo_key not in _MEMO:
            tools = sorted((cache.parent / "test-tools").glob("nvidia/cu*/bin/cuobjdump"))
            cuobjdump = find_cuobjdump() or (str(tools[0]) if tools else None)
            try:
                sonames = soname_majors(components)
                _MEMO[memo_key] = apply_choices(specs, cache, sonames, optional, cuobjdump=cuobjdump, python=sys.executable)
            except (IndexWheelError, ReleaseStackError, OSError) as exc:
                raise AnsibleLookupError(f"sglang_artifact_choices: {exc}") from None
        return [_MEMO[memo_key]]
