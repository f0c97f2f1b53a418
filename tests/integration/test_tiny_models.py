"""The tiny canary models (plugins/module_utils/sglang_sm120/serve/tiny_models.py): written from real-shaped configs, read back
by the real SGLang 0.5.9 runtime (transformers, safetensors and SGLang's own model classes and
weight loaders, on the CPU), keyed, and refusing what they do not know by name."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import shutil
import socket
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import DATA, ROOT
from sglang_sm120.serve.tiny_models import MANIFEST, TinyModelError, ensure, read_manifest

MODELS = DATA / "models"
KIMI = MODELS / "kimi-k2.5-nvfp4"
KIMI_DRAFT = MODELS / "kimi-k2.5-eagle3"
LLAMA = MODELS / "llama-3.1-8b-instruct"
LLAMA_DRAFT = MODELS / "llama-3.1-8b-eagle3"
TOKENIZER = ROOT / "roles/sglang_canary/files/tokenizer"
DTYPE_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "BOOL": 1, "U8": 1, "F8_E4M3": 1}
# the real Kimi-K2.5-NVFP4 ignore list as the tiny text model names it (language_model.* -> model.*, vision/projector dropped)
KIMI_TINY_IGNORE = ["lm_head", "model.layers.*.self_attn*", "model.layers.*.mlp.gate", "model.layers.0.mlp*"]
NVFP4_SCALE_SUFFIXES = (".weight_scale", ".weight_scale_2", ".input_scale")

# Shaped like Qwen2.5-7B-Instruct's and Qwen3-8B's config.json (public values; config only, inline
# because only their shape matters here: bias on q/k/v for Qwen2, q_norm/k_norm for Qwen3).
QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 152064,
}
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "attention_bias": False,
    "head_dim": 128,
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 36,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}


def parse_safetensors(path: Path) -> dict[str, dict[str, Any]]:
    """Read a safetensors header and check the layout: offsets contiguous from 0, each tensor's
    byte size = product(shape) x dtype size, the file ending with the last tensor."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length].decode("utf-8"))
    metadata = header.pop("__metadata__")
    assert metadata["format"] == "pt"
    position = 0
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        begin, end = entry["data_offsets"]
        assert begin == position, f"{path}: {name} starts at {begin}, not {position}"
        assert end - begin == math.prod(entry["shape"]) * DTYPE_SIZE[entry["dtype"]], f"{path}: {name} size"
        position = end
    assert len(data) == 8 + length + position, f"{path}: {len(data) - 8 - length - position} stray bytes"
    return header


def tensor_payloads(path: Path, names: Any) -> dict[str, bytes]:
    """The raw bytes of the named tensors (at their data_offsets after the header)."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length].decode("utf-8"))
    base = 8 + length
    return {name: data[base + header[name]["data_offsets"][0] : base + header[name]["data_offsets"][1]] for name in names}


def kimi_variant(directory: Path, quantization_config: Any = None, hf_quant_config: Any = None) -> Path:
    """A copy of the Kimi-K2.5 config.json with quantization_config replaced (None: removed), and hf_quant_config.json
    written only when given."""
    directory.mkdir(parents=True)
    config = json.loads((KIMI / "config.json").read_text())
    config.pop("quantization_config")
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    if hf_quant_config is not None:
        (directory / "hf_quant_config.json").write_text(json.dumps(hf_quant_config, indent=2))
    return directory


@pytest.fixture(scope="module")
def kimi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The real Kimi-K2.5-NVFP4 config (ModelOpt NVFP4): the tiny target is NVFP4 too."""
    out = tmp_path_factory.mktemp("kimi") / "canary"
    return ensure(out, KIMI, KIMI_DRAFT, TOKENIZER)


@pytest.fixture(scope="module")
def kimi_bf16(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The Kimi-K2.5 config without quantization_config nor hf_quant_config.json: a bf16 tiny target."""
    root = tmp_path_factory.mktemp("kimi-bf16")
    source = kimi_variant(root / "source")
    assert "quantization_config" not in json.loads((source / "config.json").read_text())
    return ensure(root / "canary", source, KIMI_DRAFT, TOKENIZER)


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Tiny Llama (with its EAGLE-3 draft), Qwen2 and Qwen3 targets."""
    root = tmp_path_factory.mktemp("dense")
    results = {"llama": ensure(root / "llama", LLAMA, LLAMA_DRAFT, TOKENIZER)}
    for name, config in (("qwen2", QWEN2), ("qwen3", QWEN3)):
        source = root / f"{name}-source"
        source.mkdir()
        (source / "config.json").write_text(json.dumps(config))
        results[name] = ensure(root / name, source, None, TOKENIZER)
    return results


def config_of(directory: str) -> dict[str, Any]:
    return json.loads((Path(directory) / "config.json").read_text())


# (a) -------------------------------------------------------------------------------------------


def test_kimi_target_and_draft_are_written(kimi: dict[str, Any]) -> None:
    assert kimi["changed"] is True
    target, draft = Path(kimi["target"]), Path(kimi["draft"])
    assert sorted(p.name for p in target.iterdir()) == [
        "config.json",
        "hf_quant_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert sorted(p.name for p in draft.iterdir()) == ["config.json", "model.safetensors"]
    assert (target / "tokenizer.json").read_bytes() == (TOKENIZER / "tokenizer.json").read_bytes()
    target_tensors = parse_safetensors(target / "model.safetensors")
    draft_tensors = parse_safetensors(draft / "model.safetensors")
    assert len(target_tensors) == kimi["plan"]["target"]["tensors"]
    assert len(draft_tensors) == kimi["plan"]["draft"]["tensors"]
    assert not [p.name for p in Path(kimi["dest"]).iterdir() if p.name.startswith(".")], "temp files left behind"

    manifest = read_manifest(kimi["dest"])
    assert manifest is not None and manifest["key"] == kimi["key"]
    assert manifest["sources"]["target"]["config_sha256"] == hashlib.sha256((KIMI / "config.json").read_bytes()).hexdigest()
    assert (
        manifest["sources"]["target"]["hf_quant_config_sha256"] == hashlib.sha256((KIMI / "hf_quant_config.json").read_bytes()).hexdigest()
    )
    assert manifest["sources"]["draft"]["config_sha256"] == hashlib.sha256((KIMI_DRAFT / "config.json").read_bytes()).hexdigest()
    assert set(manifest["sources"]["tokenizer"]["files"]) == {"tokenizer.json", "tokenizer_config.json"}
    assert sorted(manifest["files"]) == sorted(
        [f"target/{p.name}" for p in target.iterdir()] + [f"draft/{p.name}" for p in draft.iterdir()]
    )
    for rel, record in manifest["files"].items():
        assert hashlib.sha256((Path(kimi["dest"]) / rel).read_bytes()).hexdigest() == record["sha256"], rel


def test_kimi_plan_keeps_architecture_attention_and_routing(kimi_bf16: dict[str, Any]) -> None:
    kimi = kimi_bf16
    real = json.loads((KIMI / "config.json").read_text())["text_config"]
    target, draft = config_of(kimi["target"]), config_of(kimi["draft"])
    assert not (Path(kimi["target"]) / "hf_quant_config.json").exists()
    assert kimi["plan"]["target"]["sizes"]["moe_intermediate_size"] == [real["moe_intermediate_size"], 32]
    assert target["architectures"] == ["DeepseekV3ForCausalLM"] and target["model_type"] == "deepseek_v3"
    assert "quantization_config" not in target and "auto_map" not in target
    # MLA per-head sizes and routing: the real ones
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts", "num_experts_per_tok"):
        assert target[key] == real[key], key
    for key in ("n_group", "topk_group", "n_shared_experts", "topk_method", "scoring_func", "routed_scaling_factor", "norm_topk_prob"):
        assert target[key] == real[key], key
    assert target["num_experts_per_tok"] <= target["n_routed_experts"]
    assert target["n_routed_experts"] % target["n_group"] == 0 and target["topk_group"] <= target["n_group"]
    assert target["first_k_dense_replace"] == 1 and target["num_hidden_layers"] == 5
    assert target["hidden_size"] == 256 and target["q_lora_rank"] == 64 and target["vocab_size"] == 512
    assert target["max_position_embeddings"] == 4096
    rope = target["rope_scaling"]
    assert rope["type"] == "yarn" and rope["factor"] == 64.0
    assert rope["original_max_position_embeddings"] * rope["factor"] == target["max_position_embeddings"]
    assert target["eos_token_id"] == 0  # the test tokenizer's </s>

    assert draft["architectures"] == ["LlamaForCausalLMEagle3"] and draft["num_hidden_layers"] == 1
    assert draft["hidden_size"] == target["hidden_size"] and draft["vocab_size"] == target["vocab_size"]
    assert draft["draft_vocab_size"] == 128 and draft["max_position_embeddings"] == 2048  # half the target's, as 131072 / 262144
    ids = draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert ids == [1, 2, 3]
    # SGLang captures layer id+1's input (0.5.9; 0.5.13 too when ids start at 1): distinct, inside the target
    assert len({i + 1 for i in ids}) == 3 and max(ids) + 1 < target["num_hidden_layers"]

    tensors = parse_safetensors(Path(kimi["target"]) / "model.safetensors")
    assert tensors["model.layers.0.mlp.gate_proj.weight"]["shape"] == [704, 256]  # dense first layer
    assert tensors["model.layers.1.mlp.gate.weight"]["shape"] == [384, 256]
    assert tensors["model.layers.1.mlp.gate.e_score_correction_bias"]["dtype"] == "F32"
    assert tensors["model.layers.4.mlp.experts.383.down_proj.weight"]["shape"] == [256, 32]
    assert {entry["dtype"] for name, entry in tensors.items() if name.endswith(".weight")} == {"BF16"}
    assert not [name for name in tensors if name.endswith(NVFP4_SCALE_SUFFIXES)]
    assert tensors["model.layers.2.self_attn.kv_a_proj_with_mqa.weight"]["shape"] == [512 + 64, 256]
    assert tensors["model.layers.2.self_attn.kv_b_proj.weight"]["shape"] == [8 * (128 + 128), 512]
    draft_tensors = parse_safetensors(Path(kimi["draft"]) / "model.safetensors")
    assert draft_tensors["fc.weight"]["shape"] == [256, 3 * 256]
    assert draft_tensors["midlayer.self_attn.q_proj.weight"]["shape"] == [8 * 128, 2 * 256]
    assert draft_tensors["d2t"] == {"dtype": "I64", "shape": [128], "data_offsets": draft_tensors["d2t"]["data_offsets"]}
    assert draft_tensors["t2d"]["dtype"] == "BOOL" and draft_tensors["t2d"]["shape"] == [512]


# (e) -------------------------------------------------------------------------------------------


def test_kimi_differences_name_the_generated_nvfp4(kimi: dict[str, Any]) -> None:
    text = "\n".join(kimi["differences"])
    quantization = [d for d in kimi["differences"] if d.startswith("quantization:")]
    assert len(quantization) == 1
    assert quantization[0].startswith("quantization: generated as the real model's NVFP4 (modelopt, from config.json quantization_config")
    assert "hf_quant_config.json" in quantization[0] and "not generated" not in quantization[0] and "bf16" not in quantization[0]
    assert f"({', '.join(KIMI_TINY_IGNORE)})" in quantization[0]
    assert "(lm_head, model.layers.*.self_attn*, model.layers.*.mlp.gate, model.layers.0.mlp*)" in quantization[0]
    assert "per 16 inputs" in quantization[0] and "128 wide per rank" in quantization[0]
    assert [d for d in kimi["differences"] if d.startswith("quantization ignore list:")] == [
        "quantization ignore list: mm_projector*, vision_tower* left out (they name parts the tiny target does not have)"
    ]
    assert any(d.startswith("vision tower: left out") for d in kimi["differences"])
    assert "KimiK25ForConditionalGeneration" in text and "EAGLE-3 delegation" in text
    # the tiny config keeps the real kv_cache_scheme, so no KV-cache hint and no KV difference
    assert not [d for d in kimi["differences"] if d.startswith("kv_cache_quant_algo:")]
    assert config_of(kimi["target"])["quantization_config"]["kv_cache_scheme"] == {"dynamic": False, "num_bits": 8, "type": "float"}
    assert "tokenizer:" in text and "kimi_k2" in text
    assert kimi["launch_hints"] == {"env": {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}}
    assert read_manifest(kimi["dest"])["differences"] == kimi["differences"]


def test_kimi_fp8_differences_name_what_is_not_generated(tmp_path: Path) -> None:
    real = json.loads((KIMI / "config.json").read_text())["quantization_config"]
    hf = json.loads((KIMI / "hf_quant_config.json").read_text())
    hf["quantization"]["quant_algo"] = "FP8"
    source = kimi_variant(tmp_path / "kimi-fp8", {**real, "quant_algo": "FP8"}, hf)
    fp8 = ensure(tmp_path / "canary", source, KIMI_DRAFT, TOKENIZER)
    text = "\n".join(fp8["differences"])
    quantization = [d for d in fp8["differences"] if d.startswith("quantization")]
    assert len(quantization) == 1
    assert "FP8" in quantization[0] and "modelopt" in quantization[0] and "bf16" in quantization[0]
    assert "is not generated (the generator writes ModelOpt NVFP4 only)" in quantization[0]
    assert "from config.json quantization_config, hf_quant_config.json" in quantization[0]
    assert any(d.startswith("vision tower: left out") for d in fp8["differences"])
    assert "KimiK25ForConditionalGeneration" in text and "EAGLE-3 delegation" in text
    assert any(d.startswith("kv_cache_quant_algo:") and "FP8" in d for d in fp8["differences"])
    assert "tokenizer:" in text and "kimi_k2" in text
    assert fp8["launch_hints"] == {"kv_cache_dtype": "fp8_e4m3", "env": {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}}
    assert read_manifest(fp8["dest"])["differences"] == fp8["differences"]
    # not generated: a bf16 target with no quantization config
    target = Path(fp8["target"])
    assert "quantization_config" not in config_of(fp8["target"]) and not (target / "hf_quant_config.json").exists()
    assert config_of(fp8["target"])["moe_intermediate_size"] == 32
    tensors = parse_safetensors(target / "model.safetensors")
    assert {entry["dtype"] for name, entry in tensors.items() if name.endswith(".weight")} == {"BF16"}
    assert not [name for name in tensors if name.endswith(NVFP4_SCALE_SUFFIXES)]


def test_kimi_nvfp4_target_is_written_as_modelopt_exports_it(kimi: dict[str, Any], kimi_bf16: dict[str, Any]) -> None:
    target = Path(kimi["target"])
    config = config_of(kimi["target"])
    expected_quant = copy.deepcopy(json.loads((KIMI / "config.json").read_text())["quantization_config"])
    expected_quant["ignore"] = KIMI_TINY_IGNORE
    assert config["quantization_config"] == expected_quant
    expected_hf = json.loads((KIMI / "hf_quant_config.json").read_text())
    expected_hf["quantization"]["exclude_modules"] = KIMI_TINY_IGNORE
    assert json.loads((target / "hf_quant_config.json").read_text()) == expected_hf
    assert config["moe_intermediate_size"] == 128 and kimi["plan"]["target"]["sizes"]["moe_intermediate_size"] == [2048, 128]
    n_shared, layers, experts = config["n_shared_experts"], config["num_hidden_layers"], config["n_routed_experts"]
    assert (n_shared, layers, experts) == (1, 5, 384)

    path = target / "model.safetensors"
    tensors = parse_safetensors(path)
    assert len(tensors) == kimi["plan"]["target"]["tensors"]

    def quantized(module: str, rows: int, cols: int) -> None:
        assert tensors[f"{module}.weight"]["dtype"] == "U8" and tensors[f"{module}.weight"]["shape"] == [rows, cols // 2], module
        assert tensors[f"{module}.weight_scale"]["dtype"] == "F8_E4M3", module
        assert tensors[f"{module}.weight_scale"]["shape"] == [rows, cols // 16], module
        for suffix in ("weight_scale_2", "input_scale"):
            assert (tensors[f"{module}.{suffix}"]["dtype"], tensors[f"{module}.{suffix}"]["shape"]) == ("F32", []), f"{module}.{suffix}"

    def unquantized(module: str, shape: list[int]) -> None:
        assert (tensors[f"{module}.weight"]["dtype"], tensors[f"{module}.weight"]["shape"]) == ("BF16", shape), module
        assert not [name for name in tensors if name.startswith(f"{module}.") and name.endswith(NVFP4_SCALE_SUFFIXES)], module

    for layer in range(1, layers):
        mlp = f"model.layers.{layer}.mlp"
        for expert in range(experts):
            quantized(f"{mlp}.experts.{expert}.gate_proj", 128, 256)
            quantized(f"{mlp}.experts.{expert}.up_proj", 128, 256)
            quantized(f"{mlp}.experts.{expert}.down_proj", 256, 128)
        quantized(f"{mlp}.shared_experts.gate_proj", 128 * n_shared, 256)
        quantized(f"{mlp}.shared_experts.up_proj", 128 * n_shared, 256)
        quantized(f"{mlp}.shared_experts.down_proj", 256, 128 * n_shared)
        unquantized(f"{mlp}.gate", [384, 256])  # the router
        assert tensors[f"{mlp}.gate.e_score_correction_bias"]["dtype"] == "F32"
    assert tensors["model.layers.1.mlp.experts.0.down_proj.weight"]["shape"] == [256, 64]
    assert tensors["model.layers.1.mlp.experts.0.down_proj.weight_scale"]["shape"] == [256, 8]
    # layer 0's dense MLP: ignored by model.layers.0.mlp*
    unquantized("model.layers.0.mlp.gate_proj", [704, 256])
    unquantized("model.layers.0.mlp.up_proj", [704, 256])
    unquantized("model.layers.0.mlp.down_proj", [256, 704])
    attention = [name for name in tensors if ".self_attn." in name]
    assert len(attention) > 5 * layers and {tensors[name]["dtype"] for name in attention} == {"BF16"}
    unquantized("lm_head", [512, 256])
    unquantized("model.embed_tokens", [512, 256])

    names = {suffix: sorted(n for n in tensors if n.endswith(suffix)) for suffix in NVFP4_SCALE_SUFFIXES}
    packed = sorted(n for n, e in tensors.items() if e["dtype"] == "U8")
    assert len(packed) == len(names[".weight_scale"]) == len(names[".weight_scale_2"]) == len(names[".input_scale"])
    assert len(packed) == (layers - 1) * (3 * experts + 3)
    assert [n[: -len(".weight")] for n in packed] == [n[: -len(".weight_scale")] for n in names[".weight_scale"]]
    assert {tensors[n]["dtype"] for n in names[".weight_scale"]} == {"F8_E4M3"}

    payloads = tensor_payloads(path, [*names[".weight_scale"], *names[".weight_scale_2"], *names[".input_scale"]])
    for name in names[".weight_scale"]:  # positive e4m3 block scales 0.5 .. 1.875, never NaN
        data = payloads[name]
        assert len(data) == math.prod(tensors[name]["shape"]) and min(data) >= 0x30 and max(data) <= 0x3F, name
    assert len(set(payloads["model.layers.1.mlp.experts.0.gate_proj.weight_scale"])) > 1  # random, not one constant
    for name in names[".weight_scale_2"]:
        assert struct.unpack("<f", payloads[name]) == pytest.approx((0.002,)), name
    for name in names[".input_scale"]:
        assert struct.unpack("<f", payloads[name]) == pytest.approx((0.005,)), name

    # the same modules as the bf16 tiny target: only the scales are added
    bf16_names = set(parse_safetensors(Path(kimi_bf16["target"]) / "model.safetensors"))
    added = set(tensors) - bf16_names
    assert added and all(name.endswith(NVFP4_SCALE_SUFFIXES) for name in added), sorted(added)[:5]
    assert added == {name for suffix in NVFP4_SCALE_SUFFIXES for name in names[suffix]}
    assert not bf16_names - set(tensors), sorted(bf16_names - set(tensors))[:5]


def test_unquantized_llama_reports_no_quantization_or_vision(dense: dict[str, dict[str, Any]]) -> None:
    differences = dense["llama"]["differences"]
    assert not [d for d in differences if d.startswith(("quantization", "vision", "kv_cache", "architecture"))]
    assert dense["llama"]["launch_hints"] == {"env": {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}}
    target, draft = config_of(dense["llama"]["target"]), config_of(dense["llama"]["draft"])
    # a draft without aux layer ids: SGLang captures [2, n//2, n-3], distinct only from 7 layers
    n = target["num_hidden_layers"]
    assert n == 7 and len({2, n // 2, n - 3}) == 3 and "eagle_config" not in draft
    assert (target["num_attention_heads"], target["num_key_value_heads"], target["head_dim"]) == (8, 2, 128)
    assert draft["torch_dtype"] == "float16"
    assert parse_safetensors(Path(dense["llama"]["draft"]) / "model.safetensors")["fc.weight"]["dtype"] == "F16"
    assert dense["qwen2"]["draft"] is None and not Path(dense["qwen2"]["dest"], "draft").exists()


# (b) -------------------------------------------------------------------------------------------

# Runs in the SGLang 0.5.9 runtime's Python with the 0.5.9 tree first on PYTHONPATH; argv[1] is a JSON
# request, the last stdout line the JSON answer. Nothing here decides pass or fail.
HARNESS = r"""
import json, os, sys
os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM

request = json.loads(sys.argv[1])
out = {"targets": {}, "drafts": {}}

def read(path):
    with safe_open(os.path.join(path, "model.safetensors"), framework="pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}

def described(tensors):
    return {name: [list(t.shape), str(t.dtype).replace("torch.", "")] for name, t in tensors.items()}

weights = {}
for path in request["targets"]:
    config = AutoConfig.from_pretrained(path)
    weights[path] = read(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    tied = set(getattr(model, "_tied_weights_keys", None) or []) if config.tie_word_embeddings else set()
    out["targets"][path] = {
        "config_class": type(config).__name__,
        "tensors": described(weights[path]),
        "finite": all(bool(torch.isfinite(t.float()).all()) for t in weights[path].values() if t.is_floating_point()),
        "transformers_class": type(model).__name__,
        "transformers_state_dict": {k: list(v.shape) for k, v in model.state_dict().items() if k not in tied},
    }
    # transformers' own loader reads the checkpoint, and a forward pass gives finite logits
    loaded, info = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16, output_loading_info=True)
    with torch.no_grad():
        logits = loaded(torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])).logits
    out["targets"][path]["loading_info"] = {k: sorted(map(str, v)) for k, v in info.items() if k != "error_msgs"}
    out["targets"][path]["logits"] = [list(logits.shape), bool(torch.isfinite(logits.float()).all())]
    del loaded
for path in request["drafts"]:
    config = AutoConfig.from_pretrained(path)
    weights[path] = read(path)
    out["drafts"][path] = {"config_class": type(config).__name__, "tensors": described(weights[path])}

# SGLang's own model classes and weight loaders, on the CPU
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from sglang.srt.distributed import parallel_state
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.dp_attention import initialize_dp_attention
from sglang.srt.layers.moe import initialize_moe_config

server_args = ServerArgs(model_path=request["targets"][0], device="cpu")
set_global_server_args_for_scheduler(server_args)
parallel_state.init_distributed_environment(
    world_size=1, rank=0, local_rank=0, distributed_init_method="tcp://127.0.0.1:%d" % request["port"], backend="gloo"
)
parallel_state.initialize_model_parallel(1, 1)
initialize_dp_attention(server_args, ModelConfig.from_server_args(server_args))
initialize_moe_config(server_args)
from sglang.srt.models.registry import ModelRegistry
torch.set_default_dtype(torch.bfloat16)

def nan_filled(model):
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    return model

def unwritten(model):
    return sorted(n for n, p in model.named_parameters() if torch.isnan(p.float()).any())

def nan_counts(model):
    return {n: int(torch.isnan(p.float()).sum()) for n, p in model.named_parameters()}

def load_one_by_one(model, tensors):
    # a tensor that writes no parameter (and is not d2t/t2d) is one the loader ignored
    ignored = []
    for name, tensor in tensors.items():
        before, hot = nan_counts(model), getattr(model, "hot_token_id", None)
        model.load_weights(iter([(name, tensor)]))
        if nan_counts(model) == before and getattr(model, "hot_token_id", None) is hot and name != "t2d":
            ignored.append(name)
    return ignored

for path in request["targets"]:
    model_config = ModelConfig(path)
    cls, _ = ModelRegistry.resolve_model_cls(model_config.hf_config.architectures)
    model = nan_filled(cls(model_config.hf_config))
    row = out["targets"][path]
    row["sglang_class"] = cls.__name__
    row["sglang_attention_arch"] = model_config.attention_arch.name
    if cls.__name__.startswith("Deepseek"):
        model.load_weights(iter(weights[path].items()))  # q_a/kv_a are fused across tensors: all at once
        row["sglang_ignored"] = None
    else:
        row["sglang_ignored"] = load_one_by_one(model, weights[path])
    row["sglang_unwritten"] = unwritten(model)
for path in request["drafts"]:
    config = AutoConfig.from_pretrained(path)
    cls, _ = ModelRegistry.resolve_model_cls(config.architectures)
    model = nan_filled(cls(config))
    row = out["drafts"][path]
    row["sglang_class"] = cls.__name__
    row["sglang_ignored"] = load_one_by_one(model, weights[path])
    row["sglang_unwritten"] = unwritten(model)
    row["hot_token_id"] = None if model.hot_token_id is None else model.hot_token_id.tolist()
print(json.dumps(out))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_real_runtime_reads_and_loads_every_tensor(
    kimi_bf16: dict[str, Any], dense: dict[str, dict[str, Any]], sglang_runtime_python: Path, sglang_tree: Path
) -> None:
    kimi = kimi_bf16
    targets = [kimi["target"], *(dense[name]["target"] for name in ("llama", "qwen2", "qwen3"))]
    drafts = [kimi["draft"], dense["llama"]["draft"]]
    request = json.dumps({"targets": targets, "drafts": drafts, "port": free_port()})
    env = dict(os.environ, PYTHONPATH=str(sglang_tree), PYTHONDONTWRITEBYTECODE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([str(sglang_runtime_python), "-c", HARNESS, request], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])

    expected_classes = {
        kimi["target"]: ("DeepseekV3Config", "DeepseekV3ForCausalLM", "MLA"),
        dense["llama"]["target"]: ("LlamaConfig", "LlamaForCausalLM", "MHA"),
        dense["qwen2"]["target"]: ("Qwen2Config", "Qwen2ForCausalLM", "MHA"),
        dense["qwen3"]["target"]: ("Qwen3Config", "Qwen3ForCausalLM", "MHA"),
    }
    for path in targets:
        row = answer["targets"][path]
        header = parse_safetensors(Path(path) / "model.safetensors")
        # safetensors reads every tensor with the shapes of the header
        assert {name: shape for name, (shape, _) in row["tensors"].items()} == {n: e["shape"] for n, e in header.items()}
        assert row["finite"], path
        # transformers' own class for the architecture has exactly these names and shapes
        config_class, model_class, attention = expected_classes[path]
        assert (row["config_class"], row["transformers_class"], row["sglang_class"]) == (config_class, model_class, model_class)
        generated = {name: shape for name, (shape, _) in row["tensors"].items()}
        missing = sorted(set(row["transformers_state_dict"]) - set(generated))
        extra = sorted(set(generated) - set(row["transformers_state_dict"]))
        assert not missing and not extra, f"{model_class}: missing {missing[:5]}, extra {extra[:5]}"
        assert generated == row["transformers_state_dict"], model_class
        assert row["loading_info"] == {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": []}, row["loading_info"]
        assert row["logits"] == [[1, 8, 512], True]
        # SGLang 0.5.9's own class and loader write every parameter and use every tensor
        assert row["sglang_attention_arch"] == attention
        assert row["sglang_unwritten"] == [], f"{model_class}: SGLang parameters not loaded: {row['sglang_unwritten'][:5]}"
        assert not row["sglang_ignored"], f"{model_class}: tensors SGLang's loader ignored: {row['sglang_ignored']}"

    for path in drafts:
        row = answer["drafts"][path]
        assert row["config_class"] == "LlamaConfig" and row["sglang_class"] == "LlamaForCausalLMEagle3"
        assert row["sglang_unwritten"] == [], row["sglang_unwritten"]
        assert row["sglang_ignored"] == [], f"tensors SGLang's llama_eagle3 load_weights ignored: {row['sglang_ignored']}"
        config = config_of(path)
        assert row["hot_token_id"] == [i * (config["vocab_size"] // config["draft_vocab_size"]) for i in range(config["draft_vocab_size"])]


# (c) -------------------------------------------------------------------------------------------


def copy_sources(tmp_path: Path) -> tuple[Path, Path, Path]:
    target, draft, tokenizer = tmp_path / "target-src", tmp_path / "draft-src", tmp_path / "tokenizer-src"
    shutil.copytree(LLAMA, target)
    shutil.copytree(LLAMA_DRAFT, draft)
    shutil.copytree(TOKENIZER, tokenizer)
    return target, draft, tokenizer


def edit_json(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data, indent=2))


def test_key_reuses_unchanged_output_and_regenerates_on_any_input(tmp_path: Path) -> None:
    target, draft, tokenizer = copy_sources(tmp_path)
    out = tmp_path / "canary"
    first = ensure(out, target, draft, tokenizer)
    assert first["changed"] is True
    weights = out / "target" / "model.safetensors"
    stamp = weights.stat().st_mtime_ns

    again = ensure(out, target, draft, tokenizer)
    assert (again["changed"], again["key"]) == (False, first["key"])
    assert weights.stat().st_mtime_ns == stamp
    assert ensure(out, target, draft, tokenizer, check_mode=True)["changed"] is False

    keys = {first["key"]}
    for change in (
        lambda: edit_json(target / "config.json", rms_norm_eps=1e-06),
        lambda: edit_json(tokenizer / "tokenizer_config.json", comment="changed"),
        lambda: edit_json(draft / "config.json", intermediate_size=8192),
    ):
        change()
        checked = ensure(out, target, draft, tokenizer, check_mode=True)
        assert checked["changed"] is True and checked["key"] not in keys
        assert read_manifest(out)["key"] in keys, "check mode wrote"
        result = ensure(out, target, draft, tokenizer)
        assert (result["changed"], result["key"]) == (True, checked["key"])
        assert read_manifest(out)["key"] == result["key"]
        keys.add(result["key"])
        assert ensure(out, target, draft, tokenizer)["changed"] is False
    assert config_of(str(out / "draft"))["intermediate_size"] == 512  # 8192 * 256 / 4096

    without_draft = ensure(out, target, None, tokenizer)
    assert without_draft["changed"] is True and without_draft["draft"] is None
    assert not (out / "draft").exists() and (out / "target" / "config.json").is_file()

    (out / "target" / "model.safetensors").unlink()  # damaged output is written again
    assert ensure(out, target, None, tokenizer)["changed"] is True
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    one = ensure(tmp_path / "one", LLAMA, LLAMA_DRAFT, TOKENIZER)
    two = ensure(tmp_path / "two", LLAMA, LLAMA_DRAFT, TOKENIZER)
    assert one["key"] == two["key"]
    assert read_manifest(tmp_path / "one")["files"] == read_manifest(tmp_path / "two")["files"]


# (d) -------------------------------------------------------------------------------------------


def test_unknown_architecture_is_refused_by_name(tmp_path: Path) -> None:
    source = tmp_path / "mystery"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"architectures": ["MysteryForCausalLM"], "hidden_size": 8}))
    with pytest.raises(TinyModelError) as error:
        ensure(tmp_path / "out", source, None, TOKENIZER)
    message = str(error.value)
    assert str(source / "config.json") in message and "'MysteryForCausalLM'" in message
    assert "KimiK25ForConditionalGeneration" in message and "DeepseekV3ForCausalLM" in message and "LlamaForCausalLM" in message
    assert not (tmp_path / "out").exists()

    with pytest.raises(TinyModelError, match=r"mystery/config.json: names architecture 'MysteryForCausalLM'.*LlamaForCausalLMEagle3"):
        ensure(tmp_path / "out", LLAMA, source, TOKENIZER)


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (lambda d: None, r"model directory does not exist"),
        (lambda d: d.mkdir(), r"config.json: not found"),
        (lambda d: (d.mkdir(), (d / "config.json").write_text("{not json")), r"config.json: not valid JSON"),
        (lambda d: (d.mkdir(), (d / "config.json").write_text("[]")), r"config.json: not a JSON object"),
        (lambda d: (d.mkdir(), (d / "config.json").write_text("{}")), r"config.json: names no architecture"),
    ],
    ids=["no-dir", "no-config", "bad-json", "not-object", "no-architectures"],
)
def test_bad_target_directory_names_the_file(tmp_path: Path, setup: Any, expected: str) -> None:
    source = tmp_path / "model"
    setup(source)
    with pytest.raises(TinyModelError, match=expected) as error:
        ensure(tmp_path / "out", source, None, TOKENIZER)
    assert str(source) in str(error.value)


def test_missing_mla_key_and_bad_tokenizer_are_named(tmp_path: Path) -> None:
    source = tmp_path / "kimi"
    shutil.copytree(KIMI, source)
    config = json.loads((source / "config.json").read_text())
    del config["text_config"]["kv_lora_rank"]
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(TinyModelError, match=r"kimi/config.json: the text config has no 'kv_lora_rank', which DeepseekV3ForCausalLM needs"):
        ensure(tmp_path / "out", source, None, TOKENIZER)
    with pytest.raises(TinyModelError, match=r"tokenizer.json: not found"):
        ensure(tmp_path / "out", LLAMA, None, tmp_path)


def test_nvfp4_group_size_that_does_not_divide_a_linear_is_named(tmp_path: Path) -> None:
    quant = json.loads((KIMI / "config.json").read_text())["quantization_config"]
    source = kimi_variant(tmp_path / "kimi", {**quant, "group_size": 48}, json.loads((KIMI / "hf_quant_config.json").read_text()))
    name = "model.layers.1.mlp.experts.0.gate_proj.weight"
    with pytest.raises(TinyModelError) as error:
        ensure(tmp_path / "out", source, KIMI_DRAFT, TOKENIZER)
    assert str(error.value) == f"{name}: 256 inputs do not split into NVFP4 groups of 48"
    assert not (tmp_path / "out").exists()


# the Ansible module ------------------------------------------------------------------------------


def run_module(args: dict[str, Any], *flags: str) -> dict[str, Any]:
    """sglang_canary_models through Ansible, as test_modules runs every module."""
    from test_modules import run_module as run_ansible_module

    return run_ansible_module("sglang_canary_models", args, flags=flags)


def test_module_writes_then_reports_no_change(tmp_path: Path) -> None:
    args = {
        "target_model_path": str(LLAMA),
        "draft_model_path": str(LLAMA_DRAFT),
        "tokenizer_path": str(TOKENIZER),
        "dest": str(tmp_path / "m"),
    }
    checked = run_module(args, "--check")
    assert not checked.get("failed"), checked.get("msg")
    assert checked["changed"] is True and not (tmp_path / "m" / MANIFEST).exists()
    first = run_module(args)
    assert first["changed"] is True and first["key"] == checked["key"]
    assert first["target"] == str(tmp_path / "m" / "target") and first["draft"] == str(tmp_path / "m" / "draft")
    assert run_module(args)["changed"] is False
    bad = run_module({**args, "target_model_path": str(tmp_path / "nowhere")})
    assert bad.get("failed") and str(tmp_path / "nowhere") in bad["msg"]


def test_module_reads_the_paths_from_the_launch_flags_and_skips_an_unknown_architecture_by_policy(tmp_path: Path) -> None:
    argv = ["--model-path", str(LLAMA), "--tp-size", "2", "--speculative-draft-model-path", str(LLAMA_DRAFT)]
    from_flags = run_module({"argv": argv, "tokenizer_path": str(TOKENIZER), "dest": str(tmp_path / "m")})
    assert not from_flags.get("failed"), from_flags.get("msg")
    assert from_flags["generated"] is True and from_flags["plan"]["tp_size"] == 2 and from_flags["draft"] == str(tmp_path / "m" / "draft")
    mystery = tmp_path / "mystery"
    mystery.mkdir()
    (mystery / "config.json").write_text(json.dumps({"architectures": ["MysteryForCausalLM"], "hidden_size": 8}))
    args = {"argv": ["--model-path", str(mystery)], "tokenizer_path": str(TOKENIZER), "dest": str(tmp_path / "x")}
    skipped = run_module({**args, "unknown_architecture": "skip"})
    assert not skipped.get("failed") and skipped["generated"] is False and skipped["changed"] is False
    assert skipped["unknown_architecture"] == "MysteryForCausalLM" and "the canary is skipped" in skipped["skipped_reason"]
    refused = run_module(args)
    assert refused["failed"] and "'MysteryForCausalLM'" in refused["msg"] and "the canary cannot run" in refused["msg"]
    assert not (tmp_path / "x").exists()
    no_model = run_module({"argv": ["--tp-size", "2"], "tokenizer_path": str(TOKENIZER), "dest": str(tmp_path / "y")})
    assert no_model["failed"] and "no --model-path" in no_model["msg"]
