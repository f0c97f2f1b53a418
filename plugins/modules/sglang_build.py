#!/usr/bin/python
"""Ansible module: start or wait for one artifact's detached build, verify it, cache it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_build
short_description: Build one artifact of the SM120 build pipeline into the host wheelhouse
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/build/pipeline.py.
  - C(state=cached) looks once at the build root for the whole plan (O(items)) - it makes the root's
    directories when missing (the only change it makes, never in check mode) and returns the
    cached record of every item whose verified build is there, and the names of the others; with
    O(source_packages), also the Debian packages the others' source builds need that dpkg lacks.
  - C(state=reach), before any build starts, probes every place the O(missing) items' builds fetch from, the
    way the build fetches it and with the host's own configuration (plugins/module_utils/sglang_sm120/build/reach.py) -
    a git source by C(git ls-remote) of its ref, a requirement by C(pip index versions) against its index, a
    prebuilt URL by HTTP HEAD. It fails, naming each artifact none of whose places answers, before anything is
    built; a source fallback that does not answer beside a prebuilt that does is a warning. Reads only.
  - C(state=started) starts the build detached (its own session) unless a verified build of the
    same key is cached (changed=false) or a build of it exists already. It re-attaches to a build
    a previous run left behind (recorded in work/<name>-<key12>/job.json by pid, process start
    time and boot id), as C(running) when it still runs, C(ended) when it ended unverified; only a
    build that is gone without an exit status is started again.
  - A spec with C(prebuilt) first fetches the prebuilt wheel; it is cached only if it passes the same
    verification and carries the spec's C(local_version), else the source build starts (the record keeps why).
  - C(state=finished) waits up to O(wait_seconds) and returns progress (C(done=false)), or, once
    the build has ended, verifies every wheel and renames it into the cache. Call it from a flat
    C(until) loop. Verification requires that every shared object with GPU code carries cubins for the spec's
    C(cuda_arch) (12.0 accepts sm_120, sm_120a, sm_120f), except the C(other_arch_objects) the
    spec names with a reason, that every C(arch_objects) pattern matches an object that does, and
    the expected libcudart major. GPU code is read with cuobjdump (O(cuobjdump), else
    O(cuda_home)/bin/cuobjdump) or, without one, the built-in ELF/fatbin reader; the record names
    which. A failure removes the work directory and fails with the log's tail.
  - An item with a C(lock) (a C(wheel) source with its dependencies) downloads under the lock's pins, and before
    it is cached every wheel in the download must be one the lock allows (name, version, sha256), but for the
    distributions of the artifacts it depends on; a wheel that is not fails the build naming it, what the lock
    says, what was found and the lock file (plugins/module_utils/sglang_sm120/build/closure_lock.py).
options:
  item:
    description: One entry of sglang_build_plan's C(plan); required unless O(state=cached).
    type: dict
  items:
    description: Every entry of sglang_build_plan's C(plan), for O(state=cached).
    type: list
    elements: dict
    default: []
  root:
    description: Build root on the host (wheelhouse/, work/, logs/).
    type: path
    required: true
  state:
    description:
      - started, finished, cached (what of the whole plan is already built), or reach (can the host fetch what the
        O(missing) builds need).
    type: str
    choices: [started, finished, cached, reach]
    default: started
  missing:
    description: For O(state=reach), the names of the O(items) still to build (state=cached's RV(missing)).
    type: list
    elements: str
    default: []
  source_packages:
    description:
      - For O(state=cached), source kind (C(git), C(sdist), C(path)) -> the Debian packages a source build of that
        kind needs on the host (sglang_build_source_packages); RV(missing_packages) says which of those the missing
        items need and dpkg does not have.
    type: dict
    default: {}
  probe_timeout:
    description: For O(state=reach), seconds each probe may take.
    type: float
    default: 60
  estimate_hours:
    description: For O(state=cached), artifact name -> [low, high] hours of its source build (estimates, not measured).
    type: dict
    default: {}
  staged:
    description: Host directory holding the copied controller-side source (path and wheelhouse sources).
    type: path
  prebuilt_staged:
    description: Host directory holding the copied controller-side prebuilt wheels (prebuilt wheelhouse).
    type: path
  pip_args:
    description:
      - pip arguments for the installs into build venvs (the dependencies' own requirements and C(build_requires)),
        e.g. C(--index-url URL) or C(--no-index --find-links DIR) on an air-gapped host. Not part of the key.
    type: list
    elements: str
    default: []
  python:
    description: Python that creates the build venv.
    type: str
    default: python3
  dep_dirs:
    description: Package name -> cache directory of each dependency's wheels.
    type: dict
    default: {}
  jobs:
    description: Parallel compile jobs; 0 derives min(cores, memory / the spec's mem_per_job_gib).
    type: int
    default: 0
  max_jobs:
    description: Upper bound for derived jobs (0, none).
    type: int
    default: 0
  parallel:
    description:
      - For C(state=cached), the most builds RV(groups) may start at once (1, one after the other). Builds run together only if
        none depends on another still to build and the host affords them together (plugins/module_utils/sglang_sm120/build/parallel.py) -
        with O(jobs) > 0, their jobs add up to no more than the cores and their memory to no more than the host's; with O(jobs)=0
        each gets its derived share of cores and memory, at least O(parallel_min_jobs).
    type: int
    default: 1
  parallel_min_jobs:
    description: For C(state=cached) with O(jobs)=0, the fewest compile jobs a build may get to run beside another.
    type: int
    default: 4
  cuda_home:
    description: CUDA toolkit the build uses.
    type: path
    required: true
  cuobjdump:
    description: cuobjdump to read GPU targets with (default O(cuda_home)/bin/cuobjdump if it exists, else the built-in reader).
    type: path
  wait_seconds:
    description: How long C(finished) waits before returning progress.
    type: float
    default: 30
attributes:
  check_mode:
    description: Changes nothing, not even the start lock.
    support: partial
    details:
      - C(started) reports C(cached), C(running) or C(ended) as a real run would, and C(would-build) (changed) instead of starting a build.
      - C(finished) neither waits nor verifies; it returns C(done=true) and C(status=check-mode).
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.no_diff
  - sm120.sglang.sglang_sm120.lock_renewal
"""

EXAMPLES = r"""
- name: Start the torch build
  sglang_build:
    item: "{{ sglang_build_planned.plan[0] }}"
    root: /opt/sglang/build
    cuda_home: /usr/local/cuda-13.0
    jobs: 16
"""

RETURN = r"""
artifacts:
  description: For C(state=cached), the cache record of every item already built and verified, by name.
  type: dict
  returned: state=cached
  sample: {sglang: {key: 9b2f0c1d, package: sglang, wheels: [{wheel: sglang-0.5.9-py3-none-any.whl, sha256: 5e3a}]}}
missing:
  description: For C(state=cached), the names of the items not cached, in plan order (they are built next).
  type: list
  elements: str
  returned: state=cached
  sample: [flashinfer_python]
created:
  description: For C(state=cached), the build root's directories that were missing (made unless in check mode).
  type: list
  elements: str
  returned: state=cached
  sample: [/opt/sglang/build/wheelhouse]
groups:
  description:
    - For C(state=cached), the RV(missing) items as groups built one after the other, the builds of one group started together,
      with each build's compile jobs and why the group is so (together, or alone and why).
  type: list
  elements: dict
  returned: state=cached
  sample: [{names: [torch], jobs: {torch: 64}, why: "alone (nothing else to build is independent of it; 64 cores, 503 GiB; 64 jobs)"},
           {names: [flashinfer_jit_cache, sgl_kernel], jobs: {flashinfer_jit_cache: 32, sgl_kernel: 32},
            why: "together (independent of each other; 64 cores, 503 GiB; jobs: flashinfer_jit_cache 32, sgl_kernel 32)"}]
plan_lines:
  description: For C(state=cached), one line per missing item - where it comes from, and a source build's estimated hours.
  type: list
  elements: str
  returned: state=cached
  sample: ["torch: source build (git), 3-5 h (estimate)"]
estimate_hours:
  description: For C(state=cached), the sum of the missing source builds' estimates, [low, high].
  type: list
  elements: float
  returned: state=cached
  sample: [4.35, 7.7]
missing_packages:
  description: For C(state=cached), the O(source_packages) the missing items' source builds need that dpkg does not have installed.
  type: list
  elements: str
  returned: state=cached
  sample: [git, python3-dev]
needed_by:
  description: For C(state=cached), each of RV(missing_packages) -> the artifacts whose source build needs it.
  type: dict
  returned: state=cached
  sample: {git: [torch, sgl_kernel]}
reach:
  description:
    - For C(state=reach), per missing artifact, each place probed, how, and what it answered (C(ok) null where it
      could not be probed yet).
  type: list
  elements: dict
  returned: state=reach
  sample: [{name: torch, refused: false, probes: [{what: source, where: "https://github.com/pytorch/pytorch at v2.9.1",
            how: "/usr/bin/git ls-remote --exit-code https://github.com/pytorch/pytorch v2.9.1", ok: true, said: answers}]}]
unanswered_fallbacks:
  description: For C(state=reach), the source fallbacks that do not answer beside a prebuilt wheel that does.
  type: list
  elements: str
  returned: state=reach
  sample: []
cuobjdump:
  description: For C(state=cached), O(cuobjdump) when it exists on the host, else empty.
  type: str
  returned: state=cached
  sample: /usr/local/cuda-13.0/bin/cuobjdump
status:
  description:
    - cached, running, ended, started, would-build (check mode) for C(started);
      running, built, cached, check-mode (check mode) for C(finished).
  type: str
  returned: success
  sample: started
reattached:
  description: True when C(start) found the build a previous run started (running or ended) instead of starting one.
  type: bool
  returned: when a previous build was found
  sample: true
jobs:
  description: The parallel compile jobs used.
  type: int
  returned: when state is started
  sample: 16
log:
  description: The build log on the host.
  type: str
  returned: when a build was started, re-attached or is running
  sample: /opt/sglang/build/logs/torch-3f2a9c1d0e4b.log
pid:
  description: The process id of the detached build.
  type: int
  returned: when a build was started or re-attached
  sample: 48213
done:
  description: Whether the build has ended and was verified (C(finished)).
  type: bool
  returned: state=finished
  sample: false
elapsed:
  description: Seconds since the build started.
  type: int
  returned: when state is finished and the build still runs
  sample: 1845
last_line:
  description: The last line of the build log.
  type: str
  returned: when state is finished and the build still runs
  sample: "[1742/5120] Building CUDA object caffe2/CMakeFiles/torch_cuda.dir/..."
progress:
  description:
    - Where the running build stands, for the toolkit's stdout callback (plugins/callback/sglang_progress.py), which prints it
      at a steady interval instead of C(FAILED - RETRYING); plugins/module_utils/sglang_sm120/progress.py.
    - C(phase) is the job's phase (C(prebuilt) or C(source)) and the last C(== <time> <step>) marker of its log.
  type: dict
  returned: when state is finished and the build still runs
  sample: {what: "build of torch 3f2a9c1d0e4b", phase: "source: build", elapsed_s: 1845.0, timeout_s: 43200.0,
           last_log_line: "[1742/5120] Building CUDA object caffe2/CMakeFiles/torch_cuda.dir/..."}
  contains:
    what: {description: What runs., type: str, sample: build of torch 3f2a9c1d0e4b}
    phase: {description: Its phase., type: str, sample: "source: build"}
    elapsed_s: {description: Seconds since the build started., type: float, sample: 1845.0}
    timeout_s: {description: The spec's timeout_minutes in seconds (the build is stopped past it)., type: float, sample: 43200.0}
    last_log_line: {description: The last non-blank line of the build log., type: str, sample: "[1742/5120] Building CUDA object ..."}
artifact:
  description: The cache record (key, wheels with sha256 and verification evidence).
  type: dict
  returned: when done
  sample:
    name: torch
    package: torch
    key: 3f2a9c1d0e4b7a6f5e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f
    kind: source
    origin: built
    depends_on: []
    build_seconds: 5412
    log: /opt/sglang/build/logs/torch-3f2a9c1d0e4b.log
    finished: "2026-01-01T12:30:00Z"
    wheels: {torch-2.9.1+sm120-cp312-cp312-linux_x86_64.whl: {sha256: 9c1e0b7d4a3f2e6c5b8a7d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a}}
    local_version: sm120
    pins: []
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.build.parallel import Host, build_groups, build_plan_lines
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.build.pipeline import (
    Workspace,
    derive_jobs,
    find_cuobjdump,
    host_resources,
    start,
    survey,
    wait,
)
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.build.reach import check_reach, missing_packages, subprocess_runner
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.host.cuda_toolkit import dpkg_installed
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.progress import build_progress
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.release.lock import renew_while_polling

ARGUMENT_SPEC = dict(
    item=dict(type="dict"),
    items=dict(type="list", elements="dict", default=[]),
    root=dict(type="path", required=True),
    state=dict(type="str", choices=["started", "finished", "cached", "reach"], default="started"),
    missing=dict(type="list", elements="str", default=[]),
    source_packages=dict(type="dict", default={}),
    probe_timeout=dict(type="float", default=60),
    estimate_hours=dict(type="dict", default={}),
    staged=dict(type="path"),
    prebuilt_staged=dict(type="path"),
    pip_args=dict(type="list", elements="str", default=[]),
    python=dict(type="str", default="python3"),
    dep_dirs=dict(type="dict", default={}),
    jobs=dict(type="int", default=0),
    max_jobs=dict(type="int", default=0),
    parallel=dict(type="int", default=1),
    parallel_min_jobs=dict(type="int", default=4),
    cuda_home=dict(type="path", required=True),
    cuobjdump=dict(type="path"),
    wait_seconds=dict(type="float", default=30),
    lock_renewal=dict(type="dict", options=dict(path=dict(type="path", required=True), run_id=dict(type="str", required=True))),
)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "started", ("item",)), ("state", "finished", ("item",))],
        supports_check_mode=True,
    )
    run_module(module, lambda: build(module, module.params, module.check_mode))


def build(module: AnsibleModule, p: dict, check_mode: bool) -> dict:
    renew_while_polling(p["lock_renewal"], check_mode)  # each poll of a long build renews the deploy lock's heartbeat
    if p["state"] == "cached":
        result = survey(p["root"], p["items"], create=not check_mode)
        cuobjdump = p["cuobjdump"] if p["cuobjdump"] and os.path.exists(p["cuobjdump"]) else ""
        host = Host(*host_resources(), jobs=p["jobs"], max_jobs=p["max_jobs"], parallel=p["parallel"], min_jobs=p["parallel_min_jobs"])
        groups = [group.to_dict() for group in build_groups(p["items"], result["missing"], host)]
        wanted = {str(k): [str(n) for n in v] for k, v in p["source_packages"].items()}
        names = sorted({n for item in p["items"] if item["name"] in result["missing"] for v in wanted.values() for n in v})
        installed = dpkg_installed(module.run_command, module.get_bin_path("dpkg-query"), names)
        absent, needed_by = missing_packages(p["items"], result["missing"], wanted, installed)
        plan_lines, estimate = build_plan_lines(p["items"], result["missing"], p["estimate_hours"])
        return dict(
            changed=bool(result["created"]),
            cuobjdump=cuobjdump,
            groups=groups,
            missing_packages=absent,
            needed_by=needed_by,
            plan_lines=plan_lines,
            estimate_hours=estimate,
            **result,
        )
    if p["state"] == "reach":
        git = module.get_bin_path("git")
        runner = subprocess_runner(p["probe_timeout"])
        reach, fallbacks = check_reach(p["items"], p["missing"], p["python"], runner, git, p["probe_timeout"])
        return dict(changed=False, reach=[r.to_dict() for r in reach], unanswered_fallbacks=fallbacks)
    jobs = p["jobs"] or derive_jobs(*host_resources(), float(p["item"]["spec"].get("mem_per_job_gib", 4)), p["max_jobs"])
    if p["state"] == "started":
        place = Workspace(p["root"], p["python"], p["cuda_home"], jobs, p["dep_dirs"], p["pip_args"], p["staged"], p["prebuilt_staged"])
        result = start(p["item"], place, check=check_mode)
        result["jobs"] = jobs
        return result
    if check_mode:
        return dict(changed=False, done=True, status="check-mode")
    cuobjdump = p["cuobjdump"] or find_cuobjdump(p["cuda_home"])
    result = wait(p["item"], p["root"], p["wait_seconds"], cuobjdump)
    if not result["done"]:
        result["progress"] = build_progress(p["item"], result)
    return dict(changed=result["status"] == "built", **result)


if __name__ == "__main__":
    main()
