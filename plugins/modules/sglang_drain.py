#!/usr/bin/python
"""Ansible module: wait until the SGLang server reports no request in flight."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_drain
short_description: Wait until an SGLang server has no running or waiting request, read from the server itself
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/fleet/drain.py. Reads C(GET /v1/loads) (SGLang 0.5.9 and later;
    C(/get_load) where that is 404) until it reports no running and no waiting request twice in a row, or until
    O(timeout). Meant for a worker the router no longer sends requests to (module M(sm120.sglang.sglang_router_worker)).
  - Fails when the requests do not finish in time, naming the server and its running and waiting requests.
  - Changes nothing, except the deploy lock's heartbeat when given O(lock_renewal).
options:
  url:
    description: The server's address (loopback on the worker).
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: The server's API key; empty for none.
    type: str
    default: ""
  timeout:
    description: Seconds to wait at most (the fleet's drain timeout).
    type: float
    required: true
  interval:
    description: Seconds between two reads.
    type: float
    default: 1
attributes:
  check_mode:
    description: Reads the server's load once and returns it; does not wait.
    support: full
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.no_diff
  - sm120.sglang.sglang_sm120.lock_renewal
"""

EXAMPLES = r"""
- name: Wait for the worker's requests to finish
  sglang_drain:
    api_key: "{{ sglang_service_api_key }}"
    timeout: 900
  no_log: false
"""

RETURN = r"""
drain:
  description: How the drain went.
  type: dict
  returned: always
  sample: {drained: true, elapsed_s: 41.3, polls: 43, last: {running: 0, waiting: 0, source: /v1/loads, in_flight: 0},
           history: [[0.0, 4], [12.1, 3], [40.2, 0]]}
  contains:
    drained: {description: Whether no request was in flight at the end., type: bool, sample: true}
    elapsed_s: {description: Seconds waited., type: float, sample: 41.3}
    polls: {description: Reads of the server's load., type: int, sample: 43}
    last: {description: "The last read (running, waiting, the endpoint, in_flight).", type: dict}
    history: {description: "[seconds, requests in flight] each time the count changed.", type: list, elements: list}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.fleet.drain import DrainError, read_load, wait_drained
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.release.lock import renew_while_polling

ARGUMENT_SPEC = dict(
    url=dict(type="str", default="http://127.0.0.1:30000"),
    api_key=dict(type="str", default="", no_log=True),
    timeout=dict(type="float", required=True),
    interval=dict(type="float", default=1),
    lock_renewal=dict(type="dict", options=dict(path=dict(type="path", required=True), run_id=dict(type="str", required=True))),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: drain(module.params, module.check_mode))


def drain(p: dict, check_mode: bool) -> dict:
    key = p["api_key"] or None

    def read():
        renew_while_polling(p["lock_renewal"], check_mode)  # a long drain keeps the deploy lock's heartbeat
        return read_load(p["url"], key)

    result = wait_drained(read, timeout=0 if check_mode else p["timeout"], interval=p["interval"])
    if not result.drained and not check_mode:
        last = result.last
        raise DrainError(
            f"{p['url']} still had {last.in_flight} requests in flight ({last.running} running, {last.waiting} waiting, "
            f"from {last.source}) after {result.elapsed_s:.0f} s: raise the drain timeout "
            f"(sglang_router_drain_timeout, {p['timeout']:.0f} s) or allow the cut",
            drain=result.to_dict(),
        )
    return dict(changed=False, drain=result.to_dict())


if __name__ == "__main__":
    main()
