#!/usr/bin/python
"""Ansible module: lay out and estimate the benchmark grid before anything is measured."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_bench_grid
short_description: Lay out the benchmark grid's cells and estimate its time, refusing a grid over its bound
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/serve/grid.py (plan_grid); the sglang_benchmark role runs it
    before it touches the server.
  - The grid is concurrency x context (tokens of prompt; 0 is the prompt set as it is) x profile. Cells run per profile,
    per context, concurrency rising; each sends max(O(min_requests), O(rounds) x concurrency) requests of O(output_len)
    tokens; the first cell of each profile is preceded by a decode warm-up of O(warmup_seconds).
  - The estimate assumes O(assumed) rates (per-request decode tok/s, whole-server prompt tok/s, seconds a restart takes);
    a grid whose estimate is over O(max_minutes) fails naming the bound, and nothing is measured.
options:
  grid:
    description: C(concurrency) (integers >= 1) and C(context_tokens) (integers >= 0, or C(short) for 0), each value once.
    type: dict
    required: true
  profiles:
    description: The launch profiles measured, in order (the first is the one the server runs already).
    type: list
    elements: str
    required: true
  output_len:
    description: Output tokens per request (fixed, ignore_eos).
    type: int
    required: true
  min_requests:
    description: The fewest requests a cell sends.
    type: int
    default: 8
  rounds:
    description: Requests per cell as a multiple of its concurrency (when more than O(min_requests)).
    type: int
    default: 2
  warmup_seconds:
    description: Seconds of decode before each profile's first cell, not measured.
    type: float
    default: 20
  assumed:
    description:
      - What the estimate assumes, C(decode_tok_s) (per request), C(prefill_tok_s) (the whole server) and C(restart_s).
      - Unset keys take 50, 8000 and 600; an unknown key fails.
    type: dict
    default: {}
  max_minutes:
    description: The most minutes the estimate may come to.
    type: float
    default: 120
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
"""

EXAMPLES = r"""
- name: Lay out the grid and print its estimate
  sm120.sglang.sglang_bench_grid:
    grid: {concurrency: [1, 8, 32, 128], context_tokens: [short, 8192, 32768]}
    profiles: [eagle3, baseline]
    output_len: 256
"""

RETURN = r"""
cells:
  description: The cells in the order they run, each with C(profile), C(concurrency), C(context_tokens), C(requests),
    C(warmup_seconds), C(estimate_s) and C(slot) (its name in the run files).
  type: list
  elements: dict
  returned: success
  sample: [{profile: eagle3, concurrency: 1, context_tokens: 0, requests: 8, warmup_seconds: 20.0, estimate_s: 41.1, slot: c1-x0}]
estimate_s:
  description: The estimated seconds of the whole grid, warm-ups and restarts included.
  type: float
  returned: success
  sample: 2950.4
message:
  description: The grid's size and estimate in words, with what the estimate assumes.
  type: str
  returned: success
  sample: "24 cells (2 profiles x 3 contexts x 4 concurrencies, 1392 requests of 256 output tokens): about 49 min (...)"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.serve.grid import plan_grid, read_assumed

ARGUMENT_SPEC = dict(
    grid=dict(type="dict", required=True),
    profiles=dict(type="list", elements="str", required=True),
    output_len=dict(type="int", required=True),
    min_requests=dict(type="int", default=8),
    rounds=dict(type="int", default=2),
    warmup_seconds=dict(type="float", default=20),
    assumed=dict(type="dict", default={}),
    max_minutes=dict(type="float", default=120),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: plan(module.params))


def plan(p: dict) -> dict:
    assumed = read_assumed(p["assumed"])
    return dict(
        changed=False,
        **plan_grid(
            p["grid"],
            p["profiles"],
            output_len=p["output_len"],
            min_requests=p["min_requests"],
            rounds=p["rounds"],
            warmup_seconds=p["warmup_seconds"],
            decode_tok_s=assumed["decode_tok_s"],
            prefill_tok_s=assumed["prefill_tok_s"],
            restart_s=assumed["restart_s"],
            max_minutes=p["max_minutes"],
        ),
    )


if __name__ == "__main__":
    main()
