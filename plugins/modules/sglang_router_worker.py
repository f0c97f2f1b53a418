#!/usr/bin/python
"""Ansible module: a worker registered with SGLang's router, or removed from it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_router_worker
short_description: Register a worker with SGLang's router (with its own API key), or remove it and wait until no request can reach it
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/fleet/router.py, the router's run-time worker API
    (C(GET/POST /workers), C(DELETE /workers/{id})) as sglang-router 0.3.2 and smg 1.13.0 answer it.
  - O(state=present) adds the worker unless the router lists it (the router accepts the same URL twice, or refuses
    it with 409, depending on its version) and waits until the router lists it healthy.
  - O(state=absent) removes it and waits until the router no longer lists it (smg removes in the background and
    keeps routing to the worker for a few seconds; sglang-router 0.3.2 at once). Running requests are not waited for
    here; module M(sm120.sglang.sglang_drain) reads them from the worker itself.
options:
  router_url:
    description: The router's address as this host reaches it.
    type: str
    required: true
  router_api_key:
    description: The router's API key (its C(--api-key)); empty for a router without one.
    type: str
    default: ""
  worker_url:
    description: The worker's address as the router reaches it (its C(--host) and C(--port)).
    type: str
    required: true
  worker_api_key:
    description: The worker's own API key, which the router sends to it (its C(--api-key)); empty for none.
    type: str
    default: ""
  state:
    description: Whether the router lists the worker.
    type: str
    choices: [present, absent]
    default: present
  wait_timeout:
    description: Seconds to wait for the router to list the worker healthy (present) or to stop listing it (absent).
    type: float
    default: 120
attributes:
  check_mode:
    description: Reads the router's list and says whether a real run would add or remove; sends nothing.
    support: full
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.no_diff
"""

EXAMPLES = r"""
- name: Take the worker out of the router
  sglang_router_worker:
    router_url: http://10.0.0.5:30000
    router_api_key: "{{ sglang_router_api_key }}"
    worker_url: http://10.0.0.11:30000
    state: absent
  no_log: true
"""

RETURN = r"""
worker:
  description: The worker as the router lists it at the end (null once removed).
  type: dict
  returned: always
  sample: {id: 41c744e1-8b01-4833-ad61-d52509080239, url: "http://10.0.0.11:30000", healthy: true, status: null}
worker_id:
  description: The router's id of the worker (the one removed, for O(state=absent)); null when it was not listed.
  type: str
  returned: always
  sample: 41c744e1-8b01-4833-ad61-d52509080239
waited_s:
  description: Seconds spent waiting for the router after the request.
  type: float
  returned: always
  sample: 2.5
healthy_workers:
  description: How many workers the router lists healthy (and not draining) at the end.
  type: int
  returned: always
  sample: 2
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.fleet.router import RouterClient

ARGUMENT_SPEC = dict(
    router_url=dict(type="str", required=True),
    router_api_key=dict(type="str", default="", no_log=True),
    worker_url=dict(type="str", required=True),
    worker_api_key=dict(type="str", default="", no_log=True),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    wait_timeout=dict(type="float", default=120),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: ensure(module.params, module.check_mode))


def ensure(p: dict, check_mode: bool) -> dict:
    client = RouterClient(p["router_url"], p["router_api_key"] or None)
    listed = client.find(p["worker_url"])
    want = p["state"] == "present"
    if check_mode or ((listed is not None) == want and (not want or listed.healthy)):
        changed = (listed is not None) != want
        return dict(
            changed=changed,
            worker=None if listed is None else listed.to_dict(),
            worker_id=None if listed is None else listed.id,
            waited_s=0.0,
            healthy_workers=client.healthy_count(),
        )
    start = time.monotonic()
    if want:
        sent, worker_id = client.add(p["worker_url"], p["worker_api_key"] or None)
        seen = client.wait_healthy(p["worker_url"], p["wait_timeout"])
        return dict(
            changed=sent,
            worker=seen.to_dict(),
            worker_id=worker_id,
            waited_s=round(time.monotonic() - start, 2),
            healthy_workers=client.healthy_count(),
        )
    worker_id = client.remove(p["worker_url"])
    client.wait_gone(p["worker_url"], p["wait_timeout"])
    return dict(
        changed=True, worker=None, worker_id=worker_id, waited_s=round(time.monotonic() - start, 2), healthy_workers=client.healthy_count()
    )


if __name__ == "__main__":
    main()
