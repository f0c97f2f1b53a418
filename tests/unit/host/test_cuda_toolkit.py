"""CUDA toolkit facts, with the real nvcc 13.0.88 from NVIDIA's wheels: nvcc's version, the GPU
code in compiled objects (the suffix-exact reader the verify module uses), which release a tree
is, the component pins of a release, the repository check and the repository keys."""

from __future__ import annotations

import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import CACHE, ROOT, stack_value
from sglang_sm120.build.pipeline import gpu_code as gpu_targets
from sglang_sm120.host.cuda_toolkit import (
    CudaToolkitError,
    component_pins,
    identify_toolkit,
    installed_version,
    openpgp_fingerprints,
    parse_dpkg_query,
    parse_nvcc_version,
    parse_packages_index,
    parse_requires_dist,
    read_packages_index,
    repository_problems,
    runtime_from_name,
    runtime_version,
    upstream,
    version_series,
)

KERNEL = "__global__ void probe(float *x) { x[threadIdx.x] += 1.0f; }\n"


def compile_kernel(cuda_home: Path, tmp_path: Path, gencode: list[str], flag: str = "-c") -> Path:
    source = tmp_path / "k.cu"
    source.write_text(KERNEL)
    out = tmp_path / ("k.cubin" if flag == "-cubin" else "k.o")
    cmd = [str(cuda_home / "bin/nvcc"), *gencode, flag, "-o", str(out), str(source)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def test_real_nvcc_reports_release_13_0_build_v13_0_88(cuda_home):
    out = subprocess.run([cuda_home / "bin/nvcc", "--version"], capture_output=True, text=True, check=True).stdout
    assert parse_nvcc_version(out) == parse_nvcc_version("Cuda compilation tools, release 13.0, V13.0.88")
    assert parse_nvcc_version(out).build == "V13.0.88"


def test_unrecognised_nvcc_output_is_an_error():
    with pytest.raises(CudaToolkitError, match="nvcc --version should print"):
        parse_nvcc_version("bash: nvcc: command not found")


def test_sm_120_object_carries_sm_120(cuda_home, tmp_path):
    obj = compile_kernel(cuda_home, tmp_path, ["-gencode", "arch=compute_120,code=sm_120"])
    assert gpu_targets(str(obj)) == ["sm_120"]


def test_arch_specific_object_is_sm_120a_not_sm_120(cuda_home, tmp_path):
    obj = compile_kernel(cuda_home, tmp_path, ["-gencode", "arch=compute_120a,code=sm_120a"])
    assert gpu_targets(str(obj)) == ["sm_120a"]
    cubin = compile_kernel(cuda_home, tmp_path, ["-gencode", "arch=compute_120a,code=sm_120a"], "-cubin")
    assert gpu_targets(str(cubin)) == ["sm_120a"]


def test_cubin_is_read_from_its_elf_header(cuda_home, tmp_path):
    cubin = compile_kernel(cuda_home, tmp_path, ["-gencode", "arch=compute_120,code=sm_120"], "-cubin")
    assert gpu_targets(str(cubin)) == ["sm_120"]


def test_fat_object_lists_every_target(cuda_home, tmp_path):
    obj = compile_kernel(
        cuda_home,
        tmp_path,
        ["-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_120,code=[sm_120,compute_120]"],
    )
    assert gpu_targets(str(obj)) == ["compute_120", "sm_120", "sm_90"]


def test_ptx_only_object_is_not_machine_code(cuda_home, tmp_path):
    obj = compile_kernel(cuda_home, tmp_path, ["-gencode", "arch=compute_120,code=compute_120"])
    assert gpu_targets(str(obj)) == ["compute_120"]


def test_host_binary_without_gpu_code_has_no_targets(tmp_path):
    plain = tmp_path / "plain"
    plain.write_bytes(Path("/bin/true").read_bytes())
    assert gpu_targets(str(plain)) == []
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert gpu_targets(str(empty)) == []


def test_installed_version_reads_the_toolkit_record(cuda_home, tmp_path):
    assert installed_version(str(cuda_home)) == "13.0.1"
    assert installed_version(str(tmp_path)) is None
    (tmp_path / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK"}}))
    with pytest.raises(CudaToolkitError, match=r"cannot read cuda\.version"):
        installed_version(str(tmp_path))


def test_version_series_is_major_minor():
    assert version_series("13.0.1") == "13.0"
    with pytest.raises(CudaToolkitError, match=r"should look like '13\.0\.1', found '13\.x'"):
        version_series("13.x")


def test_targets_agree_with_nvidias_cuobjdump(cuda_home, cuobjdump, tmp_path):
    obj = compile_kernel(
        cuda_home,
        tmp_path,
        [
            "-gencode",
            "arch=compute_89,code=sm_89",
            "-gencode",
            "arch=compute_120a,code=sm_120a",
            "-gencode",
            "arch=compute_120,code=[sm_120,compute_120]",
        ],
    )
    elf = subprocess.run([cuobjdump, "--list-elf", obj], capture_output=True, text=True, check=True).stdout
    ptx = subprocess.run([cuobjdump, "--list-ptx", obj], capture_output=True, text=True, check=True).stdout
    witnessed = sorted(set(re.findall(r"\.(sm_\d+a?)\.cubin", elf)) | {f"compute_{n}" for n in re.findall(r"\.sm_(\d+a?)\.ptx", ptx)})
    assert witnessed == ["compute_120", "sm_120", "sm_120a", "sm_89"]
    assert gpu_targets(str(obj)) == witnessed


# ------------------------------------------------------------------ the release's pins

CAPTURE = Path("/work/shared/data/real-gpu/cuda-13.0-apt-install.txt")
ROLE = ROOT / "roles/cuda_toolkit"


def role_vars() -> dict:
    return yaml.safe_load((ROLE / "vars/main.yml").read_text())


def pins_for(version: str, components: dict) -> dict[str, str]:
    names = role_vars()
    return component_pins(version, components, names["cuda_toolkit_component_packages"], names["cuda_toolkit_meta_packages"])


def test_stack_components_are_nvidias_meta_wheel_pins():
    """stack_cuda_components is exactly what cuda-toolkit==13.0.1's METADATA pins (extra 'all')."""
    wheel = CACHE / "wheelhouse/cuda-toolkit-13.0.1/cuda_toolkit-13.0.1-py2.py3-none-any.whl"
    if not wheel.exists():
        pytest.fail(f"no {wheel}: run `make wheelhouse` first")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("cuda_toolkit-13.0.1.dist-info/METADATA").decode()
    assert parse_requires_dist(metadata) == stack_value("stack_cuda_components")
    assert parse_requires_dist(metadata, "cudart") == {"nvidia-cuda-runtime": "13.0.88"}
    assert stack_value("stack_cuda_runtime_releases")["13.0.88"] == "13.0.1"


def test_component_pin_table_of_13_0_1():
    pins = pins_for("13.0.1", stack_value("stack_cuda_components"))
    assert pins["cuda-toolkit-13-0"] == pins["cuda-libraries-13-0"] == pins["cuda-compiler-13-0"] == "13.0.1-1"
    assert pins["cuda-cudart-13-0"] == pins["cuda-cudart-dev-13-0"] == "13.0.88-1"
    assert pins["cuda-nvcc-13-0"] == pins["cuda-crt-13-0"] == "13.0.88-1"
    assert pins["cuda-cccl-13-0"] == "13.0.85-1"
    assert pins["cuda-nvml-dev-13-0"] == "13.0.87-1"
    assert pins["libcublas-13-0"] == "13.0.2.14-1"
    assert not any("nvvm" in name or "ptxcompiler" in name for name in pins)


def test_pins_reproduce_nvidias_real_13_0_2_install():
    """With 13.0.2's components (its meta wheel: runtime 13.0.96, cublas 13.1.0.3, the rest as
    13.0.1), the table gives the versions of every pinned package on the real 13.0.2 host."""
    components = dict(stack_value("stack_cuda_components"), **{"nvidia-cuda-runtime": "13.0.96", "nvidia-cublas": "13.1.0.3"})
    pins = pins_for("13.0.2", components)
    real = dict(line.split() for line in CAPTURE.read_text().splitlines() if line and not line.startswith("#"))
    compared = {name: version for name, version in real.items() if name in pins}
    assert compared == {name: pins[name] for name in compared}
    assert {"cuda-cudart-13-0", "cuda-nvcc-13-0", "cuda-crt-13-0", "cuda-cccl-13-0", "cuda-toolkit-13-0-config-common"} <= set(compared)
    # what stays unpinned has no component in NVIDIA's meta wheel (or is not the toolkit's)
    unpinned = sorted(name for name in real if name not in pins)
    assert unpinned == [
        "cuda-compat-13-0", "cuda-cuobjdump-13-0", "cuda-gdb-13-0", "cuda-nvdisasm-13-0", "cuda-nvprune-13-0",
        "cuda-sandbox-dev-13-0", "cuda-toolkit-13-config-common", "cuda-toolkit-config-common", "libcudnn9-cuda-13", "libnccl2",
    ]  # fmt: skip


def test_pins_refuse_a_component_without_package_names():
    with pytest.raises(CudaToolkitError, match="no Debian package names recorded for the components nvidia-new"):
        component_pins("13.0.1", {"nvidia-new": "1.0"}, {}, [])


# ------------------------------------------------------------- which release a tree is

RELEASES = {"13.0.88": "13.0.1", "13.0.96": "13.0.2"}


def apt_tree(tmp_path: Path, runtime: str, version_json: str | None = None) -> Path:
    """A tree laid out like NVIDIA's packages: lib64 -> targets/x86_64-linux/lib, libcudart.so.13 -> .13.0.NN."""
    root = tmp_path / "cuda-13.0"
    lib = root / "targets/x86_64-linux/lib"
    lib.mkdir(parents=True)
    (lib / f"libcudart.so.{runtime}").write_bytes(b"")
    (lib / "libcudart.so.13").symlink_to(f"libcudart.so.{runtime}")
    (root / "lib64").symlink_to("targets/x86_64-linux/lib")
    if version_json:
        (root / "version.json").write_text(json.dumps({"cuda": {"version": version_json}}))
    return root


def test_runtime_version_is_read_from_names():
    assert runtime_from_name("/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13.0.96") == "13.0.96"
    assert runtime_from_name("nvidia_cuda_runtime-13.0.88.dist-info") == "13.0.88"
    assert runtime_from_name("libcudart.so.13") is None
    assert upstream("13.0.88-1") == "13.0.88" and upstream("1:580.95.05-0ubuntu1") == "580.95.05"


def test_dpkg_output_keeps_installed_packages_only():
    text = "cuda-cudart-13-0 installed 13.0.88-1\ncuda-toolkit-13-0 installed 13.0.1-1\ncuda-nvcc-13-0 not-installed \n"
    assert parse_dpkg_query(text) == {"cuda-cudart-13-0": "13.0.88-1", "cuda-toolkit-13-0": "13.0.1-1"}


def test_apt_tree_without_version_json_is_identified_by_its_runtime(tmp_path):
    root = apt_tree(tmp_path, "13.0.88")
    identity = identify_toolkit(
        str(root), RELEASES, {"cuda-cudart-13-0": "13.0.88-1", "cuda-toolkit-13-0": "13.0.1-1"}, "cuda-toolkit-13-0", ("cuda-cudart-13-0",)
    )
    assert (identity.release, identity.runtime, identity.problems) == ("13.0.1", "13.0.88", [])
    assert "lib64/libcudart.so.13 -> libcudart.so.13.0.88" in identity.describe()


def test_13_0_2_runtime_is_13_0_2_whatever_nvcc_says(tmp_path):
    identity = identify_toolkit(str(apt_tree(tmp_path, "13.0.96")), RELEASES)
    assert (identity.release, identity.runtime) == ("13.0.2", "13.0.96")


def test_meta_package_at_13_0_1_with_13_0_2_runtime_is_not_13_0_1(tmp_path):
    """The drift this role prevents: cuda-toolkit-13-0=13.0.1-1 whose >= took 13.0.2's runtime."""
    root = apt_tree(tmp_path, "13.0.96")
    identity = identify_toolkit(
        str(root), RELEASES, {"cuda-cudart-13-0": "13.0.96-1", "cuda-toolkit-13-0": "13.0.1-1"}, "cuda-toolkit-13-0", ("cuda-cudart-13-0",)
    )
    assert identity.release is None
    assert "the sources disagree (13.0.1, 13.0.2)" in identity.describe()


def test_version_json_that_disagrees_with_the_runtime_is_not_believed(tmp_path):
    identity = identify_toolkit(str(apt_tree(tmp_path, "13.0.96", version_json="13.0.1")), RELEASES)
    assert identity.release is None and "disagree" in identity.describe()


def test_unknown_runtime_and_unidentifiable_tree(tmp_path):
    assert identify_toolkit(str(tmp_path / "absent"), RELEASES) is None
    assert "no release this toolkit knows" in identify_toolkit(str(apt_tree(tmp_path, "13.0.48")), RELEASES).describe()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert identify_toolkit(str(empty), RELEASES).release is None


def test_runtime_package_is_evidence_when_the_file_is_missing(tmp_path):
    empty = tmp_path / "bare"
    empty.mkdir()
    identity = identify_toolkit(str(empty), RELEASES, {"cuda-cudart-13-0": "13.0.88-1"}, "", ("cuda-cudart-13-0",))
    assert (identity.release, identity.runtime) == ("13.0.1", "13.0.88")


def test_wheels_tree_is_identified_by_its_runtime_dist_info(cuda_home):
    assert runtime_version(str(cuda_home))[0] == "13.0.88"
    identity = identify_toolkit(str(cuda_home), RELEASES)
    assert (identity.release, identity.runtime) == ("13.0.1", "13.0.88")


# --------------------------------------------------------------------- the repository

INDEX = """Package: cuda-toolkit-13-0
Version: 13.0.2-1
Depends: cuda-libraries-13-0 (>= 13.0.2)

Package: cuda-cudart-13-0
Version: 13.0.96-1

Package: cuda-nvcc-13-0
Version: 13.0.88-1
"""


def test_repository_without_13_0_1_is_refused_naming_what_it_has():
    pins = pins_for("13.0.1", stack_value("stack_cuda_components"))
    offered = parse_packages_index(INDEX)
    message = repository_problems("https://example/debian13/x86_64/", "13.0.1", pins, offered, ["cuda-toolkit-13-0", "cuda-cudart-13-0"])
    assert message.startswith("the repository https://example/debian13/x86_64/ does not offer CUDA 13.0.1 as NVIDIA released it")
    assert "cuda-toolkit-13-0 13.0.1-1 (it has 13.0.2-1)" in message
    assert "cuda-cudart-13-0 13.0.88-1 (it has 13.0.96-1)" in message
    assert "cuda-nvcc-13-0" not in message  # offered at its pin
    assert "libcublas" not in message  # not carried at all, not required
    assert "Nothing was changed" in message


def test_repository_with_13_0_1_passes_and_gzip_is_read():
    pins = {"cuda-toolkit-13-0": "13.0.1-1", "cuda-cudart-13-0": "13.0.88-1"}
    offered = read_packages_index(
        __import__("gzip").compress(
            (INDEX + "\nPackage: cuda-toolkit-13-0\nVersion: 13.0.1-1\n\nPackage: cuda-cudart-13-0\nVersion: 13.0.88-1\n").encode()
        )
    )
    assert offered["cuda-cudart-13-0"] == ["13.0.96-1", "13.0.88-1"]
    assert repository_problems("file:/r/", "13.0.1", pins, offered, list(pins)) is None
    assert "cuda-toolkit-13-0 13.0.1-1 (it has none)" in repository_problems("file:/r/", "13.0.1", pins, {}, list(pins))


# ------------------------------------------------------------------ repository keys

PREFLIGHT = yaml.safe_load((ROOT / "roles/preflight/defaults/main.yml").read_text())


def repo_vars(name: str) -> dict:
    return yaml.safe_load((ROLE / "vars/nvidia_repos" / f"{name}.yml").read_text())


def test_each_distribution_gets_nvidias_key_for_its_repository():
    assert repo_vars("debian12")["cuda_toolkit_nvidia_repo_key_file"] == "3bf863cc.pub"
    assert repo_vars("ubuntu2404")["cuda_toolkit_nvidia_repo_key_file"] == "3bf863cc.pub"
    assert repo_vars("debian13")["cuda_toolkit_nvidia_repo_key_file"] == "8793F200.pub"
    assert repo_vars("debian12")["cuda_toolkit_nvidia_repo_key_fingerprints"] == ["EB693B3035CD5710E231E123A4B469963BF863CC"]
    assert [f[-8:] for f in repo_vars("debian13")["cuda_toolkit_nvidia_repo_key_fingerprints"]] == ["8793F200"]


def test_every_distribution_preflight_allows_has_a_repository_entry():
    allowed = PREFLIGHT["preflight_supported_distributions"]
    names = {f"debian{v}" for v in allowed["Debian"]} | {f"ubuntu{v}04" for v in allowed["Ubuntu"]}
    assert names == {p.stem for p in (ROLE / "vars/nvidia_repos").glob("*.yml")}


def test_key_fingerprint_agrees_with_gpg(tmp_path):
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    try:
        subprocess.run([*gpg, "--quick-generate-key", "test <t@localhost>", "ed25519", "sign", "never"], env=env, check=True)
        listing = subprocess.run([*gpg, "--with-colons", "--fingerprint"], env=env, check=True, capture_output=True, text=True).stdout
        armored = subprocess.run([*gpg, "--armor", "--export"], env=env, check=True, capture_output=True).stdout
        binary = subprocess.run([*gpg, "--export"], env=env, check=True, capture_output=True).stdout
    finally:  # gpg starts an agent for this home; leave nothing running
        subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False)
    expected = [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")][:1]
    assert openpgp_fingerprints(armored) == expected == openpgp_fingerprints(binary)
    with pytest.raises(CudaToolkitError):
        openpgp_fingerprints(b"not a key")
