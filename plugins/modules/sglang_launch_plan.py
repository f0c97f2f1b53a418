#!/usr/bin/python
"""Ansible module: the launch plan (flags, environment, patches), checked once against the release's SGLang."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_launch_plan
short_description: Compute and check the launch plan of an SGLang release once
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/launch/plan.py C(make_plan). Merges the launch profile with
    the listen address and O(extra_flags) (last wins), checks the result with the checker of
    C(sglang-flags) against the SGLang in O(sglang) (SGLang's own parser when O(python) can
    import it, else the static table read from its sources), merges the environment parts and
    refuses a secret name in them, and returns one plan that the release key, the unit and the
    benchmark all use.
  - Then the start gate (plugins/module_utils/sglang_sm120/launch/start_failures.py) when O(start_failures) is given; every
    entry of that catalogue is evaluated on the plan's flags and environment, the model and draft
    directories the flags name (C(--model-path), C(--speculative-draft-model-path)) read on the host,
    and the host's facts in O(host_facts). A refused entry fails the plan naming it and its fix; a
    warning joins RV(plan.flag_warnings); every verdict is in RV(plan.start_gate). A fact that is
    absent makes the entries that need it C(unknown), never a pass.
  - Fails, naming the variable and what was expected, on an unknown profile, a secret in the
    environment, any refused flag, a model directory the flags name that cannot be read, or a
    refused start-failure entry; changes nothing.
options:
  sglang:
    description: The sglang package directory, the directory holding it, or a wheel.
    type: path
    required: true
  sglang_sha256:
    description:
      - The sha256 of the wheel O(sglang) must be. When the file is missing or holds other bytes, nothing is planned
        and RV(wheel_missing) is true (the caller copies the wheel there and calls again), so a converge whose
        wheel is on the host already plans without copying it.
    type: str
  profiles:
    description: Launch profiles, name -> (canonical flag name without -- -> value).
    type: dict
    required: true
  profile:
    description: The profile to plan.
    type: str
    required: true
  host:
    description: Listen address, merged over the profile.
    type: str
    required: true
  port:
    description: Listen port, merged over the profile.
    type: int
    required: true
  extra_flags:
    description: Flags merged last (false or null removes one).
    type: dict
    default: {}
  env_parts:
    description: Environment mappings, merged in order (last wins).
    type: list
    elements: dict
    default: []
  secret_names:
    description: Names kept in the secrets file only; none may appear in the environment.
    type: list
    elements: str
    default: []
  patches:
    description:
      - Ids of the patches the release carries (rules such as the symm-mem one depend on them), when
        already known (e.g. a release's applied patches). Otherwise they come from O(manifest).
    type: list
    elements: str
  manifest:
    description: The patch manifest (roles/sglang_patches/files/patches/manifest.yml, parsed); its default patches, or O(patches_only).
    type: dict
    default: {}
  patches_only:
    description: The operator's patch selection (sglang_patches_only); empty means the manifest's defaults.
    type: list
    elements: str
    default: []
  model_class:
    description: The target model's class (MLA classes get the topk rule).
    type: str
  gpu_major:
    description: Compute capability major of the GPUs.
    type: int
    default: 12
  launch_module:
    description: Module the server runs with C(python -m).
    type: str
    default: sglang.launch_server
  python:
    description: A Python whose environment has SGLang's dependencies; the static table is used when it cannot import SGLang.
    type: path
  pythonpath:
    description: More PYTHONPATH entries for O(python), after O(sglang).
    type: list
    elements: path
    default: []
  cache:
    description:
      - A directory of plans already checked, keyed by every input (the wheel's sha256, flags,
        environment, patches, Python, the checker's source); a hit skips the check. Only when
        O(sglang) is a wheel file. Not written in check mode. The start gate is never cached.
    type: path
  start_failures_skipped:
    description: Why O(start_failures) is empty, said in the plan's C(start_gate.summary) after C(not run).
    type: str
    default: ""
  model_files:
    description:
      - The config files of a model path the flags name, given instead of that directory, path ->
        (file name -> content), for a host that does not hold the model (the lab's config-only
        copies of the real Kimi-K2.5-NVFP4 and its draft). They are read from a temporary directory
        removed afterwards. A path not listed is read on the host where it is.
    type: dict
    default: {}
  host_facts:
    description: The host-facts file preflight saved (JSON); empty or unreadable makes the entries that need host facts unknown.
    type: path
  host_facts_pending:
    description:
      - Facts of O(host_facts) this run is about to change, taken as unknown by the gate (site.yml's input check, before the CUDA
        toolkit's play, names the toolkit's nvcc_version, jit_tools_missing and cuda_cccl_headers).
    type: list
    elements: str
    default: []
  service_user:
    description:
      - The user the server's unit runs as. When given, every model directory the flags name that is read on the host (not
        one given in O(model_files)) must be readable by that user inside the unit's sandbox (outside the paths
        C(ProtectHome=yes) and C(PrivateTmp=yes) hide, each directory above it searchable, it and its entries readable),
        judged from the mode bits for the user and its groups (a user not created yet as a new system user); else the
        plan fails naming the flag, the path, the user and what keeps it out. Empty checks nothing.
    type: str
    default: ""
attributes:
  check_mode:
    description: Computes and checks only; a check-mode run plans and gates exactly as a real run does,
      but does not write the plan into O(cache).
    support: full
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.no_diff
  - sm120.sglang.sglang_sm120.start_failures
"""

EXAMPLES = r"""
- name: Plan the eagle3 launch against the wheel the release will carry
  sglang_launch_plan:
    sglang: /opt/sglang/flag-check/sglang-0.5.9-py3-none-any.whl
    profiles: {eagle3: {model-path: /data/Kimi-K2.5-NVFP4, tp-size: 8}}
    profile: eagle3
    host: 127.0.0.1
    port: 30000
    env_parts: [{SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "1"}]
    model_class: KimiK25ForConditionalGeneration
"""

RETURN = r"""
wheel_missing:
  description: Whether O(sglang) is not the wheel of O(sglang_sha256) (nothing was planned then; RV(plan) is empty).
  type: bool
  returned: success
  sample: false
service_access:
  description:
    - What O(service_user) was checked for - C(user), C(checked) (the model paths), C(notes) (objects not judged, e.g. with
      a POSIX ACL); {} when not checked.
  type: dict
  returned: success
  sample: {user: sglang, checked: [/srv/models/Kimi-K2.5-NVFP4], notes: []}
plan:
  description: The launch plan.
  type: dict
  returned: success
  contains:
    profile:
      description: The profile planned.
      type: str
      sample: eagle3
    flags:
      description: The merged flags.
      type: dict
      sample: {tp-size: 8, host: 127.0.0.1, port: 30000}
    argv:
      description: The flags as arguments.
      type: list
      elements: str
      sample: [--tp-size, "8", --host, 127.0.0.1, --port, "30000"]
    exec_args:
      description: The arguments as written after C(python -m module) in ExecStart (systemd-quoted, continued lines).
      type: str
      sample: "--tp-size 8 \\\n    --host 127.0.0.1"
    launch_module:
      description: The module run with C(python -m).
      type: str
      sample: sglang.launch_server
    env:
      description: The server's environment (no secrets).
      type: dict
      sample: {SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "1"}
    patches:
      description: The patch ids the release carries.
      type: list
      elements: str
      sample: [kimi_k25_eagle3_delegation, torch_symm_mem_capability]
    manifest_sha256:
      description: sha256 of the patch manifest the ids were planned from (canonical JSON); empty when O(patches) was given.
      type: str
      sample: 3f1c0d9e2b7a4c5d6e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d
    sglang_version:
      description: The SGLang version checked against.
      type: str
      sample: 0.5.9
    parser:
      description: sglang (its own parser imported) or static (the table read from its sources).
      type: str
      sample: sglang
    parser_line:
      description: One line saying which parser decided.
      type: str
      sample: "parser: sglang (imported)"
    check_mode:
      description: import or static.
      type: str
      sample: import
    flag_warnings:
      description: Flags accepted that will do nothing on this hardware or release, and the start gate's warnings.
      type: list
      elements: str
      sample: []
    start_gate:
      description: The start gate's outcome, C(summary) (one line), C(counts) per verdict and C(verdicts) (C(id), C(verdict), C(text)).
      type: dict
      sample:
        summary: "25 known start failures checked (SGLang 0.5.9, capability 12.0): 18 ok, 4 unknown, 3 n/a"
        counts: {ok: 18, unknown: 4, n/a: 3}
        verdicts: []
"""

import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.files import file_sha256
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.launch.plan import (
    make_plan,
    manifest_digest,
    planned_patches,
    service_access,
    write_model_files,
)

# The options make_plan takes under the same name, as given; the others are read or renamed in launch_plan().
PASSED_AS_IS = (
    "profiles",
    "profile",
    "host",
    "port",
    "extra_flags",
    "env_parts",
    "secret_names",
    "model_class",
    "gpu_major",
    "launch_module",
    "python",
    "pythonpath",
    "cache",
    "host_facts",
    "host_facts_pending",
)


ARGUMENT_SPEC = dict(
    sglang=dict(type="path", required=True),
    sglang_sha256=dict(type="str"),
    profiles=dict(type="dict", required=True),
    profile=dict(type="str", required=True),
    host=dict(type="str", required=True),
    port=dict(type="int", required=True),
    extra_flags=dict(type="dict", default={}),
    env_parts=dict(type="list", elements="dict", default=[]),
    secret_names=dict(type="list", elements="str", default=[], no_log=False),
    patches=dict(type="list", elements="str"),
    manifest=dict(type="dict", default={}),
    patches_only=dict(type="list", elements="str", default=[]),
    model_class=dict(type="str"),
    gpu_major=dict(type="int", default=12),
    launch_module=dict(type="str", default="sglang.launch_server"),
    python=dict(type="path"),
    pythonpath=dict(type="list", elements="path", default=[]),
    cache=dict(type="path"),
    start_failures=dict(type="dict", default={}),
    start_failures_skipped=dict(type="str", default=""),
    model_files=dict(type="dict", default={}),
    host_facts=dict(type="path"),
    host_facts_pending=dict(type="list", elements="str", default=[]),
    service_user=dict(type="str", default=""),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: launch_plan(module.params, module.check_mode))


def launch_plan(p: dict, check_mode: bool) -> dict:
    if p["sglang_sha256"] and not _holds(p["sglang"], p["sglang_sha256"]):
        return dict(changed=False, wheel_missing=True, plan={}, service_access={})
    with tempfile.TemporaryDirectory(prefix="sglang-model-configs-") as scratch:
        model_dirs = write_model_files(scratch, p["model_files"])
        patches = p["patches"] if p["patches"] is not None else planned_patches(p["manifest"], p["patches_only"])
        plan = make_plan(
            p["sglang"],
            patches=patches,
            write_cache=not check_mode,
            catalogue=p["start_failures"],
            model_dirs=model_dirs,
            gate_skipped=p["start_failures_skipped"],
            **{name: p[name] for name in PASSED_AS_IS},
        )
        access = service_access(plan, model_dirs, p["service_user"]) if p["service_user"] else {}
        return dict(
            changed=False,
            wheel_missing=False,
            plan={**plan.to_dict(), "manifest_sha256": manifest_digest(p["manifest"])},
            service_access=access,
        )


def _holds(path: str, sha256: str) -> bool:
    """Whether ``path`` is a file holding exactly the bytes of ``sha256``."""
    try:
        return file_sha256(path) == sha256.lower()
    except OSError:
        return False


if __name__ == "__main__":
    main()
