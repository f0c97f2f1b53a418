# The stack an SGLang release pins (torch, FlashInfer, the kernel package), read on the controller
# from that release's wheel: roles/toolkit_defaults/defaults/main/stack.yml derives the stack from
# stack_sglang_version with it. Part of the collection sm120.sglang (plugins/lookup/).
from __future__ import annotations

DOCUMENTATION = """
name: sglang_release_stack
short_description: The torch, FlashInfer and kernel package versions an SGLang release pins
description:
  - Reads the C(Requires-Dist) pins of the SGLang wheel of each given version on the controller
    (plugins/plugin_utils/sglang_sm120_controller/pinned_stack.py) and returns, for each, a dictionary with C(sglang), C(torch),
    C(flashinfer), C(kernel_package) (C(sgl-kernel) up to 0.5.9, C(sglang-kernel) from 0.5.10 on),
    C(kernel_version), C(pins) (every requirement pinned to one exact version, by its normalised name) and C(wheel) (the file read).
  - The wheel is looked for as C(sglang-<version>-*.whl) in each of O(dirs) and in C(<dir>/<version>/);
    when there is none, C(pip download --no-deps sglang==<version>) fetches a wheel the GPU host could
    install (CPython 3.11, manylinux x86_64) into C(<download_dir>/<version>/), once; later runs reuse it.
  - The result is memoised per process. A version that does not exist, a file that is not an SGLang
    wheel, or a release without an exact pin of one of the three fails the lookup with a message naming it.
options:
  _terms:
    description: SGLang versions, e.g. 0.5.9.
    required: true
  dirs:
    description:
      - Controller directories holding SGLang wheels. Default, the toolkit's cache
        C($SGLANG_TOOLKIT_CACHE/sglang) (or C(.cache/sglang) of the repository) filled by C(make sglang-wheels).
    type: list
    elements: path
  download_dir:
    description:
      - Where a missing wheel is downloaded. Default C($SGLANG_TOOLKIT_CACHE/flag-check) (or
        C(.cache/flag-check) of the repository), the directory the flag check of the service role
        downloads into, so the release's wheel is fetched once for both.
    type: path
  download:
    description: Download a wheel that is not found (false, fail instead).
    type: bool
    default: true
"""

EXAMPLES = """
- name: Show the stack of SGLang 0.5.23
  ansible.builtin.debug:
    msg: "{{ lookup('sm120.sglang.sglang_release_stack', '0.5.23') }}"
"""

RETURN = """
_list:
  description: One dictionary per version, keys sglang, torch, flashinfer, kernel_package, kernel_version, pins, wheel.
  type: list
  elements: dict
"""

import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402

from sglang_sm120_controller import pinned_stack as release_stack  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        cache = Path(os.environ.get("SGLANG_TOOLKIT_CACHE") or ROOT / ".cache")
        dirs = [Path(d) for d in (self.get_option("dirs") or [cache / "sglang"])]
        download_dir = Path(self.get_option("download_dir") or cache / "flag-check") if self.get_option("download") else None
        out = []
        for term in terms:
            try:
                out.append(release_stack.release_stack(str(term), dirs, download_dir=download_dir, python=sys.executable))
            except release_stack.ReleaseStackError as exc:
                raise AnsibleLookupError(str(exc)) from None
        return out
