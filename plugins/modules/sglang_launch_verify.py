#!/usr/bin/python
"""Ansible module: check a launch plan with SGLang's own ServerArgs in the venv of the release that will run it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_launch_verify
short_description: Check a launch plan with SGLang's own ServerArgs in the release's venv, then the start gate on what it resolved
description:
  - Thin wrapper around C(verify_plan) in plugins/module_utils/sglang_sm120/launch/plan.py, run after the release is made
    and before anything starts (no canary, no switch, no restart yet).
  - Under the release venv's Python, SGLang's own C(prepare_server_args) and C(check_server_args)
    (0.5.2x, C(resolve_once)) run on the plan's flags and environment, with the device faked from the
    host's facts (capability, the smallest GPU's memory, the GPU count; else compute capability
    O(gpu_major) on the target host's 8 GPUs) and FlashInfer at the version the release pins. SGLang
    reads the model and draft directories the flags name, or the config files given in O(model_files).
  - Fails with SGLang's own message and location when it refuses the flags, and when SGLang does not
    import in that venv (its server could not start either). Each value SGLang rewrites becomes a flag
    warning naming the flag, the value given and the value SGLang uses.
  - Then the start gate (O(start_failures)) again, on the values SGLang resolved instead of the
    flags as typed; a refused entry fails naming it.
  - Changes nothing on the host except its own cache (O(cache)).
options:
  plan:
    description: The launch plan module sglang_launch_plan returned.
    type: dict
    required: true
  venv:
    description: The release's virtualenv (C(<root>/releases/<id>/venv)); its SGLang is the one checked.
    type: path
    required: true
  model_files:
    description:
      - The config files of a model path the flags name, given instead of that directory, path ->
        (file name -> content), for a host that does not hold the model (the lab's config-only
        copies). Written to a temporary directory removed afterwards; a path not listed is read on
        the host where it is.
    type: dict
    default: {}
  host_facts:
    description: The host-facts file preflight saved; without it the device is the target host's and the host-fact entries are unknown.
    type: path
  gpu_major:
    description: Compute capability major shown to SGLang when the host's facts give none.
    type: int
    default: 12
  cache:
    description:
      - A directory of SGLang's accepted verdicts keyed by every input (the Python, the release's
        server_args.py and RECORD, flags, environment, device, the model directories' config files,
        the checker's source); a hit skips the import. Not written in check mode.
    type: path
  timeout:
    description: Seconds SGLang's import and check may take together.
    type: int
    default: 600
attributes:
  check_mode:
    description: Runs the check as a real run does (nothing is changed); the cache is not written.
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
  - sm120.sglang.sglang_sm120.start_failures
"""

EXAMPLES = r"""
- name: Check the launch with SGLang's own ServerArgs in the new release's venv
  sglang_launch_verify:
    plan: "{{ sglang_launch_plan }}"
    venv: /opt/sglang/releases/20261202T070000-3f1c0d9e/venv
    start_failures: "{{ lookup('ansible.builtin.file', 'roles/sglang_launch/files/start-failures.yml') | from_yaml }}"
    host_facts: /var/lib/sglang-toolkit/host-facts.json
    cache: /opt/sglang/releases/20261202T070000-3f1c0d9e/gate
  register: verified
"""

RETURN = r"""
plan:
  description:
    - The launch plan as given, with C(server_args) (SGLang's verdict, the device it was shown, the
      values it rewrote and chose), C(flag_warnings) (SGLang's rewrites added) and C(start_gate)
      evaluated again on the values SGLang resolved (C(flag_values) C(resolved)).
  type: dict
  returned: success
  sample:
    server_args:
      verdict: ok
      sglang_version: 0.5.9
      rewritten: []
      chosen: ["--mem-fraction-static 0.7524", "--cuda-graph-max-bs 512"]
      cached: false
    start_gate:
      summary: "26 known start failures checked (SGLang 0.5.9, capability 12.0, flags as SGLang ... resolved them): 13 ok, 8 unknown, 5 n/a"
      flag_values: resolved
cached:
  description: SGLang's verdict was read from O(cache) (nothing imported).
  type: bool
  returned: success
  sample: true
"""

import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.launch.plan import verify_plan, write_model_files
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.release.venv import release_sglang

ARGUMENT_SPEC = dict(
    plan=dict(type="dict", required=True),
    venv=dict(type="path", required=True),
    start_failures=dict(type="dict", default={}),
    model_files=dict(type="dict", default={}),
    host_facts=dict(type="path"),
    gpu_major=dict(type="int", default=12),
    cache=dict(type="path"),
    timeout=dict(type="int", default=600),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: launch_verify(module.params, module.check_mode))


def launch_verify(p: dict, check_mode: bool) -> dict:
    package = release_sglang(p["venv"])
    with tempfile.TemporaryDirectory(prefix="sglang-model-configs-") as scratch:
        plan = verify_plan(
            p["plan"],
            python=f"{p['venv']}/bin/python",
            sglang_dir=package.sglang_dir,
            catalogue=p["start_failures"],
            model_dirs=write_model_files(scratch, p["model_files"]),
            host_facts=p["host_facts"],
            gpu_major=p["gpu_major"],
            cache=p["cache"],
            write_cache=not check_mode,
            timeout=p["timeout"],
        )
    # what the plan carried beside its fields (manifest_sha256) is kept
    return dict(changed=False, plan={**p["plan"], **plan.to_dict()}, cached=bool(plan.server_args.get("cached")))


if __name__ == "__main__":
    main()
