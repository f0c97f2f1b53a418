#!/usr/bin/python
"""Ansible module: start the new release's own SGLang on tiny models, send it a few requests, stop it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_canary
short_description: Start canary of a release's SGLang server on tiny models, judged by its answers
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/serve/canary.py, run on the host. Starts the release's own server
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
  - The placement (O(policy)) is decided first. SGLang sizes a server from the memory free when it starts, so
    beside a serving server the canary takes about O(mem_fraction) of what is free plus its CUDA graphs.
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
    description: C(--mem-fraction-static) for the canary (SGLang applies it to the memory free at start).
    type: float
    default: 0.1
  target_model:
    description: The tiny target's directory (the RV(sm120.sglang.sglang_canary_models#module:target)); it holds the tokenizer's files too.
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
  graph_batch_sizes:
    description:
      - Capture CUDA graphs for these batch sizes only (and the piecewise prefill graphs for 64 and 256 tokens,
        on releases before 0.5.20), in the flags O(sglang_version)'s parser knows; the result's C(graphs) says
        what was traded. Capture failures still show; one that only a larger batch size meets does not.
      - Empty captures what the launch flags capture (SGLang's default list, up to C(--cuda-graph-max-bs)).
    type: list
    elements: int
    default: []
  env_files:
    description:
      - The unit's EnvironmentFile= paths, read in order as systemd reads them (C(KEY=VALUE), quoted values,
        comments; a leading C(-) makes a missing file empty); O(env) is applied over them.
      - Read on the host by this module (root), so a 0600 secrets file is read as the unit's would be; no value is returned.
    type: list
    elements: str
    default: []
  user:
    description: Run the server as this user and its primary group (the unit's C(User=)); empty runs it as the module's user.
    type: str
    default: ""
  policy:
    description:
      - Where the canary runs. C(off) runs nothing. C(switch-window) runs it only when O(gpus_freed) (the caller
        stopped the serving server). C(beside) runs it next to the serving server and fails, starting nothing, when
        a GPU it uses has less than O(min_free_mib) free. C(auto) runs it beside when
        memory allows, else returns RV(placement) with C(mode=switch-window) without running, for the caller to stop the
        serving server and call again with O(gpus_freed).
    type: str
    choices: [auto, beside, switch-window, "off"]
    default: auto
  gpus_freed:
    description: The serving server has been stopped; the canary runs at O(mem_fraction) whatever the GPUs show.
    type: bool
    default: false
  gpu_query:
    description: Read each GPU's memory with nvidia-smi for the placement (false on a host without GPUs, e.g. the lab).
    type: bool
    default: true
  min_free_mib:
    description: >-
      MiB each GPU the canary uses must have free to run beside the serving server (SGLang sizes the canary from
      what is free; what stays free is also the serving server's room for its activations).
    type: int
    default: 16384
  kv_cache_dtype:
    description: C(--kv-cache-dtype) for the canary where the launch flags leave it unset or C(auto) (the tiny models' launch hint).
    type: str
  sglang_version:
    description: The release's SGLang version, whose log lines RV(evidence) is judged by
      (plugins/module_utils/sglang_sm120/serve/evidence.py).
    type: str
    default: ""
  known_causes:
    description:
      - The start-failure catalogue's log signatures for this release, the launch plan's C(log_signatures)
        (id, title, patterns, phases, message, fix, refs). A failed canary whose log matches one names that
        catalogue entry (RV(known_cause)) and its fix.
    type: list
    elements: dict
    default: []
attributes:
  check_mode:
    description: Starts nothing; returns the command that would run and its argv.
    support: full
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.no_diff
  - sm120.sglang.sglang_sm120.lock_renewal
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
ran:
  description: Whether the canary server was started (false for C(off), and for a switch window not yet freed).
  type: bool
  returned: always
  sample: true
placement:
  description: Where it runs (C(beside), C(switch-window), C(off)), the C(--mem-fraction-static) it gets, why, and each GPU's memory read.
  type: dict
  returned: always
  sample:
    mode: beside
    mem_fraction: 0.1
    reason: "GPU memory not read (no GPU required on this host): beside the serving server"
    gpus: []
ok:
  description: Whether the server became healthy and completed every canary request; null when it did not run.
  type: bool
  returned: always
  sample: true
evidence:
  description: >-
    What the canary showed: C(backends) (the resolved attention, MoE, sampling backends, KV dtype, CUDA-graph and
    speculative settings, from /server_info or the logged server args) and C(optimisations) (server_evidence's
    verdict per optimisation, CUDA graphs always).
  type: dict
  returned: when it ran
  sample:
    backends: {source: /server_info, values: {attention_backend: flashinfer, kv_cache_dtype: fp8_e4m3, disable_cuda_graph: false}}
    optimisations: [{name: cuda graphs, verdict: "yes", evidence: ["Capture cuda graph end. Time elapsed: 12.3 s"], note: ""}]
    sglang_version: 0.5.9
server_info:
  description: The canary's /server_info answer while healthy (keys redacted); null when it had none.
  type: dict
  returned: when it ran
  sample: {version: 0.5.9, attention_backend: triton, tp_size: 1, api_key: <redacted>}
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
graphs:
  description: Which CUDA graphs the canary captured (O(graph_batch_sizes)) and what that leaves unseen.
  type: str
  returned: always
  sample: >-
    CUDA graphs captured for batch sizes 1 4 only, piecewise prefill graphs for 64 and 256 tokens:
    a capture failure shows, one that only a larger batch size meets does not
known_cause:
  description: The catalogue entry a failed canary's log matched (name is its id; title, cause, fix, refs, the line); null otherwise.
  type: dict
  returned: always
  sample: {name: fa3-on-sm120, title: "--attention-backend fa3 on SM120", cause: "FA3 has no SM120 kernels",
           fix: "use --attention-backend triton", refs: ["#10281"], line: "Can not import FA3 in sgl_kernel"}
url:
  description: The canary server's base URL.
  type: str
  returned: always
  sample: http://127.0.0.1:30100
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import ToolkitError, run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.release.lock import Heartbeat
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.serve import canary as canary_lib

ARGUMENT_SPEC = dict(
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
    prompts=dict(type="list", elements="str", default=list(canary_lib.DEFAULT_PROMPTS)),
    concurrency=dict(type="int", default=4),
    graph_batch_sizes=dict(type="list", elements="int", default=[]),
    env_files=dict(type="list", elements="str", default=[]),
    user=dict(type="str", default=""),
    policy=dict(type="str", default="auto", choices=list(canary_lib.POLICIES)),
    gpus_freed=dict(type="bool", default=False),
    gpu_query=dict(type="bool", default=True),
    min_free_mib=dict(type="int", default=16384),
    kv_cache_dtype=dict(type="str"),
    sglang_version=dict(type="str", default=""),
    known_causes=dict(type="list", elements="dict", default=[]),
    lock_renewal=dict(type="dict", options=dict(path=dict(type="path", required=True), run_id=dict(type="str", required=True))),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, lambda: canary(module, module.params))


def canary(module: AnsibleModule, p: dict) -> dict:
    env: dict[str, str] = {}
    for path in p["env_files"]:
        values = canary_lib.read_env_file(path)
        env.update(values)
        if os.path.exists(path.lstrip("-")) and not os.stat(path.lstrip("-")).st_mode & 0o004:
            module.no_log_values.update(v for v in values.values() if v)  # a file others cannot read holds secrets
    env.update({str(k): str(v) for k, v in p["env"].items()})
    keys = canary_lib.read_api_keys(p["keys_file"]) if p["keys_file"] else {}
    module.no_log_values.update(v for v in keys.values() if v)
    if p["gpus_freed"] or p["policy"] in ("off", "switch-window"):
        placement = canary_lib.place("switch-window" if p["gpus_freed"] else p["policy"], None, [], p["mem_fraction"], p["min_free_mib"])
    else:
        gpus = canary_lib.query_gpu_memory() if p["gpu_query"] else None
        placement = canary_lib.place(p["policy"], gpus, canary_lib.canary_gpus(p["argv"], env), p["mem_fraction"], p["min_free_mib"])
    argv = canary_lib.canary_argv(p["argv"], p["target_model"], p["draft_model"], p["port"], placement.mem_fraction, p["kv_cache_dtype"])
    argv, graphs = canary_lib.trim_cuda_graphs(argv, p["graph_batch_sizes"], p["sglang_version"])
    command = [p["python"], "-m", p["module"], *argv]
    ready = placement.mode == "beside" or (placement.mode == "switch-window" and p["gpus_freed"])
    if not ready:
        why = placement.reason if placement.mode == "off" else f"not run yet: {placement.reason}"
        return dict(
            changed=False,
            ran=False,
            ok=None,
            phase="not run",
            message=why,
            placement=placement.to_dict(),
            command=command,
            argv=argv,
            graphs=graphs,
        )
    if module.check_mode:
        return dict(
            changed=False, ran=False, ok=None, phase="check mode", message="check mode: nothing started", placement=placement.to_dict(),
            command=command, argv=argv, graphs=graphs,
        )  # fmt: skip
    # The canary blocks for minutes: a thread renews the deploy lock's heartbeat meanwhile.
    heartbeat = Heartbeat(**p["lock_renewal"]).start() if p["lock_renewal"] else None
    result = canary_lib.run_canary(
        p["python"],
        p["module"],
        argv,
        env,
        p["log"],
        p["start_timeout"],
        p["request_timeout"],
        p["prompts"],
        keys=keys,
        concurrency=p["concurrency"],
        user=p["user"] or None,
        sglang_version=p["sglang_version"] or None,
        known_causes=p["known_causes"],
    ).to_dict()
    if heartbeat is not None:
        heartbeat.stop()  # fails if this run lost the lock meanwhile
    result.update(ran=True, placement=placement.to_dict(), graphs=graphs)
    if not result["ok"]:
        msg = result.pop("message")
        raise ToolkitError(msg, message=msg, changed=False, **result)
    return dict(changed=False, **result)


if __name__ == "__main__":
    main()
