#!/usr/bin/python
"""Ansible module: check what a started SGLang server answers, beyond GET /health."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_answers
short_description: Check what a started SGLang server answers (a tool call, computed-answer questions, a burst)
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/serve/answers.py; the sglang_service role runs it
    after a new release's start is healthy, before the release is marked good (a failure rolls it back).
  - C(tool-call) sends one chat completion with one tool and C(tool_choice=required) and fails unless the
    answer carries OpenAI's structured C(message.tool_calls) with that tool's name and JSON arguments;
    with O(tool_call_parser=kimi_k2) the call's id must be Kimi-K2's own C(functions.NAME:INDEX).
    A server without C(--tool-call-parser) returns the call as text in C(content), which agent clients
    cannot use, while GET /health stays 200.
  - C(questions) asks O(questions) generated questions whose answers a program computes (arithmetic, string and
    list operations, counting) at temperature 0 through C(/generate), one at a time and then O(burst) of them at
    once, and fails when a phase answers fewer than O(min_share_right) right, a request fails, or an output is
    degenerate (empty, NaN or inf, a non-finite logprob, a token or n-gram repeated); the whole check is bounded
    by O(questions_timeout). A healthy server can answer wrongly (FlashInfer's SM120 FP4 GEMM race under load,
    a broken draft or verify path).
  - C(greedy) records the greedy outputs (temperature 0, 64 tokens, token ids) of eight open-ended prompts, one at a
    time, and returns them whole in its C(details.outputs); the sglang_benchmark role records them for the baseline and
    the EAGLE-3 profile in turn and module sglang_report compares them (greedy speculative decoding is exact up to
    numerics). It fails only when a request fails.
  - The API key is read on the host from O(keys_file) (the file the service role writes), never passed in.
options:
  url:
    description: The server's base URL (loopback).
    type: str
    default: http://127.0.0.1:30000
  checks:
    description: The checks to run, in order.
    type: list
    elements: str
    choices: [tool-call, questions, greedy]
    default: [tool-call]
  tool_call_parser:
    description: The server's C(--tool-call-parser) as the launch plan gives it (its call ids are checked for kimi_k2).
    type: str
  keys_file:
    description: SGLang's API-keys file (C(api-key) in it is sent as the bearer token); absent means no key.
    type: path
  timeout:
    description: Seconds each request may take.
    type: float
    default: 120
  questions:
    description: How many computed-answer questions C(questions) asks (drawn from O(seed)).
    type: int
    default: 40
  burst:
    description: How many of them C(questions) then sends at once (cycling through them); 0 for none.
    type: int
    default: 64
  min_share_right:
    description: The share of the questions each phase must answer right, from 0 to 1.
    type: float
    default: 0.8
  seed:
    description: The seed the questions are drawn from (the same seed, the same questions).
    type: int
    default: 0
  questions_timeout:
    description: Seconds the whole C(questions) check may take; past it the check fails saying where it stopped.
    type: float
    default: 300
attributes:
  check_mode:
    description: Sends the same requests in check mode (they change nothing on the server).
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.read_only
"""

EXAMPLES = r"""
- name: Check the server returns structured tool calls
  sm120.sglang.sglang_answers:
    tool_call_parser: kimi_k2
    keys_file: /etc/sglang/api-keys.yaml

- name: Check it answers computed questions right, alone and 64 at once
  sm120.sglang.sglang_answers:
    checks: [questions]
    questions: 40
    burst: 64
    keys_file: /etc/sglang/api-keys.yaml
"""

RETURN = r"""
checks:
  description: Each check's outcome (also on failure).
  type: list
  elements: dict
  returned: always
  sample:
    - name: tool-call
      ok: true
      reason: ""
      seconds: 0.41
      answer: '{"id": "...", "object": "chat.completion"}'
      details: {}
    - name: questions
      ok: true
      reason: ""
      seconds: 6.2
      answer: 40/40 right asked one at a time, 64/64 in the burst of 64
      details: {questions: 40, share_right: 1.0, sequential: {asked: 40, right: 40, wrong: 0, first_wrong: []}}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import ToolkitError, run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.serve.answers import (
    CHECKS,
    run_checks,
    service_keys,
)

ARGUMENT_SPEC = dict(
    url=dict(type="str", default="http://127.0.0.1:30000"),
    checks=dict(type="list", elements="str", choices=list(CHECKS), default=["tool-call"]),
    tool_call_parser=dict(type="str"),
    keys_file=dict(type="path", no_log=False),
    timeout=dict(type="float", default=120),
    questions=dict(type="int", default=40),
    burst=dict(type="int", default=64),
    min_share_right=dict(type="float", default=0.8),
    seed=dict(type="int", default=0),
    questions_timeout=dict(type="float", default=300),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: answers(module.params), partial=dict(checks=[]))


def answers(p: dict) -> dict:
    asking = dict(
        count=p["questions"], concurrency=p["burst"], min_share_right=p["min_share_right"], seed=p["seed"], timeout_s=p["questions_timeout"]
    )
    checks = run_checks(p["url"], service_keys(p["keys_file"]), p["checks"], p["tool_call_parser"], p["timeout"], asking)
    results = [c.to_dict() for c in checks]
    failed = [c for c in results if not c["ok"]]
    if failed:
        raise ToolkitError("; ".join(f"answer check {c['name']} failed: {c['reason']}" for c in failed), checks=results)
    return dict(changed=False, checks=results)


if __name__ == "__main__":
    main()
