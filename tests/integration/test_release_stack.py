"""The stack follows the SGLang release: plugins/plugin_utils/sglang_sm120_controller/pinned_stack.py on the real wheels in
.cache/sglang (`make sglang-wheels`), and the production build specs rendered by real Ansible with the
lookup sglang_release_stack (plugins/lookup/). No network: pip is pointed at an empty
directory, so a wheel missing from the cache fails instead of being downloaded."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

import pytest

from conftest import CACHE, DATA, ROOT
from sglang_sm120.build.pipeline import plan
from sglang_sm120_controller.pinned_stack import ReleaseStackError, release_stack, stack_from_metadata, stack_from_wheel

WHEELS = CACHE / "sglang"
ANSIBLE = Path(sys.executable).parent / "ansible"
CONTEXT = {"cuda_version": "13.0.1", "nvcc_build": "V13.0.88", "cuda_home": "/usr/local/cuda-13.0", "arch": "12.0"}


def wheel_of(version: str) -> Path:
    found = sorted(WHEELS.glob(f"sglang-{version}-*.whl"))
    if not found:
        pytest.fail(f"no SGLang {version} wheel in {WHEELS}: run `make sglang-wheels` first")
    return found[0]


def pins_in_wheel(wheel: Path) -> dict[str, str]:
    """Read independently of release_stack: unconditional `name[extras]==version` Requires-Dist lines."""
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if re.fullmatch(r"sglang-[^/]+\.dist-info/METADATA", n)]
        headers = HeaderParser().parsestr(archive.read(meta).decode(), headersonly=True)
    pins = {"sglang": headers["Version"]}
    for line in headers.get_all("Requires-Dist"):
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^;\s]+)", line.strip())
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(3)
    return pins


def offline_env(cache: Path, tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "no-index"
    empty.mkdir(exist_ok=True)
    return {
        **os.environ,
        "SGLANG_TOOLKIT_CACHE": str(cache),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(empty),
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_NOCOLOR": "1",
    }


def render(tmp_path: Path, *extra: str, cache: Path = CACHE, inventory: Path = ROOT / "inventory/example-site") -> dict[str, Any]:
    """The build specs and the stack as Ansible renders them for the example site's host gpu-01 (the toolkit's defaults
    loaded by role toolkit_defaults, as every playbook loads them)."""
    expression = "{'specs': sglang_build_specs, 'release': stack_release, 'torch': stack_torch_version, 'triton': stack_triton_version}"
    playbook = tmp_path / "render.yml"
    playbook.write_text(
        "- hosts: gpu-01\n  gather_facts: false\n  roles:\n    - role: sm120.sglang.toolkit_defaults\n  tasks:\n"
        f"    - ansible.builtin.debug:\n        var: {json.dumps(expression)}\n"
    )
    done = subprocess.run(
        [str(ANSIBLE.parent / "ansible-playbook"), "-i", str(inventory), str(playbook)]
        # the specs as written: which index wheels the deploy takes instead is tests/integration/test_index_wheels.py
        + ["-e", "sglang_build_index_wheels=false"]
        + [arg for value in extra for arg in ("-e", value)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=offline_env(cache, tmp_path),
    )
    out = json.loads(done.stdout[done.stdout.index("{") :])
    result = out["plays"][0]["tasks"][0]["hosts"]["gpu-01"]
    if result.get("failed"):
        return {"error": result["msg"]}
    return result[next(k for k in result if k.startswith("{"))]


def by_name(specs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {spec["name"]: spec for spec in specs}


# ------------------------------------------------------------------ the parser, on the real wheels


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10", "0.5.23"])
def test_stack_is_the_wheels_own_pins(version: str) -> None:
    wheel = wheel_of(version)
    pins = pins_in_wheel(wheel)
    stack = stack_from_wheel(wheel)
    kernel = "sgl-kernel" if version == "0.5.9" else "sglang-kernel"  # renamed in 0.5.10
    exact = stack.pop("pins")
    assert stack == {
        "sglang": version,
        "torch": pins["torch"],
        "flashinfer": pins["flashinfer-python"],
        "kernel_package": kernel,
        "kernel_version": pins[kernel],
    }
    unconditional = {k: v for k, v in pins.items() if k != "sglang"}
    assert unconditional.items() <= exact.items(), {k: (v, exact.get(k)) for k, v in unconditional.items() if exact.get(k) != v}


def test_known_releases() -> None:
    companions = ("torchaudio", "torch-memory-saver", "torchao", "torchcodec", "torchvision")
    pins = stack_from_wheel(wheel_of("0.5.9")).pop("pins")
    # the CUDA-linked companions' exact pins (torchcodec's only on Linux x86_64; torchvision unpinned)
    assert {k: v for k, v in pins.items() if k in companions} == {
        "torchaudio": "2.9.1",
        "torch-memory-saver": "0.0.9",
        "torchao": "0.9.0",
        "torchcodec": "0.8.0",
    }
    assert "torch-memory-saver" not in stack_from_wheel(wheel_of("0.5.23"))["pins"]  # >=0.0.9.post1 there: no exact pin
    assert {k: v for k, v in stack_from_wheel(wheel_of("0.5.9")).items() if k != "pins"} == {
        "sglang": "0.5.9",
        "torch": "2.9.1",
        "flashinfer": "0.6.3",
        "kernel_package": "sgl-kernel",
        "kernel_version": "0.3.21",
    }
    assert {k: v for k, v in stack_from_wheel(wheel_of("0.5.23")).items() if k != "pins"} == {
        "sglang": "0.5.23",
        "torch": "2.14.1",
        "flashinfer": "0.7.2",  # pinned as flashinfer_python[cu13]==0.7.2
        "kernel_package": "sglang-kernel",
        "kernel_version": "0.4.10",
    }


def test_every_cached_release_has_a_stack() -> None:
    for line in (DATA / "sglang-wheels.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            version = line.split()[0]
            pins = pins_in_wheel(wheel_of(version))
            stack = stack_from_wheel(wheel_of(version))
            assert stack["torch"] == pins["torch"] and stack["kernel_version"] == pins[stack["kernel_package"]], version


def test_a_wheel_that_is_not_sglang(tmp_path: Path) -> None:
    real = CACHE / "real-wheels" / "sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl"  # scripts/real-wheels.sh
    with pytest.raises(ReleaseStackError, match=re.escape(f"{real} is not an SGLang wheel (its METADATA is sgl_kernel-0.3.21.dist-info")):
        stack_from_wheel(real)
    bare = tmp_path / "sglang-0.5.98-py3-none-any.whl"
    with zipfile.ZipFile(bare, "w") as archive:
        archive.writestr("sglang/__init__.py", "")
    with pytest.raises(ReleaseStackError, match=r"is not an SGLang wheel \(no \*\.dist-info/METADATA in it\)"):
        stack_from_wheel(bare)
    text = tmp_path / "sglang-0.5.97-py3-none-any.whl"
    text.write_text("not a zip")
    with pytest.raises(ReleaseStackError, match="is not a wheel"):
        stack_from_wheel(text)
    with pytest.raises(ReleaseStackError, match=r"METADATA names vllm 0\.9\.0"):
        stack_from_metadata("Metadata-Version: 2.1\nName: vllm\nVersion: 0.9.0\nRequires-Dist: torch==2.9.1\n")


def test_a_missing_or_loose_pin_is_named() -> None:
    head = "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.50\n"
    with pytest.raises(ReleaseStackError, match=r"SGLang 0\.5\.50 \(x\) does not require sglang-kernel or sgl-kernel"):
        stack_from_metadata(head + "Requires-Dist: torch==2.9.1\nRequires-Dist: flashinfer_python==0.6.3\n", source="x")
    with pytest.raises(ReleaseStackError, match=r"requires torch>=2\.9, not one exact version"):
        stack_from_metadata(
            head + "Requires-Dist: torch>=2.9\nRequires-Dist: flashinfer_python==0.6.3\nRequires-Dist: sglang-kernel==0.4.1\n"
        )
    # a pin for another platform or an extra is not the host's
    text = head + (
        'Requires-Dist: torch==9.9; sys_platform == "darwin"\nRequires-Dist: torch==2.9.1\n'
        "Requires-Dist: flashinfer_python==0.6.3\nRequires-Dist: sglang-kernel==1.0; extra == 'x'\nRequires-Dist: sglang-kernel==0.4.1\n"
    )
    assert stack_from_metadata(text)["torch"] == "2.9.1" and stack_from_metadata(text)["kernel_version"] == "0.4.1"


def test_a_version_that_does_not_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in offline_env(tmp_path, tmp_path).items():
        if key.startswith("PIP_"):
            monkeypatch.setenv(key, value)
    downloads = tmp_path / "downloads"
    with pytest.raises(
        ReleaseStackError, match=r"SGLang 0\.5\.999: no such release could be downloaded \(pip download --no-deps sglang==0\.5\.999"
    ):
        release_stack("0.5.999", [WHEELS], download_dir=downloads)
    assert [p.name for p in downloads.rglob("*")] == []  # nothing left behind
    with pytest.raises(ReleaseStackError, match=r"SGLang 0\.5\.999: no sglang-0\.5\.999-\*\.whl in .*, and downloading is off"):
        release_stack("0.5.999", [WHEELS])
    with pytest.raises(ReleaseStackError, match="'latest' is not an SGLang version"):
        release_stack("latest", [WHEELS])


def test_found_in_a_version_directory_and_memoised(tmp_path: Path) -> None:
    place = tmp_path / "flag-check" / "0.5.9"
    place.mkdir(parents=True)
    shutil.copy(wheel_of("0.5.9"), place)
    first = release_stack("0.5.9", [tmp_path / "empty"], download_dir=tmp_path / "flag-check")
    assert first["wheel"] == str(place / wheel_of("0.5.9").name) and first["torch"] == "2.9.1"
    shutil.rmtree(place)
    assert release_stack("0.5.9", [tmp_path / "empty"], download_dir=tmp_path / "flag-check") == first


# ------------------------------------------------------------------ through Ansible


def test_production_specs_follow_0_5_9(tmp_path: Path) -> None:
    out = render(tmp_path)
    specs = by_name(out["specs"])
    assert out["release"]["torch"] == "2.9.1" and out["triton"] == "3.5.1"
    torch = specs["torch"]
    assert torch["source"]["ref"] == "v2.9.1" and torch["prebuilt"]["pattern"] == "torch-2.9.1+cu130-*.whl"
    assert torch["env"]["PYTORCH_BUILD_VERSION"] == "2.9.1+cu130" and torch["pins"] == ["triton==3.5.1"]
    assert torch["env"]["PYTORCH_EXTRA_INSTALL_REQUIREMENTS"].startswith("triton==3.5.1;")
    assert specs["flashinfer"]["source"]["ref"] == "v0.6.3" and specs["flashinfer_jit_cache"]["source"]["ref"] == "v0.6.3"
    kernel = specs["sgl_kernel"]
    assert kernel["package"] == "sgl-kernel" and kernel["prebuilt"]["pattern"] == "sgl_kernel-0.3.21+cu130-*.whl"
    assert 'grep -q "^version = \\"0.3.21+${SGLANG_LOCAL_VERSION}\\"$" pyproject.toml' in kernel["build"]
    assert kernel["source"]["ref"] == "v0.5.9" and specs["sglang"]["source"]["wheel"] == "sglang==0.5.9"
    plan(out["specs"], CONTEXT)  # the pipeline accepts them


def test_production_specs_follow_0_5_23(tmp_path: Path) -> None:
    out = render(tmp_path, "stack_sglang_version=0.5.23")
    pins = pins_in_wheel(wheel_of("0.5.23"))
    specs = by_name(out["specs"])
    assert (pins["torch"], pins["flashinfer-python"], pins["sglang-kernel"]) == ("2.14.1", "0.7.2", "0.4.10")
    torch = specs["torch"]
    assert torch["source"]["ref"] == "v2.14.1" and torch["env"]["PYTORCH_BUILD_VERSION"] == "2.14.1+cu130"
    assert torch["pins"] == ["triton==3.8.0"] and out["triton"] == "3.8.0"
    assert specs["flashinfer"]["source"]["ref"] == "v0.7.2"
    assert specs["flashinfer_jit_cache"]["prebuilt"]["pattern"] == "flashinfer_jit_cache-0.7.2+cu130-*.whl"
    kernel = specs["sgl_kernel"]
    assert kernel["package"] == "sglang-kernel" and kernel["prebuilt"]["pattern"] == "sglang_kernel-0.4.10+cu130-*.whl"
    assert '"^version = \\"0.4.10+${SGLANG_LOCAL_VERSION}\\"$"' in kernel["build"] and kernel["source"]["ref"] == "v0.5.23"
    assert specs["sglang"]["source"]["wheel"] == "sglang==0.5.23"
    # the companions: torchvision follows torch, torchaudio the release's pin; 0.5.23 pins no exact
    # torch_memory_saver (its >=0.0.9.post1 wheel carries CUDA-13 objects), so none is built
    assert specs["torchvision"]["source"]["ref"] == "v0.29.1" and specs["torchaudio"]["source"]["ref"] == "v" + pins["torchaudio"]
    assert "torch_memory_saver" not in specs
    assert specs["sglang"]["depends_on"] == ["torch", "flashinfer", "flashinfer_jit_cache", "sgl_kernel", "torchaudio", "torchvision"]
    old = {p.name: p.key for p in plan(render(tmp_path)["specs"], CONTEXT)}
    new = {p.name: p.key for p in plan(out["specs"], CONTEXT)}
    assert set(old) - set(new) == {"torch_memory_saver"}
    assert all(old[name] != new[name] for name in new)  # a new stack is built anew


def test_one_variable_overrides_the_release(tmp_path: Path) -> None:
    # torchvision follows torch through a recorded map that knows no 2.13.0: the render names it
    failed = render(tmp_path, "stack_sglang_version=0.5.23", "stack_torch_version=2.13.0")
    assert "torch 2.13.0 has no recorded torchvision" in failed["error"] and "or set stack_torchvision_version" in failed["error"]
    out = render(tmp_path, "stack_sglang_version=0.5.23", "stack_torch_version=2.13.0", "stack_torchvision_version=0.28.0")
    specs = by_name(out["specs"])
    assert specs["torch"]["source"]["ref"] == "v2.13.0" and specs["torch"]["pins"] == ["triton==3.7.1"]
    assert specs["torchvision"]["source"]["ref"] == "v0.28.0" and specs["torchvision"]["env"]["PYTORCH_VERSION"] == "2.13.0"
    assert specs["flashinfer"]["source"]["ref"] == "v0.7.2" and specs["sgl_kernel"]["package"] == "sglang-kernel"
    # a group's group_vars win over the release too
    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "gpu_hosts").mkdir(parents=True)
    shutil.copy(ROOT / "inventory/example-site/hosts.yml", inventory)
    (inventory / "group_vars" / "gpu_hosts" / "stack.yml").write_text('stack_flashinfer_version: "0.6.4"\n')
    specs = by_name(render(tmp_path, inventory=inventory)["specs"])
    assert specs["flashinfer"]["source"]["ref"] == "v0.6.4" and specs["torch"]["source"]["ref"] == "v2.9.1"


def test_a_torch_without_a_recorded_triton(tmp_path: Path) -> None:
    failed = render(tmp_path, "stack_torch_version=2.99.0", "stack_torchvision_version=0.99.0")
    assert "torch 2.99.0 has no recorded triton" in failed["error"] and "or set stack_triton_version" in failed["error"]
    specs = by_name(
        render(tmp_path, "stack_torch_version=2.99.0", "stack_triton_version=3.99.0", "stack_torchvision_version=0.99.0")["specs"]
    )
    assert specs["torch"]["pins"] == ["triton==3.99.0"]


def test_bad_releases_fail_the_lookup_by_name(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "sglang").mkdir(parents=True)
    with zipfile.ZipFile(cache / "sglang" / "sglang-0.5.98-py3-none-any.whl", "w") as archive:
        archive.writestr("notsglang-0.5.98.dist-info/METADATA", "Metadata-Version: 2.1\nName: notsglang\nVersion: 0.5.98\n")
    failed = render(tmp_path, "stack_sglang_version=0.5.98", cache=cache)
    assert "sglang-0.5.98-py3-none-any.whl is not an SGLang wheel" in failed["error"]
    failed = render(tmp_path, "stack_sglang_version=0.5.999", cache=cache)
    assert "SGLang 0.5.999: no such release could be downloaded" in failed["error"]
    assert not list((cache / "flag-check").rglob("*.whl"))


def test_the_lab_renders_without_the_lookup(tmp_path: Path) -> None:
    """The lab builds no torch: its specs need neither the lookup nor the network."""
    env = offline_env(CACHE, tmp_path)
    done = subprocess.run(
        [str(ANSIBLE), "all", "-i", str(ROOT / "inventory/lab"), "-m", "debug", "-a", "var=sglang_build_specs"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    result = json.loads(done.stdout[done.stdout.index("{") :])["plays"][0]["tasks"][0]["hosts"]["sglang-lab"]
    assert [s["name"] for s in result["sglang_build_specs"]] == ["sm120_probe", "sglang_standin", "sglang"], result


def test_stack_var_prints_the_knob_and_refuses_derived_values() -> None:
    script = ROOT / "scripts" / "stack_var.py"
    done = subprocess.run([sys.executable, str(script), "stack_sglang_version"], capture_output=True, text=True, check=True)
    assert re.fullmatch(r"\d+\.\d+\.\d+\n", done.stdout)
    derived = subprocess.run([sys.executable, str(script), "stack_torch_version"], capture_output=True, text=True)
    assert derived.returncode == 2 and "derived by Ansible" in derived.stderr and "sm120.sglang.toolkit_defaults" in derived.stderr
