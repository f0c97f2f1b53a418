"""The launch plan (plugins/module_utils/sglang_sm120/launch/plan.py): one merge, one check, one argv for the release
key, the unit and the benchmark. Checked against the real SGLang 0.5.9 wheel (static table)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import CACHE, ROOT
from sglang_sm120.launch.flags import exec_start
from sglang_sm120.launch.plan import LaunchPlanError, make_plan, manifest_digest, merge_env, merge_flags, planned_patches
from sglang_sm120_controller.compat import render_profile

SERVICE = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/service.yml").read_text())
STACK = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/stack.yml").read_text())
PROFILES = {name: render_profile(flags, STACK) for name, flags in SERVICE["sglang_profiles"].items()}
MANIFEST = yaml.safe_load((ROOT / "roles/sglang_patches/files/patches/manifest.yml").read_text())
WHEEL_059 = CACHE / "sglang" / "sglang-0.5.9-py3-none-any.whl"


def plan(**overrides):
    args = dict(
        profiles=PROFILES,
        profile="eagle3",
        host="127.0.0.1",
        port=30000,
        extra_flags={},
        env_parts=[{"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}, {}, {}],
        secret_names=[],
        patches=planned_patches(MANIFEST, []),
        model_class="KimiK25ForConditionalGeneration",
        gpu_major=12,
        launch_module="sglang.launch_server",
    )
    args.update(overrides)
    return make_plan(WHEEL_059, **args)


def test_merge_order_profile_then_address_then_extra_flags() -> None:
    profiles = {"p": {"tp-size": 8, "port": 1, "mem-fraction-static": 0.8}}
    merged = merge_flags(profiles, "p", "0.0.0.0", 30001, {"mem-fraction-static": 0.9, "tp-size": None})
    assert merged == {"tp-size": None, "port": 30001, "mem-fraction-static": 0.9, "host": "0.0.0.0"}


@pytest.mark.parametrize(
    ("profiles", "name", "extra", "message"),
    [
        ({}, "eagle3", {}, "sglang_profiles is empty"),
        ({"baseline": {}}, "eagle3", {}, "sglang_profile is 'eagle3', expected one of baseline"),
        ({"eagle3": ["tp-size"]}, "eagle3", {}, "sglang_profiles.eagle3: expected a mapping"),
        ({"eagle3": {}}, "eagle3", ["tp-size"], "sglang_extra_flags: expected a mapping"),
    ],
)
def test_bad_profile_input_names_the_variable(profiles, name, extra, message) -> None:
    with pytest.raises(LaunchPlanError, match=re.escape(message)):
        merge_flags(profiles, name, "127.0.0.1", 30000, extra)


def test_environment_last_part_wins_and_secrets_are_refused() -> None:
    assert merge_env([{"A": 1, "B": "x"}, {"B": "y"}, {"C": None}], []) == {"A": "1", "B": "y", "C": ""}
    with pytest.raises(LaunchPlanError, match="SGLANG_API_KEY set both as environment"):
        merge_env([{}, {}, {"SGLANG_API_KEY": "k"}], ["SGLANG_API_KEY"])


def test_planned_patches_are_the_manifests_defaults_or_the_selection() -> None:
    defaults = [entry["id"] for entry in MANIFEST["patches"] if entry.get("default")]
    assert defaults, "the manifest has default patches"
    assert planned_patches(MANIFEST, []) == defaults
    one = MANIFEST["patches"][0]["id"]
    assert planned_patches(MANIFEST, [one, one]) == [one]
    with pytest.raises(LaunchPlanError, match="sglang_patches_only names no_such_patch"):
        planned_patches(MANIFEST, ["no_such_patch"])


def test_manifest_digest_follows_content_not_key_order() -> None:
    digest = manifest_digest(MANIFEST)
    assert len(digest) == 64
    assert manifest_digest(dict(reversed(list(MANIFEST.items())))) == digest
    changed = {
        **MANIFEST,
        "patches": [{**MANIFEST["patches"][0], "default": not MANIFEST["patches"][0].get("default")}, *MANIFEST["patches"][1:]],
    }
    assert manifest_digest(changed) != digest
    assert manifest_digest({}) == ""


def test_plan_of_the_production_eagle3_profile_on_real_0_5_9() -> None:
    result = plan(extra_flags={"mem-fraction-static": 0.85}, env_parts=[{"A": "1"}, {"NCCL_P2P_LEVEL": "SYS"}, {}])
    assert result.sglang_version == "0.5.9"
    argv = result.argv
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert argv[argv.index("--port") + 1] == "30000"
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.85"
    assert result.env == {"A": "1", "NCCL_P2P_LEVEL": "SYS"}
    assert result.check_mode == "static" and result.parser == "static"
    # The unit's ExecStart is the interpreter and module, then exactly these arguments.
    python = "/opt/sglang/releases/0001-abc/venv/bin/python"
    assert exec_start(python, "sglang.launch_server", argv) == f"{python} -m sglang.launch_server \\\n    {result.exec_args}"
    assert result.exec_args.count("\\\n") == sum(1 for a in argv if a.startswith("--")) - 1


def test_a_refused_flag_fails_the_plan_naming_the_profile() -> None:
    with pytest.raises(LaunchPlanError, match=r"invalid SGLang launch flags for profile eagle3 .*--tp"):
        plan(extra_flags={"tp": 8})


def test_the_plan_is_computed_in_one_place_only() -> None:
    """No role or playbook checks or renders the flags except through role sglang_launch."""
    callers = []
    for path in sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("playbooks/*.yml")]):
        text = path.read_text()
        if re.search(r"^\s*(?:sm120\.sglang\.)?(sglang_launch_plan|sglang_flags):\s*([&*]\w+\s*)?$", text, re.M):
            callers.append(str(path.relative_to(ROOT)))
    assert callers == ["roles/sglang_launch/tasks/main.yml"]
    assert not (ROOT / "plugins" / "modules" / "sglang_flags.py").exists()
    templates = "".join(p.read_text() for p in ROOT.glob("roles/*/templates/*.j2"))
    assert "exec_start" not in templates


def test_a_plan_checked_once_is_read_back_for_the_same_inputs_only(tmp_path, monkeypatch) -> None:
    from sglang_sm120.launch import plan as launch_plan

    first = plan(cache=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 1

    def no_check(*args, **kwargs):
        raise AssertionError("checked again although nothing changed")

    monkeypatch.setattr(launch_plan, "check_launch", no_check)
    assert plan(cache=tmp_path) == first
    with pytest.raises(AssertionError, match="checked again"):
        plan(cache=tmp_path, extra_flags={"mem-fraction-static": 0.8})
    with pytest.raises(AssertionError, match="checked again"):
        plan(cache=tmp_path, python="/usr/bin/python3")
    # check mode reads the cache but never writes it
    monkeypatch.undo()
    plan(cache=tmp_path, extra_flags={"mem-fraction-static": 0.8}, write_cache=False)
    assert len(list(tmp_path.glob("*.json"))) == 1


# --- the start gate (roles/sglang_launch/files/start-failures.yml) in the plan ------------------------------------

CATALOGUE = yaml.safe_load((ROOT / "roles/sglang_launch/files/start-failures.yml").read_text())
MODELS = ROOT / "tests/data/models"  # config-only copies of the real Kimi-K2.5-NVFP4 and its EAGLE-3 draft
MODEL_DIRS = {STACK["stack_model_path"]: str(MODELS / "kimi-k2.5-nvfp4"), STACK["stack_draft_model_path"]: str(MODELS / "kimi-k2.5-eagle3")}
HOST_8X = ROOT / "tests/data/start-failures/host-8x-rtx-pro-6000.json"
LAUNCH_DEFAULTS = yaml.safe_load((ROOT / "roles/sglang_launch/defaults/main.yml").read_text())


def gated(**overrides):
    return plan(catalogue=CATALOGUE, model_dirs=MODEL_DIRS, host_facts=str(HOST_8X), **overrides)


def test_the_production_profiles_pass_the_start_gate_with_the_real_kimi_configs() -> None:
    for profile in ("eagle3", "baseline"):
        result = gated(profile=profile)
        gate = result.start_gate
        verdicts = {v["id"]: v["verdict"] for v in gate["verdicts"]}
        # every entry the gate can decide (a run-time-only one, trigger [], is the canary's: its log signature)
        decidable = [e for e in CATALOGUE["entries"] if e["trigger"]]
        assert gate["counts"]["refused"] == 0 and len(verdicts) == len(decidable), gate["summary"]
        # the checkpoint says FP8 KV; the profile's explicit --kv-cache-dtype keeps SGLang from taking it
        assert verdicts["fp8-kv-from-checkpoint"] == "ok"
        assert gate["summary"].startswith(f"{len(decidable)} known start failures checked (SGLang 0.5.9, capability 12.0): ")
        # the canary gets the catalogue's log signatures of the release's version from the plan
        signed = {sig["id"] for sig in result.log_signatures}
        assert {"no-kernel-image", "still-capturing-cuda-graphs", "fa3-on-sm120"} <= signed
        assert "nvfp4-moe-runner-auto-is-trtllm-on-sm120" not in signed  # 0.5.16 on
        assert [w for w in result.flag_warnings if w.startswith("start gate ")] == [
            f"start gate {v['text']}" for v in gate["verdicts"] if v["verdict"] == "warning"
        ]


def test_the_gate_refuses_the_fp8_kv_of_the_checkpoint_before_anything_is_built() -> None:
    """Upstream's recipe as it is (no --kv-cache-dtype): refused by the catalogue, naming the entry and its fix."""
    with pytest.raises(LaunchPlanError) as caught:
        gated(extra_flags={"kv-cache-dtype": None})
    text = str(caught.value)
    assert text.startswith("the start gate refuses profile eagle3 (") and "nothing changed" in text
    assert "refused: [fp8-kv-from-checkpoint]" in text and "fix: give --kv-cache-dtype explicitly" in text
    assert f"model kv_cache_quant_algo FP8 ({MODELS / 'kimi-k2.5-nvfp4' / 'config.json'}: " in text  # the evidence names the file read


def test_a_model_directory_the_flags_name_must_be_readable_on_the_host(tmp_path) -> None:
    missing = tmp_path / "Kimi-K2.5-NVFP4"
    with pytest.raises(
        LaunchPlanError, match=rf"start gate: --model-path {re.escape(str(missing))} cannot be read on this host: .*no such directory"
    ):
        plan(catalogue=CATALOGUE, extra_flags={"model-path": str(missing)}, model_dirs={})
    missing.mkdir()
    with pytest.raises(LaunchPlanError, match=r"config\.json"):
        plan(catalogue=CATALOGUE, extra_flags={"model-path": str(missing)}, model_dirs={})


def test_without_host_facts_their_entries_are_unknown_never_ok() -> None:
    result = plan(catalogue=CATALOGUE, model_dirs=MODEL_DIRS)
    verdicts = {v["id"]: v["verdict"] for v in result.start_gate["verdicts"]}
    assert "no host-facts file given" in result.start_gate["summary"]
    assert verdicts["driver-too-old"] == "unknown" and verdicts["weights-exceed-static-memory"] == "unknown"
    unreadable = plan(catalogue=CATALOGUE, model_dirs=MODEL_DIRS, host_facts="/nonexistent/host-facts.json")
    assert "host facts not read" in unreadable.start_gate["summary"] and "run playbooks/preflight.yml" in unreadable.start_gate["summary"]
    assert plan().start_gate["summary"] == "not run: no catalogue given"
    # the role says why a check-mode plan made on the controller runs no gate
    skipped = "a check-mode plan made on the controller cannot read the model directories on the host"
    assert plan(gate_skipped=skipped).start_gate["summary"] == f"not run: {skipped}"


def test_site_yml_input_check_takes_the_toolkits_facts_as_unknown_until_its_play(tmp_path) -> None:
    """Before the CUDA toolkit's play a fresh host has no toolkit headers: the gate would refuse what that play is about
    to install. site.yml's input check names those facts pending; the gate takes them as unknown, saying why."""
    facts = json.loads(HOST_8X.read_text())
    facts.update(cuda_cccl_headers=False, jit_tools_missing=["nvcc"], nvcc_version=None)
    fresh = tmp_path / "host-facts.json"
    fresh.write_text(json.dumps(facts))
    with pytest.raises(LaunchPlanError, match=r"jit-cuda-headers-missing"):
        plan(catalogue=CATALOGUE, model_dirs=MODEL_DIRS, host_facts=str(fresh))
    early = plan(
        catalogue=CATALOGUE,
        model_dirs=MODEL_DIRS,
        host_facts=str(fresh),
        host_facts_pending=["nvcc_version", "jit_tools_missing", "cuda_cccl_headers"],
    )
    verdict = next(v for v in early.start_gate["verdicts"] if v["id"] == "jit-cuda-headers-missing")
    assert verdict["verdict"] == "unknown" and "the CUDA toolkit this run installs is not there yet" in verdict["text"]
    # the host's other facts still decide: the parallel sizes against its 8 GPUs
    with pytest.raises(LaunchPlanError, match=r"parallel-size-exceeds-host-gpus"):
        plan(
            catalogue=CATALOGUE,
            model_dirs=MODEL_DIRS,
            host_facts=str(fresh),
            host_facts_pending=["cuda_cccl_headers"],
            extra_flags={"tp-size": 16},
        )


def test_the_gate_is_never_read_from_the_plan_cache(tmp_path) -> None:
    """A cached flag check is reused, but the model directories are read again: one gone since is refused."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text((MODELS / "kimi-k2.5-nvfp4" / "config.json").read_text())
    dirs = {**MODEL_DIRS, STACK["stack_model_path"]: str(model)}
    first = plan(cache=tmp_path / "plans", catalogue=CATALOGUE, model_dirs=dirs)
    assert first.start_gate["counts"]["refused"] == 0
    (model / "config.json").unlink()
    with pytest.raises(LaunchPlanError, match=r"cannot be read on this host"):
        plan(cache=tmp_path / "plans", catalogue=CATALOGUE, model_dirs=dirs)


def module_args(config_dirs: dict[str, str], **overrides: Any) -> dict[str, Any]:
    """The module sglang_launch_plan's arguments for the eagle3 profile on real 0.5.9 and the 8-GPU host's
    facts, each model path of ``config_dirs`` given as its config files (model_files)."""
    files = {path: {f.name: f.read_text() for f in sorted(Path(directory).iterdir())} for path, directory in config_dirs.items()}
    args = dict(
        sglang=str(WHEEL_059),
        profiles=PROFILES,
        profile="eagle3",
        host="127.0.0.1",
        port=30000,
        manifest=MANIFEST,
        model_class="KimiK25ForConditionalGeneration",
        start_failures=CATALOGUE,
        model_files=files,
        host_facts=str(HOST_8X),
        # the role's fixed environment (roles/sglang_launch/defaults/main.yml sglang_launch_base_env): the draft's
        # 131072 positions below the target's 262144 need SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN
        env_parts=[LAUNCH_DEFAULTS["sglang_launch_base_env"]],
    )
    return {**args, **overrides}


def test_the_module_reads_config_files_given_for_a_model_the_host_does_not_hold(tmp_path) -> None:
    """plugins/modules/sglang_launch_plan.py through real Ansible: model_files stand in for the directories (the lab's way)."""
    from test_modules import run_module

    args = module_args(MODEL_DIRS)
    result = run_module("sglang_launch_plan", args)
    assert not result.get("failed"), result.get("msg")
    gate = result["plan"]["start_gate"]
    assert gate["counts"]["refused"] == 0 and {v["id"]: v["verdict"] for v in gate["verdicts"]}["fp8-kv-from-checkpoint"] == "ok"
    refused = run_module("sglang_launch_plan", {**args, "extra_flags": {"kv-cache-dtype": None}})
    assert refused.get("failed") and "refused: [fp8-kv-from-checkpoint]" in refused["msg"]
    assert "config.json: quantization_config.kv_cache_scheme (float, 8 bits)" in refused["msg"]


def test_the_module_plans_only_against_the_wheel_of_the_digest_it_is_given(tmp_path) -> None:
    """sglang_sha256: a host that holds exactly that wheel plans at once (no copy on a converge that
    changes nothing); a missing or other wheel plans nothing and says wheel_missing (the role copies it)."""
    import hashlib
    import shutil

    from test_modules import run_module

    wheel = tmp_path / WHEEL_059.name
    digest = hashlib.sha256(WHEEL_059.read_bytes()).hexdigest()
    args = module_args(MODEL_DIRS, sglang=str(wheel), sglang_sha256=digest)
    missing = run_module("sglang_launch_plan", args)
    assert not missing.get("failed") and missing["wheel_missing"] is True and missing["plan"] == {}
    wheel.write_bytes(b"PK other bytes")
    assert run_module("sglang_launch_plan", args)["wheel_missing"] is True
    shutil.copy(WHEEL_059, wheel)
    planned = run_module("sglang_launch_plan", args)
    assert not planned.get("failed"), planned.get("msg")
    assert planned["wheel_missing"] is False and planned["plan"]["sglang_version"] == "0.5.9"
    tasks = yaml.safe_load((ROOT / "roles/sglang_launch/tasks/main.yml").read_text())
    copy = next(t for t in tasks if "ansible.builtin.copy" in t)
    assert copy["when"] == "sglang_launch_planned_here.wheel_missing | default(false)"
