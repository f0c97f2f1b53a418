#!/usr/bin/python
"""Ansible module: the release record of /opt/sglang (find, create, mark, switch, prune)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_release
short_description: Manage versioned SGLang releases and the current symlink
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/release/records.py. C(releases.json) is the explicit record of the order,
    the state of each release (building, ready, good, bad), current and last known-good.
options:
  root:
    description: Release root (holds releases/, current, releases.json).
    type: path
    default: /opt/sglang
  action:
    description:
      - C(find) the usable release with O(key), or with the key of O(inputs) (returned as RV(key));
        C(create) a building release; C(ready), C(good), C(bad) mark one; C(discard) marks a failed
        building release bad and removes its directory; C(switch) points current at one; C(prune)
        keeps O(keep) releases; C(info) reads the record; C(rollback_target) names the release to
        roll back to (O(release), else the newest good one before current) and fails saying why
        there is none.
    type: str
    choices: [find, create, ready, good, bad, discard, switch, prune, info, rollback_target]
    required: true
  key:
    description: The release key (find, create); find computes it from O(inputs) when not given.
    type: str
  inputs:
    description: What went into the release (find, create); recorded in its manifest (create).
    type: dict
    default: {}
  release:
    description: Release id (ready, good, bad, discard, switch; rollback_target, optional).
    type: str
  reason:
    description: Why (bad, discard).
    type: str
    default: ""
  manifest:
    description: Fields merged into the release's manifest.json (ready, good, bad).
    type: dict
    default: {}
  keep:
    description: Releases to keep (prune).
    type: int
    default: 5
attributes:
  check_mode:
    description: Writes nothing in check mode; find, info and rollback_target read as a real run does.
    support: partial
    details:
      - switch and prune report exactly what they would change (prune returns the releases it would remove).
      - create, ready, good, bad and discard report changed without checking whether the record would change;
        create returns no release id.
  diff_mode:
    description: Only switch returns a diff (the current symlink before and after); the other actions return none.
    support: partial
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
"""

EXAMPLES = r"""
- name: Point current at the new release
  sglang_release:
    action: switch
    release: 0003-1a2b3c4d
"""

RETURN = r"""
release:
  description: The release id acted on or found (null when find finds none); for rollback_target, the target.
  type: str
  returned: success
  sample: 0002-1a2b3c4d
key:
  description: The key looked for (find).
  type: str
  returned: when action is find
  sample: 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b
rollback_from:
  description: The release current when the rollback target was chosen.
  type: str
  returned: when action is rollback_target
  sample: 0003-5e6f7a8b
pruned:
  description: The releases removed (in check mode, that would be removed).
  type: list
  elements: str
  returned: when action is prune
  sample: [0001-aaaaaaaa]
record:
  description: releases.json after the action, with current_link.
  type: dict
  returned: success
  sample: {schema: 1, seq: 2, order: [0001-aaaaaaaa, 0002-bbbbbbbb], current: 0002-bbbbbbbb, last_good: 0002-bbbbbbbb}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.release.records import Releases, release_key

ARGUMENT_SPEC = dict(
    root=dict(type="path", default="/opt/sglang"),
    action=dict(
        type="str",
        required=True,
        choices=["find", "create", "ready", "good", "bad", "discard", "switch", "prune", "info", "rollback_target"],
    ),
    key=dict(type="str", no_log=False),
    inputs=dict(type="dict", default={}),
    release=dict(type="str"),
    reason=dict(type="str", default=""),
    manifest=dict(type="dict", default={}),
    keep=dict(type="int", default=5),
)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[
            ("action", "find", ("key", "inputs"), True),
            ("action", "create", ("key",)),
            ("action", "ready", ("release",)),
            ("action", "good", ("release",)),
            ("action", "bad", ("release",)),
            ("action", "discard", ("release",)),
            ("action", "switch", ("release",)),
        ],
        supports_check_mode=True,
    )
    run_module(module, lambda: release_action(module.params, module.check_mode, module._diff))


def release_action(p: dict, check: bool, diff: bool) -> dict:
    releases = Releases(p["root"])
    action = p["action"]
    changed, release, extra = False, p["release"], {}
    if action == "find":
        extra["key"] = p["key"] or release_key(p["inputs"])
        release = releases.find(extra["key"])
    elif action == "rollback_target":
        extra["rollback_from"], release = releases.rollback_target(p["release"])
    elif action == "create":
        changed = True
        release = None if check else releases.create(p["key"], p["inputs"])
    elif action in ("ready", "good", "bad"):
        changed = True if check else releases.set_state(p["release"], action, p["reason"], p["manifest"])
    elif action == "discard":
        changed = True
        if not check:
            releases.discard(p["release"], p["reason"])
    elif action == "switch":
        before = releases.summary().get("current_link")
        changed = releases.switch(p["release"], check=check)
        if changed and diff:
            extra["diff"] = {"before": f"current -> {before}\n", "after": f"current -> releases/{p['release']}\n"}
    elif action == "prune":
        extra["pruned"] = releases.prune(p["keep"], check=check)
        changed = bool(extra["pruned"])
    return dict(changed=changed, release=release, record=releases.summary(), **extra)


if __name__ == "__main__":
    main()
