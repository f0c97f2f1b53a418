"""The patched SGLang code run for real: the real 0.5.9 wheel, patched by the engine, imported by the
real SGLang 0.5.9 runtime environment (CPU; the GPU-only calls are faked inside the subprocess).

Also shows that the old `64 * MiB` template, which applies and compiles, is caught by each layer:
the engine's lint, the import check and this harness.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from conftest import DATA, ROOT
from sglang_sm120.patches.engine import apply
from sglang_sm120.patches.errors import LintError
from sglang_sm120.patches.import_check import check_imports, failure_message, module_name
from sglang_sm120.patches.manifest import load_manifest

PATCHES = ROOT / "roles/sglang_patches/files/patches"
OLD_SYMM_TEMPLATE = DATA / "patches" / "torch_symm_mem_sm120.old-mib.diff.j2"
SYMM = "srt/distributed/device_communicators/torch_symm_mem.py"
KIMI = "srt/models/kimi_k25.py"
MIB = 1 << 20

# Runs in the runtime Python with a (patched) SGLang tree first on PYTHONPATH. argv[1] is a JSON
# request; the last stdout line is the JSON answer. Nothing here decides pass or fail.
HARNESS = r"""
import json, sys, types
import torch
import torch.distributed as dist

request = json.loads(sys.argv[1])
out = {}

import sglang.srt.distributed.device_communicators.torch_symm_mem as symm

symm.torch_symm_mem_available = True
torch.cuda.set_device = lambda device: None
torch.cuda.get_device_capability = lambda device=None: (request["capability"], 0)
allocated = []

def empty(numel, device=None, dtype=None):
    allocated.append(numel)
    return torch.empty(numel, dtype=dtype)

symm.torch_symm_mem.empty = empty
symm.torch_symm_mem.rendezvous = lambda buffer, group_name: types.SimpleNamespace(multicast_ptr=0)
group = types.SimpleNamespace(group_name="tp")
for world_size in request["world_sizes"]:
    dist.get_world_size = lambda group=None, _ws=world_size: _ws
    del allocated[:]
    try:
        comm = symm.TorchSymmMemCommunicator(group, 0)
    except Exception as exc:
        out[str(world_size)] = {"error": type(exc).__name__ + ": " + str(exc)}
        continue
    row = {
        "disabled": comm.disabled,
        "buffer_is_none": getattr(comm, "buffer", None) is None,
        "max_size": getattr(comm, "max_size", None),
        "allocated_bytes": [n * 2 for n in allocated],
    }
    if not comm.disabled:
        row["takes_small"] = comm.should_torch_symm_mem_allreduce(torch.zeros(1024, dtype=torch.bfloat16))
        row["takes_max"] = comm.should_torch_symm_mem_allreduce(torch.zeros(comm.max_size // 2, dtype=torch.bfloat16))
    out[str(world_size)] = row

from sglang.srt.models import kimi_k25

cls = kimi_k25.KimiK25ForConditionalGeneration
names = ["get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"]
out["kimi_defines"] = sorted(n for n in names if n in vars(cls))
if len(out["kimi_defines"]) == len(names):
    class Inner:
        def __init__(self):
            self.calls, self.returned = [], []

        def _record(self, name, args):
            value = object()
            self.calls.append([name, args])
            self.returned.append(value)
            return value

        def get_embed_and_head(self):
            return self._record("get_embed_and_head", [])

        def set_embed_and_head(self, embed, head):
            return self._record("set_embed_and_head", [embed, head])

        def set_eagle3_layers_to_capture(self, layer_ids=None):
            return self._record("set_eagle3_layers_to_capture", [layer_ids])

    model = object.__new__(cls)
    torch.nn.Module.__init__(model)
    model.language_model = Inner()
    got = [
        model.get_embed_and_head(),
        model.set_embed_and_head("EMBED", "HEAD"),
        model.set_eagle3_layers_to_capture([2, 30, 58]),
        model.set_eagle3_layers_to_capture(),
    ]
    out["kimi_calls"] = model.language_model.calls
    out["kimi_results_passed_back"] = [a is b for a, b in zip(got, model.language_model.returned)]
    out["kimi_is_module"] = isinstance(model, torch.nn.Module)
print(json.dumps(out))
"""


def manifest_data() -> dict[str, Any]:
    return yaml.safe_load((PATCHES / "manifest.yml").read_text())


def tree_copy(sglang_tree: Path, dest: Path) -> Path:
    """A copy of the pristine wheel's sglang package (the fixture tree itself is never written)."""
    shutil.copytree(sglang_tree / "sglang", dest / "sglang")
    return dest


def patched_tree(
    sglang_tree: Path,
    dest: Path,
    values: Optional[dict[str, Any]] = None,
    template_dir: Path = PATCHES,
    lint: Optional[bool] = True,
) -> Path:
    tree = tree_copy(sglang_tree, dest)
    results = apply(load_manifest(manifest_data(), template_dir), tree / "sglang", dest / "state", values=values, lint=lint)
    assert [r.status for r in results] == ["applied", "applied"]
    return tree


def old_templates(tmp_path: Path) -> Path:
    """roles/sglang_patches/files/patches with the torch_symm_mem template as it was before issue 12 (`64 * MiB`)."""
    templates = tmp_path / "old-templates"
    shutil.copytree(PATCHES, templates)
    shutil.copy2(OLD_SYMM_TEMPLATE, templates / "torch_symm_mem_sm120.diff.j2")
    return templates


def run_harness(python: Path, tree: Path, world_sizes: list[int], capability: int = 12) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    request = json.dumps({"world_sizes": world_sizes, "capability": capability})
    return subprocess.run([str(python), "-c", HARNESS, request], capture_output=True, text=True, env=env, timeout=600, check=False)


def harness(python: Path, tree: Path, world_sizes: list[int]) -> dict[str, Any]:
    proc = run_harness(python, tree, world_sizes)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_old_template_is_really_different() -> None:
    """The kept test data is the `64 * MiB` version, and the shipped template no longer names MiB."""
    old = OLD_SYMM_TEMPLATE.read_text()
    new = (PATCHES / "torch_symm_mem_sm120.diff.j2").read_text()
    assert "{{ mib }} * MiB" in old and "MiB" not in new.replace("(MiB)", "")
    assert old.replace("{{ mib }} * MiB", "{{ mib }} * 1024 * 1024") == new


def test_symm_mem_default_patch_on_sm120_and_kimi_delegation(sglang_runtime_python: Path, sglang_tree: Path, tmp_path: Path) -> None:
    out = harness(sglang_runtime_python, patched_tree(sglang_tree, tmp_path), [2, 4, 6, 8])
    for world_size in ("2", "4", "8"):
        # No multicast on PCIe: disabled cleanly after allocating the template's 64 MiB, as upstream does.
        assert out[world_size] == {"disabled": True, "buffer_is_none": True, "max_size": 64 * MIB, "allocated_bytes": [64 * MIB]}
    # A world size the template does not list: disabled before allocating anything.
    assert out["6"] == {"disabled": True, "buffer_is_none": True, "max_size": None, "allocated_bytes": []}

    assert out["kimi_defines"] == ["get_embed_and_head", "set_eagle3_layers_to_capture", "set_embed_and_head"]
    assert out["kimi_is_module"] is True
    assert out["kimi_calls"] == [
        ["get_embed_and_head", []],
        ["set_embed_and_head", ["EMBED", "HEAD"]],
        ["set_eagle3_layers_to_capture", [[2, 30, 58]]],
        ["set_eagle3_layers_to_capture", [None]],
    ]
    assert out["kimi_results_passed_back"] == [True, True, True, True]


def test_symm_mem_rendered_values_and_two_shot(sglang_runtime_python: Path, sglang_tree: Path, tmp_path: Path) -> None:
    values = {"sm120_all_reduce_max_mib": {8: 32}, "sm120_two_shot_without_multicast": True}
    out = harness(sglang_runtime_python, patched_tree(sglang_tree, tmp_path, values), [2, 8])
    assert out["2"] == {"disabled": True, "buffer_is_none": True, "max_size": None, "allocated_bytes": []}
    # Two-shot without multicast: stays enabled with the rendered 32 MiB buffer.
    assert out["8"] == {
        "disabled": False,
        "buffer_is_none": False,
        "max_size": 32 * MIB,
        "allocated_bytes": [32 * MIB],
        "takes_small": True,
        "takes_max": False,
    }


def test_harness_on_the_pristine_files(sglang_runtime_python: Path, sglang_tree: Path, tmp_path: Path) -> None:
    """The harness is real: the unpatched 0.5.9 file crashes on SM120 and the Kimi class lacks the hooks."""
    out = harness(sglang_runtime_python, tree_copy(sglang_tree, tmp_path), [8])
    assert out["8"] == {"error": "KeyError: 12"}
    assert out["kimi_defines"] == [] and "kimi_calls" not in out


def test_old_mib_template_is_caught_by_every_layer(sglang_runtime_python: Path, sglang_tree: Path, tmp_path: Path) -> None:
    templates = old_templates(tmp_path)
    # 1. The engine's lint refuses it and changes nothing.
    refused = tree_copy(sglang_tree, tmp_path / "refused")
    before = (refused / "sglang" / SYMM).read_bytes()
    with pytest.raises(LintError) as err:
        apply(load_manifest(manifest_data(), templates), refused / "sglang", tmp_path / "refused-state", lint=True)
    message = str(err.value)
    assert f"patch torch_symm_mem_sm120: the patched file has problems the pristine one has not: {SYMM}:32: undefined name 'MiB'" in message
    assert (refused / "sglang" / SYMM).read_bytes() == before and not (tmp_path / "refused-state").exists()

    # Without the lint it applies and compiles, as before issue 12 ...
    tree = patched_tree(sglang_tree, tmp_path / "old", template_dir=templates, lint=False)
    # 2. ... but the import check fails it with the NameError and its traceback,
    outcomes = check_imports(str(sglang_runtime_python), [module_name(SYMM), module_name(KIMI)], {"PYTHONPATH": str(tree)})
    assert [(o.module, o.ok) for o in outcomes] == [(module_name(SYMM), False), (module_name(KIMI), True)]
    assert outcomes[0].error == "NameError: name 'MiB' is not defined"
    text = failure_message(str(sglang_runtime_python), outcomes)
    assert text.startswith(f"{module_name(SYMM)} does not import with {sglang_runtime_python}: NameError")
    assert 'torch_symm_mem.py", line 32, in <module>' in text and len(text.splitlines()) <= 16
    # 3. ... and so does the runtime harness.
    proc = run_harness(sglang_runtime_python, tree, [8])
    assert proc.returncode != 0 and "NameError: name 'MiB' is not defined" in proc.stderr
