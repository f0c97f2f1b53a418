"""sglang_audit on the real SGLang 0.5.9 and 0.5.10 packages (unpacked by scripts/sglang-wheels.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BIN, ROOT
from sglang_sm120.patches.audit import SglangAuditError, SglangSource, audit

CLI = BIN / "sglang-audit"
KIMI = "KimiK25ForConditionalGeneration"
WORKING = ("DeepseekV3ForCausalLM", "LlamaForCausalLM", "Qwen2_5_VLForConditionalGeneration")


@pytest.fixture(scope="session")
def sglang_cache() -> Path:
    cache = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache")) / "sglang"
    for version in ("0.5.9", "0.5.10"):
        if not (cache / version / "sglang" / "srt").is_dir() or not (cache / f"sglang-{version}-py3-none-any.whl").is_file():
            pytest.fail(f"no unpacked SGLang {version} under {cache}: run scripts/sglang-wheels.sh first")
    return cache


@pytest.fixture(scope="session")
def sglang_059(sglang_cache: Path) -> SglangSource:
    return SglangSource(sglang_cache / "0.5.9" / "sglang")


@pytest.fixture(scope="session")
def sglang_0510(sglang_cache: Path) -> SglangSource:
    return SglangSource(sglang_cache / "0.5.10" / "sglang")


@pytest.fixture(scope="session")
def kimi_059(sglang_059: SglangSource):
    return audit(sglang_059, KIMI)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CLI), *args], capture_output=True, text=True, timeout=60)


def test_kimi_k25_in_059_lacks_the_eagle3_target_methods(kimi_059):
    assert kimi_059.sglang_version == "0.5.9"
    assert kimi_059.algorithm == "EAGLE3"
    assert kimi_059.missing_required == ["get_embed_and_head", "set_eagle3_layers_to_capture"]
    assert kimi_059.ok is False


def test_draft_only_set_embed_and_head_is_not_a_target_requirement(kimi_059):
    assert "set_embed_and_head" not in kimi_059.required
    assert "set_embed_and_head" not in kimi_059.missing_required
    assert all(item.name != "set_embed_and_head" for item in kimi_059.conditional)


def test_call_sites_point_at_the_runner_and_the_eagle_worker(kimi_059):
    capture = kimi_059.call_sites["set_eagle3_layers_to_capture"]
    embed = kimi_059.call_sites["get_embed_and_head"]
    assert "srt/model_executor/model_runner.py:622" in capture
    assert any(site.startswith("srt/model_executor/cuda_graph_runner.py:") for site in capture)
    assert "srt/speculative/eagle_worker.py:157" in embed
    assert any(site.startswith("srt/speculative/eagle_worker_v2.py:") for site in embed)


def test_hasattr_and_getattr_defaults_are_guarded(kimi_059):
    assert {"start_layer", "torchao_applied", "get_attention_sliding_window_size"} <= set(kimi_059.guarded)


def test_feature_gated_accesses_are_conditional_with_their_feature(kimi_059):
    by_name = {item.name: item for item in kimi_059.conditional}
    assert by_name["forward_split_prefill"].feature == "forward_batch.forward_mode.is_split_prefill()"
    assert by_name["forward_split_prefill"].present is False
    assert "routed_experts_weights_of_layer" in by_name
    assert "forward_split_prefill" not in kimi_059.missing_required


def test_kimi_k25_in_0510_has_everything(sglang_0510):
    result = audit(sglang_0510, KIMI)
    assert result.sglang_version == "0.5.10"
    assert result.missing_required == []
    assert result.ok
    assert {"get_embed_and_head", "set_eagle3_layers_to_capture"} <= set(result.required)


@pytest.mark.parametrize("model_class", WORKING)
@pytest.mark.parametrize("version", ["0.5.9", "0.5.10"])
def test_no_false_alarm_on_working_models(sglang_cache: Path, version: str, model_class: str):
    result = audit(sglang_cache / version / "sglang", model_class)
    assert result.missing_required == [], result.call_sites
    assert {"get_embed_and_head", "set_eagle3_layers_to_capture"} <= set(result.required)


def test_eagle_without_3_does_not_need_the_capture_hook(sglang_059: SglangSource):
    result = audit(sglang_059, KIMI, "EAGLE")
    assert result.missing_required == ["get_embed_and_head"]
    assert audit(sglang_059, KIMI, "NEXTN").missing_required == ["get_embed_and_head"]


def test_ngram_uses_no_target_hooks(sglang_059: SglangSource):
    assert audit(sglang_059, KIMI, "NGRAM").missing_required == []


def test_wheel_reads_the_same_as_the_directory(sglang_cache: Path, kimi_059):
    from_wheel = audit(sglang_cache / "sglang-0.5.9-py3-none-any.whl", KIMI)
    assert from_wheel.to_dict() == kimi_059.to_dict()


def test_model_dir_config_names_the_class(sglang_059: SglangSource, tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": [KIMI], "model_type": "kimi_k25"}))
    result = audit(sglang_059, model_dir=tmp_path)
    assert result.model_class == KIMI
    assert result.missing_required == ["get_embed_and_head", "set_eagle3_layers_to_capture"]


def test_bad_config_and_unknown_class_are_errors(sglang_059: SglangSource, tmp_path: Path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(SglangAuditError, match=r"config\.json"):
        audit(sglang_059, model_dir=tmp_path)
    with pytest.raises(SglangAuditError, match="NoSuchModelForCausalLM"):
        audit(sglang_059, "NoSuchModelForCausalLM")


def test_cli_exit_1_and_json_when_something_is_missing(sglang_cache: Path):
    done = run_cli("--sglang", str(sglang_cache / "0.5.9" / "sglang"), "--model-class", KIMI, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["missing_required"] == ["get_embed_and_head", "set_eagle3_layers_to_capture"]
    assert report["ok"] is False
    assert {"sglang_version", "model_class", "algorithm", "conditional", "guarded", "call_sites"} <= set(report)


def test_cli_table_lists_call_sites(sglang_cache: Path):
    done = run_cli("--sglang", str(sglang_cache / "sglang-0.5.9-py3-none-any.whl"), "--model-class", KIMI)
    assert done.returncode == 1
    assert "MISSING get_embed_and_head" in done.stdout
    assert "sglang/srt/speculative/eagle_worker.py:157" in done.stdout


def test_cli_exit_0_from_model_dir(sglang_cache: Path, tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": [KIMI]}))
    done = run_cli("--sglang", str(sglang_cache / "0.5.10" / "sglang"), "--model-dir", str(tmp_path), "--algorithm", "eagle3")
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--model-class", "NoSuchModelForCausalLM"], "no class NoSuchModelForCausalLM"),
        (["--model-dir", "MISSING"], "config.json"),
    ],
)
def test_cli_exit_2_on_bad_model(sglang_cache: Path, tmp_path: Path, args: list[str], reason: str):
    args = [str(tmp_path) if a == "MISSING" else a for a in args]
    done = run_cli("--sglang", str(sglang_cache / "0.5.9" / "sglang"), *args)
    assert done.returncode == 2
    assert reason in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_cli_exit_2_on_a_directory_that_is_not_sglang(tmp_path: Path):
    done = run_cli("--sglang", str(tmp_path), "--model-class", KIMI)
    assert done.returncode == 2
    assert "not an SGLang package" in done.stderr


TOY_FILES = {
    "version.py": '__version__ = "9.9.9"\n',
    "srt/speculative/spec_info.py": """
from enum import Enum, auto


class SpeculativeAlgorithm(Enum):
    EAGLE = auto()
    EAGLE3 = auto()
    NGRAM = auto()

    def is_eagle(self):
        return self in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.EAGLE3)

    def is_eagle3(self):
        return self == SpeculativeAlgorithm.EAGLE3

    def is_ngram(self):
        return self == SpeculativeAlgorithm.NGRAM

    def create_worker(self, server_args):
        if self.is_eagle():
            from sglang.srt.speculative.toy_worker import ToyWorker

            return ToyWorker
        from sglang.srt.speculative.toy_ngram import ToyNgram

        return ToyNgram
""",
    "srt/speculative/toy_worker.py": """
class ToyWorker:
    def __init__(self, target_worker):
        self.target_worker = target_worker
        target_model = self.target_worker.model_runner.model
        weights = target_model.share_weights_with_draft()
        self.model_runner.model.take_weights(weights)
        if hasattr(self.target_worker.model_runner.model, "optional_probe"):
            self.target_worker.model_runner.model.optional_probe()
""",
    "srt/speculative/toy_ngram.py": """
class ToyNgram:
    def __init__(self, target_worker):
        target_worker.model_runner.model.ngram_only_hook()
""",
    "srt/model_executor/model_runner.py": """
class ModelRunner:
    def __init__(self, server_args):
        self.server_args = server_args
        self.capture_aux = False
        if self.spec_algorithm.is_eagle3():
            self.capture_aux = True
        self.setup()

    def setup(self):
        if self.capture_aux:
            self.model.aux_capture_hook([1, 2])
        self.maybe_fancy()
        self.model.forward()

    def maybe_fancy(self):
        if not self.server_args.enable_fancy_mode:
            return
        self.model.fancy_hook()
""",
    "srt/models/toy.py": """
from torch import nn

from sglang.srt.models.toy_base import ToyBase


class ToyForCausalLM(ToyBase):
    def __init__(self):
        self.lm = None


class BareToyForCausalLM(nn.Module):
    pass
""",
    "srt/models/toy_base.py": """
from torch import nn


class ToyBase(nn.Module):
    def share_weights_with_draft(self):
        return None

    aux_capture_hook = share_weights_with_draft
""",
}


@pytest.fixture
def toy_sglang(tmp_path: Path) -> Path:
    root = tmp_path / "sglang"
    for name, text in TOY_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_names_and_flags_are_derived_not_built_in(toy_sglang: Path):
    bare = audit(toy_sglang, "BareToyForCausalLM")
    assert bare.sglang_version == "9.9.9"
    assert bare.missing_required == ["aux_capture_hook", "share_weights_with_draft"]
    assert bare.call_sites["share_weights_with_draft"] == ["srt/speculative/toy_worker.py:6"]
    assert "take_weights" not in bare.required  # called on the worker's own (draft) model
    assert bare.guarded == ["optional_probe"]
    assert [(c.name, c.feature, c.present) for c in bare.conditional] == [("fancy_hook", "server_args.enable_fancy_mode", False)]


def test_bases_class_assignments_and_the_algorithm_decide(toy_sglang: Path):
    assert audit(toy_sglang, "ToyForCausalLM").missing_required == []
    assert audit(toy_sglang, "BareToyForCausalLM", "EAGLE").missing_required == ["share_weights_with_draft"]
    assert audit(toy_sglang, "BareToyForCausalLM", "NGRAM").missing_required == ["ngram_only_hook"]


# The shortcuts that keep the audit under 2 s (scripts/bench_audit.py) must see what the plain ways see.


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_file_listing_and_statement_walk_match_rglob_and_ast_walk(sglang_cache: Path, version: str):
    import ast

    from sglang_sm120.patches.audit import _STATEMENT_NODES, _python_files, _walk_statements

    root = sglang_cache / version / "sglang"
    if not root.is_dir():
        pytest.skip(f"no unpacked SGLang {version}")
    assert _python_files(root) == sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
    for name in ("srt/model_executor/model_runner.py", "srt/speculative/spec_info.py", "srt/managers/scheduler.py"):
        tree = ast.parse((root / name).read_text())
        expected = [node for node in ast.walk(tree) if node is tree or isinstance(node, _STATEMENT_NODES)]
        assert list(_walk_statements(tree)) == expected, name


def test_line_prefilters_and_class_index_match_the_plain_scans(sglang_cache: Path):
    import re

    from sglang_sm120.patches.audit import _CLASS_LINE, _lines_with

    root = sglang_cache / "0.5.9" / "sglang"
    text = (root / "srt/model_executor/model_runner.py").read_text()
    lines = text.split("\n")
    assert _lines_with(text, ("hasattr", "getattr")) == [i for i, line in enumerate(lines, 1) if "hasattr" in line or "getattr" in line]
    assert _lines_with("a\rhasattr(x, 'y')", ("hasattr",)) is None  # a lone CR: no shortcut
    plain = re.compile(r"^class\s+(\w+)\s*[(:]", re.MULTILINE)
    models = (root / "srt/models/deepseek_v2.py").read_text()
    found = [m.group(1) for m in _CLASS_LINE.finditer("\n" + models)]
    assert found == [m.group(1) for m in plain.finditer(models)]
    assert "DeepseekV3ForCausalLM" in found
