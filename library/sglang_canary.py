#!/usr/bin/python
"""Ansible module: start the new release's own SGLang on tiny models, send it a few requests, stop it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_canary
short_description: Start canary of a release's SGLang server on tiny models, judged by its answers
description:
  - Thin wrapper around module_utils/canary.py, run on the host. Starts the release's own server
    (O(python) C(-m) O(module) with the release's launch flags O(argv) and environment O(env)) with
    C(--model-path) (and C(--tokenizer-path) when present) replaced by O(target_model),
    C(--speculative-draft-model-path) by O(draft_model), C(--port) O(port), C(--host 127.0.0.1) and
    C(--mem-fraction-static) O(mem_fraction); every other flag is kept exactly (TP size, backends,
    speculative settings, C(--config)).
  - The server runs as a child in its own process group, its output only in O(log). GET /health is
    probed every 0.5 s (as the health gate does) until 200, the server exits, or O(start_timeout);
    then one streamed request and O(concurrency) concurrent ones (32 tokens each, with the API key
    from O(keys_file) when given). Healthy only when every request completes.
  - The server is always stopped (SIGTERM to the group, up to 60 s, then SIGKILL), also on failure;
    no process is left. The keys are replaced by C(<redacted>) in O(log) and in everything returned.
  - Fails with a message naming the phase it stopped in (C(port closed), C(503), C(no answer),
    C(exited) with the exit status, C(requests), C(port in use), C(not started)) and quoting the last
    line of the log; the result's fields are returned with the failure too.
  - Tiny models (module sglang_canary_models) exercise the release's code paths for the target's
    architecture, not the real weights' size, quantization or load time.
options:
  python:
    description: The release venv's python.
    type: path
    required: true
  module:
    description: The launch module run with C(-m).
    type: str
    default: sglang.launch_server
  argv:
    description: The release's launch flags (the launch plan's argv), without the python and module.
    type: list
    elements: str
    required: true
  env:
    description: The release's environment, added to the module's own (C(PYTHONUNBUFFERED=1) unless set).
    type: dict
    default: {}
  log:
    description: Where the server's stdout and stderr are written (replaced at each run, kept afterwards).
    type: path
    required: true
  start_timeout:
    description: Seconds the server has to answer GET /health with 200.
    type: float
    default: 300
  request_timeout:
    description: Seconds each canary request may take.
    type: float
    default: 120
  port:
    description: The canary's own port on 127.0.0.1; it must be free (the canary is not started when something answers there).
    type: int
    default: 30100
  mem_fraction:
    description: C(--mem-fraction-static) for the canary (small, so a running server's GPUs are not needed whole).
    type: float
    default: 0.1
  target_model:
    description: The tiny target's directory (the RV(sglang_canary_models.target)); it holds the tokenizer's files too.
    type: path
    required: true
  draft_model:
    description: The tiny draft's directory; required when O(argv) has C(--speculative-draft-model-path).
    type: path
  keys_file:
    description: >-
      The service's API-keys YAML (C(api-key: "...")), read on the host; its C(api-key) is sent with the requests.
    type: path
  prompts:
    description: The prompts sent (the first one streamed alone, then round-robin for the concurrent ones).
    type: list
    elements: str
    default:
      - The capital of France is
      - Write a short poem about a graphics card.
      - Explain speculative decoding in one sentence.
      - "List three prime numbers:"
  concurrency:
    description: How many requests are sent at once after the streamed one.
    type: int
    default: 4
attributes:
  check_mode:
    description: Starts nothing; returns the command that would run and its argv.
    support: full
  diff_mode:
    description: No diff.
    support: none
author: sglang-sm120 toolkit
notes:
  - Reports C(changed=false), since the server is stopped again; only O(log) is written.
"""

EXAMPLES = r"""
- name: Start canary of the new release on the tiny models
  sglang_canary:
    python: "{{ sglang_release_dir }}/venv/bin/python"
    argv: "{{ sglang_launch_plan.argv }}"
    env: {SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "1"}
    log: "{{ sglang_release_dir }}/canary.log"
    target_model: "{{ canary_models.target }}"
    draft_model: "{{ canary_models.draft }}"
    keys_file: /etc/sglang/api-keys.yaml
    start_timeout: 300
  register: canary
"""

RETURN = r"""
ok:
  description: Whether the server became healthy and completed every canary request.
  type: bool
  returned: always
  sample: true
phase:
  description:
    - Where it ended (C(served) when ok; else C(port closed), C(503), C(no answer), C(HTTP <n>), C(exited), C(requests),
      C(port in use), C(not started)).
  type: str
  returned: always
  sample: served
message:
  description: One sentence; when it failed, the phase and the last log line.
  type: str
  returned: always
  sample: >-
    canary failed in phase exited: the server exited with status 1 before it was healthy (2.1 s);
    last log line: RuntimeError: CUDA error
seconds:
  description: Seconds from the start to the end of the requests (or the failure).
  type: float
  returned: always
  sample: 131.4
healthy_at:
  description: Seconds from the start to the first 200 from /health; null when never.
  type: float
  returned: always
  sample: 128.2
port_open_at:
  description: Seconds from the start to the first answer of any status; null when the port never opened.
  type: float
  returned: always
  sample: 120.5
first_503_at:
  description: Seconds from the start to the first 503 (SGLang's warm-up); null when none was seen.
  type: float
  returned: always
  sample: 120.5
phases:
  description: Each phase the probes saw, with the seconds it was first seen, in order.
  type: list
  elements: list
  returned: always
  sample: [["port closed", 0.01], ["503", 120.5], ["healthy", 128.2]]
requests:
  description: What the canary requests did (empty when the server never became healthy).
  type: dict
  returned: always
  sample:
    streamed_ok: true
    streamed: {ok: true, output_tokens: 32, ttft_s: 0.08, latency_s: 0.4, completion_tokens: 32, spec_verify_ct: 31, error: ""}
    concurrent_ok: 4
    concurrent_total: 4
    output_len: 32
    accept_length: 1.03
    accept_source: requests
    accept_note: ""
    errors: []
exit_status:
  description: The server's exit status (negative N when signal N ended it); null when it was never started.
  type: int
  returned: always
  sample: -15
stopped:
  description: How the server ended (C(exited by itself), C(SIGTERM), C(SIGKILL after 60 s)).
  type: str
  returned: always
  sample: SIGTERM
log:
  description: The server's log file (keys redacted).
  type: str
  returned: always
  sample: /opt/sglang/releases/0004-9f8e7d6c/canary.log
log_tail:
  description: The last 25 non-empty lines of the log (keys redacted).
  type: list
  elements: str
  returned: always
  sample: ["[2026-12-01 10:00:00] The server is fired up and ready to roll!"]
command:
  description: The command run (or, in check mode, that would run).
  type: list
  elements: str
  returned: always
  sample: [/opt/sglang/current/venv/bin/python, -m, sglang.launch_server, --model-path, /opt/sglang/canary/models/target, --port, "30100"]
argv:
  description: In check mode, the canary's launch flags (the release's with the replacements).
  type: list
  elements: str
  returned: check mode
  sample: [--model-path, /opt/sglang/canary/models/target, --tp-size, "8", --host, 127.0.0.1, --port, "30100", --mem-fraction-static, "0.1"]
url:
  description: The canary server's base URL.
  type: str
  returned: always
  sample: http://127.0.0.1:30100
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.bench_client import KeysFileError, read_keys
from ansible.module_utils.canary import DEFAULT_PROMPTS, CanaryArgvError, canary_argv, run_canary


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            module=dict(type="str", default="sglang.launch_server"),
            argv=dict(type="list", elements="str", required=True),
            env=dict(type="dict", default={}),
            log=dict(type="path", required=True),
            start_timeout=dict(type="float", default=300.0),
            request_timeout=dict(type="float", default=120.0),
            port=dict(type="int", default=30100),
            mem_fraction=dict(type="float", default=0.1),
            target_model=dict(type="path", required=True),
            draft_model=dict(type="path"),
            keys_file=dict(type="path", no_log=False),
            prompts=dict(type="list", elements="str", default=list(DEFAULT_PROMPTS)),
            concurrency=dict(type="int", default=4),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        argv = canary_argv(p["argv"], p["target_model"], p["draft_model"], p["port"], p["mem_fraction"])
        keys = read_keys(p["keys_file"]) if p["keys_file"] else {}
        module.no_log_values.update(v for v in keys.values() if v)
    except (CanaryArgvError, KeysFileError, OSError) as exc:
        module.fail_json(msg=str(exc))
    command = [p["python"], "-m", p["module"], *argv]
    if module.check_mode:
        module.exit_json(changed=False, ok=None, phase="check mode", message="check mode: nothing started", command=command, argv=argv)
    result = run_canary(
        p["python"],
        p["module"],
        argv,
        p["env"],
        p["log"],
        p["start_timeout"],
        p["request_timeout"],
        p["prompts"],
        keys=keys,
        concurrency=p["concurrency"],
    ).to_dict()
    if not result["ok"]:
        msg = result.pop("message")
        module.fail_json(msg=msg, message=msg, changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
