"""Tiny models for a start canary: a small target of the real target's architecture and a small
EAGLE-3 draft, with random weights, written from the real models' config.json on the host.

Plain Python, standard library only (it runs on the GPU host with whatever Python is there):
the safetensors files are written here byte by byte, the random weights come from seeded
``random.Random`` objects, so the same inputs give the same bytes. plugins/modules/sglang_canary_models.py
wraps it.

    <out>/target/               config.json, model.safetensors, the tokenizer's files
    <out>/draft/                config.json, model.safetensors (only with a draft)
    <out>/canary-models.json    key, sources (sha256), plan, differences, launch hints, files

What is kept and what is made small (see docs/canary.md):

- kept: the text model's architecture class (a Kimi-K2.5 wrapper gives its DeepSeek-V3 text
  model), the attention kind and its per-head sizes (MLA's kv_lora_rank, qk_nope/qk_rope/v head
  dims; MHA's head_dim: kernels specialise on them), the routing (n_routed_experts, top-k,
  n_group/topk_group, scoring, topk_method, shared experts: SGLang picks its routing kernel and
  its shared-expert fusion from these exact numbers), the draft's architecture and aux-layer
  scheme, the ratio of the draft's context to the target's;
- small: hidden size, heads, q_lora_rank, MLP widths, layer count, vocabulary (the tokenizer's),
  context length;
- the checkpoint's quantization where it is ModelOpt NVFP4 (Kimi-K2.5-NVFP4's): every Linear the
  real ignore list does not exclude is written as the real export writes it (packed FP4 weights, FP8
  e4m3 block scales per 16 inputs, FP32 global weight and input scales) under the same
  quantization_config / hf_quant_config.json, so SGLang loads it through its NVFP4 path and picks
  its GEMM and MoE runners as it will for the real model;
- not generated, and said so in ``differences``: any other quantization (bf16 weights then), a
  vision tower, the real tokenizer, custom code (auto_map), MTP layers.

The key is the sha256 of the generator version, the target's config.json (and
hf_quant_config.json), the draft's config.json, the tokenizer files, this file's source and
the options: a converge that changed none of them reuses the written models.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import inspect
import json
import math
import os
import random
import shutil
import struct
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

GENERATOR_VERSION = "2"
MANIFEST = "canary-models.json"
WEIGHTS = "model.safetensors"

# Sizes of the tiny models (per tensor-parallel rank where TP splits them).
TINY_HIDDEN = 256  # a tiny LlamaForCausalLM of this width served on SGLang 0.5.13 / H200 (shared/data/real-server)
HEADS_PER_RANK = 8  # Kimi-K2.5's 64 heads at TP 8
MOE_INTERMEDIATE_PER_RANK = 32  # experts keep their real count, so their width is the smallest
# NVFP4 kernels tile their inputs (Marlin: 128 along K, 64 along N; CUTLASS FP4: 128): quantized experts are this wide per rank
NVFP4_MOE_INTERMEDIATE_PER_RANK = 128
NVFP4_GROUP = 16  # inputs per FP8 block scale in ModelOpt's NVFP4 export
# The scales of the generated NVFP4 tensors: |weight| <= 6 x 1.875 x WEIGHT_SCALE_2, about 0.02 like the bf16 ones
NVFP4_WEIGHT_SCALE_2 = 0.002
NVFP4_INPUT_SCALE = 0.005
TINY_CONTEXT = 4096
MIN_LAYERS = 3

PathLike = Union[str, "os.PathLike[str]"]


class TinyModelError(Exception):
    """The tiny models cannot be planned or written; the message names the file and the reason."""


class UnknownArchitectureError(TinyModelError):
    """The target or draft names an architecture the generator does not know (a canary may be skipped by policy)."""

    def __init__(self, message: str, architecture: str) -> None:
        super().__init__(message)
        self.architecture = architecture


# --------------------------------------------------------------------------------------------
# Reading the sources
# --------------------------------------------------------------------------------------------


@dataclass
class SourceModel:
    """One real model directory as read: its config.json (and hf_quant_config.json)."""

    path: Path
    config_file: Path
    config_bytes: bytes
    config: dict[str, Any]
    quant_bytes: Optional[bytes] = None
    quant: Optional[dict[str, Any]] = None

    @property
    def architecture(self) -> str:
        return str(self.config["architectures"][0])


@dataclass
class TokenizerSource:
    path: Path
    files: dict[str, bytes]
    vocab_size: int
    eos_token_id: int
    bos_token_id: int


def _read_json(path: Path, what: str) -> tuple[bytes, dict[str, Any]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TinyModelError(f"{path}: not found ({what} needs it)") from None
    except OSError as exc:
        raise TinyModelError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise TinyModelError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise TinyModelError(f"{path}: not a JSON object")
    return data, parsed


def read_model(model_dir: PathLike, role: str = "target") -> SourceModel:
    """Read `model_dir`/config.json (and hf_quant_config.json where there is one)."""
    path = Path(model_dir)
    if not path.is_dir():
        raise TinyModelError(f"{path}: the {role} model directory does not exist")
    config_file = path / "config.json"
    data, config = _read_json(config_file, f"the {role} model")
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures or not isinstance(architectures[0], str):
        raise TinyModelError(f"{config_file}: names no architecture ('architectures' is {architectures!r})")
    source = SourceModel(path, config_file, data, config)
    quant_file = path / "hf_quant_config.json"
    if quant_file.is_file():
        source.quant_bytes, source.quant = _read_json(quant_file, f"the {role} model")
    return source


TOKENIZER_SKIP_SUFFIXES = (".py", ".pyc", ".safetensors", ".bin", ".pt")


def read_tokenizer(tokenizer_dir: PathLike) -> TokenizerSource:
    """The tokenizer whose files go into the tiny target: its vocabulary size and eos/bos ids."""
    path = Path(tokenizer_dir)
    if not path.is_dir():
        raise TinyModelError(f"{path}: the tokenizer directory does not exist")
    files = {
        entry.name: entry.read_bytes()
        for entry in sorted(path.iterdir())
        if entry.is_file() and not entry.name.startswith(".") and not entry.name.endswith(TOKENIZER_SKIP_SUFFIXES)
    }
    tokenizer_file = path / "tokenizer.json"
    _, tokenizer = _read_json(tokenizer_file, "the tokenizer")
    ids: dict[str, int] = {}
    model = tokenizer.get("model") if isinstance(tokenizer.get("model"), dict) else {}
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        ids.update({str(k): int(v) for k, v in vocab.items()})
    elif isinstance(vocab, list):  # unigram: [[piece, score], ...]
        ids.update({str(item[0]): i for i, item in enumerate(vocab)})
    for added in tokenizer.get("added_tokens") or []:
        if isinstance(added, dict) and "content" in added and "id" in added:
            ids[str(added["content"])] = int(added["id"])
    if not ids:
        raise TinyModelError(f"{tokenizer_file}: holds no vocabulary (model.vocab / added_tokens)")
    vocab_size = max(ids.values()) + 1
    config: dict[str, Any] = {}
    if (path / "tokenizer_config.json").is_file():
        _, config = _read_json(path / "tokenizer_config.json", "the tokenizer")

    def token_id(key: str) -> Optional[int]:
        token = config.get(key)
        if isinstance(token, dict):
            token = token.get("content")
        return ids.get(token) if isinstance(token, str) else None

    eos = token_id("eos_token")
    eos = 0 if eos is None else eos
    bos = token_id("bos_token")
    return TokenizerSource(path, files, vocab_size, eos, eos if bos is None else bos)


# --------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # safetensors dtype: BF16, F16, F32, I64, BOOL, U8 (packed FP4), F8_E4M3
    shape: tuple[int, ...]
    init: str = "random"  # random | ones | zeros | values | fill
    values: tuple[int, ...] = ()  # for init=values (I64 / BOOL)
    fill: float = 0.0  # for init=fill (F32)


@dataclass
class ModelPlan:
    role: str
    source_architecture: str
    architecture: str
    attention: str
    config: dict[str, Any]
    tensors: list[TensorSpec]
    sizes: dict[str, list[Any]] = field(default_factory=dict)  # key -> [real, tiny]
    extra_files: dict[str, Any] = field(default_factory=dict)  # name -> JSON written beside config.json

    def summary(self) -> dict[str, Any]:
        return {
            "source_architecture": self.source_architecture,
            "architecture": self.architecture,
            "attention": self.attention,
            "sizes": self.sizes,
            "tensors": len(self.tensors),
            "bytes": sum(tensor_nbytes(t) for t in self.tensors),
        }


@dataclass
class Plan:
    target: ModelPlan
    draft: Optional[ModelPlan]
    differences: list[str]
    launch_hints: dict[str, Any]
    tp_size: int

    def summary(self) -> dict[str, Any]:
        return {
            "tp_size": self.tp_size,
            "target": self.target.summary(),
            "draft": self.draft.summary() if self.draft else None,
        }


DTYPE_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "BOOL": 1, "U8": 1, "F8_E4M3": 1}
TORCH_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}

WRAPPERS = {"KimiK25ForConditionalGeneration": "DeepseekV3ForCausalLM"}
MLA_TARGETS = ("DeepseekV3ForCausalLM",)
DENSE_TARGETS = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
KNOWN_TARGETS = tuple(sorted((*WRAPPERS, *MLA_TARGETS, *DENSE_TARGETS)))
KNOWN_DRAFTS = ("LlamaForCausalLMEagle3",)
MODEL_TYPES = {
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
# Keys of a real config that name code or files the tiny model does not have.
DROPPED_KEYS = ("auto_map", "quantization_config", "_name_or_path", "name_or_path", "transformers_version")


def tensor_nbytes(spec: TensorSpec) -> int:
    return math.prod(spec.shape) * DTYPE_SIZE[spec.dtype]


def _round_up(value: float, multiple: int) -> int:
    return max(multiple, math.ceil(value / multiple) * multiple)


def _need(config: dict[str, Any], key: str, source: SourceModel, architecture: str) -> Any:
    if config.get(key) is None:
        raise TinyModelError(f"{source.config_file}: the text config has no '{key}', which {architecture} needs")
    return config[key]


def _target_sizes(text: dict[str, Any], config: dict[str, Any], *own: str) -> dict[str, list[Any]]:
    """key -> [the real model's value, the tiny target's] for the sizes every target reports and the
    architecture's ``own`` (in the report's order; a key neither config has is left out)."""
    keys = ("num_hidden_layers", "hidden_size", "num_attention_heads", *own, "vocab_size", "max_position_embeddings")
    return {key: [text.get(key), config.get(key)] for key in keys if key in text or key in config}


def _weight_dtype(config: dict[str, Any]) -> str:
    name = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    return TORCH_DTYPES.get(str(name).replace("torch.", ""), "BF16")


def _scaled_context(config: dict[str, Any], tiny_max: int) -> dict[str, Any]:
    """max_position_embeddings -> tiny_max, and a yarn rope_scaling's original length by the same ratio
    (so that factor = max / original holds as in the real config)."""
    updates: dict[str, Any] = {"max_position_embeddings": tiny_max}
    real_max = config.get("max_position_embeddings")
    rope = config.get("rope_scaling")
    if isinstance(rope, dict) and rope.get("original_max_position_embeddings") and real_max:
        rope = dict(rope)
        rope["original_max_position_embeddings"] = max(1, int(rope["original_max_position_embeddings"] * tiny_max // real_max))
        updates["rope_scaling"] = rope
    return updates


def _text_config(target: SourceModel, differences: list[str]) -> tuple[str, dict[str, Any]]:
    """The text model's architecture and config: a wrapper's text_config, or the config itself."""
    architecture = target.architecture
    config = target.config
    if architecture in WRAPPERS:
        text = config.get("text_config")
        if not isinstance(text, dict):
            raise TinyModelError(f"{target.config_file}: {architecture} without a 'text_config' object")
        inner = WRAPPERS[architecture]
        text = dict(text)
        named = (text.get("architectures") or [inner])[0]
        if named != inner:
            raise TinyModelError(f"{target.config_file}: {architecture}'s text_config names {named}; the generator knows {inner} there")
        differences.append(
            f"architecture: the real model is {architecture}, a wrapper around {inner}; the tiny target is the "
            f"text model {inner} alone, so the wrapper's own code (its EAGLE-3 delegation to the text model, "
            "its language_model.* weight names, multimodal input) is not exercised"
        )
        if isinstance(config.get("vision_config"), dict) or any("vision" in str(k) for k in config):
            differences.append(
                "vision tower: left out (the real model has a vision tower and an mm projector; the tiny target is text only)"
            )
        for key in ("quantization_config",):
            if key in config and key not in text:
                text[key] = config[key]
        return inner, text
    if architecture not in (*MLA_TARGETS, *DENSE_TARGETS):
        raise UnknownArchitectureError(
            f"{target.config_file}: names architecture '{architecture}', which the tiny-model generator does not know; "
            f"it knows: {', '.join(KNOWN_TARGETS)}",
            architecture,
        )
    return architecture, dict(config)


@dataclass
class Nvfp4:
    """The real checkpoint's ModelOpt NVFP4 quantization, as the tiny target reproduces it."""

    quantization_config: Optional[dict[str, Any]]  # config.json's, ignore list translated (None: the real one has none)
    hf_quant_config: Optional[dict[str, Any]]  # hf_quant_config.json's, exclude_modules translated
    ignore: list[str]  # the translated patterns of modules left unquantized
    dropped: list[str]  # real patterns naming parts the tiny target has not (vision tower, projector)
    group_size: int


def _translate_patterns(patterns: list[Any]) -> tuple[list[str], list[str]]:
    """A wrapper's module names (language_model.*) as the tiny text model names them (model.*); patterns
    naming what the tiny target leaves out (vision tower, projector) are dropped."""
    kept, dropped = [], []
    for raw in patterns:
        pattern = str(raw)
        if pattern.startswith("language_model."):
            pattern = "model." + pattern[len("language_model.") :]
        if pattern.startswith(("vision", "mm_projector", "multi_modal", "visual")):
            dropped.append(str(raw))
        elif pattern not in kept:
            kept.append(pattern)
    return kept, dropped


def _nvfp4(target: SourceModel, text: dict[str, Any]) -> Optional[Nvfp4]:
    """The NVFP4 spec when the real checkpoint is ModelOpt NVFP4 (config.json's quantization_config
    with quant_method modelopt, or hf_quant_config.json from modelopt), else None."""
    quant = text.get("quantization_config") if isinstance(text.get("quantization_config"), dict) else None
    hf = target.quant if isinstance(target.quant, dict) else None
    hf_inner = hf.get("quantization") if hf and isinstance(hf.get("quantization"), dict) else None
    from_config = quant is not None and str(quant.get("quant_method", "")).lower() == "modelopt"
    algo = str((quant or {}).get("quant_algo") or (hf_inner or {}).get("quant_algo") or "").upper()
    if algo != "NVFP4" or not (from_config or hf_inner is not None):
        return None
    group = int((quant or {}).get("group_size") or (hf_inner or {}).get("group_size") or NVFP4_GROUP)
    if not from_config:
        quant = None
    real_ignore = list((quant or {}).get("ignore") or (hf_inner or {}).get("exclude_modules") or [])
    ignore, dropped = _translate_patterns(real_ignore)
    tiny_quant = None
    if quant is not None:
        tiny_quant = copy.deepcopy(quant)
        tiny_quant["ignore"] = ignore
    tiny_hf = None
    if hf_inner is not None:
        tiny_hf = copy.deepcopy(hf)
        tiny_hf["quantization"]["exclude_modules"] = _translate_patterns(list(hf_inner.get("exclude_modules") or []))[0]
    return Nvfp4(tiny_quant, tiny_hf, ignore, dropped, group)


def _quant_differences(
    target: SourceModel, text: dict[str, Any], differences: list[str], hints: dict[str, Any], nvfp4: Optional[Nvfp4]
) -> None:
    quant = text.get("quantization_config") if isinstance(text.get("quantization_config"), dict) else None
    hf_quant = (target.quant or {}).get("quantization") if isinstance((target.quant or {}).get("quantization"), dict) else None
    if quant is None and hf_quant is None:
        return
    method = (quant or {}).get("quant_method") or ((target.quant or {}).get("producer") or {}).get("name") or "unknown"
    algo = (quant or {}).get("quant_algo") or (hf_quant or {}).get("quant_algo") or str(method).upper()
    where = ", ".join(
        name
        for name, present in (("config.json quantization_config", quant is not None), ("hf_quant_config.json", hf_quant is not None))
        if present
    )
    if nvfp4 is not None:
        differences.append(
            f"quantization: generated as the real model's {algo} ({method}, from {where}): packed FP4 weights (two e2m1 a byte), "
            f"FP8 e4m3 block scales per {nvfp4.group_size} inputs and FP32 global weight and input scales for every Linear "
            f"its ignore list does not exclude ({', '.join(nvfp4.ignore) or 'none'}), so SGLang loads the tiny target "
            "through its NVFP4 path and picks its FP4 GEMM and MoE runners as for the real model; quantized experts are "
            f"{NVFP4_MOE_INTERMEDIATE_PER_RANK} wide per rank (the FP4 kernels' tiles), the scales are made up (no calibration)"
        )
        if nvfp4.dropped:
            differences.append(
                f"quantization ignore list: {', '.join(nvfp4.dropped)} left out (they name parts the tiny target does not have)"
            )
        return
    differences.append(
        f"quantization: the real model is {algo} ({method}, from {where}); the tiny one is {_weight_dtype(text).lower()} with no "
        "quantization config: "
        f"{algo} packing (weights and scales) is not generated (the generator writes ModelOpt NVFP4 only), so the quantized "
        "GEMM/MoE kernels and their runner selection are not exercised"
    )
    kv_algo = (hf_quant or {}).get("kv_cache_quant_algo") or (quant or {}).get("kv_cache_quant_algo")
    scheme = (quant or {}).get("kv_cache_scheme")
    if kv_algo is None and isinstance(scheme, dict) and scheme.get("type") == "float" and scheme.get("num_bits") == 8:
        kv_algo = "FP8"
    if isinstance(kv_algo, str) and kv_algo.upper() == "FP8":
        differences.append(
            "kv_cache_quant_algo: the real checkpoint declares FP8, so SGLang with --kv-cache-dtype auto runs an fp8_e4m3 KV "
            "cache; the tiny target declares none (bf16 KV cache) unless the canary passes --kv-cache-dtype fp8_e4m3"
        )
        hints["kv_cache_dtype"] = "fp8_e4m3"
    elif kv_algo:
        differences.append(f"kv_cache_quant_algo: the real checkpoint declares {kv_algo}; the tiny target declares none")


# Modules SGLang builds unquantized whatever the checkpoint says: the MoE router and the embeddings.
NEVER_QUANTIZED = ("mlp.gate", "embed_tokens")


def _quantize(tensors: list[TensorSpec], nvfp4: Nvfp4) -> list[TensorSpec]:
    """Each 2-D Linear weight the ignore list does not exclude, as ModelOpt's NVFP4 export writes it:
    <module>.weight U8 [out, in/2], .weight_scale F8_E4M3 [out, in/group], .weight_scale_2 and
    .input_scale F32 scalars."""
    out: list[TensorSpec] = []
    for spec in tensors:
        module = spec.name[: -len(".weight")] if spec.name.endswith(".weight") else ""
        quantized = (
            module
            and len(spec.shape) == 2
            and not module.endswith(NEVER_QUANTIZED)
            and not any(fnmatch.fnmatchcase(module, pattern) for pattern in nvfp4.ignore)
        )
        if not quantized:
            out.append(spec)
            continue
        rows, cols = spec.shape
        if cols % (2 * nvfp4.group_size):
            raise TinyModelError(f"{spec.name}: {cols} inputs do not split into NVFP4 groups of {nvfp4.group_size}")
        out += [
            TensorSpec(spec.name, "U8", (rows, cols // 2)),
            TensorSpec(module + ".weight_scale", "F8_E4M3", (rows, cols // nvfp4.group_size)),
            TensorSpec(module + ".weight_scale_2", "F32", (), "fill", fill=NVFP4_WEIGHT_SCALE_2),
            TensorSpec(module + ".input_scale", "F32", (), "fill", fill=NVFP4_INPUT_SCALE),
        ]
    return out


def _common_config(text: dict[str, Any], architecture: str, tokenizer: TokenizerSource, tiny_max: int) -> dict[str, Any]:
    config = {k: copy.deepcopy(v) for k, v in text.items() if k not in DROPPED_KEYS}
    config.update(
        architectures=[architecture],
        model_type=MODEL_TYPES[architecture],
        vocab_size=tokenizer.vocab_size,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
        hidden_size=TINY_HIDDEN,
        torch_dtype={"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[_weight_dtype(text)],
    )
    config.pop("dtype", None)
    config.update(_scaled_context(text, tiny_max))
    return config


def _aux_layers(draft: Optional[SourceModel]) -> tuple[Optional[list[int]], int]:
    """The tiny draft's eagle_aux_hidden_state_layer_ids and the least target layer count they need.

    SGLang captures the input of layer id+1 for each id (0.5.9; from 0.5.13 only when the ids
    start at 1, else id itself): the ids are kept starting where the real ones start (at most 2)
    and consecutive, and the target gets a layer beyond the last one. Without ids SGLang captures
    [2, n//2, n-3], distinct only from n = 7."""
    if draft is None:
        return None, MIN_LAYERS
    eagle = draft.config.get("eagle_config")
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
    if not ids:
        return None, 7
    if not all(isinstance(i, int) and i >= 0 for i in ids):
        raise TinyModelError(f"{draft.config_file}: eagle_aux_hidden_state_layer_ids must be non-negative integers, got {ids!r}")
    base = min(min(ids), 2)
    rank = {value: base + i for i, value in enumerate(sorted(set(ids)))}
    tiny = [rank[i] for i in ids]
    return tiny, max(MIN_LAYERS, max(tiny) + 2)


def _mla_plan(
    source: SourceModel,
    text: dict[str, Any],
    tokenizer: TokenizerSource,
    layers: int,
    tp: int,
    differences: list[str],
    nvfp4: Optional[Nvfp4] = None,
) -> ModelPlan:
    arch = "DeepseekV3ForCausalLM"
    for key in (
        "hidden_size",
        "num_attention_heads",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
        "intermediate_size",
    ):
        _need(text, key, source, arch)
    real_hidden = int(text["hidden_size"])
    scale = TINY_HIDDEN / real_hidden
    real_heads = int(text["num_attention_heads"])
    heads = min(real_heads, HEADS_PER_RANK * tp)
    config = _common_config(text, arch, tokenizer, TINY_CONTEXT)
    q_lora = text.get("q_lora_rank")
    first_dense = min(int(text.get("first_k_dense_replace") or 0), 1)
    experts = text.get("n_routed_experts")
    config.update(
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        q_lora_rank=None if q_lora is None else _round_up(int(q_lora) * scale, 64),
        intermediate_size=_round_up(int(text["intermediate_size"]) * scale, 64 * tp),
        first_k_dense_replace=first_dense,
        num_nextn_predict_layers=0,
        attention_bias=False,
    )
    config.setdefault("moe_layer_freq", 1)
    if experts:
        for key in ("num_experts_per_tok", "moe_intermediate_size"):
            _need(text, key, source, arch)
        config["moe_intermediate_size"] = (NVFP4_MOE_INTERMEDIATE_PER_RANK if nvfp4 else MOE_INTERMEDIATE_PER_RANK) * tp
        config.setdefault("n_group", 1)
        config.setdefault("topk_group", 1)
        config.setdefault("n_shared_experts", 0)
        config.setdefault("topk_method", "greedy")
        if int(config["num_experts_per_tok"]) > int(experts):
            raise TinyModelError(f"{source.config_file}: num_experts_per_tok {config['num_experts_per_tok']} > n_routed_experts {experts}")
        if int(experts) % int(config["n_group"]) or int(config["topk_group"]) > int(config["n_group"]):
            raise TinyModelError(
                f"{source.config_file}: n_routed_experts {experts} with n_group {config['n_group']} / "
                f"topk_group {config['topk_group']} is not a valid grouping"
            )
    if int(text.get("num_nextn_predict_layers") or 0) > 0:
        differences.append(f"MTP: the real model has {text['num_nextn_predict_layers']} NextN layer(s); the tiny target has none")
    if text.get("attention_bias"):
        differences.append("attention_bias: true in the real config; the tiny target has no attention biases")

    sizes = _target_sizes(
        text,
        config,
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
        "intermediate_size",
        "moe_intermediate_size",
        "n_routed_experts",
        "num_experts_per_tok",
        "n_shared_experts",
        "n_group",
        "topk_group",
        "first_k_dense_replace",
    )
    dtype = _weight_dtype(config)
    hidden, vocab = TINY_HIDDEN, tokenizer.vocab_size
    nope, rope, v_dim, kv_lora = (int(config[k]) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"))
    tensors = [TensorSpec("model.embed_tokens.weight", dtype, (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        if config["q_lora_rank"] is None:
            tensors.append(TensorSpec(p + "self_attn.q_proj.weight", dtype, (heads * (nope + rope), hidden)))
        else:
            q_rank = int(config["q_lora_rank"])
            tensors += [
                TensorSpec(p + "self_attn.q_a_proj.weight", dtype, (q_rank, hidden)),
                TensorSpec(p + "self_attn.q_a_layernorm.weight", dtype, (q_rank,), "ones"),
                TensorSpec(p + "self_attn.q_b_proj.weight", dtype, (heads * (nope + rope), q_rank)),
            ]
        tensors += [
            TensorSpec(p + "self_attn.kv_a_proj_with_mqa.weight", dtype, (kv_lora + rope, hidden)),
            TensorSpec(p + "self_attn.kv_a_layernorm.weight", dtype, (kv_lora,), "ones"),
            TensorSpec(p + "self_attn.kv_b_proj.weight", dtype, (heads * (nope + v_dim), kv_lora)),
            TensorSpec(p + "self_attn.o_proj.weight", dtype, (hidden, heads * v_dim)),
            TensorSpec(p + "input_layernorm.weight", dtype, (hidden,), "ones"),
            TensorSpec(p + "post_attention_layernorm.weight", dtype, (hidden,), "ones"),
        ]
        # SGLang's DeepseekV2DecoderLayer._is_layer_sparse
        sparse = bool(experts) and i >= first_dense and i % int(config["moe_layer_freq"]) == 0
        if not sparse:
            tensors += _mlp(p + "mlp.", dtype, hidden, int(config["intermediate_size"]))
            continue
        n_experts, width = int(experts), int(config["moe_intermediate_size"])
        tensors.append(TensorSpec(p + "mlp.gate.weight", dtype, (n_experts, hidden)))
        if config.get("topk_method") == "noaux_tc":
            tensors.append(TensorSpec(p + "mlp.gate.e_score_correction_bias", "F32", (n_experts,)))
        for e in range(n_experts):
            tensors += _mlp(f"{p}mlp.experts.{e}.", dtype, hidden, width)
        if int(config.get("n_shared_experts") or 0):
            tensors += _mlp(p + "mlp.shared_experts.", dtype, hidden, width * int(config["n_shared_experts"]))
    tensors.append(TensorSpec("model.norm.weight", dtype, (hidden,), "ones"))
    if not config.get("tie_word_embeddings"):
        tensors.append(TensorSpec("lm_head.weight", dtype, (vocab, hidden)))
    return _with_quantization(ModelPlan("target", source.architecture, arch, "MLA", config, tensors, sizes), nvfp4)


def _with_quantization(model: ModelPlan, nvfp4: Optional[Nvfp4]) -> ModelPlan:
    """The target with the real checkpoint's NVFP4 quantization: tensors, quantization_config, hf_quant_config.json."""
    if nvfp4 is None:
        return model
    model.tensors = _quantize(model.tensors, nvfp4)
    if nvfp4.quantization_config is not None:
        model.config["quantization_config"] = nvfp4.quantization_config
    if nvfp4.hf_quant_config is not None:
        model.extra_files["hf_quant_config.json"] = nvfp4.hf_quant_config
    return model


def _mlp(prefix: str, dtype: str, hidden: int, width: int, bias: bool = False) -> list[TensorSpec]:
    out = [
        TensorSpec(prefix + "gate_proj.weight", dtype, (width, hidden)),
        TensorSpec(prefix + "up_proj.weight", dtype, (width, hidden)),
        TensorSpec(prefix + "down_proj.weight", dtype, (hidden, width)),
    ]
    if bias:
        out += [
            TensorSpec(prefix + "gate_proj.bias", dtype, (width,)),
            TensorSpec(prefix + "up_proj.bias", dtype, (width,)),
            TensorSpec(prefix + "down_proj.bias", dtype, (hidden,)),
        ]
    return out


def _heads(config: dict[str, Any], tp: int) -> tuple[int, int, int, int]:
    """(real heads, tiny heads, tiny kv heads, head_dim): head_dim kept, heads made small, the GQA ratio kept."""
    real_heads = int(config["num_attention_heads"])
    real_kv = int(config.get("num_key_value_heads") or real_heads)
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // real_heads)
    heads = min(real_heads, HEADS_PER_RANK * tp)
    kv = max(1, heads * real_kv // real_heads)
    while heads % kv:
        kv -= 1
    return real_heads, heads, kv, head_dim


def _dense_plan(
    source: SourceModel, text: dict[str, Any], arch: str, tokenizer: TokenizerSource, layers: int, tp: int, nvfp4: Optional[Nvfp4] = None
) -> ModelPlan:
    for key in ("hidden_size", "num_attention_heads", "intermediate_size"):
        _need(text, key, source, arch)
    scale = TINY_HIDDEN / int(text["hidden_size"])
    _, heads, kv, head_dim = _heads(text, tp)
    config = _common_config(text, arch, tokenizer, TINY_CONTEXT)
    config.update(
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        intermediate_size=_round_up(int(text["intermediate_size"]) * scale, 64 * tp),
    )
    sizes = _target_sizes(text, config, "num_key_value_heads", "head_dim", "intermediate_size")
    sizes["head_dim"][0] = text.get("head_dim") or int(text["hidden_size"]) // int(text["num_attention_heads"])
    dtype = _weight_dtype(config)
    hidden, vocab = TINY_HIDDEN, tokenizer.vocab_size
    qkv_bias = arch == "Qwen2ForCausalLM" or bool(config.get("attention_bias"))
    o_bias = arch != "Qwen2ForCausalLM" and bool(config.get("attention_bias"))
    tensors = [TensorSpec("model.embed_tokens.weight", dtype, (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, rows in (("q_proj", heads * head_dim), ("k_proj", kv * head_dim), ("v_proj", kv * head_dim)):
            tensors.append(TensorSpec(f"{p}self_attn.{name}.weight", dtype, (rows, hidden)))
            if qkv_bias:
                tensors.append(TensorSpec(f"{p}self_attn.{name}.bias", dtype, (rows,)))
        tensors.append(TensorSpec(p + "self_attn.o_proj.weight", dtype, (hidden, heads * head_dim)))
        if o_bias:
            tensors.append(TensorSpec(p + "self_attn.o_proj.bias", dtype, (hidden,)))
        if arch == "Qwen3ForCausalLM":
            tensors += [
                TensorSpec(p + "self_attn.q_norm.weight", dtype, (head_dim,), "ones"),
                TensorSpec(p + "self_attn.k_norm.weight", dtype, (head_dim,), "ones"),
            ]
        tensors += _mlp(p + "mlp.", dtype, hidden, int(config["intermediate_size"]), bias=bool(config.get("mlp_bias")))
        tensors += [
            TensorSpec(p + "input_layernorm.weight", dtype, (hidden,), "ones"),
            TensorSpec(p + "post_attention_layernorm.weight", dtype, (hidden,), "ones"),
        ]
    tensors.append(TensorSpec("model.norm.weight", dtype, (hidden,), "ones"))
    if not config.get("tie_word_embeddings"):
        tensors.append(TensorSpec("lm_head.weight", dtype, (vocab, hidden)))
    return _with_quantization(
        ModelPlan("target", source.architecture, arch, "MHA" if kv == heads else "GQA", config, tensors, sizes), nvfp4
    )


def _check_draft_architecture(draft: SourceModel) -> str:
    if draft.architecture not in KNOWN_DRAFTS:
        raise UnknownArchitectureError(
            f"{draft.config_file}: names architecture '{draft.architecture}', which the tiny-model generator does not know "
            f"for a draft; it knows: {', '.join(KNOWN_DRAFTS)}",
            draft.architecture,
        )
    return draft.architecture


def _draft_plan(
    draft: SourceModel, target_text: dict[str, Any], target: ModelPlan, aux_ids: Optional[list[int]], tp: int, differences: list[str]
) -> ModelPlan:
    arch = _check_draft_architecture(draft)
    real = draft.config
    for key in ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"):
        _need(real, key, draft, arch)
    if int(real.get("num_hidden_layers") or 1) != 1:
        raise TinyModelError(
            f"{draft.config_file}: {arch} with {real['num_hidden_layers']} layers; the generator writes 1-layer EAGLE-3 drafts"
        )
    real_target_hidden = int(target_text["hidden_size"])
    real_in = int(real.get("target_hidden_size") or real["hidden_size"])
    hidden = (
        TINY_HIDDEN
        if int(real["hidden_size"]) == real_target_hidden
        else _round_up(int(real["hidden_size"]) * TINY_HIDDEN / real_target_hidden, 64)
    )
    hidden_in = TINY_HIDDEN if real_in == real_target_hidden else _round_up(real_in * TINY_HIDDEN / real_target_hidden, 64)
    scale = hidden / int(real["hidden_size"])
    _, heads, kv, head_dim = _heads(real, tp)
    vocab = int(target.config["vocab_size"])
    real_vocab = int(real["vocab_size"])
    real_draft_vocab = real.get("draft_vocab_size")
    draft_vocab = None
    if real_draft_vocab is not None:
        draft_vocab = (
            vocab if int(real_draft_vocab) >= real_vocab else min(vocab, _round_up(int(real_draft_vocab) * vocab / real_vocab, 64))
        )
    real_target_max = int(target_text.get("max_position_embeddings") or TINY_CONTEXT)
    real_max = int(real.get("max_position_embeddings") or real_target_max)
    tiny_max = TINY_CONTEXT if real_max >= real_target_max else max(256, TINY_CONTEXT * real_max // real_target_max)

    config = {k: copy.deepcopy(v) for k, v in real.items() if k not in DROPPED_KEYS}
    config.pop("dtype", None)
    config.update(
        architectures=[arch],
        model_type="llama",
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        intermediate_size=_round_up(int(real["intermediate_size"]) * scale, 64 * tp),
        num_hidden_layers=1,
        vocab_size=vocab,
        bos_token_id=target.config["bos_token_id"],
        eos_token_id=target.config["eos_token_id"],
        pad_token_id=target.config["pad_token_id"],
        torch_dtype={"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[_weight_dtype(real)],
    )
    config.update(_scaled_context(real, tiny_max))
    if "target_hidden_size" in real or hidden_in != hidden:
        config["target_hidden_size"] = hidden_in
    if real_draft_vocab is not None:
        config["draft_vocab_size"] = draft_vocab
    eagle = config.get("eagle_config")
    if isinstance(eagle, dict) and aux_ids is not None:
        eagle["eagle_aux_hidden_state_layer_ids"] = aux_ids
    n_aux = len(aux_ids) if aux_ids is not None else 3
    if "num_aux_hidden_states" in config:
        config["num_aux_hidden_states"] = n_aux

    dtype = _weight_dtype(config)
    tensors = [
        TensorSpec("embed_tokens.weight", dtype, (vocab, hidden)),
        TensorSpec("fc.weight", dtype, (hidden, hidden_in * n_aux)),
        TensorSpec("midlayer.self_attn.q_proj.weight", dtype, (heads * head_dim, 2 * hidden)),
        TensorSpec("midlayer.self_attn.k_proj.weight", dtype, (kv * head_dim, 2 * hidden)),
        TensorSpec("midlayer.self_attn.v_proj.weight", dtype, (kv * head_dim, 2 * hidden)),
        TensorSpec("midlayer.self_attn.o_proj.weight", dtype, (hidden, heads * head_dim)),
        *_mlp("midlayer.mlp.", dtype, hidden, int(config["intermediate_size"])),
        TensorSpec("midlayer.input_layernorm.weight", dtype, (hidden,), "ones"),
        TensorSpec("midlayer.hidden_norm.weight", dtype, (hidden,), "ones"),
        TensorSpec("midlayer.post_attention_layernorm.weight", dtype, (hidden,), "ones"),
        TensorSpec("norm.weight", dtype, (hidden,), "ones"),
    ]
    if config.get("bias"):
        tensors.append(TensorSpec("fc.bias", dtype, (hidden,)))
    eagle_flags = eagle if isinstance(eagle, dict) else {}
    if config.get("fc_norm") or config.get("use_aux_norm") or eagle_flags.get("fc_norm"):
        tensors += [TensorSpec(f"fc_norm.{i}.weight", dtype, (hidden_in,), "ones") for i in range(n_aux)]
    if config.get("norm_before_fc") or eagle_flags.get("norm_before_fc"):
        tensors.append(TensorSpec("input_norm.weight", dtype, (hidden_in * n_aux,), "ones"))
    if not config.get("tie_word_embeddings"):
        tensors.append(TensorSpec("lm_head.weight", dtype, (draft_vocab or vocab, hidden)))
    if draft_vocab is not None and draft_vocab < vocab:
        # Hot tokens spread over the vocabulary, so d2t (target id - draft id) is not all zeros.
        step = vocab // draft_vocab
        hot = [i * step for i in range(draft_vocab)]
        hot_set = set(hot)
        tensors += [
            TensorSpec("d2t", "I64", (draft_vocab,), "values", tuple(t - i for i, t in enumerate(hot))),
            TensorSpec("t2d", "BOOL", (vocab,), "values", tuple(1 if t in hot_set else 0 for t in range(vocab))),
        ]
        differences.append(
            f"draft vocabulary: the real draft maps {real_draft_vocab} of {real_vocab} target tokens (d2t/t2d from training); "
            f"the tiny draft maps {draft_vocab} of {vocab}, every {step}th token"
        )
    sizes = {
        "hidden_size": [real["hidden_size"], hidden],
        "num_attention_heads": [real["num_attention_heads"], heads],
        "num_key_value_heads": [real.get("num_key_value_heads"), kv],
        "head_dim": [real.get("head_dim") or int(real["hidden_size"]) // int(real["num_attention_heads"]), head_dim],
        "intermediate_size": [real["intermediate_size"], config["intermediate_size"]],
        "vocab_size": [real_vocab, vocab],
        "draft_vocab_size": [real_draft_vocab, draft_vocab],
        "max_position_embeddings": [real.get("max_position_embeddings"), tiny_max],
        "eagle_aux_hidden_state_layer_ids": [
            (real.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
            if isinstance(real.get("eagle_config"), dict)
            else None,
            aux_ids,
        ],
    }
    return ModelPlan("draft", arch, arch, "MHA" if kv == heads else "GQA", config, tensors, sizes)


def plan_models(target: SourceModel, tokenizer: TokenizerSource, draft: Optional[SourceModel] = None, tp_size: int = 1) -> Plan:
    """What the tiny target (and draft) are: configs, tensor list, what differs from the real models."""
    if tp_size < 1:
        raise TinyModelError(f"tp_size must be >= 1, got {tp_size}")
    differences: list[str] = []
    hints: dict[str, Any] = {}
    architecture, text = _text_config(target, differences)
    if draft is not None:
        _check_draft_architecture(draft)
    aux_ids, layers = _aux_layers(draft)
    nvfp4 = _nvfp4(target, text)
    _quant_differences(target, text, differences, hints, nvfp4)
    if architecture in MLA_TARGETS:
        tiny = _mla_plan(target, text, tokenizer, layers, tp_size, differences, nvfp4)
    else:
        tiny = _dense_plan(target, text, architecture, tokenizer, layers, tp_size, nvfp4)
    model_type = text.get("model_type")
    changes = []
    if model_type and model_type != tiny.config["model_type"]:
        changes.append(f"model_type {model_type!r} -> {tiny.config['model_type']!r}")
    if text.get("auto_map") or target.config.get("auto_map"):
        changes.append("auto_map (custom code) dropped")
    if changes:
        differences.append(
            f"config: {', '.join(changes)}: the tiny target loads with transformers' built-in config class, without trust_remote_code"
        )
    differences.append(
        f"tokenizer: the real model's tokenizer (vocabulary {text.get('vocab_size')}) is replaced by {tokenizer.path.name}/ "
        f"({tokenizer.vocab_size} tokens); no chat template or tool-call tokens of the real model"
    )
    differences.append(
        f"sizes: {TINY_HIDDEN} hidden, {tiny.config['num_hidden_layers']} layers, {tiny.config['num_attention_heads']} heads "
        f"(real {text.get('hidden_size')}, {text.get('num_hidden_layers')}, {text.get('num_attention_heads')}); per-head sizes, "
        "expert count and routing are the real ones, but kernels chosen for the real shapes only (e.g. GEMMs specialised on "
        "the real hidden size) are not exercised, and load time, memory and CUDA-graph capture are not the real model's"
    )
    differences.append("weights: random (seeded), so outputs are meaningless and the EAGLE-3 accept length is about 1")
    draft_plan = _draft_plan(draft, text, tiny, aux_ids, tp_size, differences) if draft is not None else None
    if draft_plan is not None:
        real_t = int(text.get("max_position_embeddings") or 0)
        real_d = int(draft.config.get("max_position_embeddings") or 0) if draft else 0
        if real_d and real_t and real_d < real_t:
            hints["env"] = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    return Plan(tiny, draft_plan, differences, hints, tp_size)


# --------------------------------------------------------------------------------------------
# The key
# --------------------------------------------------------------------------------------------


def generator_source() -> bytes:
    """This module's own source (works inside Ansible's zipped payload too)."""
    try:
        return inspect.getsource(sys.modules[__name__]).encode("utf-8")
    except (OSError, TypeError, KeyError):
        return Path(__file__).read_bytes()


def compute_key(target: SourceModel, tokenizer: TokenizerSource, draft: Optional[SourceModel] = None, tp_size: int = 1) -> str:
    digest = hashlib.sha256()

    def part(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    part("version", GENERATOR_VERSION.encode())
    part("target/config.json", target.config_bytes)
    part("target/hf_quant_config.json", target.quant_bytes or b"")
    part("draft/config.json", draft.config_bytes if draft else b"")
    for name, data in sorted(tokenizer.files.items()):
        part(f"tokenizer/{name}", data)
    part("generator", generator_source())
    part("options", json.dumps({"tp_size": tp_size}, sort_keys=True).encode())
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

# bf16/f32 high byte -> sign and exponent: magnitudes 2**-9 .. 2**-5 (like a 0.02-std init), never inf/NaN
_HIGH = bytes((0x3B, 0x3C, 0xBB, 0xBC)[b & 3] for b in range(256))
_ONES = {"BF16": b"\x80\x3f", "F16": b"\x00\x3c", "F32": b"\x00\x00\x80\x3f"}


def tensor_bytes(spec: TensorSpec, seed: str) -> bytes:
    """The little-endian bytes of one tensor; random values from a Random seeded by (seed, name)."""
    count = math.prod(spec.shape)
    size = DTYPE_SIZE[spec.dtype]
    if spec.init == "values":
        if spec.dtype == "I64":
            return struct.pack(f"<{count}q", *spec.values)
        return bytes(1 if v else 0 for v in spec.values)
    if spec.init == "zeros":
        return bytes(count * size)
    if spec.init == "ones":
        return _ONES[spec.dtype] * count
    if spec.init == "fill":
        return struct.pack(f"<{count}f", *([spec.fill] * count))
    rng = random.Random(int.from_bytes(hashlib.sha256(f"{seed}\0{spec.name}".encode()).digest()[:8], "little"))
    raw = bytearray(rng.getrandbits(8 * count * size).to_bytes(count * size, "little")) if count else bytearray()
    if spec.dtype == "U8":  # two FP4 (e2m1) codes a byte: every nibble is a finite value, -6 .. 6
        return bytes(raw)
    if spec.dtype == "F8_E4M3":  # positive block scales 0.5 .. 1.875 (exponent 6 or 7), never NaN
        return bytes(raw.translate(bytes(0x30 | (b & 0x0F) for b in range(256))))
    if spec.dtype == "F16":  # f16 high byte: sign, 5 exponent bits, 2 mantissa bits: 2**-9 .. 2**-5
        raw[1::2] = raw[1::2].translate(bytes((0x18, 0x1C, 0x98, 0x9C)[b & 3] | (b >> 6) for b in range(256)))
    else:
        raw[size - 1 :: size] = raw[size - 1 :: size].translate(_HIGH)
    return bytes(raw)


def safetensors_header(tensors: list[TensorSpec], metadata: dict[str, str]) -> bytes:
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for spec in tensors:
        end = offset + tensor_nbytes(spec)
        header[spec.name] = {"dtype": spec.dtype, "shape": list(spec.shape), "data_offsets": [offset, end]}
        offset = end
    data = json.dumps(header, separators=(",", ":")).encode("utf-8")
    data += b" " * (-len(data) % 8)  # the tensor data starts 8-byte aligned, as safetensors' own writer does
    return struct.pack("<Q", len(data)) + data


def write_safetensors(path: Path, tensors: list[TensorSpec], seed: str, metadata: dict[str, str]) -> dict[str, Any]:
    """Write one safetensors file; returns its size and sha256."""
    ordered = sorted(tensors, key=lambda t: t.name)
    digest = hashlib.sha256()
    size = 0
    with path.open("wb") as handle:
        header = safetensors_header(ordered, metadata)
        handle.write(header)
        digest.update(header)
        size += len(header)
        for spec in ordered:
            chunk = tensor_bytes(spec, seed)
            if len(chunk) != tensor_nbytes(spec):  # pragma: no cover - a bug here, not bad input
                raise TinyModelError(f"{path}: {spec.name} came out {len(chunk)} bytes, not {tensor_nbytes(spec)}")
            handle.write(chunk)
            digest.update(chunk)
            size += len(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    return {"size": size, "sha256": digest.hexdigest()}


def _write_file(path: Path, data: bytes) -> dict[str, Any]:
    with path.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _write_model(directory: Path, model: ModelPlan, key: str, tokenizer: Optional[TokenizerSource]) -> dict[str, dict[str, Any]]:
    directory.mkdir(parents=True)
    files = {"config.json": _write_file(directory / "config.json", _json_bytes(model.config))}
    metadata = {"format": "pt", "generator": f"sglang-sm120 tiny_models {GENERATOR_VERSION}", "key": key, "role": model.role}
    files[WEIGHTS] = write_safetensors(directory / WEIGHTS, model.tensors, f"{key}\0{model.role}", metadata)
    for name, data in sorted(model.extra_files.items()):
        files[name] = _write_file(directory / name, _json_bytes(data))
    for name, data in sorted((tokenizer.files if tokenizer else {}).items()):
        files[name] = _write_file(directory / name, data)
    return files


def _sources(target: SourceModel, tokenizer: TokenizerSource, draft: Optional[SourceModel]) -> dict[str, Any]:
    def sha(data: Optional[bytes]) -> Optional[str]:
        return hashlib.sha256(data).hexdigest() if data is not None else None

    return {
        "target": {"path": str(target.path), "config_sha256": sha(target.config_bytes), "hf_quant_config_sha256": sha(target.quant_bytes)},
        "draft": {"path": str(draft.path), "config_sha256": sha(draft.config_bytes)} if draft else None,
        "tokenizer": {"path": str(tokenizer.path), "files": {name: sha(data) for name, data in sorted(tokenizer.files.items())}},
    }


def read_manifest(out: PathLike) -> Optional[dict[str, Any]]:
    try:
        data = json.loads((Path(out) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _reusable(out: Path, manifest: Optional[dict[str, Any]], key: str) -> bool:
    if not manifest or manifest.get("key") != key or not isinstance(manifest.get("files"), dict):
        return False
    for rel, record in manifest["files"].items():
        path = out / rel
        if not path.is_file() or not isinstance(record, dict) or path.stat().st_size != record.get("size"):
            return False
    return True


def _commit(out: Path, staging: Path, parts: list[str], manifest: dict[str, Any]) -> None:
    """Swap the staged parts in (each a rename), the manifest last: an interrupted swap leaves no
    manifest with this key, so the next run writes again."""
    manifest_path = out / MANIFEST
    if manifest_path.exists():
        manifest_path.unlink()
    for part in ("target", "draft"):
        dest = out / part
        if dest.exists() or dest.is_symlink():
            os.rename(dest, staging / f"old-{part}")
        if part in parts:
            os.rename(staging / part, dest)
    fd, tmp = tempfile.mkstemp(dir=str(out), prefix=f".{MANIFEST}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        handle.write(_json_bytes(manifest))
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, manifest_path)


def _result(out: Path, key: str, plan: Plan, changed: bool) -> dict[str, Any]:
    return {
        "changed": changed,
        "key": key,
        "dest": str(out),
        "target": str(out / "target"),
        "draft": str(out / "draft") if plan.draft else None,
        "manifest": str(out / MANIFEST),
        "plan": plan.summary(),
        "differences": list(plan.differences),
        "launch_hints": dict(plan.launch_hints),
    }


def ensure(
    out: PathLike,
    target_dir: PathLike,
    draft_dir: Optional[PathLike] = None,
    tokenizer_dir: Optional[PathLike] = None,
    tp_size: int = 1,
    check_mode: bool = False,
) -> dict[str, Any]:
    """Write the tiny target (and draft) under `out` unless the manifest there has this key already.

    Returns changed, key, dest, target, draft, manifest, plan, differences, launch_hints. In
    check mode nothing is written; changed says whether a real run would write."""
    if tokenizer_dir is None:
        raise TinyModelError("a tokenizer directory is needed (the tiny target's vocabulary is its vocabulary)")
    out = Path(out)
    target = read_model(target_dir, "target")
    draft = read_model(draft_dir, "draft") if draft_dir is not None else None
    tokenizer = read_tokenizer(tokenizer_dir)
    plan = plan_models(target, tokenizer, draft, tp_size)
    key = compute_key(target, tokenizer, draft, tp_size)
    if _reusable(out, read_manifest(out), key):
        return _result(out, key, plan, changed=False)
    if check_mode:
        return _result(out, key, plan, changed=True)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=str(out), prefix=".tmp-"))
    try:
        files = {f"target/{name}": record for name, record in _write_model(staging / "target", plan.target, key, tokenizer).items()}
        parts = ["target"]
        if plan.draft is not None:
            files.update({f"draft/{name}": record for name, record in _write_model(staging / "draft", plan.draft, key, None).items()})
            parts.append("draft")
        manifest = {
            "generator_version": GENERATOR_VERSION,
            "key": key,
            "sources": _sources(target, tokenizer, draft),
            "plan": plan.summary(),
            "differences": plan.differences,
            "launch_hints": plan.launch_hints,
            "files": files,
        }
        _commit(out, staging, parts, manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _result(out, key, plan, changed=True)
