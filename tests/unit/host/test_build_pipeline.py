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

from conftest import ROOT
from sglang_sm120.build.pipeline import (
    BuildError,
    BuildSpecError,
    Workspace,
    attached,
    build_script,
    cached,
    dependency_install,
    derive_jobs,
    plan,
    start,
    survey,
    verify_wheel,
    wait,
    work_dir,
)

FIXTURE = ROOT / "tests" / "fixtures" / "sm120-probe"
CACHE_DIR = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache"))
CONTEXT = {"cuda_version": "13.0.1", "nvcc_build": "V13.0.88", "cuda_home": "/usr/local/cuda-13.0", "arch": "12.0"}


def probe(name: str, depends_on: tuple[str, ...] = (), **env: str) -> dict[str, Any]:
    requires = " ".join(f"--requires {d}" for d in depends_on)
    return {
        "name": name,
        "source": {"path": str(FIXTURE)},
        "depends_on": list(depends_on),
        "env": dict(env),
        "build": f'python3 build_wheel.py --name {name} --version "1.0+$SGLANG_LOCAL_VERSION" --out "$WHEEL_DIR" {requires}',
        "build_requires": [],
        "local_version": "cu130",
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
        (lambda s: s.update(index=""), "`index` must be a requirement, found ''"),
        (lambda s: s.update(optional="yes"), "`optional` must be true or false, found 'yes'"),
        # build requirements, local versions, pins, prebuilt: the message names the spec and the field
        (lambda s: s.pop("build_requires"), "build spec 'x': a path source must declare `build_requires`"),
        (lambda s: s.update(build_requires="cmake"), "build spec 'x': `build_requires` must be a list of non-empty strings"),
        (lambda s: s.update(local_version="+cu130"), "build spec 'x': `local_version` must be a local version label like cu130"),
        (lambda s: s.update(pins=["triton>=3"]), "build spec 'x': `pins` entries look like triton==3.5.1"),
        (lambda s: s.update(prebuilt={"url": "https://x/y.whl", "wheel": "y==1"}), "build spec 'x': `prebuilt` needs exactly one of"),
        (lambda s: s.update(prebuilt={"url": "https://x/y.whl", "mirror": "z"}), "build spec 'x': unknown prebuilt field mirror"),
        (
            lambda s: s.update(prebuilt={"url": "https://x/y.whl", "sha256": "abc"}),
            "build spec 'x': prebuilt `sha256` must be 64 hex digits",
        ),
        (lambda s: s.update(buildrequires=[]), "build spec 'x': unknown field buildrequires"),
    ],
    ids=[
        "unknown-field",
        "no-source",
        "git-without-ref",
        "two-sources",
        "unknown-dep",
        "bad-verify",
        "no-build",
        "empty-index",
        "optional-not-bool",
        "no-build-requires",
        "build-requires-not-list",
        "bad-local-version",
        "loose-pin",
        "two-prebuilt",
        "unknown-prebuilt",
        "bad-sha",
        "unknown-field-buildrequires",
    ],
)
def test_bad_specs_fail_naming_the_artifact(mutate: Any, message: str) -> None:
    spec = probe("x")
    mutate(spec)
    with pytest.raises(BuildSpecError, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
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
    started = start(item, Workspace(str(root), "python3", str(cuda_home), 1, dep_dirs or {}, staged=str(FIXTURE)))
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


def test_survey_reads_the_whole_plan_once_and_finds_what_changed(cuda_home: Path, tmp_path: Path) -> None:
    planned = [p.to_dict() for p in plan([probe("base"), probe("solo")], CONTEXT)]
    root = tmp_path / "build"
    looked = survey(root, planned, create=False)
    assert looked["missing"] == ["base", "solo"] and looked["artifacts"] == {} and len(looked["created"]) == 4
    assert not root.exists(), "check mode makes nothing"
    assert survey(root, planned)["created"] and sorted(p.name for p in root.iterdir()) == ["logs", "src", "wheelhouse", "work"]
    built = run_build(planned[0], root, cuda_home)
    looked = survey(root, planned)
    assert looked == {"created": [], "artifacts": {"base": built["artifact"]}, "missing": ["solo"]}
    wheel = root / "wheelhouse" / "base" / planned[0]["key"] / built["artifact"]["wheels"][0]["wheel"]
    wheel.write_bytes(wheel.read_bytes() + b"tampered")
    assert survey(root, planned)["missing"] == ["base", "solo"], "a cached wheel whose sha256 changed is not cached"


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
    started = start(item, Workspace(str(tmp_path), "python3", str(cuda_home), staged=str(FIXTURE)))
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
    first = start(item, Workspace(str(tmp_path), "python3", str(cuda_home), staged=str(FIXTURE)))
    assert first["status"] == "started"
    # the first controller polls a while, then dies: nothing more from it
    assert wait(item, str(tmp_path), 0.2)["done"] is False
    job = json.loads((work_dir(tmp_path, "long", item["key"]) / "job.json").read_text())
    again = start(item, Workspace(str(tmp_path), "python3", str(cuda_home), staged=str(FIXTURE)))
    assert again["status"] == "running" and again["reattached"] and again["pid"] == first["pid"] == job["pid"]
    assert json.loads((work_dir(tmp_path, "long", item["key"]) / "job.json").read_text()) == job  # no second build
    polls = 0
    while not (result := wait(item, str(tmp_path), 0.01))["done"]:
        polls += 1
    assert result["status"] == "built" and polls > 50  # many short polls, flat: no recursion anywhere
    assert start(item, Workspace(str(tmp_path), "python3", str(cuda_home), staged=str(FIXTURE)))["status"] == "cached"


# ---------------------------------------------------------------- polling: sub-second waits, a flat loop bounded by the timeout

WAIT_TASKS = ROOT / "roles" / "sglang_build" / "tasks" / "wait.yml"
ARGUMENT_SPECS = ROOT / "roles" / "sglang_build" / "meta" / "argument_specs.yml"


@pytest.mark.parametrize("poll", [0.01, 0.1, 0.25, 5, 30])
def test_poll_loop_outlasts_a_12_hour_build_at_any_poll_interval(poll: float) -> None:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    loader = DataLoader()
    task = loader.load_from_file(str(WAIT_TASKS))[0]
    item = {"name": "torch", "spec": {"timeout_minutes": 720}}
    templar = Templar(loader=loader, variables={"sglang_build_poll_seconds": poll, "sglang_build_item": item})
    each = float(templar.template(trust_as_template(task["sm120.sglang.sglang_build"]["wait_seconds"])))
    retries = int(templar.template(trust_as_template(task["retries"])))
    assert each == max(poll, 0.1)  # sub-second waits pass through; 0.1 s is the floor
    assert retries * each >= 720 * 60  # each poll blocks at least `each`, so the loop outlasts the build's own timeout
    assert task["delay"] == 0 and "until" in task and "include_tasks" not in WAIT_TASKS.read_text()  # flat, no recursion


def test_poll_seconds_may_be_a_fraction() -> None:
    import yaml
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    option = yaml.safe_load(ARGUMENT_SPECS.read_text())["argument_specs"]["main"]["options"]["sglang_build_poll_seconds"]
    result = ArgumentSpecValidator({"sglang_build_poll_seconds": {"type": option["type"]}}).validate({"sglang_build_poll_seconds": 0.1})
    assert result.error_messages == [] and result.validated_parameters["sglang_build_poll_seconds"] == 0.1


def test_a_sub_second_poll_returns_after_about_its_wait(cuda_home: Path, tmp_path: Path) -> None:
    spec = probe("polled")
    spec["build"] = "sleep 30"
    item = plan([spec], CONTEXT)[0].to_dict()
    assert start(item, Workspace(str(tmp_path), "python3", str(cuda_home), staged=str(FIXTURE)))["status"] == "started"
    job = json.loads((work_dir(tmp_path, "polled", item["key"]) / "job.json").read_text())
    try:
        took = []
        for _ in range(5):
            began = time.monotonic()
            assert wait(item, str(tmp_path), 0.1)["done"] is False
            took.append(time.monotonic() - began)
        assert min(took) >= 0.1 and min(took) < 0.9, took  # not rounded up to a whole second (then every wait would take 1 s)
    finally:
        os.killpg(job["pid"], signal.SIGKILL)


def test_build_that_ended_unwatched_is_verified_not_restarted(cuda_home: Path, tmp_path: Path) -> None:
    item = plan([probe("unwatched")], CONTEXT)[0].to_dict()
    first = start(item, Workspace(str(tmp_path), "python3", str(cuda_home), staged=str(FIXTURE)))
    rc = work_dir(tmp_path, "unwatched", item["key"]) / "rc"
    deadline = time.monotonic() + 120
    while not rc.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    again = start(item, Workspace(str(tmp_path), "python3", str(cuda_home), staged=str(FIXTURE)))
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
    started = start(item, Workspace(str(tmp_path), "python3", str(cuda_home), staged=str(FIXTURE)))
    assert started["status"] == "started" and started["pid"] != os.getpid()
    assert wait(item, str(tmp_path), 60)["status"] == "built"


# ---------------------------------------------------------------- build requirements, dependency installs, local versions, prebuilt


def test_prebuilt_wheels_cannot_declare_build_requires_or_prebuilt() -> None:
    wheel = {"name": "w", "source": {"wheel": "w==1"}, "verify": {"device_code": "none"}}
    with pytest.raises(BuildSpecError, match="build spec 'w': a wheel source is a prebuilt wheel: remove `build_requires`"):
        plan([{**wheel, "build_requires": []}], CONTEXT)
    with pytest.raises(BuildSpecError, match="build spec 'w': `prebuilt` needs a source to fall back to"):
        plan([{**wheel, "prebuilt": {"url": "https://x/w.whl"}}], CONTEXT)


def fake_dep(root: Path, name: str, version: str, pins: list[str]) -> str:
    directory = root / "wheelhouse" / name / ("k" * 64)
    directory.mkdir(parents=True)
    wheel = f"{name}-{version}-cp311-cp311-linux_x86_64.whl"
    (directory / wheel).write_bytes(b"")
    record = {"name": name, "package": name, "kind": "git", "wheels": [{"wheel": wheel}], "pins": pins, "installs": [wheel]}
    (directory / "artifact.json").write_text(json.dumps(record))
    return str(directory)


def test_dependency_install_takes_the_files_then_resolves_their_requirements(tmp_path: Path) -> None:
    """torch's own requirements (sympy, ..., triton) are resolved in a second pass, pinned; the files come first, offline."""
    torch_dir = fake_dep(tmp_path, "torch", "2.9.1+cu130", ["triton==3.5.1"])
    spec = {**probe("sgl_kernel", ("torch",)), "build_requires": ["scikit-build-core>=0.10", "cmake>=3.26", "ninja"]}
    specs = [{**probe("torch"), "pins": ["triton==3.5.1"]}, spec]
    item = next(p for p in plan(specs, CONTEXT) if p.name == "sgl_kernel").to_dict()
    place = Workspace(
        str(tmp_path), "python3", "/cuda", 4, {"torch": torch_dir}, ["--index-url", "https://pypi.example/simple"], str(FIXTURE)
    )
    script = build_script(item, place)
    lines = script.splitlines()
    wheel = f"{torch_dir}/torch-2.9.1+cu130-cp311-cp311-linux_x86_64.whl"
    constraints = str(work_dir(tmp_path, "sgl_kernel", item["key"]) / "constraints.txt")
    first = lines.index(f"venv/bin/pip install --quiet --no-index --no-deps {wheel}")
    second = lines.index(
        f"venv/bin/pip install --quiet --index-url https://pypi.example/simple --find-links {torch_dir} -c {constraints} {wheel}"
    )
    assert "--no-deps" not in lines[second] and "--no-index" not in lines[second]
    assert lines[second + 1] == "venv/bin/pip check"
    requires = next(i for i, line in enumerate(lines) if "scikit-build-core" in line)
    assert first < second < requires < lines.index("cd src")
    assert f"-c {constraints}" in lines[requires]
    assert f"printf '%s\\n' 'torch==2.9.1+cu130\ntriton==3.5.1' > {constraints}" in script
    assert "export SGLANG_LOCAL_VERSION=cu130" in lines


def test_dependency_requirements_really_resolve_in_a_venv(tmp_path: Path) -> None:
    """A dependency wheel that requires another distribution gets it, from the wheelhouse, in the second pass."""
    pypkg = tmp_path / "wh"
    pypkg.mkdir()
    req = tiny_wheel(pypkg, "needed", "2.0")
    main = tiny_wheel(pypkg, "torchlike", "1.0+cu130", requires=["needed==2.0"])
    venv = tmp_path / "venv"
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    constraints = tmp_path / "c.txt"
    constraints.write_text("")
    d = tmp_path / "dep"
    d.mkdir()
    (d / main.name).write_bytes(main.read_bytes())
    (d / req.name).write_bytes(req.read_bytes())
    (d / "artifact.json").write_text(json.dumps({"kind": "git", "wheels": [{"wheel": main.name}], "installs": [main.name]}))
    for command in dependency_install(f"{venv}/bin/pip", {"torchlike": str(d)}, ["--no-index"], str(constraints)):
        subprocess.run(command, shell=True, check=True, capture_output=True)
    listed = subprocess.run([f"{venv}/bin/pip", "list", "--format=json"], check=True, capture_output=True, text=True).stdout
    versions = {p["name"]: p["version"] for p in json.loads(listed)}
    assert versions["torchlike"] == "1.0+cu130" and versions["needed"] == "2.0"


def tiny_wheel(out: Path, name: str, version: str, requires: tuple[str, ...] | list[str] = (), payload: bytes = b"X = 1\n") -> Path:
    """A minimal pure-Python wheel (for installs into temporary venvs)."""
    import base64
    import hashlib
    import zipfile

    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": payload,
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
        ).encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n" for n, d in files.items()
    )
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    wheel = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for n, d in files.items():
            archive.writestr(n, d)
    return wheel


def test_local_version_is_checked_after_the_build(cuda_home: Path, tmp_path: Path) -> None:
    spec = probe("plain")
    spec["build"] = 'python3 build_wheel.py --name plain --version 1.0 --out "$WHEEL_DIR"'  # forgets the label
    item = plan([spec], CONTEXT)[0].to_dict()
    with pytest.raises(
        BuildError,
        match=r"plain: local_version 'cu130': expected every wheel's version to end with \+cu130; "
        r"plain-1\.0-py3-none-linux_x86_64\.whl has version 1\.0; nothing cached",
    ):
        run_build(item, tmp_path, cuda_home)
    assert cached(tmp_path, "plain", item["key"]) is None
    labelled = run_build(plan([probe("plain")], CONTEXT)[0].to_dict(), tmp_path, cuda_home)
    assert labelled["artifact"]["wheels"][0]["wheel"] == "plain-1.0+cu130-py3-none-linux_x86_64.whl"
    assert labelled["artifact"]["origin"] == "built" and labelled["artifact"]["installs"] == ["plain-1.0+cu130-py3-none-linux_x86_64.whl"]


def test_a_verified_prebuilt_wheel_is_used(cuda_home: Path, tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    build_probe(cuda_home, shelf, name="pre")
    good = next(shelf.glob("pre-*.whl"))
    labelled = shelf / "pre-1.0+cu130-py3-none-linux_x86_64.whl"
    good.rename(labelled)
    spec = {**probe("pre"), "prebuilt": {"wheelhouse": str(shelf), "pattern": "pre-1.0+cu130-*.whl"}}
    item = plan([spec], CONTEXT)[0].to_dict()
    assert item["prebuilt_files"] == [str(labelled)]
    started = start(item, Workspace(str(tmp_path / "root"), "python3", str(cuda_home), staged=str(FIXTURE), prebuilt_staged=str(shelf)))
    assert started["phase"] == "prebuilt"
    while not (result := wait(item, str(tmp_path / "root"), 5))["done"]:
        pass
    assert result["artifact"]["origin"] == "prebuilt" and "prebuilt_rejected" not in result["artifact"]


def test_a_prebuilt_wheel_that_fails_verification_falls_back_to_the_source_build(cuda_home: Path, tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    wrong = build_probe(cuda_home, shelf, name="fb", PROBE_ARCH="90")  # sm_90 only: must not be used
    labelled = shelf / "fb-1.0+cu130-py3-none-linux_x86_64.whl"
    wrong.rename(labelled)
    spec = {**probe("fb"), "prebuilt": {"wheelhouse": str(shelf), "pattern": "fb-*.whl"}}
    item = plan([spec], CONTEXT)[0].to_dict()
    start(item, Workspace(str(tmp_path / "root"), "python3", str(cuda_home), staged=str(FIXTURE), prebuilt_staged=str(shelf)))
    while not (result := wait(item, str(tmp_path / "root"), 5))["done"]:
        pass
    record = result["artifact"]
    assert record["origin"] == "built"
    assert "prebuilt wheel not used" in record["prebuilt_rejected"] and "found sm_90" in record["prebuilt_rejected"]
    assert record["wheels"][0]["shared_objects"][0]["targets"] == ["sm_120"]
    assert "building from source instead" in Path(record["log"]).read_text()


def test_a_missing_prebuilt_wheel_falls_back_to_the_source_build(cuda_home: Path, tmp_path: Path) -> None:
    spec = {**probe("none"), "prebuilt": {"wheelhouse": str(tmp_path / "empty"), "pattern": "none-*.whl"}}
    item = plan([spec], CONTEXT)[0].to_dict()
    assert item["prebuilt_files"] == []
    start(item, Workspace(str(tmp_path / "root"), "python3", str(cuda_home), staged=str(FIXTURE)))
    while not (result := wait(item, str(tmp_path / "root"), 5))["done"]:
        pass
    assert result["artifact"]["origin"] == "built" and "exit status 3" in result["artifact"]["prebuilt_rejected"]


def test_production_specs_declare_what_the_real_sources_need(specs: list[dict[str, Any]]) -> None:
    """The production specs as Ansible renders them (conftest's `specs`)."""
    by_name = {p.name: p.spec for p in plan(specs, CONTEXT)}
    for name in ("torch", "flashinfer", "flashinfer_jit_cache", "sgl_kernel"):
        assert by_name[name]["local_version"] == "cu130" and by_name[name]["build_requires"], name
        assert "--no-build-isolation" not in by_name[name]["build"], name
    assert by_name["torch"]["pins"] == ["triton==3.5.1"]
    assert "triton==3.5.1" in by_name["torch"]["env"]["PYTORCH_EXTRA_INSTALL_REQUIREMENTS"]
    assert {"scikit-build-core>=0.10", "ninja"} <= set(by_name["sgl_kernel"]["build_requires"])
    assert any(r.startswith("cmake") for r in by_name["sgl_kernel"]["build_requires"])
    assert "SGL_KERNEL_COMPILE_THREADS" not in by_name["sgl_kernel"]["env"]
    assert "-DSGL_KERNEL_COMPILE_THREADS=" in by_name["sgl_kernel"]["env"]["CMAKE_ARGS"]
    assert "-DENABLE_BELOW_SM90=OFF" in by_name["sgl_kernel"]["env"]["CMAKE_ARGS"]
    assert by_name["sgl_kernel"]["jobs_env"] == ["CMAKE_BUILD_PARALLEL_LEVEL"]
    jit = by_name["flashinfer_jit_cache"]
    assert jit["env"] == {"FLASHINFER_CUDA_ARCH_LIST": "12.0f", "FLASHINFER_LOCAL_VERSION": "cu130"}
    assert any(r.startswith("nvidia-nvshmem-cu13") for r in jit["build_requires"])
    assert "NVSHMEM_INCLUDE_PATH" in jit["build"] and "NVSHMEM_LIBRARY_PATH" in jit["build"]
    assert "python -m build --wheel" in jit["build"]
    for name in ("torch", "flashinfer_jit_cache", "sgl_kernel", "torchvision", "torchaudio"):
        assert "wheelhouse" in by_name[name]["prebuilt"], name  # the controller's vetted wheels, else source
    # the CUDA-linked companions (0.5.9): built against our torch for CUDA 13, sglang installs after them
    for name in ("torchvision", "torchaudio", "torch_memory_saver"):
        assert by_name[name]["local_version"] == "cu130" and by_name[name]["verify"]["cudart"] == "13", name
    assert by_name["torchvision"]["env"]["BUILD_VERSION"] == "0.24.1+cu130" and by_name["torchvision"]["env"]["PYTORCH_VERSION"] == "2.9.1"
    assert by_name["torchaudio"]["env"]["BUILD_VERSION"] == "2.9.1+cu130"
    assert by_name["torch_memory_saver"]["source"]["ref"] == "0f3d6edec6613408365b4f4a379a2a2886095393"
    assert {"torchvision", "torchaudio", "torch_memory_saver"} <= set(by_name["sglang"]["depends_on"])


def test_pypi_sgl_kernel_is_refused_by_the_local_version_label() -> None:
    """PyPI's sgl-kernel 0.3.21 (CUDA 12.9, manylinux) cannot pass for our +cu130 build."""
    from sglang_sm120.build.pipeline import check_local_version

    real = CACHE_DIR / "real-wheels" / "sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl"
    with pytest.raises(BuildError, match=r"sgl_kernel-0\.3\.21-cp310-abi3-manylinux2014_x86_64\.whl has version 0\.3\.21"):
        check_local_version([real], "cu130")
    check_local_version([Path("sgl_kernel-0.3.21+cu130-cp310-abi3-linux_x86_64.whl")], "cu130")
