"""The build pipeline's plan, keys, verification and detached builds, with the real nvcc 13.0.1."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from build_pipeline import (
    BuildError,
    BuildSpecError,
    attached,
    cached,
    derive_jobs,
    plan,
    start,
    verify_wheel,
    wait,
    work_dir,
)
from conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "sm120-probe"
CONTEXT = {"cuda_version": "13.0.1", "nvcc_build": "V13.0.88", "cuda_home": "/usr/local/cuda-13.0", "arch": "12.0"}


def probe(name: str, depends_on: tuple[str, ...] = (), **env: str) -> dict[str, Any]:
    requires = " ".join(f"--requires {d}" for d in depends_on)
    return {
        "name": name,
        "source": {"path": str(FIXTURE)},
        "depends_on": list(depends_on),
        "env": dict(env),
        "build": f'python3 build_wheel.py --name {name} --version 1.0 --out "$WHEEL_DIR" {requires}',
        "verify": {"cuda_arch": "12.0", "cudart": "13", "device_code": "required"},
        "timeout_minutes": 5,
    }


def keys(specs: list[dict[str, Any]]) -> dict[str, str]:
    return {p.name: p.key for p in plan(specs, CONTEXT)}


# ---------------------------------------------------------------- plan


def test_plan_orders_by_dependency_and_keys_propagate() -> None:
    specs = [probe("dependent", ("base",)), probe("base"), probe("solo")]
    planned = plan(specs, CONTEXT)
    assert [p.name for p in planned].index("base") < [p.name for p in planned].index("dependent")
    before = keys(specs)
    changed = copy.deepcopy(specs)
    changed[1]["env"] = {"PROBE_SCALE": "3.0f"}
    after = keys(changed)
    assert after["base"] != before["base"] and after["dependent"] != before["dependent"]
    assert after["solo"] == before["solo"]
    assert keys(specs) == before  # deterministic


def test_context_change_changes_every_key() -> None:
    specs = [probe("base"), probe("solo")]
    other = {p.name: p.key for p in plan(specs, {**CONTEXT, "cuda_version": "13.0.2"})}
    assert all(other[n] != k for n, k in keys(specs).items())


def test_controller_source_content_is_in_the_key(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.cu").write_text("// one\n")
    spec = {**probe("x"), "source": {"path": str(src)}}
    first = keys([spec])["x"]
    (src / "a.cu").write_text("// two\n")
    assert keys([spec])["x"] != first


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.update(colour="red"), "build spec 'x': unknown field colour"),
        (lambda s: s.pop("source"), "build spec 'x': `source` is missing"),
        (lambda s: s.update(source={"git": "https://example.invalid/x.git"}), "build spec 'x': a git source needs `ref`"),
        (lambda s: s.update(source={"wheel": "x==1", "path": "/tmp"}), "needs exactly one of"),
        (lambda s: s.update(depends_on=["nothing"]), "depends_on 'nothing', which no spec defines"),
        (lambda s: s.update(verify={"device_code": "maybe"}), "verify.device_code must be one of"),
        (lambda s: s.pop("build"), "needs a `build` script"),
    ],
    ids=["unknown-field", "no-source", "git-without-ref", "two-sources", "unknown-dep", "bad-verify", "no-build"],
)
def test_bad_specs_fail_naming_the_artifact(mutate: Any, message: str) -> None:
    spec = probe("x")
    mutate(spec)
    with pytest.raises(BuildSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan([spec], CONTEXT)


def test_cycles_are_named() -> None:
    with pytest.raises(BuildSpecError, match="dependency cycle: a -> b -> a"):
        plan([probe("a", ("b",)), probe("b", ("a",))], CONTEXT)


def test_jobs_follow_cores_and_memory() -> None:
    assert derive_jobs(64, 512, 8) == 64
    assert derive_jobs(64, 128, 8) == 16
    assert derive_jobs(4, 2, 8) == 1
    assert derive_jobs(64, 512, 8, cap=24) == 24


# ---------------------------------------------------------------- verification on real nvcc output


def build_probe(cuda_home: Path, out: Path, name: str = "probe", **env: str) -> Path:
    run_env = {**os.environ, "CUDA_HOME": str(cuda_home), **env}
    subprocess.run(
        ["python3", str(FIXTURE / "build_wheel.py"), "--name", name, "--version", "1.0", "--out", str(out)],
        check=True,
        env=run_env,
        capture_output=True,
    )
    return next(out.glob(f"{name}-*.whl"))


def test_sm120_wheel_passes_with_both_witnesses(cuda_home: Path, cuobjdump: Path, tmp_path: Path) -> None:
    wheel = build_probe(cuda_home, tmp_path)
    rules = {"cuda_arch": "12.0", "cudart": "13", "device_code": "required"}
    builtin = verify_wheel(wheel, rules)
    witnessed = verify_wheel(wheel, rules, str(cuobjdump))
    assert (
        builtin["shared_objects"]
        == witnessed["shared_objects"]
        == [{"path": "probe/libprobe.so", "targets": ["sm_120"], "cudart": ["13"], "rule": "must carry the target"}]
    )
    assert "cuobjdump" in witnessed["witness"]


def test_wheel_without_sm120_is_rejected(cuda_home: Path, cuobjdump: Path, tmp_path: Path) -> None:
    wheel = build_probe(cuda_home, tmp_path, PROBE_ARCH="90")
    with pytest.raises(BuildError, match=r"probe/libprobe\.so: expected sm_120 or sm_120a or sm_120f, found sm_90"):
        verify_wheel(wheel, {"cuda_arch": "12.0", "device_code": "required"}, str(cuobjdump))


def test_ptx_only_where_configured(cuda_home: Path, tmp_path: Path) -> None:
    wheel = build_probe(cuda_home, tmp_path, PROBE_PTX="1", PROBE_ARCH="120")
    found = verify_wheel(wheel, {"cuda_arch": "12.0", "device_code": "required", "ptx_ok": True})
    assert "compute_120" in found["shared_objects"][0]["targets"]


def test_wrong_cuda_runtime_is_rejected(cuda_home: Path, tmp_path: Path) -> None:
    wheel = build_probe(cuda_home, tmp_path)
    with pytest.raises(BuildError, match=r"links libcudart.so.13, expected libcudart.so.12"):
        verify_wheel(wheel, {"cuda_arch": "12.0", "cudart": "12", "device_code": "required"})


def test_pure_python_wheel_with_required_device_code_is_rejected(tmp_path: Path) -> None:
    wheel = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache")) / "sglang" / "sglang-0.5.9-py3-none-any.whl"
    with pytest.raises(BuildError, match="no shared object with GPU code"):
        verify_wheel(wheel, {"cuda_arch": "12.0", "device_code": "required"})
    assert verify_wheel(wheel, {"device_code": "none"})["shared_objects"] == []


# ---------------------------------------------------------------- detached builds on this machine


def run_build(item: dict[str, Any], root: Path, cuda_home: Path, dep_dirs: dict[str, str] | None = None) -> dict[str, Any]:
    started = start(item, str(root), str(FIXTURE), "python3", dep_dirs or {}, 1, str(cuda_home))
    if started["status"] == "cached":
        return {"status": "cached", "artifact": started["artifact"]}
    while True:
        result = wait(item, str(root), 5)
        if result["done"]:
            return result


def test_build_caches_verified_wheels_and_reuses_them(cuda_home: Path, tmp_path: Path) -> None:
    item = plan([probe("base")], CONTEXT)[0].to_dict()
    first = run_build(item, tmp_path, cuda_home)
    assert first["status"] == "built"
    assert first["artifact"]["wheels"][0]["shared_objects"][0]["targets"] == ["sm_120"]
    assert not work_dir(tmp_path, "base", item["key"]).exists()
    again = run_build(item, tmp_path, cuda_home)
    assert again["status"] == "cached" and again["artifact"] == first["artifact"]


def test_dependent_build_sees_its_dependency(cuda_home: Path, tmp_path: Path) -> None:
    planned = [p.to_dict() for p in plan([probe("base"), probe("dependent", ("base",))], CONTEXT)]
    base = run_build(planned[0], tmp_path, cuda_home)
    dep_dir = str(tmp_path / "wheelhouse" / "base" / planned[0]["key"])
    result = run_build(planned[1], tmp_path, cuda_home, {"base": dep_dir})
    assert result["status"] == "built" and base["status"] == "built"
    log = Path(result["artifact"]["log"]).read_text()
    assert "built" in log


def test_failed_build_caches_nothing_and_reports_the_log(cuda_home: Path, tmp_path: Path) -> None:
    item = plan([probe("broken", PROBE_FAIL="1")], CONTEXT)[0].to_dict()
    with pytest.raises(BuildError, match=r"(?s)broken: build failed with exit status 1.*PROBE_FAIL=1: failing on purpose"):
        run_build(item, tmp_path, cuda_home)
    assert cached(tmp_path, "broken", item["key"]) is None
    assert not work_dir(tmp_path, "broken", item["key"]).exists()
    assert not (tmp_path / "wheelhouse" / "broken" / item["key"]).exists()


def test_interrupted_build_caches_nothing(cuda_home: Path, tmp_path: Path) -> None:
    spec = probe("slow")
    spec["build"] = "sleep 30"
    item = plan([spec], CONTEXT)[0].to_dict()
    started = start(item, str(tmp_path), str(FIXTURE), "python3", {}, 1, str(cuda_home))
    assert started["status"] == "started"
    job = json.loads((work_dir(tmp_path, "slow", item["key"]) / "job.json").read_text())
    progress = wait(item, str(tmp_path), 0.5)
    assert progress["done"] is False and progress["log"].endswith(".log")
    os.killpg(job["pid"], signal.SIGKILL)
    time.sleep(0.5)
    with pytest.raises(BuildError, match="interrupted"):
        wait(item, str(tmp_path), 5)
    assert cached(tmp_path, "slow", item["key"]) is None and not work_dir(tmp_path, "slow", item["key"]).exists()


# ---------------------------------------------------------------- re-attaching after the controller died


def test_second_run_reattaches_to_the_running_build_and_waits_for_it(cuda_home: Path, tmp_path: Path) -> None:
    spec = probe("long")
    spec["build"] = "sleep 3\n" + spec["build"]
    item = plan([spec], CONTEXT)[0].to_dict()
    first = start(item, str(tmp_path), str(FIXTURE), "python3", {}, 1, str(cuda_home))
    assert first["status"] == "started"
    # the first controller polls a while, then dies: nothing more from it
    assert wait(item, str(tmp_path), 0.2)["done"] is False
    job = json.loads((work_dir(tmp_path, "long", item["key"]) / "job.json").read_text())
    again = start(item, str(tmp_path), str(FIXTURE), "python3", {}, 1, str(cuda_home))
    assert again["status"] == "running" and again["reattached"] and again["pid"] == first["pid"] == job["pid"]
    assert json.loads((work_dir(tmp_path, "long", item["key"]) / "job.json").read_text()) == job  # no second build
    polls = 0
    while not (result := wait(item, str(tmp_path), 0.01))["done"]:
        polls += 1
    assert result["status"] == "built" and polls > 50  # many short polls, flat: no recursion anywhere
    assert start(item, str(tmp_path), str(FIXTURE), "python3", {}, 1, str(cuda_home))["status"] == "cached"


def test_build_that_ended_unwatched_is_verified_not_restarted(cuda_home: Path, tmp_path: Path) -> None:
    item = plan([probe("unwatched")], CONTEXT)[0].to_dict()
    first = start(item, str(tmp_path), str(FIXTURE), "python3", {}, 1, str(cuda_home))
    rc = work_dir(tmp_path, "unwatched", item["key"]) / "rc"
    deadline = time.monotonic() + 120
    while not rc.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    again = start(item, str(tmp_path), str(FIXTURE), "python3", {}, 1, str(cuda_home))
    assert again["status"] == "ended" and again["pid"] == first["pid"]
    result = wait(item, str(tmp_path), 5)
    assert result["status"] == "built" and result["artifact"]["wheels"][0]["shared_objects"][0]["targets"] == ["sm_120"]


def test_a_reused_pid_is_not_mistaken_for_the_build(cuda_home: Path, tmp_path: Path) -> None:
    item = plan([probe("stale")], CONTEXT)[0].to_dict()
    work = work_dir(tmp_path, "stale", item["key"])
    work.mkdir(parents=True)
    # a record left by a build whose process is gone; its pid now belongs to this test process
    job = {"pid": os.getpid(), "proc_start": 1, "started": time.time(), "log": str(tmp_path / "x.log"), "key": item["key"]}
    (work / "job.json").write_text(json.dumps({**job, "timeout_minutes": 5}))
    assert attached(tmp_path, "stale", item["key"]) is None
    started = start(item, str(tmp_path), str(FIXTURE), "python3", {}, 1, str(cuda_home))
    assert started["status"] == "started" and started["pid"] != os.getpid()
    assert wait(item, str(tmp_path), 60)["status"] == "built"
