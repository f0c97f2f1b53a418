"""SGLang's own ServerArgs on the launch plan, in the venv of the release that will run it
(launch_plan.verify_plan, plugins/modules/sglang_launch_verify.py), on the real SGLang 0.5.9 and its CPU
runtime. Two SGLang imports in all: the accepted plan (its verdict then read back from the cache)
and a refused one through real Ansible."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_launch_plan import CATALOGUE, HOST_8X, STACK, WHEEL_059
from test_launch_plan import plan as typed_plan

from conftest import ROOT
from sglang_sm120.launch.plan import LaunchPlan, LaunchPlanError, _read_verdict, _verify_key, _write_verdict, start_gate, verify_plan

# What the lab gives for the model paths (inventory/lab/group_vars/lab/build.yml): the Kimi config
# files with the TEST FIXTURE stand-in for its remote code, and the draft's config.
MODEL_DIRS = {
    STACK["stack_model_path"]: str(ROOT / "tests/data/lab-models/kimi-k2.5-nvfp4"),
    STACK["stack_draft_model_path"]: str(ROOT / "tests/data/models/kimi-k2.5-eagle3"),
}


def plan(**overrides) -> LaunchPlan:
    """The production eagle3 plan as tests/unit/host/test_launch_plan.py makes it, with the start gate on the lab's model
    files and the 8-GPU host."""
    return typed_plan(**{"catalogue": CATALOGUE, "model_dirs": MODEL_DIRS, "host_facts": str(HOST_8X), **overrides})


@dataclass
class Release:
    venv: Path
    sglang_dir: Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory, sglang_runtime_python: Path, sglang_tree: Path) -> Release:
    """A release venv as the lab makes one: a venv of the runtime's own Python with SGLang 0.5.9 in
    its site-packages (links to the unpacked wheel: the package and its dist-info) and the runtime's
    packages reached through a .pth file (sglang_release_site_packages)."""
    venv = tmp_path_factory.mktemp("release") / "venv"
    subprocess.run([str(sglang_runtime_python.resolve()), "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python3*/site-packages")
    (site / "sglang").symlink_to(sglang_tree / "sglang")
    for info in sglang_tree.glob("sglang-*.dist-info"):
        (site / info.name).symlink_to(info)
    runtime_site = subprocess.run(
        [str(sglang_runtime_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (site / "zz-runtime.pth").write_text(runtime_site + "\n")
    return Release(venv=venv, sglang_dir=site / "sglang")


def verified(before: LaunchPlan, release: Release, cache: Path) -> LaunchPlan:
    """The plan checked in the release's venv as the deploy checks it (the lab's model files, the 8-GPU host's facts)."""
    return verify_plan(
        before.to_dict(),
        python=release.python,
        sglang_dir=release.sglang_dir,
        catalogue=CATALOGUE,
        model_dirs=MODEL_DIRS,
        host_facts=str(HOST_8X),
        cache=cache,
    )


@pytest.fixture(scope="module")
def checked(release: Release, tmp_path_factory: pytest.TempPathFactory) -> tuple[LaunchPlan, LaunchPlan, Path]:
    """(the plan as made before the build, the same plan verified in the release's venv, the verdict cache).
    --speculative-num-draft-tokens 16 with topk 1: SGLang 0.5.9 silently uses 4."""
    before = plan(extra_flags={"speculative-num-draft-tokens": 16})
    cache = tmp_path_factory.mktemp("gate")
    after = verified(before, release, cache)
    return before, after, cache


def test_sglang_accepts_the_plan_in_the_release_venv_on_the_device_of_the_host_facts(checked) -> None:
    _, after, _ = checked
    sa = after.server_args
    assert sa["verdict"] == "ok" and sa["sglang_version"] == "0.5.9" and sa["cached"] is False
    assert sa["python"].endswith("/venv/bin/python")
    # the device of tests/data/start-failures/host-8x-rtx-pro-6000.json, FlashInfer as the release pins it
    assert sa["device"]["capability"] == "12.0" and sa["device"]["count"] == 8 and sa["device"]["flashinfer_version"] == "0.6.3"
    assert any(line.startswith("compute capability 12.0 (the host-facts file ") for line in sa["device_from"]), sa["device_from"]
    assert any(c.startswith("--mem-fraction-static ") for c in sa["chosen"]), sa["chosen"]


def test_a_value_sglang_rewrites_is_a_warning_naming_the_flag_and_both_values(checked) -> None:
    before, after, _ = checked
    rewrite = [w for w in after.flag_warnings if w.startswith("SGLang's ServerArgs: ")]
    assert len(rewrite) == 1, after.flag_warnings
    assert rewrite[0].startswith("SGLang's ServerArgs: --speculative-num-draft-tokens 16: SGLang 0.5.9 uses 4 instead")
    assert "speculative_num_draft_tokens is adjusted" in rewrite[0]  # SGLang's own log line
    assert not any(w.startswith("SGLang's ServerArgs: ") for w in before.flag_warnings)


def test_the_gate_reads_the_values_sglang_resolved_after_the_release_is_made(checked) -> None:
    before, after, _ = checked
    assert before.start_gate["flag_values"] == "typed" and "read from the flags as typed" in before.start_gate["summary"]
    assert after.start_gate["flag_values"] == "resolved"
    assert "read from the flags as SGLang 0.5.9's ServerArgs in the release's venv (" in after.start_gate["summary"]
    assert after.start_gate["counts"]["refused"] == 0 and len(after.start_gate["verdicts"]) == len(
        [e for e in CATALOGUE["entries"] if e["trigger"]]
    )
    verdicts = {v["id"]: v for v in after.start_gate["verdicts"]}
    # the memory entry reads the fraction SGLang chose (the flag was not given)
    memory = verdicts["weights-exceed-static-memory"]["text"]
    assert "not given: the value SGLang resolved" in memory, memory
    # deep_gemm is absent from the runtime: the release venv's own import probe says so, no host-facts file needed
    deepgemm = verdicts["deepgemm-on-sm120"]
    assert deepgemm["verdict"] == "ok"
    assert "host deep_gemm_importable false (import probe in the release's venv: ImportError" in deepgemm["text"]
    assert {v["id"]: v["verdict"] for v in before.start_gate["verdicts"]}["deepgemm-on-sm120"] == "unknown"
    # the gate's warnings are those of this evaluation, not the typed one's as well
    gate_warnings = [w for w in after.flag_warnings if w.startswith("start gate ")]
    assert gate_warnings == [f"start gate {v['text']}" for v in after.start_gate["verdicts"] if v["verdict"] == "warning"]


def test_the_verdict_is_read_back_for_the_same_inputs_and_not_for_others(checked, release: Release) -> None:
    before, after, cache = checked
    again = verified(before, release, cache)
    assert again.server_args["cached"] is True
    assert again.start_gate == after.start_gate and again.flag_warnings == after.flag_warnings
    check = {"argv": before.argv, "env": before.env, "label": "eagle3"}
    device = after.server_args["device"]
    key = _verify_key(release.python, release.sglang_dir, check, device)
    assert _verify_key(release.python, release.sglang_dir, {**check, "env": {"NCCL_P2P_DISABLE": "1"}}, device) != key
    assert _verify_key(release.python, release.sglang_dir, check, {**device, "memory_mib": 49152}) != key


def test_the_cache_follows_the_model_files_content_not_their_directory(tmp_path: Path, release: Release) -> None:
    """The lab's config files are written to a new temporary directory each run: the same files are the same key."""
    one, two = tmp_path / "one", tmp_path / "two"
    for directory in (one, two):
        directory.mkdir()
        (directory / "config.json").write_text('{"architectures": ["X"]}')
    argv = ["--model-path", "/data/Kimi-K2.5-NVFP4"]
    device = {"capability": "12.0", "memory_mib": 97887, "count": 8}
    key = _verify_key(release.python, release.sglang_dir, {"argv": argv, "model": str(one)}, device)
    assert _verify_key(release.python, release.sglang_dir, {"argv": argv, "model": str(two)}, device) == key
    (two / "config.json").write_text('{"architectures": ["Y"]}')
    assert _verify_key(release.python, release.sglang_dir, {"argv": argv, "model": str(two)}, device) != key


def test_an_sglang_that_does_not_import_in_the_release_venv_fails_the_plan(tmp_path: Path, release: Release) -> None:
    """The system Python has no SGLang dependencies: nothing could start there either."""
    with pytest.raises(LaunchPlanError) as caught:
        verify_plan(
            plan().to_dict(),
            python="/usr/bin/python3",
            sglang_dir=release.sglang_dir,
            catalogue=CATALOGUE,
            model_dirs=MODEL_DIRS,
            host_facts=str(HOST_8X),
            cache=tmp_path,
        )
    text = str(caught.value)
    assert "SGLang's own check of profile eagle3 could not run in the release's Python (/usr/bin/python3)" in text
    assert "does not import" in text and "would not start in it either" in text
    assert list(tmp_path.iterdir()) == []  # a failure is never cached


def test_the_module_fails_with_sglangs_own_refusal_through_ansible(release: Release) -> None:
    """plugins/modules/sglang_launch_verify.py through real Ansible (its checker runs from the module's zip):
    SGLang 0.5.9 refuses --attention-backend trtllm_mha on capability 12. The start gate refuses it already when the
    plan is made (backend-refuses-capability-or-kv-dtype); the plan checked here is made without that entry, so that
    SGLang's own refusal in the release's venv is what stops it."""
    from test_modules import run_module

    entry = "backend-refuses-capability-or-kv-dtype"
    with pytest.raises(LaunchPlanError, match=rf"refused: \[{entry}\] .*--attention-backend trtllm_mha: compute capability 12\.0"):
        plan(extra_flags={"attention-backend": "trtllm_mha"})
    files = {path: {f.name: f.read_text() for f in sorted(Path(directory).iterdir())} for path, directory in MODEL_DIRS.items()}
    without = {**CATALOGUE, "entries": [e for e in CATALOGUE["entries"] if e["id"] != entry]}
    typed = plan(extra_flags={"attention-backend": "trtllm_mha"}, catalogue=without)
    args = dict(
        plan=typed.to_dict(),
        venv=str(release.venv),
        start_failures=CATALOGUE,
        model_files=files,
        host_facts=str(HOST_8X),
    )
    result = run_module("sglang_launch_verify", args)
    assert result.get("failed"), result
    msg = result["msg"]
    assert msg.startswith("SGLang 0.5.9's own ServerArgs refuses profile eagle3 in the release's venv (")
    assert "nothing started" in msg
    assert "TRTLLM MHA backend is only supported on Blackwell GPUs (SM100)" in msg
    assert "raised at sglang/srt/server_args.py:1900 in _handle_attention_backend_compatibility" in msg


def test_deep_gemm_importing_in_the_release_venv_refuses_0_5_9_unless_its_jit_is_off() -> None:
    """Row 11: SGLang 0.5.9 turns DeepGEMM's JIT on whenever deep_gemm imports (the real sgl-kernel
    wheel ships it), and it has no SM120 kernels. The probe's answer fills a host-facts file that
    does not say; SGLANG_ENABLE_JIT_DEEPGEMM=0 (the role's default environment) is the fix."""
    probe = {"deep_gemm_importable": True, "deep_gemm_note": "import deep_gemm succeeded"}
    typed = plan()
    with pytest.raises(LaunchPlanError) as caught:
        start_gate(typed, WHEEL_059, CATALOGUE, MODEL_DIRS, str(HOST_8X), 12, venv_probes=probe)
    text = str(caught.value)
    assert "refused: [deepgemm-on-sm120]" in text
    assert "host deep_gemm_importable true (import probe in the release's venv: import deep_gemm succeeded)" in text
    assert "fix: set SGLANG_ENABLE_JIT_DEEPGEMM=0" in text
    off = plan(env_parts=[{"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", "SGLANG_ENABLE_JIT_DEEPGEMM": "0"}])
    gated = start_gate(off, WHEEL_059, CATALOGUE, MODEL_DIRS, str(HOST_8X), 12, venv_probes=probe)
    assert {v["id"]: v["verdict"] for v in gated.start_gate["verdicts"]}["deepgemm-on-sm120"] == "ok"
    # without a host-facts file the probe still decides it; the other host entries stay unknown
    alone = start_gate(off, WHEEL_059, CATALOGUE, MODEL_DIRS, None, 12, venv_probes=probe)
    verdicts = {v["id"]: v for v in alone.start_gate["verdicts"]}
    assert verdicts["deepgemm-on-sm120"]["verdict"] == "ok" and verdicts["driver-too-old"]["verdict"] == "unknown"
    assert "no host-facts file given" in verdicts["driver-too-old"]["text"]


def test_a_kept_verdict_names_the_model_directories_of_the_check_that_reads_it(tmp_path: Path) -> None:
    """The key holds the model directories by content, so a verdict made with the same files in
    other directories is reused: its resolved values must then name this check's directories."""
    made = {"argv": ["--model-path", "/tmp/run-1/kimi", "--speculative-draft-model-path", "/tmp/run-1/draft"], "env": {}}
    report = {
        "sglang_version": "0.5.9",
        "results": [{"verdict": "ok", "values": {"model_path": "/tmp/run-1/kimi", "tokenizer_path": "/tmp/run-1/kimi/tok",
                                                  "speculative_draft_model_path": "/tmp/run-1/draft", "other": "/tmp/run-1x"}}],
    }  # fmt: skip
    _write_verdict(tmp_path, "k", report, made)
    now = {"argv": ["--model-path", "/srv/kimi", "--speculative-draft-model-path", "/srv/draft"], "env": {}}
    values = _read_verdict(tmp_path, "k", now)["results"][0]["values"]
    assert values == {
        "model_path": "/srv/kimi",
        "tokenizer_path": "/srv/kimi/tok",
        "speculative_draft_model_path": "/srv/draft",
        "other": "/tmp/run-1x",
    }
    assert _read_verdict(tmp_path, "k", made)["results"][0]["values"] == report["results"][0]["values"]
    # a verdict kept without the directories it was made with is not reused
    (tmp_path / "server-args-old.json").write_text(json.dumps(report))
    assert _read_verdict(tmp_path, "old", now) is None


def test_tritons_ptxas_asked_in_the_release_venv_decides_its_entry() -> None:
    """The ServerArgs check's ptxas probe fills triton_ptxas_knows_arch where the host-facts file does
    not say (preflight runs before the release's venv exists); a refusal names what ptxas said."""
    said = "/v/triton/backends/nvidia/bin/ptxas (CUDA 12.8) --gpu-name=sm_121a, PTX 8.7: exit 255: ptxas fatal : Value 'sm_121a' ..."
    probe = {
        "deep_gemm_importable": False,
        "deep_gemm_note": "ImportError: no deep_gemm",
        "triton_ptxas_knows_arch": False,
        "triton_ptxas_note": said,
    }
    typed = plan()
    with pytest.raises(LaunchPlanError) as caught:
        start_gate(typed, WHEEL_059, CATALOGUE, MODEL_DIRS, str(HOST_8X), 12, venv_probes=probe)
    text = str(caught.value)
    assert "refused: [triton-ptxas-lacks-gpu-arch]" in text
    assert f"host triton_ptxas_knows_arch false (Triton's ptxas asked in the release's venv: {said})" in text
    knows = {**probe, "triton_ptxas_knows_arch": True, "triton_ptxas_note": "assembled"}
    gated = start_gate(typed, WHEEL_059, CATALOGUE, MODEL_DIRS, str(HOST_8X), 12, venv_probes=knows)
    verdicts = {v["id"]: v for v in gated.start_gate["verdicts"]}
    assert verdicts["triton-ptxas-lacks-gpu-arch"]["verdict"] == "ok"
    assert verdicts["deepgemm-on-sm120"]["verdict"] == "ok"  # both probes taken from one report
    unasked = start_gate(typed, WHEEL_059, CATALOGUE, MODEL_DIRS, str(HOST_8X), 12)
    assert {v["id"]: v["verdict"] for v in unasked.start_gate["verdicts"]}["triton-ptxas-lacks-gpu-arch"] == "unknown"
