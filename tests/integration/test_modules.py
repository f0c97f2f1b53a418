"""The modules in plugins/modules/ run through real Ansible (ad-hoc, local connection)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import DATA, ROOT, standin_server
from sglang_sm120.host.facts import FACTS
from sglang_sm120.launch.start_failures import read_host_facts

ANSIBLE = Path(sys.executable).parent / "ansible"


def run_module(module: str, args: dict, env_extra: dict | None = None, flags: tuple[str, ...] = ()) -> dict:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_GATHERING="explicit",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    env.update(env_extra or {})
    proc = subprocess.run(
        [
            str(ANSIBLE),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-m",
            module if "." in module else f"sm120.sglang.{module}",
            "-a",
            json.dumps(args),
            *flags,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    output = json.loads(proc.stdout)
    return output["plays"][0]["tasks"][0]["hosts"]["localhost"]


def fake_nvidia_smi(tmp_path: Path, capture: str, rc: int = 0) -> Path:
    """A stand-in nvidia-smi that prints a captured output (no GPU here)."""
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat '{DATA / 'nvidia-smi' / capture}'\nexit {rc}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_preflight_passes_with_eight_sm120_gpus(tmp_path):
    smi = fake_nvidia_smi(tmp_path, "eight-rtx-pro-6000.txt")
    result = run_module(
        "sglang_preflight", {"nvidia_smi": str(smi), "disks": [{"label": "tmp", "path": str(tmp_path / "new"), "min_gib": 0.001}]}
    )
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    assert len(result["gpus"]) == 8 and result["gpus"][3]["compute_cap"] == "12.0"
    assert result["disks"][0]["measured_at"] == str(tmp_path)


def test_preflight_lists_every_problem_in_one_failure(tmp_path):
    smi = fake_nvidia_smi(tmp_path, "seven-gpus.txt")
    result = run_module(
        "sglang_preflight",
        {"nvidia_smi": str(smi), "min_memory_gib": 100000, "disks": [{"label": "releases", "path": "/", "min_gib": 10**9}]},
    )
    assert result["failed"]
    assert "preflight found 3 problem(s)" in result["msg"]
    assert "found 7 GPUs, expected 8" in result["msg"]
    assert "expected at least 100000.0 GiB" in result["msg"]
    assert "releases: found" in result["msg"]


def test_preflight_without_nvidia_smi_says_so(tmp_path):
    result = run_module("sglang_preflight", {"nvidia_smi": str(tmp_path / "absent-nvidia-smi")})
    assert result["failed"]
    assert "not found on PATH (is the NVIDIA driver installed?); expected 8 GPUs" in result["msg"]


def test_preflight_reports_a_failing_nvidia_smi(tmp_path):
    smi = fake_nvidia_smi(tmp_path, "driver-not-loaded.txt", rc=9)
    result = run_module("sglang_preflight", {"nvidia_smi": str(smi)})
    assert result["failed"]
    assert "exited 9: NVIDIA-SMI has failed" in result["msg"]


def test_preflight_skips_gpus_when_not_required(tmp_path):
    result = run_module("sglang_preflight", {"gpu_required": False, "nvidia_smi": str(tmp_path / "none")})
    assert not result.get("failed") and result["gpus"] == []


def fake_gpu_host(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in nvidia-smi answering the GPU query and `topo -m` from captures (eight RTX PRO 6000
    on PCIe), and a CUDA home whose nvcc prints the real H200's `nvcc --version`."""
    facts = DATA / "host-facts"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        f"if [ \"$1\" = topo ]; then cat '{facts / 'rtx-pro-6000-pcie' / 'topo-m.txt'}';"
        f" else cat '{DATA / 'nvidia-smi' / 'eight-rtx-pro-6000.txt'}'; fi\n"
    )
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text(f"#!/bin/sh\ncat '{facts / 'h200-real' / 'nvcc.txt'}'\n")
    for tool in (smi, cuda / "bin" / "nvcc"):
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return smi, cuda


def test_preflight_gathers_the_host_facts_and_they_read_back_as_host_facts(tmp_path):
    smi, cuda = fake_gpu_host(tmp_path)
    args = {"nvidia_smi": str(smi), "cuda_home": str(cuda), "lspci": str(tmp_path / "no-lspci")}
    result = run_module("sglang_preflight", args)
    assert not result.get("failed"), result.get("msg")
    assert result["pcie_only"] is True and result["gpu_topology"]["GPU0"]["GPU1"] == "PIX" and len(result["gpu_topology"]) == 8
    assert (result["nvcc_path"], result["nvcc_version"]) == (str(cuda / "bin" / "nvcc"), "13.0")
    assert "nvcc" not in result["jit_tools_missing"]
    # an absent command is an unknown fact with its reason, never a problem
    assert result["acs_redirect"] is None and result["acs_redirect_bridges"] is None and result["problems"] == []
    lspci_absent = f"{tmp_path / 'no-lspci'} not found (install pciutils to read the bridges' ACS settings)"
    assert result["facts_unknown"]["acs_redirect"] == lspci_absent
    assert sorted(k for k in FACTS if result[k] is None) == sorted(result["facts_unknown"])
    # action and _ansible_no_log are the json callback's; a registered result has neither
    saved = {k: v for k, v in result.items() if k not in ("action", "_ansible_no_log")}
    (tmp_path / "facts.json").write_text(json.dumps(saved))
    host = read_host_facts(tmp_path / "facts.json")
    assert host.pcie_only is True and host.nvcc_version == "13.0" and host.capability == "12.0" and host.memory_mib == 97887
    assert host.unknown["acs_redirect"] == result["facts_unknown"]["acs_redirect"]
    checked = run_module("sglang_preflight", args, flags=("--check",))
    assert {k: checked[k] for k in FACTS} == {k: result[k] for k in FACTS}


def test_preflight_saves_the_facts_the_start_gate_reads_and_never_reports_a_change(tmp_path):
    smi, cuda = fake_gpu_host(tmp_path)
    target = tmp_path / "sglang" / "host-facts.json"
    args = {"nvidia_smi": str(smi), "cuda_home": str(cuda), "lspci": str(tmp_path / "no-lspci"), "save_facts": str(target)}
    previewed = run_module("sglang_preflight", args, flags=("--check",))
    assert previewed["facts_saved"] is True and not target.exists()  # check mode says so and writes nothing
    first = run_module("sglang_preflight", args)
    assert first["facts_saved"] is True and first["changed"] is False
    host = read_host_facts(target)  # the file the launch plan's start gate reads
    assert host.pcie_only is True and host.memory_mib == 97887 and host.nvcc_version == "13.0"
    assert "disks" not in json.loads(target.read_text())  # free space changes from run to run: not saved
    again = run_module("sglang_preflight", args)
    assert again["facts_saved"] is False and again["changed"] is False
    # the host changed (another nvcc): the record follows, and still no change is reported
    (cuda / "bin" / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    moved = run_module("sglang_preflight", args)
    assert moved["facts_saved"] is True and moved["changed"] is False and read_host_facts(target).nvcc_version == "12.8"


def test_preflight_facts_never_change_its_verdict(tmp_path):
    """Without nvidia-smi every GPU fact is unknown, and the failure is the GPU check's alone."""
    saved = tmp_path / "facts.json"
    args = {"nvidia_smi": str(tmp_path / "absent-nvidia-smi"), "cuda_home": str(tmp_path), "save_facts": str(saved)}
    result = run_module("sglang_preflight", args)
    assert result["failed"] and result["msg"].startswith("preflight found 1 problem(s): cannot list GPUs")
    facts = json.loads(saved.read_text())  # a failure returns its problems; the facts it read are in the saved file
    assert facts["gpu_topology"] is None and facts["pcie_only"] is None
    assert facts["facts_unknown"]["pcie_only"] == f"{tmp_path / 'absent-nvidia-smi'} not found (is the NVIDIA driver installed?)"
    skipped = run_module("sglang_preflight", {"gpu_required": False, "nvidia_smi": str(tmp_path / "none")})
    assert not skipped.get("failed") and skipped["gpus"] == [] and skipped["pcie_only"] is None


def test_cuda_verify_accepts_the_real_toolkit(cuda_home):
    result = run_module("cuda_toolkit_verify", {"cuda_home": str(cuda_home), "release": "13.0", "build": "V13.0.88", "version": "13.0.1"})
    assert not result.get("failed"), result.get("msg")
    assert result["targets"] == ["sm_120"] and result["changed"] is False


def test_cuda_verify_records_the_probe_and_compiles_again_when_the_compiler_changes(cuda_home, tmp_path):
    # The wheels toolkit is links into its site directory: the same links beside a link to that site.
    (tmp_path / "site").symlink_to((cuda_home.parent / "site").resolve())
    home = tmp_path / "toolkit"
    shutil.copytree(cuda_home, home, symlinks=True)
    stamp = tmp_path / "state" / "probe.json"
    args = {"cuda_home": str(home), "release": "13.0", "build": "V13.0.88", "version": "13.0.1", "stamp": str(stamp)}
    first = run_module("cuda_toolkit_verify", args)
    assert not first.get("failed"), first.get("msg")
    assert first["probe_cached"] is False and first["targets"] == ["sm_120"] and stamp.is_file()
    again = run_module("cuda_toolkit_verify", args)
    assert again["probe_cached"] is True and again["targets"] == ["sm_120"] and again["nvcc_build"] == "V13.0.88"
    assert run_module("cuda_toolkit_verify", {**args, "arch": "12.0a"})["probe_cached"] is False, "another target compiles again"
    assert run_module("cuda_toolkit_verify", args)["probe_cached"] is False, "the stamp now holds sm_120a's probe"
    real_bin = (cuda_home / "bin").resolve()
    (home / "bin").unlink()
    (home / "bin").mkdir()
    for part in real_bin.iterdir():
        (home / "bin" / part.name).symlink_to(part)
    assert run_module("cuda_toolkit_verify", args)["probe_cached"] is True, "the same compiler files, linked anew"
    (home / "bin" / "ptxas").unlink()
    shutil.copy2(real_bin / "ptxas", home / "bin" / "ptxas")  # same bytes, another file: a reinstalled compiler part
    assert run_module("cuda_toolkit_verify", args)["probe_cached"] is False
    assert run_module("cuda_toolkit_verify", {**args, "version": "13.0.2"})["failed"], "the version check runs even with a recorded probe"


def test_cuda_verify_names_the_build_it_found(cuda_home):
    result = run_module("cuda_toolkit_verify", {"cuda_home": str(cuda_home), "release": "13.0", "build": "V13.0.96"})
    assert result["failed"]
    assert result["msg"].endswith("expected release 13.0, V13.0.96; found release 13.0, V13.0.88")


def test_cuda_verify_checks_the_recorded_version(cuda_home):
    result = run_module("cuda_toolkit_verify", {"cuda_home": str(cuda_home), "release": "13.0", "build": "V13.0.88", "version": "13.0.2"})
    assert result["failed"] and "expected CUDA 13.0.2, found 13.0.1" in result["msg"]


def test_cuda_verify_refuses_an_arch_nvcc_cannot_emit(cuda_home):
    result = run_module("cuda_toolkit_verify", {"cuda_home": str(cuda_home), "release": "13.0", "build": "V13.0.88", "arch": "5.0"})
    assert result["failed"] and "could not compile a kernel for sm_50" in result["msg"]


def test_cuda_verify_without_nvcc(tmp_path):
    result = run_module("cuda_toolkit_verify", {"cuda_home": str(tmp_path), "release": "13.0", "build": "V13.0.88"})
    assert result["failed"] and result["msg"] == f"expected an executable nvcc at {tmp_path}/bin/nvcc, found none"


def test_wheels_installer_leaves_nothing_when_pip_fails(tmp_path):
    wheelhouse = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache")) / "wheelhouse" / "cuda-toolkit-13.0.1"
    dest = tmp_path / "13.0.1"
    proc = subprocess.run(
        [
            "sh",
            str(ROOT / "roles/cuda_toolkit/files/install-cuda-wheels.sh"),
            sys.executable,
            str(wheelhouse),
            str(dest),
            "13.0.1",
            "cuda-toolkit[nvcc]==13.0.99",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0
    assert "13.0.99" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_wheels_installer_refuses_an_existing_destination(tmp_path):
    dest = tmp_path / "13.0.1"
    dest.mkdir()
    proc = subprocess.run(
        ["sh", str(ROOT / "roles/cuda_toolkit/files/install-cuda-wheels.sh"), sys.executable, "", str(dest), "13.0.1", "x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1 and "already exists" in proc.stderr


def sglang_tree(tmp_path: Path) -> Path:
    tree = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache")) / "sglang" / "0.5.9" / "sglang"
    if not tree.is_dir():
        raise AssertionError(f"no SGLang 0.5.9 at {tree}: run scripts/sglang-wheels.sh")
    shutil.copytree(tree, tmp_path / "sglang")
    return tmp_path / "sglang"


def sglang_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A virtualenv (tmp_path/venv) whose site-packages (returned with it) holds a copy of SGLang 0.5.9."""
    venv = tmp_path / "venv"
    site = venv / "lib/python3.11/site-packages"
    site.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.2\n")
    shutil.move(str(sglang_tree(tmp_path)), site / "sglang")
    return venv, site


def patch_args(sglang: Path, **extra) -> dict:
    manifest = yaml.safe_load((ROOT / "roles/sglang_patches/files/patches/manifest.yml").read_text())
    return {"sglang_dir": str(sglang), "manifest": manifest, "template_dir": str(ROOT / "roles/sglang_patches/files/patches"), **extra}


def test_patch_module_applies_once_checks_and_reverts(tmp_path):
    sglang = sglang_tree(tmp_path)
    kimi = sglang / "srt/models/kimi_k25.py"
    pristine = kimi.read_bytes()

    checked = run_module("sglang_patch", patch_args(sglang), flags=("--check", "--diff"))
    assert checked["changed"] is True and kimi.read_bytes() == pristine
    assert any("+    def get_embed_and_head(self):" in d["prepared"] for d in checked["diff"])

    first = run_module("sglang_patch", patch_args(sglang))
    assert first["changed"] is True, first.get("msg")
    assert {p["id"]: p["status"] for p in first["patches"]}["kimi_k25_eagle3_delegation"] == "applied"
    second = run_module("sglang_patch", patch_args(sglang))
    assert second["changed"] is False

    audited = run_module("sglang_audit", {"sglang": str(sglang), "model_class": "KimiK25ForConditionalGeneration"})
    assert not audited.get("failed") and audited["audit"]["missing_required"] == []

    reverted = run_module("sglang_patch", patch_args(sglang, state="absent"))
    assert reverted["changed"] is True and kimi.read_bytes() == pristine


def test_patch_module_refuses_drift_naming_the_file(tmp_path):
    sglang = sglang_tree(tmp_path)
    kimi = sglang / "srt/models/kimi_k25.py"
    kimi.write_bytes(kimi.read_bytes() + b"# edited by hand\n")
    result = run_module("sglang_patch", patch_args(sglang))
    assert result["failed"] and "srt/models/kimi_k25.py" in result["msg"]
    assert kimi.read_bytes().endswith(b"# edited by hand\n")


def test_audit_module_fails_listing_the_missing_methods(tmp_path):
    sglang = sglang_tree(tmp_path)
    result = run_module("sglang_audit", {"sglang": str(sglang), "model_class": "KimiK25ForConditionalGeneration"})
    assert result["failed"]
    assert "get_embed_and_head (called at srt/speculative/eagle_worker.py:157" in result["msg"]
    assert "set_eagle3_layers_to_capture (called at" in result["msg"]
    assert result["audit"]["missing_required"] == ["get_embed_and_head", "set_eagle3_layers_to_capture"]


def test_patch_module_takes_the_patches_rendered_on_the_controller(tmp_path):
    sglang = sglang_tree(tmp_path)
    args = patch_args(sglang)
    rendered = run_module("sglang_patch_render", {"manifest": args["manifest"], "template_dir": args["template_dir"]})
    assert rendered["changed"] is False and sorted(rendered["rendered"]) == ["kimi_k25_eagle3_delegation", "torch_symm_mem_sm120"]
    del args["template_dir"]
    wrong = run_module("sglang_patch", {**args, "rendered": rendered["rendered"], "values": {"sm120_multimem_world_sizes": [8]}})
    assert wrong["failed"] and "pre-rendered with values" in wrong["msg"]
    applied = run_module("sglang_patch", {**args, "rendered": rendered["rendered"]})
    assert applied["changed"] is True, applied.get("msg")
    assert b"def set_eagle3_layers_to_capture" in (sglang / "srt/models/kimi_k25.py").read_bytes()


def test_package_module_finds_sglang_in_a_venv(tmp_path):
    venv, site = sglang_venv(tmp_path)
    found = run_module("sglang_package", {"venv": str(venv)})
    assert found["package"]["version"] == "0.5.9" and found["package"]["sglang_dir"] == str(site / "sglang")
    missing = run_module("sglang_package", {"venv": str(tmp_path / "nowhere")})
    assert missing["failed"] and f"{tmp_path / 'nowhere'} is not a virtualenv" in missing["msg"]


def test_audit_module_can_report_without_failing(tmp_path):
    sglang = sglang_tree(tmp_path)
    result = run_module("sglang_audit", {"sglang": str(sglang), "model_class": "KimiK25ForConditionalGeneration", "fail_on_missing": False})
    assert not result.get("failed") and result["audit"]["ok"] is False


def test_render_module_lints_against_the_pristine_files_from_the_host(tmp_path):
    """The role's path: sglang_package returns the pristine bytes, sglang_patch_render lints the diffs."""
    import base64

    venv, site = sglang_venv(tmp_path)
    args = patch_args(site / "sglang")
    targets = [p["target"] for p in args["manifest"]["patches"]]
    found = run_module("sglang_package", {"venv": str(venv), "manifest": args["manifest"], "pristine_of": targets})
    assert sorted(found["pristine"]) == sorted(targets), found.get("msg")
    symm = "srt/distributed/device_communicators/torch_symm_mem.py"
    assert base64.b64decode(found["pristine"][symm]["content_base64"]) == (site / "sglang" / symm).read_bytes()

    good = run_module(
        "sglang_patch_render", {"manifest": args["manifest"], "template_dir": args["template_dir"], "pristine": found["pristine"]}
    )
    assert not good.get("failed") and good["linted"] == ["kimi_k25_eagle3_delegation", "torch_symm_mem_sm120"], good.get("msg")

    old = tmp_path / "old-templates"
    shutil.copytree(ROOT / "roles/sglang_patches/files/patches", old)
    shutil.copy2(DATA / "patches/torch_symm_mem_sm120.old-mib.diff.j2", old / "torch_symm_mem_sm120.diff.j2")
    bad = run_module("sglang_patch_render", {"manifest": args["manifest"], "template_dir": str(old), "pristine": found["pristine"]})
    assert (
        bad["failed"]
        and f"patch torch_symm_mem_sm120: the patched file has problems the pristine one has not: {symm}:32: undefined name 'MiB'"
        in bad["msg"]
    )


def test_import_check_module_reports_the_traceback_tail(tmp_path):
    pkg = tmp_path / "sglang" / "srt" / "models"
    pkg.mkdir(parents=True)
    for init in (tmp_path / "sglang", tmp_path / "sglang" / "srt", pkg):
        (init / "__init__.py").write_text("")
    (pkg / "good.py").write_text("VALUE = 1\n")
    (pkg / "bad.py").write_text("import os\n\nSIZE = 64 * MiB\n")
    args = {"python": sys.executable, "environment": {"PYTHONPATH": str(tmp_path)}}
    ok = run_module("sglang_import_check", {**args, "targets": ["srt/models/good.py"]})
    assert not ok.get("failed") and ok["imports"] == [{"module": "sglang.srt.models.good", "ok": True, "error": "", "traceback": ""}]
    failed = run_module("sglang_import_check", {**args, "targets": ["srt/models/good.py", "srt/models/bad.py"]})
    assert failed["failed"] and [i["ok"] for i in failed["imports"]] == [True, False]
    first, *trace = failed["msg"].splitlines()
    assert first == f"sglang.srt.models.bad does not import with {sys.executable}: NameError: name 'MiB' is not defined"
    assert 0 < len(trace) <= 15 and trace[-1] == "NameError: name 'MiB' is not defined"
    assert f'File "{pkg / "bad.py"}", line 3, in <module>' in failed["msg"]


def test_import_check_is_not_run_again_for_the_same_files_and_packages(tmp_path):
    site = tmp_path / "site-packages"
    pkg = site / "sglang" / "srt" / "models"
    pkg.mkdir(parents=True)
    for init in (site / "sglang", site / "sglang" / "srt", pkg):
        (init / "__init__.py").write_text("")
    target = pkg / "probe.py"
    marker = tmp_path / "imported"
    # The module leaves a mark each time it is really imported.
    target.write_text(f"open({str(marker)!r}, 'a').write('x')\n")
    stamp = tmp_path / "import-check.json"
    args = {
        "python": sys.executable,
        "environment": {"PYTHONPATH": str(site)},
        "targets": ["srt/models/probe.py"],
        "sglang_dir": str(site / "sglang"),
        "stamp": str(stamp),
    }
    first = run_module("sglang_import_check", args)
    assert not first.get("failed") and first["cached"] is False and marker.read_text() == "x"
    again = run_module("sglang_import_check", args)
    assert again["cached"] is True and again["imports"] == first["imports"] and marker.read_text() == "x"

    (site / "newpkg-1.0.dist-info").mkdir()  # something installed beside sglang: checked again
    assert run_module("sglang_import_check", args)["cached"] is False and marker.read_text() == "xx"
    assert run_module("sglang_import_check", args)["cached"] is True

    target.write_text(target.read_text() + "BROKEN = MiB\n")  # the target changed: checked again, and fails
    broken = run_module("sglang_import_check", args)
    assert broken["failed"] and broken["cached"] is False and "NameError: name 'MiB' is not defined" in broken["msg"]
    assert run_module("sglang_import_check", args)["failed"], "a failed check is never recorded as proven"


def test_audit_module_records_a_passed_audit_and_audits_again_when_sglang_changes(tmp_path):
    sglang = sglang_tree(tmp_path)
    stamp = tmp_path / "audit.json"
    args = {"sglang": str(sglang), "model_class": "KimiK25ForConditionalGeneration", "stamp": str(stamp)}
    missing = run_module("sglang_audit", args)
    assert missing["failed"] and missing["cached"] is False and not stamp.exists(), "a failed audit is never recorded"
    assert run_module("sglang_patch", patch_args(sglang))["changed"] is True
    first = run_module("sglang_audit", args)
    assert not first.get("failed") and first["cached"] is False and stamp.is_file()
    again = run_module("sglang_audit", args)
    assert again["cached"] is True and again["audit"] == first["audit"]
    assert run_module("sglang_audit", {**args, "algorithm": "EAGLE"})["cached"] is False, "another question is audited again"
    assert run_module("sglang_audit", args)["cached"] is False
    assert run_module("sglang_patch", patch_args(sglang, state="absent"))["changed"] is True
    reverted = run_module("sglang_audit", args)
    assert reverted["failed"] and reverted["cached"] is False, "the reverted package is audited again and fails"


def test_the_controller_steps_run_in_process_and_as_modules_alike(tmp_path):
    """plugins/action runs sglang_patch_render and sglang_build_plan in the controller's own process (no
    module run: no invocation echoed back); the same modules run as modules where no action plugin pairs with them
    (here: copies of plugins/modules/ called as ansible.legacy modules from a library path). Both validate the same
    options and give the same results and the same failures."""
    from test_build_pipeline import CONTEXT, probe

    library = tmp_path / "library"
    library.mkdir()
    for name in ("sglang_patch_render", "sglang_build_plan"):
        shutil.copy(ROOT / "plugins" / "modules" / f"{name}.py", library)
    as_module = {"ANSIBLE_LIBRARY": str(library)}
    args = patch_args(sglang_tree(tmp_path))
    render_args = {"manifest": args["manifest"], "template_dir": args["template_dir"]}
    plan_args = {"specs": [probe("torch"), probe("sgl_kernel", ("torch",))], "context": CONTEXT}
    for module, good, bad, message in (
        ("sglang_patch_render", render_args, {**render_args, "only": ["no_such_patch"]}, "no_such_patch"),
        ("sglang_build_plan", plan_args, {**plan_args, "specs": [probe("x", ("y",))]}, "build spec 'x': depends_on 'y'"),
    ):
        here, there = run_module(module, good), run_module(f"ansible.legacy.{module}", good, env_extra=as_module)
        assert "invocation" not in here and "invocation" in there, module
        assert not here.get("failed") and not there.get("failed"), (here.get("msg"), there.get("msg"))
        assert {k: v for k, v in there.items() if k not in ("invocation", "action")} == {k: v for k, v in here.items() if k != "action"}
        failed_here, failed_there = run_module(module, bad), run_module(f"ansible.legacy.{module}", bad, env_extra=as_module)
        assert failed_here["failed"] and failed_there["failed"] and message in failed_here["msg"]
        assert failed_here["msg"] == failed_there["msg"]
        wrong = run_module(module, {**good, "no_such_option": 1})
        assert wrong["failed"] and "no_such_option" in wrong["msg"], wrong
    keys = [p["key"] for p in run_module("sglang_build_plan", plan_args)["plan"]]
    assert len(set(keys)) == 2 and all(len(k) == 64 for k in keys)


def test_answers_module_passes_a_server_with_the_kimi_parser_and_fails_one_without(tmp_path):
    """sglang_answers through Ansible against the stand-in: the key read from the service's keys file on the host
    (never an argument, never in the result), structured tool calls pass, a server without the parser fails naming why."""
    from test_standin import Standin

    key = "sk-answers-" + os.urandom(6).hex()
    keys_file = tmp_path / "api-keys.yaml"
    keys_file.write_text(f'api-key: "{key}"\n')
    with_parser = Standin(tmp_path, ["--tool-call-parser", "kimi_k2", "--config", str(keys_file)], "0.5.13", {})
    without = Standin(tmp_path, ["--config", str(keys_file)], "0.5.13", {})
    try:
        with_parser.wait_healthy()
        without.wait_healthy()
        args = {"tool_call_parser": "kimi_k2", "keys_file": str(keys_file)}
        ok = run_module("sglang_answers", {**args, "url": f"http://127.0.0.1:{with_parser.port}"})
        assert not ok.get("failed") and ok["changed"] is False, ok
        assert [(c["name"], c["ok"]) for c in ok["checks"]] == [("tool-call", True)]
        failed = run_module("sglang_answers", {**args, "url": f"http://127.0.0.1:{without.port}"})
        assert failed["failed"] and failed["msg"].startswith("answer check tool-call failed: no structured tool_calls"), failed
        assert [c["ok"] for c in failed["checks"]] == [False] and "get_weather" in failed["checks"][0]["answer"]
        assert key not in json.dumps(ok) + json.dumps(failed)
    finally:
        with_parser.stop()
        without.stop()


def test_answers_module_questions_pass_a_right_server_and_fail_corrupt_or_diverging_ones_naming_the_answer(tmp_path):
    """The questions check through Ansible (TEST FIXTURE: the stand-in answers the toolkit's questions, right by default):
    a right EAGLE-3 server passes alone and in the burst; one whose answers are corrupted, and one whose outputs leave
    the target's only under speculation (a broken draft or verify path), fail naming the first wrong answer; the record
    keeps the figures and the first few wrong answers, not every output. (A burst that emits NaN: molecule/service.)"""
    from test_answer_checks import FAST as ANSWERS_FAST
    from test_answer_checks import SPEC as EAGLE3

    args = {"checks": ["questions"], "questions": 12, "burst": 24}
    flags = ["--model-path", "/models/target", *EAGLE3]
    with standin_server(flags, ANSWERS_FAST) as right:
        ok = run_module("sglang_answers", {**args, "url": right})
    assert not ok.get("failed"), ok
    [check] = ok["checks"]
    assert check["name"] == "questions" and check["ok"] and check["reason"] == "", check
    assert check["answer"] == "12/12 right asked one at a time, 24/24 in the burst of 24", check
    details = check["details"]
    assert details["sequential"]["right"] == 12 and details["burst"]["asked"] == 24 and details["sequential"]["first_wrong"] == []
    assert "outputs" not in details["sequential"]

    for mode in ("corrupt", "spec-diverge"):
        with standin_server(flags, {**ANSWERS_FAST, "SGLANG_STANDIN_ANSWERS": mode}) as url:
            failed = run_module("sglang_answers", {**args, "url": url})
        assert failed["failed"], (mode, failed)
        assert failed["msg"].startswith("answer check questions failed: 0 of 12 questions asked one at a time answered right (0%), "), (
            failed["msg"]
        )
        assert "below the 80% asked for; the first wrong: question 0 (" in failed["msg"], failed["msg"]
        [check] = failed["checks"]
        wrong = check["details"]["sequential"]["first_wrong"]
        assert not check["ok"] and check["details"]["sequential"]["wrong"] == 12 and len(wrong) == 3, check
        assert wrong[0]["got"] != wrong[0]["expected"] and "\n" not in wrong[0]["prompt"], wrong[0]

    # the target alone (no speculation) under spec-diverge answers right: only speculation diverges
    with standin_server(["--model-path", "/models/target"], {**ANSWERS_FAST, "SGLANG_STANDIN_ANSWERS": "spec-diverge"}) as target:
        alone = run_module("sglang_answers", {**args, "url": target, "burst": 0})
    assert not alone.get("failed") and alone["checks"][0]["details"]["burst"] is None, alone


def test_a_failed_preflight_returns_its_problems_and_not_the_facts(tmp_path):
    """Quiet failures: the console shows what is wrong; the facts measured are in the saved file, which the message names."""
    smi = fake_nvidia_smi(tmp_path, "seven-gpus.txt")
    saved = tmp_path / "host-facts.json"
    result = run_module("sglang_preflight", {"nvidia_smi": str(smi), "save_facts": str(saved)})
    assert result["failed"] and result["msg"].endswith(f"(the host facts read are in {saved})"), result["msg"]
    assert result["problems"] == ["found 7 GPUs, expected 8"], result["problems"]
    assert not {"gpus", "disks", "memory_gib", "gpu_topology", "pcie_only"} & set(result), sorted(result)
    assert len(json.loads(saved.read_text())["gpus"]) == 7
