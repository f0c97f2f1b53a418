"""docs/troubleshooting.md cannot drift from the code: every message it lists is still printed by the
files it names (each piece of the message between `<...>` placeholders, parentheses and semicolons is found in one string of
those files: a Python string or f-string's literal text, a YAML value), and every entry gives a
cause, a change and a retry command. The messages the issue asks to name their variable do so: a
missing model or draft directory (stack_model_path, stack_draft_model_path), a GPU-count mismatch
(preflight_gpu_count), a build timeout (the spec's timeout_minutes)."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

import ansible
import pytest
import yaml

from conftest import ROOT
from sglang_sm120.build.pipeline import BuildError, Workspace, plan, start, wait, work_dir
from sglang_sm120.launch.plan import LaunchPlanError

PAGE = ROOT / "docs" / "troubleshooting.md"
ANSIBLE_ROOT = Path(ansible.__file__).resolve().parent.parent
HEADING = re.compile(r"^### `(.+)`$")
PLACEHOLDER = re.compile(r"<[^<>]*>")


def entries() -> list[dict[str, Any]]:
    """Each ``### `message` `` entry with its section and the text under it."""
    found: list[dict[str, Any]] = []
    section = ""
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:]
        elif match := HEADING.match(line):
            found.append({"message": match.group(1), "section": section, "body": ""})
        elif found:
            found[-1]["body"] += line + "\n"
    return found


def pieces(message: str) -> list[str]:
    """The literal text of a message: split at the placeholders, parentheses and semicolons (where the
    code joins its clauses), edges trimmed."""
    out = []
    for part in re.split(r"[();]", PLACEHOLDER.sub("\x00", message)):
        for piece in part.split("\x00"):
            piece = piece.strip(" ,;:.[]'")
            if re.search(r"\w", piece):
                out.append(piece)
    return out


def _python_strings(text: str) -> list[str]:
    strings = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.JoinedStr):  # an f-string: its literal runs, a break where a value goes
            strings.append("\x00".join(v.value if isinstance(v, ast.Constant) else "" for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append(node.value)
    return strings


def _yaml_strings(text: str) -> list[str]:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!vault", lambda loader, node: "")
    strings: list[str] = []
    stack = [yaml.load(text, Loader=Loader)]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack += list(item.keys()) + list(item.values())
        elif isinstance(item, list):
            stack += item
        elif isinstance(item, str):
            strings.append(item)
    return strings


@cache
def strings_of(path: Path) -> tuple[str, ...]:
    files = sorted(p for p in path.rglob("*") if p.suffix in (".py", ".yml")) if path.is_dir() else [path]
    out: list[str] = []
    for file in files:
        text = file.read_text()
        out += _python_strings(text) if file.suffix == ".py" else _yaml_strings(text)
    return tuple(out)


def printed_by(entry: dict[str, Any]) -> list[Path]:
    line = next(line for line in entry["body"].splitlines() if line.startswith("- Printed by:"))
    root = ANSIBLE_ROOT if "ansible-core" in line else ROOT
    return [root / name for name in re.findall(r"`([^`]+)`", line)]


def test_the_page_lists_the_messages_the_issue_names() -> None:
    messages = [e["message"] for e in entries()]
    assert len(messages) >= 30
    for must in ("stack_model_path", "stack_draft_model_path", "preflight_gpu_count", "timeout_minutes", "--ask-vault-pass"):
        assert any(must in m for m in messages), must
    assert any("Attempting to decrypt but no vault secrets found" in m for m in messages)


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e["message"][:60])
def test_every_listed_message_is_still_printed_by_the_files_it_names(entry: dict[str, Any]) -> None:
    files = printed_by(entry)
    assert files and all(f.exists() for f in files), files
    strings = [s for f in files for s in strings_of(f)]
    missing = [piece for piece in pieces(entry["message"]) if not any(piece in s for s in strings)]
    assert missing == [], f"{entry['message']!r}: not in {[str(f) for f in files]}: {missing}"


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e["message"][:60])
def test_every_entry_gives_a_cause_a_change_and_a_retry_command(entry: dict[str, Any]) -> None:
    body = entry["body"]
    assert "- Cause: " in body and "- Change: " in body
    retry = re.search(r"^- Retry: `([^`]+)`", body, re.M)
    assert retry and re.match(r"(\w+=\S+ )?(make deploy|ansible-playbook) ", retry.group(1)), body


def test_the_piece_check_can_fail() -> None:
    """The check above is not vacuous: a reworded message is not found."""
    strings = strings_of(ROOT / "plugins/module_utils/sglang_sm120/launch/plan.py")
    assert any("cannot be read on this host" in s for s in strings)
    assert not any("cannot be found on this host" in s for s in strings)
    assert pieces("found <n> GPUs, expected <n> (preflight_gpu_count)") == ["found", "GPUs, expected", "preflight_gpu_count"]


# The messages name their variable, as printed


def test_a_missing_model_or_draft_directory_names_its_inventory_variable(tmp_path: Path) -> None:
    from test_launch_plan import CATALOGUE, MODEL_DIRS, STACK
    from test_launch_plan import plan as launch_plan

    missing = tmp_path / "Kimi-K2.5-NVFP4"
    with pytest.raises(LaunchPlanError) as model:
        launch_plan(catalogue=CATALOGUE, extra_flags={"model-path": str(missing)}, model_dirs={})
    assert "--model-path" in str(model.value) and "or set stack_model_path (the inventory variable" in str(model.value)
    dirs = {k: v for k, v in MODEL_DIRS.items() if k != STACK["stack_draft_model_path"]}
    draft = tmp_path / "eagle3"
    with pytest.raises(LaunchPlanError) as drafted:
        launch_plan(catalogue=CATALOGUE, extra_flags={"speculative-draft-model-path": str(draft)}, model_dirs=dirs)
    assert f"--speculative-draft-model-path {draft}" in str(drafted.value) and "or set stack_draft_model_path" in str(drafted.value)


def test_a_gpu_count_mismatch_names_the_preflight_variable(tmp_path: Path) -> None:
    from test_modules import fake_nvidia_smi, run_module

    smi = fake_nvidia_smi(tmp_path, "seven-gpus.txt")
    names = {"gpu_count": "preflight_gpu_count", "min_memory_gib": "preflight_min_memory_gib"}
    result = run_module("sm120.sglang.sglang_preflight", {"nvidia_smi": str(smi), "min_memory_gib": 100000, "setting_names": names})
    assert result["failed"]
    assert "found 7 GPUs, expected 8 (preflight_gpu_count)" in result["msg"]
    assert "expected at least 100000.0 GiB (preflight_min_memory_gib)" in result["msg"]
    unnamed = run_module("sm120.sglang.sglang_preflight", {"nvidia_smi": str(smi)})
    assert "found 7 GPUs, expected 8" in unnamed["msg"] and "(preflight_gpu_count)" not in unnamed["msg"]


def test_the_preflight_role_names_its_variables_for_the_module() -> None:
    tasks = yaml.safe_load((ROOT / "roles/preflight/tasks/main.yml").read_text())
    check = next(t for t in tasks if "sm120.sglang.sglang_preflight" in t)
    names = check["sm120.sglang.sglang_preflight"]["setting_names"]
    assert names["gpu_count"] == "preflight_gpu_count" and names["min_memory_gib"] == "preflight_min_memory_gib"
    # each has its default in the role's defaults, or in the toolkit's wiring (role toolkit_defaults) when the stack derives it
    defaults = (ROOT / "roles/preflight/defaults/main.yml").read_text() + (
        ROOT / "roles/toolkit_defaults/defaults/main/roles.yml"
    ).read_text()
    assert all(re.search(rf"^{name.split(',')[0]}:", defaults, re.M) for name in names.values() if name != "preflight_disks")


def test_a_build_timeout_names_the_spec_timeout_minutes(cuda_home: Path, tmp_path: Path) -> None:
    from test_build_pipeline import CONTEXT, FIXTURE, probe

    spec = probe("slow")
    spec["build"] = "sleep 60"
    spec["timeout_minutes"] = 0.02  # 1.2 s
    item = plan([spec], CONTEXT)[0].to_dict()
    started = start(item, Workspace(str(tmp_path), "python3", str(cuda_home), staged=str(FIXTURE)))
    assert started["status"] == "started"
    pid = json.loads((work_dir(tmp_path, "slow", item["key"]) / "job.json").read_text())["pid"]
    time.sleep(1.5)
    try:
        with pytest.raises(BuildError) as stopped:
            wait(item, str(tmp_path), 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    text = str(stopped.value)
    assert "slow: build exceeded 0.02 minutes and was stopped (the build spec's timeout_minutes" in text
    assert "the spec named slow of sglang_build_specs" in text


# --check on a fresh host: the start gate reads the model directories' config files read on the host


def read_on_host(*paths: Path) -> dict[str, Any]:
    """What roles/sglang_launch/tasks/check_mode_models.yml gets: the role's script run as the host runs it."""
    script = ROOT / "roles/sglang_launch/files/read_model_configs.py"
    proc = subprocess.run([sys.executable, "-c", script.read_text(), *map(str, paths)], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def test_check_mode_reads_the_model_configs_on_the_host_and_the_gate_gives_its_verdicts(tmp_path: Path) -> None:
    from test_launch_plan import CATALOGUE, MODELS, STACK
    from test_launch_plan import plan as launch_plan

    from sglang_sm120.launch.plan import write_model_files

    index = {"metadata": {"total_size": 123}, "weight_map": {f"layer.{i}": "model-1.safetensors" for i in range(1000)}}
    model = tmp_path / "host" / "Kimi-K2.5-NVFP4"
    model.mkdir(parents=True)
    for name in ("config.json", "hf_quant_config.json"):
        if (MODELS / "kimi-k2.5-nvfp4" / name).exists():
            (model / name).write_text((MODELS / "kimi-k2.5-nvfp4" / name).read_text())
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    (model / "modeling_kimi.py").write_text("# code the gate only needs the name of\n")
    (model / "model-1.safetensors").write_bytes(b"\0" * 16)
    draft = MODELS / "kimi-k2.5-eagle3"
    missing = tmp_path / "host" / "nowhere"

    read = read_on_host(model, draft, missing)
    assert sorted(read) == sorted([str(model), str(draft)])  # a missing directory is left out
    assert json.loads(read[str(model)]["model.safetensors.index.json"]) == {"metadata": {"total_size": 123}}  # no weight map
    assert read[str(model)]["modeling_kimi.py"] == "" and "model-1.safetensors" not in read[str(model)]

    flags = {"model-path": str(model), "speculative-draft-model-path": str(draft)}
    (tmp_path / "scratch").mkdir()
    dirs = write_model_files(tmp_path / "scratch", read)
    result = launch_plan(catalogue=CATALOGUE, extra_flags=flags, model_dirs=dirs)
    verdicts = result.start_gate["verdicts"]
    decidable = [e for e in CATALOGUE["entries"] if e["trigger"]]  # a run-time-only entry is the canary's
    assert len(verdicts) == len(decidable) and all(v["text"].startswith(f"{v['verdict']}: [{v['id']}]") for v in verdicts)
    assert result.start_gate["counts"]["refused"] == 0
    with pytest.raises(LaunchPlanError, match=r"--model-path .*nowhere cannot be read on this host: .*or set stack_model_path"):
        launch_plan(catalogue=CATALOGUE, extra_flags={**flags, "model-path": str(missing)}, model_dirs=dirs)
    assert STACK["stack_model_path"] != str(model)


def test_the_launch_role_runs_the_gate_in_a_check_mode_plan_made_on_the_controller() -> None:
    tasks = yaml.safe_load((ROOT / "roles/sglang_launch/tasks/main.yml").read_text())
    planned = next(t for t in tasks if "sm120.sglang.sglang_launch_plan" in t)["sm120.sglang.sglang_launch_plan"]
    assert "sglang_launch_on_controller" not in planned["start_failures"] and "check-mode" not in planned["start_failures_skipped"]
    included = next(t for t in tasks if t.get("ansible.builtin.include_tasks") == "check_mode_models.yml")
    assert "ansible_check_mode" in included["when"]
    # the deploy prints the gate's counts and what it could not decide (every verdict with -v): read from the plan
    assert any(
        "start_gate.verdicts" in str(t.get("vars", {})) and "start_gate.summary" in str(t.get("ansible.builtin.debug", {})) for t in tasks
    )
