#!/usr/bin/python
"""Ansible module: locate the SGLang package in a virtualenv, without importing it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_package
short_description: Find the installed SGLang package of a virtualenv
description:
  - Looks for C(lib*/python3*/site-packages/sglang) in the virtualenv and reads the version from
    its C(version.py) (cross-checked with pip's dist-info). Never imports sglang or torch.
  - Fails, naming the path, when the directory is not a virtualenv or holds no or several sglang
    packages.
  - With O(pristine_of), also returns the pristine bytes of those patch targets, so the controller
    can lint the rendered patches against them (M(sm120.sglang.sglang_patch_render)
    O(sm120.sglang.sglang_patch_render#module:pristine)) before the host changes anything.
options:
  venv:
    description: The virtualenv directory (the one holding C(pyvenv.cfg)).
    type: path
    required: true
  pristine_of:
    description:
      - Patch targets (relative to C(sglang/)) whose pristine bytes to return. A target counts
        when its sha256 is a pristine one of O(manifest), else the copy kept in the state
        directory is returned when the file is the recorded patched result; others are left out.
    type: list
    elements: str
    default: []
  manifest:
    description: The parsed C(roles/sglang_patches/files/patches/manifest.yml); needed with O(pristine_of).
    type: dict
  state_dir:
    description: The patch state directory (default C(<sglang_dir>/../.sglang-patches)).
    type: path
  intact:
    description:
      - For a release found by the key of its inputs (the patch inputs among them), say whether its
        patched SGLang is still as it was made, in this one run instead of the patch role's steps.
        It is when every recorded patch target still has the sha256 it was patched to, and the proofs of the
        import check and of the audit (when given) still hold for the package as it is (RV(intact)).
      - Needs O(manifest). When it holds, O(pristine_of) is not read (nothing will be applied).
    type: dict
    suboptions:
      import_stamp:
        description:
          - The import check's proof file (M(sm120.sglang.sglang_import_check) O(sm120.sglang.sglang_import_check#module:stamp)).
          - Omit it when no import check runs.
        type: path
      audit:
        description:
          - The audit's C(stamp), C(model_class), C(model_dir) and C(algorithm), as M(sm120.sglang.sglang_audit) gets them.
          - Omit it when no audit runs.
        type: dict
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
"""

EXAMPLES = r"""
- name: Locate SGLang in the release
  sglang_package:
    venv: /opt/sglang/current/venv
  register: sglang_pkg
"""

RETURN = r"""
package:
  description: The SGLang package found in the virtualenv.
  type: dict
  returned: success
  sample:
    venv: /opt/sglang/current/venv
    python_version: 3.12.3
    site_packages: /opt/sglang/current/venv/lib/python3.12/site-packages
    sglang_dir: /opt/sglang/current/venv/lib/python3.12/site-packages/sglang
    version: 0.5.9
    dist_info_version: 0.5.9
  contains:
    venv: {description: The virtualenv., type: str, sample: /opt/sglang/current/venv}
    python_version: {description: Its Python version (pyvenv.cfg)., type: str, sample: 3.12.3}
    site_packages:
      description: The site-packages holding sglang.
      type: str
      sample: /opt/sglang/current/venv/lib/python3.12/site-packages
    sglang_dir:
      description: The sglang package directory.
      type: str
      sample: /opt/sglang/current/venv/lib/python3.12/site-packages/sglang
    version: {description: The version from sglang/version.py., type: str, sample: 0.5.9}
    dist_info_version: {description: The version pip's dist-info records (null without one)., type: str, sample: 0.5.9}
pristine:
  description: Per target of O(pristine_of), its pristine C(sha256), C(source) path and C(content_base64).
  type: dict
  returned: success
  sample:
    srt/models/kimi_k25.py:
      sha256: 5d41402abc4b2a76b9719d911017c592ae2d8d4c1f6e3b7a9c0d2e4f6a8b0c1d
      source: /opt/sglang/current/venv/lib/python3.12/site-packages/sglang/srt/models/kimi_k25.py
      content_base64: IyBDb3B5cmlnaHQgMjAyNSBTR0xhbmcgVGVhbQo=
intact:
  description: With O(intact), whether the release's patched SGLang is as it was made, and what the patch role would have said.
  type: dict
  returned: when O(intact) is given
  sample:
    ok: true
    reasons: []
    patches: {kimi_k25_eagle3_delegation: already-applied}
    imported: [sglang.srt.models.kimi_k25]
    audit: {ok: true}
  contains:
    ok: {description: Every record still holds., type: bool, sample: true}
    reasons: {description: What no longer holds (empty when RV(intact.ok))., type: list, elements: str, sample: []}
    patches:
      description: Patch id to C(already-applied) for each target still patched.
      type: dict
      sample: {kimi_k25_eagle3_delegation: already-applied}
    imported: {description: The modules the import check's proof names., type: list, elements: str, sample: [sglang.srt.models.kimi_k25]}
    audit: {description: The audit's recorded report., type: dict, sample: {ok: true}}
"""

import base64

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import ToolkitError, run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.patches import intact as patches_intact
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.patches.engine import pristine_sources
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.patches.manifest import load_manifest
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.release.venv import find_sglang

ARGUMENT_SPEC = dict(
    venv=dict(type="path", required=True),
    pristine_of=dict(type="list", elements="str", default=[]),
    manifest=dict(type="dict"),
    state_dir=dict(type="path"),
    intact=dict(type="dict", options=dict(import_stamp=dict(type="path"), audit=dict(type="dict"))),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: package(module.params))


def package(p: dict) -> dict:
    pristine, extra = {}, {}
    found_package = find_sglang(p["venv"])
    if p["intact"] is not None:
        if not p["manifest"]:
            raise ToolkitError("intact needs the manifest")
        extra["intact"] = patches_intact.check(
            found_package.sglang_dir,
            load_manifest(p["manifest"], rendered={}),
            f"{p['venv']}/bin/python",
            p["state_dir"],
            p["intact"]["import_stamp"],
            p["intact"]["audit"],
        ).to_dict()
    if p["pristine_of"] and not extra.get("intact", {}).get("ok"):
        if not p["manifest"]:
            raise ToolkitError("pristine_of needs the manifest")
        manifest = load_manifest(p["manifest"], rendered={})
        for target, found in pristine_sources(manifest, found_package.sglang_dir, p["state_dir"], p["pristine_of"]).items():
            content = base64.b64encode(found.pop("content")).decode("ascii")
            pristine[target] = dict(found, content_base64=content)
    return dict(changed=False, package=found_package.to_dict(), pristine=pristine, **extra)


if __name__ == "__main__":
    main()
