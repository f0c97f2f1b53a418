"""Every library a release venv installs can load on the host (plugins/module_utils/sglang_sm120/build/elf_closure.py),
tried on ELF files gcc builds here.

A small venv is laid out as pip would (packages, *.dist-info with METADATA and RECORD): torch/lib with
libc10.so and libtorch_cuda.so (needing libcudart.so.13, which the CUDA-13 host's lib64 provides), a
torchvision whose _C.so needs libcudart.so.12 (as PyPI's 0.24.1 does), and objects that find their
helpers through $ORIGIN, through an inherited DT_RPATH, or not at all.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from sglang_sm120.build.elf_closure import ClosureError, check_venv, describe, read_elf, read_ld_cache, scan_venv
from sglang_sm120_controller.toolkit_data import role_allowlist

GCC = shutil.which("gcc")
pytestmark = pytest.mark.skipif(GCC is None, reason="gcc is needed to build the ELF test files")


def build(out: Path, soname: str | None = None, needs: tuple[Path, ...] = (), rpath: str | None = None, new_dtags: bool = True) -> Path:
    """A shared object at `out` that links each of `needs` (so its DT_NEEDED names their SONAMEs), with RUNPATH or RPATH."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / (out.name + ".c")
    src.write_text(f"int f_{abs(hash(str(out))) % 10**8}(void) {{ return 1; }}\n")
    cmd = [GCC, "-shared", "-fPIC", "-o", str(out), str(src)]
    if soname:
        cmd.append(f"-Wl,-soname,{soname}")
    cmd.append("-Wl,--no-as-needed")
    for lib in needs:
        cmd += [f"-L{lib.parent}", f"-l:{lib.name}"]
    if rpath:
        cmd += [f"-Wl,-rpath,{rpath}", "-Wl,--enable-new-dtags" if new_dtags else "-Wl,--disable-new-dtags"]
    subprocess.run(cmd, check=True, capture_output=True)
    src.unlink()
    return out


def dist_info(site: Path, name: str, version: str, files: list[str]) -> None:
    """METADATA and RECORD as pip writes them, listing `files` (relative to site-packages)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    lines = []
    for rel in [*files, f"{info.name}/METADATA"]:
        digest = base64.urlsafe_b64encode(hashlib.sha256((site / rel).read_bytes()).digest()).rstrip(b"=").decode()
        lines.append(f"{rel},sha256={digest},{(site / rel).stat().st_size}")
    (info / "RECORD").write_text("\n".join([*lines, f"{info.name}/RECORD,,"]) + "\n")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """host lib64 (libcudart.so.13), link-only stubs that no search reaches (libcudart.so.12), and a venv using both."""
    root = tmp_path_factory.mktemp("closure")
    host = root / "usr-local-cuda-13.0" / "lib64"
    stubs = root / "link-only"
    site = root / "venv" / "lib" / "python3.11" / "site-packages"
    cudart13 = build(host / "libcudart.so.13", "libcudart.so.13")
    cudart12 = build(stubs / "libcudart.so.12", "libcudart.so.12")
    c10 = build(site / "torch/lib/libc10.so", "libc10.so")
    build(site / "torch/lib/libtorch_cuda.so", "libtorch_cuda.so", needs=(c10, cudart13), rpath="$ORIGIN")
    dist_info(site, "torch", "2.9.1+sm120", ["torch/lib/libc10.so", "torch/lib/libtorch_cuda.so"])
    # torchvision as PyPI ships 0.24.1: _C.so needs libc10.so (torch/lib, loaded by `import torch`) and libcudart.so.12
    build(site / "torchvision/_C.so", needs=(c10, cudart12), rpath="/__w/_temp/conda_environment/lib", new_dtags=False)
    dist_info(site, "torchvision", "0.24.1", ["torchvision/_C.so"])
    # a package finding its own helper through $ORIGIN (RUNPATH $ORIGIN/../origin_pkg.libs)
    helper = build(site / "origin_pkg.libs/libhelper.so.1", "libhelper.so.1")
    build(site / "origin_pkg/_ext.so", needs=(helper,), rpath="$ORIGIN/../origin_pkg.libs")
    dist_info(site, "origin-pkg", "1.0", ["origin_pkg.libs/libhelper.so.1", "origin_pkg/_ext.so"])
    return {"root": root, "host": host, "stubs": stubs, "site": site, "helper": helper}


def test_reader_agrees_with_readelf(lab: dict[str, Path]) -> None:
    if shutil.which("readelf") is None:
        pytest.skip("no readelf to compare with")
    for path in [lab["site"] / "torchvision/_C.so", lab["site"] / "origin_pkg/_ext.so", lab["site"] / "torch/lib/libtorch_cuda.so"]:
        info = read_elf(path)
        dump = subprocess.run(["readelf", "-dW", str(path)], capture_output=True, text=True, check=True).stdout
        assert info is not None
        needed = [line.split("[", 1)[1].rstrip("]") for line in dump.splitlines() if "(NEEDED)" in line]
        assert list(info.needed) == needed
        paths = {
            tag: [d for line in dump.splitlines() if f"({tag})" in line for d in line.split("[", 1)[1].rstrip("]").split(":")]
            for tag in ("RPATH", "RUNPATH")
        }
        assert (list(info.rpath), list(info.runpath)) == (paths["RPATH"], paths["RUNPATH"])
    assert read_elf(lab["site"] / "torch-2.9.1+sm120.dist-info" / "METADATA") is None


def test_ld_cache_reader_matches_ldconfig() -> None:
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    if not Path("/etc/ld.so.cache").is_file() or not Path(ldconfig).exists():
        pytest.skip("no ld.so.cache / ldconfig here")
    listed = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=True).stdout.splitlines()
    expected = {(line.split()[0], line.split("=> ")[1]) for line in listed if "=> " in line}
    found = {(name, path) for name, paths in read_ld_cache().items() for path in paths}
    assert expected and found == expected


def test_a_satisfied_closure_passes(lab: dict[str, Path]) -> None:
    shutil.rmtree(lab["root"] / "ok", ignore_errors=True)
    site = lab["root"] / "ok"
    shutil.copytree(lab["site"], site, ignore=shutil.ignore_patterns("torchvision*"))
    closure = check_venv([site], host_dirs=[str(lab["host"])], ld_cache={})
    assert closure.objects == 4
    assert closure.unmet == [] and closure.allowed == []
    # the same venv on a host whose lib64 is not searched: libtorch_cuda.so's libcudart.so.13 is missing
    with pytest.raises(ClosureError, match=r"torch 2\.9\.1\+sm120: torch/lib/libtorch_cuda\.so needs libcudart\.so\.13, which nothing"):
        check_venv([site], host_dirs=[], ld_cache={}, default_dirs=())


def test_cuda12_runtime_on_a_cuda13_host_fails_naming_package_object_and_library(lab: dict[str, Path]) -> None:
    with pytest.raises(ClosureError) as caught:
        check_venv([lab["site"]], host_dirs=[str(lab["host"])], ld_cache={})
    message = str(caught.value)
    assert "torchvision 0.24.1: torchvision/_C.so needs libcudart.so.12, which nothing on this host provides" in message
    assert f"the host's library dirs {lab['host']}" in message  # what was searched
    assert "its RPATH (and its loaders') /__w/_temp/conda_environment/lib" in message
    assert "sglang_release_closure_allowlist" in message
    assert "libc10.so" not in message.split("torchvision/_C.so needs", 1)[1].split(",", 1)[0]  # torch/lib's is found
    assert "torch 2.9.1" not in message and "origin-pkg" not in message


def test_a_library_bundled_for_another_object_does_not_satisfy_the_need(lab: dict[str, Path]) -> None:
    """torchvision.libs/libcudart.e8e8b82a.so.12 has SONAME libcudart.so.12, but only image.so's RUNPATH leads there."""
    site = lab["root"] / "bundled"
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(lab["site"], site)
    # auditwheel's renaming: image.so's DT_NEEDED names the file, whose SONAME stays libcudart.so.12
    renamed = build(lab["stubs"] / "renamed" / "libcudart.e8e8b82a.so.12", "libcudart.e8e8b82a.so.12")
    build(site / "torchvision/image.so", needs=(renamed,), rpath="$ORIGIN:$ORIGIN/../torchvision.libs")
    build(site / "torchvision.libs/libcudart.e8e8b82a.so.12", "libcudart.so.12")
    assert read_elf(site / "torchvision/image.so").needed[0] == "libcudart.e8e8b82a.so.12"
    closure = scan_venv([site], host_dirs=[str(lab["host"])], ld_cache={})
    failing = {(u.object, u.needed) for u in closure.unmet}
    assert failing == {("torchvision/_C.so", "libcudart.so.12")}


def test_origin_rpath_is_expanded(lab: dict[str, Path]) -> None:
    site = lab["root"] / "origin"
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(lab["site"], site, ignore=shutil.ignore_patterns("torchvision*"))
    assert scan_venv([site], host_dirs=[str(lab["host"])], ld_cache={}).unmet == []
    # the same need without the $ORIGIN entry is not found: the helper lies in no directory ld.so searches
    build(site / "origin_pkg/_plain.so", needs=(lab["helper"],))
    unmet = scan_venv([site], host_dirs=[str(lab["host"])], ld_cache={}).unmet
    assert [(u.distribution, u.object, u.needed) for u in unmet] == [("(no distribution)", "origin_pkg/_plain.so", "libhelper.so.1")]
    assert unmet[0].reason.startswith(f"which the venv has ({site / 'origin_pkg.libs/libhelper.so.1'}) but nowhere ld.so searches")
    # and with the helper gone, the $ORIGIN object fails naming it
    (site / "origin_pkg.libs/libhelper.so.1").unlink()
    unmet = scan_venv([site], host_dirs=[str(lab["host"])], ld_cache={}).unmet
    assert ("origin-pkg", "origin_pkg/_ext.so", "libhelper.so.1") in {(u.distribution, u.object, u.needed) for u in unmet}
    assert f"its RUNPATH {site / 'origin_pkg.libs'}" in unmet[0].reason


@pytest.mark.parametrize(("new_dtags", "loads"), [(False, True), (True, False)], ids=["DT_RPATH-inherited", "DT_RUNPATH-not-inherited"])
def test_rpath_of_the_loader_applies_to_its_dependencies_runpath_does_not(lab: dict[str, Path], new_dtags: bool, loads: bool) -> None:
    """As scipy's wheels rely on: _fitpack.so (RPATH $ORIGIN/../../scipy.libs) -> libgfortran (no RPATH) -> libquadmath."""
    site = lab["root"] / f"chain-{new_dtags}"
    shutil.rmtree(site, ignore_errors=True)
    quadmath = build(site / "scipy.libs/libquadmath-8.so.0", "libquadmath-8.so.0")
    gfortran = build(site / "scipy.libs/libgfortran-8.so.5", "libgfortran-8.so.5", needs=(quadmath,))
    build(site / "scipy/interpolate/_fitpack.so", needs=(gfortran,), rpath="$ORIGIN/../../scipy.libs", new_dtags=new_dtags)
    dist_info(site, "scipy", "1.17.1", ["scipy.libs/libquadmath-8.so.0", "scipy.libs/libgfortran-8.so.5", "scipy/interpolate/_fitpack.so"])
    unmet = scan_venv([site], ld_cache={}, default_dirs=()).unmet
    if loads:
        assert unmet == []
    else:
        assert [(u.object, u.needed) for u in unmet] == [
            ("scipy/interpolate/_fitpack.so", "libquadmath-8.so.0 (for scipy.libs/libgfortran-8.so.5, which it loads)")
        ]


def test_allowlist_by_package_and_by_object_glob(lab: dict[str, Path]) -> None:
    reason = "SGLang 0.5.9 serves this model without torchvision's ops"
    closure = check_venv([lab["site"]], host_dirs=[str(lab["host"])], ld_cache={}, allowlist={"torchvision": reason, "flashinfer": "x"})
    assert [(u.distribution, u.object, u.needed, u.allowed) for u in closure.allowed] == [
        ("torchvision", "torchvision/_C.so", "libcudart.so.12", reason)
    ]
    assert closure.allowlist_unused == ["flashinfer"]
    assert f"(allowed: {reason})" in closure.summary()["allowed"][0]
    # a glob that covers the object; one that covers another object of the package does not allow it
    check_venv([lab["site"]], host_dirs=[str(lab["host"])], ld_cache={}, allowlist={"torchvision:torchvision/_C*.so": reason})
    with pytest.raises(ClosureError, match=r"torchvision 0\.24\.1: torchvision/_C\.so needs libcudart\.so\.12"):
        check_venv([lab["site"]], host_dirs=[str(lab["host"])], ld_cache={}, allowlist={"torchvision:torchvision/image*.so": reason})
    # another package's entry does not cover it
    with pytest.raises(ClosureError, match=r"torchvision 0\.24\.1"):
        check_venv([lab["site"]], host_dirs=[str(lab["host"])], ld_cache={}, allowlist={"torchaudio": reason})


def test_allowlist_entry_without_reason_is_refused(lab: dict[str, Path]) -> None:
    with pytest.raises(ClosureError, match=r"sglang_release_closure_allowlist: expected a reason .* found none for torchvision"):
        scan_venv([lab["site"]], allowlist={"torchvision": "  "}, ld_cache={})


def test_files_of_another_machine_are_not_loaded(lab: dict[str, Path]) -> None:
    site = lab["root"] / "abi"
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(lab["site"], site, ignore=shutil.ignore_patterns("torchvision*"))
    cubin = bytearray((site / "torch/lib/libc10.so").read_bytes())
    cubin[18:20] = (190).to_bytes(2, "little")  # EM_CUDA: a GPU cubin, which ld.so never loads
    (site / "torch/lib/kernel.cubin").write_bytes(bytes(cubin))
    closure = check_venv([site], host_dirs=[str(lab["host"])], ld_cache={})
    assert closure.other_abi == ["torch/lib/kernel.cubin"] and closure.objects == 4


def test_role_default_allowlist_has_a_reason_per_entry() -> None:
    allowlist = role_allowlist()
    assert allowlist, "roles/sglang_release/defaults/main.yml: sglang_release_closure_allowlist is empty"
    for key, reason in allowlist.items():
        assert ":" in key, f"{key}: the defaults allow objects of a package (package:glob), never a whole package"
        assert isinstance(reason, str) and len(reason.split()) >= 8, f"{key}: expected a reason, found {reason!r}"


REAL = ROOT / ".cache" / "real-wheels" / "closure-0.5.9"


@pytest.mark.parametrize(
    ("wheel", "dist", "obj"),
    [
        ("torchvision-0.24.1-*.whl", "torchvision 0.24.1", "torchvision/_C.so"),
        ("torchaudio-2.9.1-*.whl", "torchaudio 2.9.1", "torchaudio/lib/libtorchaudio.so"),
        ("torchao-0.9.0-*.whl", "torchao 0.9.0", "torchao/_C.abi3.so"),
        ("torch_memory_saver-0.0.9-*.whl", "torch_memory_saver 0.0.9", "torch_memory_saver_hook_mode_torch.abi3.so"),
    ],
)
def test_real_pypi_wheels_of_the_0_5_9_closure_need_cudart_12(wheel: str, dist: str, obj: str, tmp_path: Path) -> None:
    """The wheels pip takes for SGLang 0.5.9, where present (pip download into .cache/real-wheels/closure-0.5.9)."""
    found = sorted(REAL.glob(wheel))
    if not found:
        pytest.skip(f"no {wheel} under {REAL}")
    subprocess.run([sys.executable, "-m", "zipfile", "-e", str(found[0]), str(tmp_path)], check=True)
    cudart13 = build(tmp_path.parent / f"{tmp_path.name}-host" / "libcudart.so.13", "libcudart.so.13")
    closure = scan_venv([tmp_path], host_dirs=[str(cudart13.parent)], ld_cache={}, default_dirs=())
    said = describe(closure.unmet, objects_per_package=99)
    assert said.startswith(f"{dist}: ") and f"{obj} needs " in said
    assert any(u.object == obj and u.needed == "libcudart.so.12" for u in closure.unmet), said


def test_an_object_with_runpath_ignores_its_loaders_rpath(lab: dict[str, Path]) -> None:
    """ld.so uses the loaders' DT_RPATH only for an object without DT_RUNPATH."""
    site = lab["root"] / "runpath-child"
    shutil.rmtree(site, ignore_errors=True)
    leaf = build(site / "pkg.libs/libleaf.so.1", "libleaf.so.1")
    child = build(site / "pkg.libs/libchild.so.1", "libchild.so.1", needs=(leaf,), rpath="/nonexistent/dir", new_dtags=True)
    build(site / "pkg/_ext.so", needs=(child,), rpath="$ORIGIN/../pkg.libs", new_dtags=False)
    unmet = scan_venv([site], ld_cache={}, default_dirs=()).unmet
    assert [(u.object, u.needed) for u in unmet] == [("pkg/_ext.so", "libleaf.so.1 (for pkg.libs/libchild.so.1, which it loads)")]
    assert "its RUNPATH /nonexistent/dir" in unmet[0].reason


def test_a_library_loaded_earlier_in_the_same_load_is_taken_by_soname(lab: dict[str, Path]) -> None:
    """_ext.so (RUNPATH) needs libfirst then libsecond; libsecond (no paths) needs libfirst, already loaded by then."""
    site = lab["root"] / "same-load"
    shutil.rmtree(site, ignore_errors=True)
    first = build(site / "pkg.libs/libfirst.so.1", "libfirst.so.1")
    second = build(site / "pkg.libs/libsecond.so.1", "libsecond.so.1", needs=(first,))
    build(site / "pkg/_ext.so", needs=(first, second), rpath="$ORIGIN/../pkg.libs")
    assert scan_venv([site], ld_cache={}, default_dirs=()).unmet == []
    # loaded the other way round, libsecond's need comes first and nothing on its path has libfirst
    shutil.rmtree(site)
    first = build(site / "pkg.libs/libfirst.so.1", "libfirst.so.1")
    second = build(site / "pkg.libs/libsecond.so.1", "libsecond.so.1", needs=(first,))
    build(site / "pkg/_ext.so", needs=(second,), rpath="$ORIGIN/../pkg.libs")
    assert [u.needed for u in scan_venv([site], ld_cache={}, default_dirs=()).unmet] == [
        "libfirst.so.1 (for pkg.libs/libsecond.so.1, which it loads)"
    ]


def test_a_file_of_the_right_name_for_another_machine_does_not_satisfy(lab: dict[str, Path]) -> None:
    host12 = lab["root"] / "host-with-foreign-cudart12"
    host12.mkdir(exist_ok=True)
    foreign = bytearray((lab["stubs"] / "libcudart.so.12").read_bytes())
    (host12 / "libcudart.so.12").write_bytes(bytes(foreign))
    assert check_venv([lab["site"]], host_dirs=[str(lab["host"]), str(host12)], ld_cache={}).unmet == []  # the real one: loads
    foreign[18:20] = (183).to_bytes(2, "little")  # EM_AARCH64
    (host12 / "libcudart.so.12").write_bytes(bytes(foreign))
    with pytest.raises(ClosureError, match=r"torchvision/_C\.so needs libcudart\.so\.12"):
        check_venv([lab["site"]], host_dirs=[str(lab["host"]), str(host12)], ld_cache={})


def test_the_release_install_module_fails_naming_package_and_library_then_passes_with_the_allowlist(
    lab: dict[str, Path], tmp_path: Path
) -> None:
    """plugins/modules/sglang_release_install.py through real Ansible (read back only): the check runs on the venv the module is given."""
    from test_modules import run_module

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    shutil.copytree(lab["site"], purelib, dirs_exist_ok=True)
    args = {"venv": str(venv), "build_root": str(tmp_path), "artifacts": {}, "install": False, "library_dirs": [str(lab["host"])]}
    failed = run_module("sglang_release_install", args)
    assert failed.get("failed"), failed
    assert f"the release venv {venv}: 1 package(s)" in failed["msg"]
    assert "torchvision 0.24.1: torchvision/_C.so needs libcudart.so.12, which nothing on this host provides" in failed["msg"]
    reason = "not imported by the server modules this release runs"
    passed = run_module("sglang_release_install", {**args, "closure_allowlist": {"torchvision": reason}})
    assert not passed.get("failed"), passed.get("msg")
    closure = passed["library_closure"]
    assert closure["objects_checked"] == 5 and closure["unmet"] == []
    assert closure["allowed"] and closure["allowed"][0].startswith("torchvision 0.24.1: torchvision/_C.so needs libcudart.so.12")
    assert closure["allowed"][0].endswith(f"(allowed: {reason})")


def test_a_runtime_the_venv_adds_through_a_pth_file_provides_its_torch(tmp_path: Path) -> None:
    """The lab's release venvs import torch from a shared runtime listed in a .pth file (sglang_release_site_packages):
    its torch/lib counts as loaded, as the venv's own would; the runtime's other objects are not the release's."""
    from sglang_sm120.build.elf_closure import pth_dirs

    runtime = tmp_path / "runtime" / "site-packages"
    c10 = build(runtime / "torch/lib/libc10.so", "libc10.so")
    lost = build(tmp_path / "elsewhere" / "libgone.so.1", "libgone.so.1")
    build(runtime / "other/_x.so", needs=(lost,))  # unloadable, but not the release's to check
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    build(site / "sglang/srt/_core.so", needs=(c10,), rpath="$ORIGIN/../../torch/lib")  # the venv has no torch/lib
    dist_info(site, "sglang", "0.5.23", ["sglang/srt/_core.so"])
    (site / "extra.pth").write_text(f"# the shared runtime\n{runtime}\nimport os\n{tmp_path / 'missing'}\n")
    assert pth_dirs([site]) == [runtime]
    alone = scan_venv([site], ld_cache={}, default_dirs=()).unmet
    assert [(u.distribution, u.needed) for u in alone] == [("sglang", "libc10.so")]
    assert scan_venv([site], ld_cache={}, default_dirs=(), provider_sites=pth_dirs([site])).unmet == []


def test_per_cuda_variants_pass_when_the_hosts_one_loads(lab: dict[str, Path], tmp_path: Path) -> None:
    """torch_memory_saver 0.0.10 as the index ships it: <stem>_cu12, <stem>_cu13 and a plain <stem>
    (CUDA 12) per hook; its Python loads the variant of the host's CUDA (seen failing the check on the
    real GPU machine before this rule: tests/data/real-server/0.5.13-h200-index-release/closure.json)."""
    cudart12 = next((lab["site"].parent.parent.parent.parent / "link-only").glob("libcudart.so.12"))
    cudart13 = lab["host"] / "libcudart.so.13"
    site = tmp_path / "site-packages"
    names = []
    for stem in ("hook_mode_preload", "hook_mode_torch"):
        build(site / f"tms_{stem}_cu12.abi3.so", needs=(cudart12,))
        build(site / f"tms_{stem}.abi3.so", needs=(cudart12,))
        build(site / f"tms_{stem}_cu13.abi3.so", needs=(cudart13,))
        names += [f"tms_{stem}_cu12.abi3.so", f"tms_{stem}.abi3.so", f"tms_{stem}_cu13.abi3.so"]
    dist_info(site, "torch_memory_saver", "0.0.10", names)
    closure = scan_venv([site], host_dirs=[str(lab["host"])], ld_cache={}, default_dirs=())
    assert closure.unmet == []
    allowed = {u.object: u.allowed for u in closure.allowed}
    assert set(allowed) == {
        "tms_hook_mode_preload_cu12.abi3.so",
        "tms_hook_mode_preload.abi3.so",
        "tms_hook_mode_torch_cu12.abi3.so",
        "tms_hook_mode_torch.abi3.so",
    }
    assert "tms_hook_mode_preload_cu13.abi3.so loads on this host" in allowed["tms_hook_mode_preload.abi3.so"]
    # a CUDA-12-only host: nothing to pick from on a CUDA-13 host without the cu13 objects
    only12 = tmp_path / "only12"
    build(only12 / "tms_hook_cu12.abi3.so", needs=(cudart12,))
    build(only12 / "tms_hook.abi3.so", needs=(cudart12,))
    dist_info(only12, "torch_memory_saver", "0.0.9", ["tms_hook_cu12.abi3.so", "tms_hook.abi3.so"])
    failed = scan_venv([only12], host_dirs=[str(lab["host"])], ld_cache={}, default_dirs=())
    assert {u.object for u in failed.unmet} == {"tms_hook_cu12.abi3.so", "tms_hook.abi3.so"} and failed.allowed == []


def test_tvm_ffis_library_counts_as_loaded_by_pythons_import(tmp_path: Path) -> None:
    """xgrammar's bindings need libtvm_ffi.so, which only apache-tvm-ffi's tvm_ffi/lib holds (no path of
    xgrammar's leads there): `import tvm_ffi` has loaded it, as `import torch` loads torch/lib."""
    site = tmp_path / "site-packages"
    tvm = build(site / "tvm_ffi/lib/libtvm_ffi.so", "libtvm_ffi.so")
    build(site / "xgrammar/libxgrammar_bindings.so", needs=(tvm,))
    dist_info(site, "apache-tvm-ffi", "0.1.9", ["tvm_ffi/lib/libtvm_ffi.so"])
    dist_info(site, "xgrammar", "0.2.1", ["xgrammar/libxgrammar_bindings.so"])
    assert scan_venv([site], ld_cache={}, default_dirs=()).unmet == []
    # elsewhere than tvm_ffi/lib, the same library is not taken
    other = tmp_path / "other"
    lib = build(other / "somepkg/libtvm_ffi.so", "libtvm_ffi.so")
    build(other / "xgrammar/libxgrammar_bindings.so", needs=(lib,))
    unmet = scan_venv([other], ld_cache={}, default_dirs=()).unmet
    assert [(u.object, u.needed) for u in unmet] == [("xgrammar/libxgrammar_bindings.so", "libtvm_ffi.so")]
