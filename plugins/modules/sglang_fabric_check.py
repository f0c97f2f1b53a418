#!/usr/bin/python
"""Ansible module: an all-reduce across the GPUs a launch plan uses, with the release's torch and NCCL, before the load."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_fabric_check
short_description: All-reduce across the launch plan's GPUs with the release's NCCL, bounded in time, before the load
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/host/fabric_check.py. Starts one process per rank with the
    release venv's Python (torch.distributed, the plan's NCCL environment), all-reduces a small and a large tensor,
    and kills every rank still running after O(timeout) seconds; a hang is a result, never a stuck play.
  - Records bus bandwidth for the largest size and latency for the smallest, judged against O(thresholds), and the
    host facts (O(host_facts)) that explain a hang, in O(record); while what decided it holds (the release's
    Python, the ranks, the environment, the host facts, the boot) the record is reused.
  - A hang or a failure fails the module when O(policy=refuse), naming the host facts that explain it.
  - With O(tune), each of O(candidates) is measured too and the fastest, where it beats the plan's own environment,
    is written to O(env_file), which the release's unit reads after its own environment.
options:
  python:
    description: The release venv's Python (it imports torch).
    type: path
    required: true
  pythonpath:
    description: Extra import paths for the ranks (the lab's mounted runtime).
    type: list
    elements: path
    default: []
  argv:
    description: The launch plan's flags; their tp, pp and dp sizes give the GPUs to all-reduce across.
    type: list
    elements: str
    required: true
  env:
    description: The launch plan's environment, given to every rank (the NCCL part is recorded).
    type: dict
    default: {}
  ranks:
    description: Ranks to start instead of the plan's GPU count (0 = the plan's); the lab's gloo stand-in uses 2.
    type: int
    default: 0
  backend:
    description: C(nccl) on GPUs; C(gloo) runs the same orchestration on CPUs (a host without GPUs, tests).
    type: str
    choices: [nccl, gloo]
    default: nccl
  timeout:
    description: Seconds the whole check may take before every rank left is killed (a timeout result).
    type: float
    default: 120
  sizes:
    description: Message sizes in bytes; the smallest gives the latency, the largest the bus bandwidth.
    type: list
    elements: int
    default: [32768, 1048576, 268435456]
  iters:
    description: Timed all-reduces per size (after O(warmup) untimed ones).
    type: int
    default: 20
  warmup:
    description: Untimed all-reduces per size.
    type: int
    default: 5
  thresholds:
    description: Per GPU count, C(min_busbw_gbs) and C(max_small_latency_us), each entry with its C(source).
    type: list
    elements: dict
    default: []
  candidates:
    description: NCCL environments to measure with O(tune) (each C(name) and C(env)).
    type: list
    elements: dict
    default: []
  tune:
    description: Measure O(candidates) and keep the fastest in O(env_file) (else O(env_file) is removed).
    type: bool
    default: false
  policy:
    description: C(refuse) fails on a hang or failure; C(warn) records it; C(off) checks nothing.
    type: str
    choices: [refuse, warn, "off"]
    default: refuse
  host_facts:
    description: Preflight's host facts file (the facts recorded beside the figures, and those that explain a hang).
    type: path
  record:
    description: Where the outcome is recorded (the release's C(fabric.json)); the worker script is written beside it.
    type: path
    required: true
  env_file:
    description: The release's C(fabric.env) (the chosen candidate's environment, with O(tune)).
    type: path
    required: true
  serving:
    description: Whether a current release may hold the GPUs now (an out-of-memory failure then is "not measured").
    type: bool
    default: false
attributes:
  check_mode:
    description: Reads the record; a check that would run is reported as C(would-check), nothing is started or written.
    support: full
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.no_diff
"""

EXAMPLES = r"""
- name: Check the PCIe fabric with the release's NCCL before the canary
  sglang_fabric_check:
    python: /opt/sglang/releases/0002-1a2b3c4d/venv/bin/python
    argv: [--model-path, /data/Kimi-K2.5-NVFP4, --tp-size, "8"]
    env: {NCCL_P2P_LEVEL: SYS}
    host_facts: /opt/sglang/host-facts.json
    record: /opt/sglang/releases/0002-1a2b3c4d/fabric.json
    env_file: /opt/sglang/releases/0002-1a2b3c4d/fabric.env
    thresholds:
      - {gpus: 8, min_busbw_gbs: 30, max_small_latency_us: 40, source: "voipmonitor/rtx6kpro optimization/nccl-tuning.md"}
"""

RETURN = r"""
fabric:
  description: The record (status ok, short, timeout, failed, unchecked or would-check; figures; host facts; candidates).
  type: dict
  returned: always
  sample:
    status: ok
    world_size: 8
    large_busbw_gbs: 39.2
    small_latency_us: 27.5
    shortfalls: []
    message: "all-reduce across 8 GPUs: 39.2 GB/s bus bandwidth at 256 MiB, 27.5 us at 32 KiB"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.host import fabric_check

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            pythonpath=dict(type="list", elements="path", default=[]),
            argv=dict(type="list", elements="str", required=True),
            env=dict(type="dict", default={}),
            ranks=dict(type="int", default=0),
            backend=dict(type="str", choices=["nccl", "gloo"], default="nccl"),
            timeout=dict(type="float", default=120),
            sizes=dict(type="list", elements="int", default=[32768, 1048576, 268435456]),
            iters=dict(type="int", default=20),
            warmup=dict(type="int", default=5),
            thresholds=dict(type="list", elements="dict", default=[]),
            candidates=dict(type="list", elements="dict", default=[]),
            tune=dict(type="bool", default=False),
            policy=dict(type="str", choices=["refuse", "warn", "off"], default="refuse"),
            host_facts=dict(type="path"),
            record=dict(type="path", required=True),
            env_file=dict(type="path", required=True),
            serving=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: check(module))


def check(module: AnsibleModule) -> dict:
    p = module.params
    try:
        with open(BOOT_ID, encoding="utf-8") as handle:
            boot_id = handle.read().strip()
    except OSError:
        boot_id = ""
    request = fabric_check.CheckRequest(
        python=p["python"],
        argv=p["argv"],
        env={str(k): str(v) for k, v in p["env"].items()},
        record=p["record"],
        env_file=p["env_file"],
        host_facts=p["host_facts"],
        pythonpath=p["pythonpath"],
        backend=p["backend"],
        ranks=p["ranks"],
        timeout=p["timeout"],
        sizes=p["sizes"],
        iters=p["iters"],
        warmup=p["warmup"],
        thresholds=p["thresholds"],
        candidates=p["candidates"],
        tune=p["tune"],
        policy=p["policy"],
        serving=p["serving"],
        boot_id=boot_id,
    )
    record = fabric_check.run(request, check_mode=module.check_mode)
    return dict(changed=bool(record.get("ran")), fabric=record)


if __name__ == "__main__":
    main()
