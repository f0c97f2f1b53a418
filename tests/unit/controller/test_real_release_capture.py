"""What the toolkit's own release install saw on a real GPU machine with a release of the package index's own wheels.

tests/data/real-server/0.5.13-h200-index-release/ was made by scripts/real_release_proof.py on the lent
H200 (its README section says how, and what it does not show). These tests pin what was measured there:
the index's sglang-kernel 0.4.3 wheel read back file by file with the sha256 the controller's index
judgement has, its GPU code read from the installed objects, the library closure's verdict, sgl_kernel
ops run on the GPU, and the canary started with the release venv's Python."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CAPTURE = ROOT / "tests/data/real-server/0.5.13-h200-index-release"
REPORT = json.loads((CAPTURE / "report.json").read_text())
READBACK = json.loads((CAPTURE / "readback.json").read_text())
JUDGEMENT = json.loads((CAPTURE / "index-judgement-sglang-kernel-0.4.3.json").read_text())
# Distributions pip left out of the venv because the runtime named by the venv's .pth had the same version.
SKIPPED = [
    "build",
    "einops",
    "huggingface-hub",
    "mdurl",
    "prometheus-client",
    "protobuf",
    "pygments",
    "pyproject-hooks",
    "rich",
    "shellingham",
    "tabulate",
    "tqdm",
    "typing-extensions",
]


def test_the_release_was_made_with_the_toolkits_install_code_from_wheel_files() -> None:
    made = REPORT["venv_made"]
    assert made["argv"][1:3] == ["-m", "venv"] and made["rc"] == 0
    assert made["pth"]["file"].endswith("/zz-sglang-release-site-packages.pth")  # the role's sglang_release_site_packages
    assert made["pth"]["lines"] == ["/opt/torch/.venv/lib/python3.12/site-packages"]
    install = REPORT["install"]
    assert install["rc"] == 0 and install["wheels"] == 116
    assert install["argv_head"][1:7] == ["-m", "pip", "install", "--no-index", "--disable-pip-version-check", "--no-deps"]
    assert install["argv_head"][7].startswith("/tmp/release/build/wheelhouse/") and install["argv_head"][7].endswith(".whl")
    log = (CAPTURE / "install.log").read_text()
    assert log.startswith("+ /tmp/release/venv/bin/python -m pip install --no-index") and "Successfully installed" in log
    assert all(step["ok"] for step in REPORT["steps"].values()), REPORT["steps"]


def test_the_index_sglang_kernel_wheel_read_back_file_by_file() -> None:
    kernel = READBACK["sglang-kernel"]
    assert kernel["ok"]
    (installed,) = kernel["installed"]
    assert installed["version"] == "0.4.3" and installed["wheel"] == JUDGEMENT["wheel"]
    assert installed["wheel_sha256"] == JUDGEMENT["sha256"] == REPORT["expect"]["sglang-kernel"]
    assert REPORT["wheel_sha256_sglang_kernel"] == JUDGEMENT["sha256"]  # the carried file itself, hashed on the machine
    assert installed["files_checked"] == 124  # every file of the whole wheel (FA3 and sm100 objects included)
    sums = (CAPTURE / "bundle-sha256sums.txt").read_text()
    assert f"{JUDGEMENT['sha256']}  {JUDGEMENT['wheel']}" in sums
    assert REPORT["verdict"]["sglang_kernel_sha256_is_index"] and REPORT["verdict"]["sglang_kernel_read_back"]


def test_the_installed_kernel_objects_carry_sm120a_and_link_cuda_13() -> None:
    (evidence,) = READBACK["sglang-kernel"]["sm120_verification"]
    objects = {o["path"]: o for o in evidence["shared_objects"]}
    assert evidence["read_from"].startswith("installed files (sglang_kernel-0.4.3.dist-info/RECORD)")
    for path in ("sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so"):
        assert "sm_120a" in objects[path]["targets"] and objects[path]["rule"] == "must carry the target"
    assert objects["sgl_kernel/flash_ops.abi3.so"]["targets"] == ["sm_80", "sm_86", "sm_90a"]
    assert objects["sgl_kernel/flash_ops.abi3.so"]["rule"].startswith("other architectures on purpose")
    assert all(o["cudart"] == ["13"] for o in objects.values())
    # the same objects, with the same GPU code, as the controller's judgement of the index wheel read them
    judged = {o["path"]: sorted(o["targets"]) for o in JUDGEMENT["objects"]}
    assert {p: sorted(o["targets"]) for p, o in objects.items()} == judged


def test_pip_left_out_what_the_shared_runtime_has_at_the_same_version_and_read_back_refused_it() -> None:
    assert REPORT["read_back"]["pip_skipped_same_version_in_runtime"] == SKIPPED
    log = (CAPTURE / "install.log").read_text()
    assert "huggingface-hub is already installed with the same version as the provided wheel" in log
    for name in SKIPPED:
        assert not READBACK[name]["ok"] and READBACK[name]["error"].endswith("found it not installed"), name
    # one more refusal: two index wheels ship a top-level build_backend.py; the one on disk is flashinfer-python's
    assert REPORT["read_back"]["failed_other_than_skipped"] == ["torch-c-dlpack-ext"]
    assert "build_backend.py: file on disk sha256=" in READBACK["torch-c-dlpack-ext"]["error"]
    assert READBACK["flashinfer-python"]["ok"]
    ok = [name for name, entry in READBACK.items() if entry["ok"]]
    assert len(READBACK) == 116 and len(ok) == 116 - len(SKIPPED) - 1
    assert READBACK["sglang"]["ok"] and READBACK["torch-memory-saver"]["ok"]


def test_the_elf_closure_with_the_default_allowlist_failed_naming_three_packages_and_not_the_kernel() -> None:
    closure = json.loads((CAPTURE / "closure.json").read_text())
    assert closure["provider_sites"] == ["/opt/torch/.venv/lib/python3.12/site-packages"]
    assert closure["passed"] is False and not REPORT["verdict"]["elf_closure_passed"]
    unmet = closure["summary"]["unmet"]
    packages = sorted({u.split(":")[0] for u in unmet})
    assert packages == ["sgl-deep-gemm 0.1.2", "torch_memory_saver 0.0.10", "xgrammar 0.2.1"]
    tms = [u for u in unmet if u.startswith("torch_memory_saver")]
    assert len(tms) == 4 and all("needs libcudart.so.12, which nothing on this host provides" in u for u in tms)
    tvm = [u for u in unmet if not u.startswith("torch_memory_saver")]
    assert all("needs libtvm_ffi.so, which the venv has" in u for u in tvm)
    assert not any("sglang_kernel" in u or "sgl_kernel/" in u for u in unmet)
    assert closure["summary"]["objects_checked"] == 175


def test_the_release_imports_and_its_kernel_runs_on_the_gpu() -> None:
    assert [o["module"] for o in REPORT["imports"] if not o["ok"]] == []
    op = json.loads((CAPTURE / "gpu-op.json").read_text())
    assert op["rc"] == 0 and op["device"] == "NVIDIA H200" and op["capability"] == [9, 0]
    assert op["torch"] == "2.11.0+cu130" and op["sgl_kernel_file"].startswith("/tmp/release/venv/")
    for name in ("rmsnorm", "silu_and_mul"):
        assert op["ops"][name]["ok"] and op["ops"][name]["device"] == "cuda:0"
        assert op["ops"][name]["max_abs_err_vs_torch"] < 0.05 * op["ops"][name]["ref_max_abs"]
    # capability 9.0 loads the sm90 objects of the release venv (not the sm_120a code an SM120 host runs)
    assert "/tmp/release/venv/lib/python3.12/site-packages/sgl_kernel/sm90/common_ops.abi3.so" in op["mapped_objects"]
    assert not any("sm100/" in path for path in op["mapped_objects"])


def test_the_canary_served_with_the_release_venvs_python() -> None:
    canary = REPORT["canary"]
    assert canary["python"] == "/tmp/release/venv/bin/python" and canary["classified"] == "served"
    result = json.loads((CAPTURE / "canary-result.json").read_text())
    assert result["ok"] and result["phase"] == "served" and result["command"][0] == "/tmp/release/venv/bin/python"
    assert [phase for phase, _ in result["phases"]] == ["port closed", "503", "healthy"]
    assert result["requests"]["streamed_ok"] and result["requests"]["concurrent_ok"] == 4
    verdicts = {o["name"]: o["verdict"] for o in result["evidence"]["optimisations"]}
    assert verdicts["cuda graphs"] == "yes" and verdicts["speculative decoding"] == "yes"
    assert canary["added_flags"] == ["--dtype", "bfloat16"]
    log = (CAPTURE / "canary.log").read_text()
    assert "Capture draft cuda graph end" in log and "/tmp/release/venv/lib/python3.12/site-packages/sglang" in log


def test_the_first_try_failure_was_classified() -> None:
    first = json.loads((CAPTURE / "first-try-report.json").read_text())["canary"]
    assert not first["ok"] and first["classified"] == "server exited" and first["phase"] == "exited"
    assert "Capture cuda graph failed: expected mat1 and mat2 to have the same dtype" in first["message"]
    # the tiny Llama EAGLE-3 draft is float16 (as the real draft's config says), the target bfloat16
    assert "KV Cache is allocated. dtype: torch.float16" in (CAPTURE / "first-try-canary.log").read_text()
    assert "KV Cache is allocated. dtype: torch.float16" not in (CAPTURE / "canary.log").read_text()  # with --dtype bfloat16


def test_no_captured_file_holds_the_throwaway_key() -> None:
    for path in (p for p in CAPTURE.rglob("*") if p.is_file()):  # rerun/ too
        assert not re.search(r"proof-[0-9a-f]{24}", path.read_text(errors="replace")), path
    assert REPORT["canary"]["key_found_in"] == []


RERUN = CAPTURE / "rerun"  # the same bundle on the H200 again, with the checks of "Release checks that SGLang 0.5.13's ..."


def test_the_rerun_closure_passed_with_the_variants_and_tvm_ffi() -> None:
    closure = json.loads((RERUN / "closure.json").read_text())
    assert closure["passed"] is True and closure["failure"] is None and closure["summary"]["unmet"] == []
    assert closure["summary"]["objects_checked"] == 175
    variants = [a for a in closure["summary"]["allowed"] if "another CUDA build of an object the package picks" in a]
    assert len(variants) == 4 and all(a.startswith("torch_memory_saver 0.0.10: ") and "_cu13.abi3.so loads" in a for a in variants)
    assert len(closure["summary"]["allowed"]) == 115 + 4  # torchcodec's FFmpeg needs by the role's list, as before
    assert not any("libtvm_ffi.so" in a for a in closure["summary"]["allowed"])  # found in tvm_ffi/lib, not allowed


def test_the_rerun_read_back_the_installed_distributions_and_the_kernel() -> None:
    report = json.loads((RERUN / "report.json").read_text())
    readback = json.loads((RERUN / "readback.json").read_text())
    runtime = json.loads((RERUN / "from-runtime.json").read_text())
    # the 13 pip skipped are the runtime's, each at the wheel's version; read_back ran on the other 103
    assert report["read_back"]["pip_skipped_same_version_in_runtime"] == SKIPPED == sorted(runtime)
    assert all(e["same_version"] and e["runtime"][0]["dist_info"].startswith("/opt/torch/.venv/") for e in runtime.values())
    assert len(readback) == 103 and not set(readback) & set(SKIPPED)
    # read_back as the module calls it (all the wheels at once) passed; one wheel at a time, the shared file still fails
    together = report["read_back_together"]
    assert together["ok"] and together["wheels"] == 103
    assert together["shared_files"] == [
        "build_backend.py: torch_c_dlpack_ext and flashinfer_python both ship it; on disk is flashinfer_python's, installed after"
    ]
    assert [name for name, entry in readback.items() if not entry["ok"]] == ["torch-c-dlpack-ext"]
    (kernel,) = readback["sglang-kernel"]["installed"]
    assert readback["sglang-kernel"]["ok"] and kernel["files_checked"] == 124 and kernel["wheel_sha256"] == JUDGEMENT["sha256"]
    assert report["verdict"]["elf_closure_passed"] and report["verdict"]["canary"] == "served" and report["verdict"]["gpu_op_ran"]
