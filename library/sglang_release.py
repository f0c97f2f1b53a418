#!/usr/bin/python
"""Ansible module: the release record of /opt/sglang (find, create, mark, switch, prune)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_release
short_description: Manage versioned SGLang releases and the current symlink
description:
  - Thin wrapper around module_utils/releases.py. C(releases.json) is the explicit record of the order,
    the state of each release (building, ready, good, bad), current and last known-good.
options:
  root:
    description: Release root (holds releases/, current, releases.json).
    type: path
    default: /opt/sglang
  action:
    description:
      - C(find) the usable release with O(key); C(create) a building release; C(ready), C(good),
        C(bad) mark one; C(discard) marks a failed building release bad and removes its directory;
        C(switch) points current at one; C(prune) keeps O(keep) releases; C(info) reads the record.
    type: str
    choices: [find, create, ready, good, bad, discard, switch, prune, info]
    required: true
  key:
    description: The release key (find, create).
    type: str
  inputs:
    description: What went into the release, recorded in its manifest (create).
    type: dict
    default: {}
  release:
    description: Release id (ready, good, bad, discard, switch).
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
author: sglang-sm120 toolkit
"""

EXAMPLES = r"""
- name: Point current at the new release
  sglang_release:
    action: switch
    release: 0003-1a2b3c4d
"""

RETURN = r"""
release:
  description: The release id acted on or found (null when find finds none).
  type: str
  returned: success
record:
  description: releases.json after the action, with current_link.
  type: dict
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.releases import ReleaseError, Releases


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/opt/sglang"),
            action=dict(
                type="str", required=True, choices=["find", "create", "ready", "good", "bad", "discard", "switch", "prune", "info"]
            ),
            key=dict(type="str", no_log=False),
            inputs=dict(type="dict", default={}),
            release=dict(type="str"),
            reason=dict(type="str", default=""),
            manifest=dict(type="dict", default={}),
            keep=dict(type="int", default=5),
        ),
        required_if=[
            ("action", "find", ("key",)),
            ("action", "create", ("key",)),
            ("action", "ready", ("release",)),
            ("action", "good", ("release",)),
            ("action", "bad", ("release",)),
            ("action", "discard", ("release",)),
            ("action", "switch", ("release",)),
        ],
        supports_check_mode=True,
    )
    p = module.params
    releases = Releases(p["root"])
    action, check = p["action"], module.check_mode
    changed, release, extra = False, p["release"], {}
    try:
        if action == "find":
            release = releases.find(p["key"])
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
            if changed and module._diff:
                extra["diff"] = {"before": f"current -> {before}\n", "after": f"current -> releases/{p['release']}\n"}
        elif action == "prune":
            extra["pruned"] = releases.prune(p["keep"], check=check)
            changed = bool(extra["pruned"])
    except (ReleaseError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, release=release, record=releases.summary(), **extra)


if __name__ == "__main__":
    main()
