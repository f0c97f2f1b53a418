"""The package index's own wheels judged by what they are (plugins/plugin_utils/sglang_sm120_controller/index_wheels.py):
real wheels from .cache/real-wheels (scripts/real-wheels.sh), NVIDIA's cuobjdump as the witness, the
build specs' own verify rules; and sglang-compat's per-artifact plan for SGLang 0.5.13."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import BIN
from sglang_sm120_controller.compat import render_profile
from sglang_sm120_controller.index_wheels import (
    ArtifactChoice,
    _pinned_major,
    _variants,
    first_deploy_hours,
    judge,
    judge_cached,
    required_cuda,
    soname_majors,
)

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
WHEELS = CACHE / "real-wheels"
GROUP_VARS = ROOT / "roles/toolkit_defaults/defaults/main"
STACK = yaml.safe_load((GROUP_VARS / "stack.yml").read_text())
BUILD = yaml.safe_load((GROUP_VARS / "build.yml").read_text())
SONAMES = soname_majors(STACK["stack_cuda_components"])


def cuobjdump() -> str:
    found = sorted((CACHE / "test-tools").glob("nvidia/cu*/bin/cuobjdump"))
    if not found:
        pytest.fail("no cuobjdump under .cache/test-tools: run make wheelhouse")
    return str(found[0])


def rules(artifact: str) -> dict:
    specs = {s["name"]: s for s in [*BUILD["sglang_build_core_specs"], *BUILD["sglang_build_companion_specs"]]}
    return render_profile(specs[artifact]["verify"], STACK)


def wheel(pattern: str) -> Path:
    found = sorted(WHEELS.glob(pattern))
    if not found:
        pytest.fail(f"no {pattern} under {WHEELS}: run scripts/real-wheels.sh")
    return found[0]


def test_the_soname_majors_come_from_cuda_13_0_1s_components():
    # libcufft.so.12 is CUDA 13's cuFFT (12.0), libcurand.so.10 its cuRAND: not the CUDA major
    assert SONAMES["cudart"] == 13 and SONAMES["cublas"] == 13 and SONAMES["nvrtc"] == 13
    assert SONAMES["cufft"] == 12 and SONAMES["curand"] == 10 and SONAMES["cusolver"] == 12 and SONAMES["cusparse"] == 12


@pytest.mark.parametrize(
    ("specifier", "major"),
    [("==13.0.2", 13), ("~=12.8", 12), (">=13.0.3,<14", 13), ("<13", 12), (">=12.0", None), ("", None), ("==12.9", 12)],
)
def test_which_cuda_a_specifier_names(specifier, major):
    assert _pinned_major(specifier) == major


def test_requirements_name_the_cuda_they_were_built_for():
    torch_2_11 = (
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n"
        'Requires-Dist: cuda-toolkit[cublas,cudart]==13.0.2; platform_system == "Linux"\n'
        'Requires-Dist: nvidia-cudnn-cu13==9.19.0.56; platform_system == "Linux"\n'
        'Requires-Dist: nvidia-nccl-cu12==2.27.5; platform_system == "Windows"\n'
    )
    assert required_cuda(torch_2_11) == {13: ["cuda-toolkit[cublas,cudart]==13.0.2", "nvidia-cudnn-cu13==9.19.0.56"]}
    # flashinfer-python 0.7.2: a lower bound accepts CUDA 13, it names no CUDA
    assert required_cuda("Metadata-Version: 2.1\nName: flashinfer-python\nRequires-Dist: cuda-python>=12.0\n") == {}


def test_per_cuda_variants_are_judged_on_the_one_this_host_loads():
    names = ["tms/hook_cu12.abi3.so", "tms/hook_cu13.abi3.so", "tms/hook.abi3.so", "tms/other.abi3.so"]
    skipped = _variants(names, 13)
    assert set(skipped) == {"tms/hook_cu12.abi3.so", "tms/hook.abi3.so"}
    assert "tms/hook_cu13.abi3.so" in skipped["tms/hook_cu12.abi3.so"]
    assert _variants(names, 14) == {}  # no CUDA 14 variant: nothing is skipped, each is judged


def test_torch_memory_saver_0_0_9_post1_fits_by_its_cuda_13_objects():
    found = judge(
        "torch_memory_saver",
        "torch_memory_saver==0.0.9.post1",
        wheel("torch_memory_saver-0.0.9.post1-*.whl"),
        rules("torch_memory_saver"),
        13,
        cuobjdump(),
        SONAMES,
    )
    assert found.fits, found.problems
    assert found.cuda_majors == [13]
    notes = {o.path: o.note for o in found.objects}
    assert notes["torch_memory_saver_hook_mode_preload_cu13.abi3.so"] == ""
    assert "CUDA 12 variant" in notes["torch_memory_saver_hook_mode_preload_cu12.abi3.so"]
    # the same wheel on a CUDA 12 host: its cu12 objects are the ones loaded, and they fit there
    assert judge(
        "torch_memory_saver", "x", wheel("torch_memory_saver-0.0.9.post1-*.whl"), {"cudart": "12", "device_code": "none"}, 12, cuobjdump()
    ).fits


def test_torchvision_0_26_0_fits_and_0_24_1_is_refused_naming_its_object():
    fits = judge("torchvision", "torchvision==0.26.0", wheel("torchvision-0.26.0-*.whl"), rules("torchvision"), 13, cuobjdump(), SONAMES)
    assert fits.fits, fits.problems
    assert "sm_120" in fits.gpu_code and fits.cuda_majors == [13]
    assert fits.summary.startswith("CUDA 13, ") and "sm_120" in fits.summary
    old = judge("torchvision", "torchvision==0.24.1", wheel("torchvision-0.24.1-*.whl"), rules("torchvision"), 13, cuobjdump(), SONAMES)
    assert not old.fits
    assert any("libcudart.so.12" in p and "torchvision/_C.so" in p for p in old.problems), old.problems


def test_sgl_kernel_0_3_21_is_refused_for_cuda_12_and_its_exempt_objects_are_not_counted_as_missing_sm120():
    found = judge("sgl_kernel", "sgl-kernel==0.3.21", wheel("sgl_kernel-0.3.21-*.whl"), rules("sgl_kernel"), 13, cuobjdump(), SONAMES)
    assert not found.fits
    text = "; ".join(found.problems)
    assert "links libcudart.so.12" in text and "links libcublas.so.12" in text
    # flash_ops (sm_80/86/90a) is exempt by the spec, with its reason: not reported as lacking SM120
    assert "flash_ops.abi3.so: expected" not in text


def _repack(tmp_path: Path, name: str, metadata: str, objects: dict[str, Path]) -> Path:
    out = tmp_path / f"{name}-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(f"{name}-1.0.dist-info/METADATA", metadata)
        for member, source in objects.items():
            archive.write(source, member)
    return out


def test_a_wheel_that_claims_cuda_13_but_links_a_cuda_12_library_is_refused_naming_the_object(tmp_path):
    cuda12_object = next((WHEELS / f"{wheel('torchvision-0.24.1-*.whl').name}.d").rglob("_C.so"))
    liar = _repack(
        tmp_path,
        "liar",
        "Metadata-Version: 2.1\nName: liar\nVersion: 1.0\nRequires-Dist: nvidia-cuda-runtime-cu13==13.0.88\n",
        {"liar/_C.so": cuda12_object},
    )
    found = judge("liar", "liar==1.0", liar, {"cuda_arch": "12.0", "cudart": "13", "device_code": "required"}, 13, cuobjdump(), SONAMES)
    assert not found.fits
    assert found.problems == ["links libcudart.so.12 (CUDA 13 has libcudart.so.13): liar/_C.so"]


def test_a_wheel_whose_gpu_object_lacks_sm120_is_refused_naming_what_it_carries(tmp_path):
    hopper_only = next((WHEELS / f"{wheel('sgl_kernel-0.3.21-*.whl').name}.d").rglob("flash_ops*.so"))
    wheel_file = _repack(
        tmp_path, "hopper", "Metadata-Version: 2.1\nName: hopper\nVersion: 1.0\n", {"hopper/flash_ops.abi3.so": hopper_only}
    )
    found = judge(
        "hopper", "hopper==1.0", wheel_file, {"cuda_arch": "12.0", "device_code": "required"}, 13, cuobjdump(), {"cudart": 12, "nvrtc": 12}
    )
    assert not found.fits
    (problem,) = found.problems
    assert problem.startswith("hopper/flash_ops.abi3.so: expected sm_120") and "sm_90a" in problem


def test_a_judgement_is_kept_and_read_back(tmp_path):
    path = wheel("torch_memory_saver-0.0.9.post1-*.whl")
    first = judge_cached("torch_memory_saver", "a", path, rules("torch_memory_saver"), tmp_path, 13, cuobjdump(), SONAMES)
    (kept,) = (tmp_path / "judgements").glob("*.json")
    again = judge_cached("torch_memory_saver", "b", path, rules("torch_memory_saver"), tmp_path, 13, cuobjdump(), SONAMES)
    assert again.to_dict() | {"requirement": "a"} == first.to_dict()
    # other rules are another judgement
    judge_cached("torch_memory_saver", "a", path, {"device_code": "none"}, tmp_path, 13, cuobjdump(), SONAMES)
    assert len(list((tmp_path / "judgements").glob("*.json"))) == 2 and kept.exists()


def test_first_deploy_hours_count_torch_then_its_dependents_side_by_side_at_best():
    def built(artifact, low, high):
        return ArtifactChoice(artifact, artifact, "source build", "", (low, high))

    choices = [
        built("torch", 3, 5),
        built("sgl_kernel", 1, 2),
        built("flashinfer_jit_cache", 1, 2),
        built("torchvision", 0.25, 0.5),
        ArtifactChoice("torchaudio", "t", "index wheel", "fits"),
    ]
    assert first_deploy_hours(choices) == (4, 9.5)
    assert first_deploy_hours([ArtifactChoice("torch", "t", "index wheel", "fits")]) == (0, 0)


def test_sglang_0_5_13_needs_no_source_build_on_this_hardware():
    """Done when of issue 32: every CUDA-linked artifact of SGLang 0.5.13 is the index's own wheel,
    judged on the real wheels (torch 2.11.0, sglang-kernel 0.4.3, ...; downloaded once into
    .cache/index-wheels), FlashInfer's AOT cache optional."""
    done = subprocess.run([str(BIN / "sglang-compat"), "0.5.13", "--json"], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr
    (release,) = json.loads(done.stdout)["releases"]
    choices = {a["artifact"]: a for a in release["artifacts"]}
    assert set(choices) == {"torch", "sgl_kernel", "flashinfer", "flashinfer_jit_cache", "torchvision", "torchaudio", "torch_memory_saver"}
    for name in ("torch", "sgl_kernel", "torchvision", "torchaudio", "torch_memory_saver"):
        assert choices[name]["choice"] == "index wheel", choices[name]["cell"]
        assert choices[name]["judgement"]["cuda_majors"] == [13]
    assert "sm_120a" in choices["sgl_kernel"]["judgement"]["gpu_code"]
    assert {"sm_120", "sm_120a"} <= set(choices["torch"]["judgement"]["gpu_code"])
    assert choices["flashinfer_jit_cache"]["choice"] == "JIT on first use"
    assert release["source_build_hours"] == [0, 0]


def _cache_with(cache: Path, requirement: str, source: Path) -> None:
    """An index-wheel cache holding ``source`` as the download of ``requirement`` (nothing fetched)."""
    import shutil

    target = cache / "wheels" / requirement
    target.mkdir(parents=True)
    shutil.copy(source, target / source.name)


def test_apply_choices_takes_a_fitting_index_wheel_and_leaves_the_rest(tmp_path):
    from sglang_sm120_controller.index_wheels import apply_choices

    cache = tmp_path
    _cache_with(cache, "torchvision==0.26.0", wheel("torchvision-0.26.0-*.whl"))
    _cache_with(cache, "torchvision==0.24.1", wheel("torchvision-0.24.1-*.whl"))
    # a pip that finds no wheel of anything, as the index has none of flashinfer-jit-cache
    no_index = tmp_path / "pip-finds-nothing"
    no_index.write_text("#!/bin/sh\necho 'ERROR: No matching distribution found for it' >&2\nexit 1\n")
    no_index.chmod(0o755)
    verify = rules("torchvision")
    specs = [
        {"name": "torch", "source": {"git": "x"}},
        {"name": "new_tv", "index": "torchvision==0.26.0", "local_version": "cu130", "verify": verify, "source": {"git": "x"}},
        {
            "name": "old_tv",
            "index": "torchvision==0.24.1",
            "local_version": "cu130",
            "verify": verify,
            "source": {"git": "x"},
            "prebuilt": {"wheelhouse": str(tmp_path / "none"), "pattern": "torchvision-0.24.1+cu130-*.whl"},
        },
        {"name": "jit", "index": "flashinfer-jit-cache==0.6.3", "optional": True, "verify": {}, "source": {"git": "x"}},
        {"name": "sglang", "depends_on": ["torch", "new_tv", "old_tv", "jit"], "source": {"wheel": "sglang==0.5.9"}},
    ]
    out = {s["name"]: s for s in apply_choices(specs, cache, SONAMES, cuobjdump=cuobjdump(), python=str(no_index))}
    assert list(out) == ["torch", "new_tv", "old_tv", "sglang"]  # the optional one without a wheel is left out
    assert out["torch"] == specs[0]
    taken = out["new_tv"]
    assert "index" not in taken and "local_version" not in taken  # the index's own file, no +cu130 label
    assert taken["prebuilt"]["pattern"] == wheel("torchvision-0.26.0-*.whl").name
    assert Path(taken["prebuilt"]["wheelhouse"]).parent == cache / "wheels"
    assert (
        taken["prebuilt"]["origin"].startswith("the package index's own wheel, torchvision-0.26.0-")
        and "CUDA 13" in taken["prebuilt"]["origin"]
    )
    kept = out["old_tv"]
    assert kept["local_version"] == "cu130" and kept["prebuilt"]["pattern"] == "torchvision-0.24.1+cu130-*.whl"
    assert "does not fit" in kept["prebuilt"]["origin"] and "libcudart.so.12" in kept["prebuilt"]["origin"]
    assert out["sglang"]["depends_on"] == ["torch", "new_tv", "old_tv"]
    # asked to build the optional one: it stays, as written
    again = apply_choices(specs, cache, SONAMES, build_optional=["jit"], cuobjdump=cuobjdump(), python=str(no_index))
    assert [s["name"] for s in again] == ["torch", "new_tv", "old_tv", "jit", "sglang"]
    assert again[-1]["depends_on"] == ["torch", "new_tv", "old_tv", "jit"]


def test_the_production_specs_of_0_5_13_take_every_cuda_artifact_from_the_index(tmp_path):
    """The inventory as Ansible renders it (the lookup sglang_artifact_choices), SGLang 0.5.13: no spec is
    left to a source build, FlashInfer's optional AOT cache is left out and nothing depends on it."""
    import os

    playbook = tmp_path / "render.yml"
    out = tmp_path / "specs.json"
    playbook.write_text(
        "- hosts: gpu_hosts[0]\n  gather_facts: false\n  roles:\n    - role: sm120.sglang.toolkit_defaults\n"
        "  tasks:\n    - ansible.builtin.copy:\n"
        f"        dest: {out}\n        content: \"{{{{ sglang_build_specs | to_nice_json }}}}\"\n        mode: '0644'\n"
        "      delegate_to: localhost\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_LOOKUP_PLUGINS": str(ROOT / "plugins/lookup"),
        "SGLANG_TOOLKIT_CACHE": str(CACHE),
    }
    done = subprocess.run(
        [
            str(ROOT / ".venv/bin/ansible-playbook"),
            "-i",
            str(ROOT / "inventory/example-site"),
            str(playbook),
            "-e",
            "stack_sglang_version=0.5.13",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    specs = {s["name"]: s for s in json.loads(out.read_text())}
    assert list(specs) == ["torch", "flashinfer", "sgl_kernel", "torchvision", "torchaudio", "sglang"]
    for name in ("torch", "flashinfer", "sgl_kernel", "torchvision", "torchaudio"):
        assert specs[name]["prebuilt"]["origin"].startswith("the package index's own wheel"), specs[name]["prebuilt"]
        assert "local_version" not in specs[name]
    assert specs["sgl_kernel"]["prebuilt"]["pattern"] == "sglang_kernel-0.4.3-cp310-abi3-manylinux2014_x86_64.whl"
    assert "flashinfer_jit_cache" not in specs["sglang"]["depends_on"]
