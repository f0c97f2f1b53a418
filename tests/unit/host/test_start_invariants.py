"""The start gate's generic invariants (plugins/module_utils/sglang_sm120/launch/invariants.py, entries
draft-dtype-differs-from-target, draft-context-longer-than-draft, draft-not-an-eagle3-class,
quantization-flag-not-backed-by-checkpoint): each refused on the real model configs of tests/data/models and
passed by its control, on the flag tables and sources of the real unpacked SGLang 0.5.9 and 0.5.23; and the
source facts each rests on re-read from every release, so a release that changes them fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import CACHE, DATA, unpacked_sglang
from sglang_sm120.launch.flags import _lookup, release_flag_table
from sglang_sm120.launch.invariants import (
    BACKEND_RULE_FILES,
    BACKEND_RULES,
    CAPABILITY_PREDICATES,
    ENV_FALSE,
    ENV_TRUE,
    STR_DTYPES,
    _in_releases,
    backend_rule_lines,
    eagle3_capable,
    read_release_data,
)
from sglang_sm120.launch.start_failures import Context, evaluate_entry, parse_argv, read_host_facts, read_model_dir
from sglang_sm120_controller.toolkit_data import load_catalogue

MODELS = DATA / "models"
ENTRIES = {e.id: e for e in load_catalogue()}
RELEASES = [line.split()[0] for line in (DATA / "sglang-wheels.txt").read_text().splitlines() if line.strip() and not line.startswith("#")]
KIMI, KIMI_DRAFT = MODELS / "kimi-k2.5-nvfp4", MODELS / "kimi-k2.5-eagle3"
LLAMA, LLAMA_DRAFT = MODELS / "llama-3.1-8b-instruct", MODELS / "llama-3.1-8b-eagle3"
ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
ALLOW = {ENV: "1"}


tree = unpacked_sglang


@pytest.fixture(scope="module", params=["0.5.9", "0.5.23"])
def release(request: pytest.FixtureRequest) -> dict[str, Any]:
    sglang = tree(request.param)
    return {
        "version": request.param,
        "aliases": {name: flag.name for name, flag in _lookup(release_flag_table(sglang)).items()},
        "data": read_release_data(sglang),
    }


def run(entry_id: str, release: dict[str, Any], argv: list[str], *, model: Path | None, draft: Path | None = None, env: Any = None) -> Any:
    ctx = Context(
        flags=parse_argv(argv, release["aliases"]),
        env=dict(env or {}),
        version=release["version"],
        capability="12.0",
        model=read_model_dir(model) if model else None,
        draft=read_model_dir(draft, "--draft-model") if draft else None,
        host=read_host_facts(DATA / "start-failures" / "host-8x-rtx-pro-6000.json"),
        aliases=release["aliases"],
        release=release["data"],
    )
    return evaluate_entry(ENTRIES[entry_id], ctx)


def eagle(algorithm: str = "EAGLE3") -> list[str]:
    return ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", "/data/draft"]


def refused_naming(result: Any, *texts: str) -> None:
    text = result.text()
    assert result.verdict == "refused", text
    assert ENTRIES[result.id].fix in text
    for part in texts:
        assert part in text, (part, text)


# --- the draft's dtype ---------------------------------------------------------------------------------------------


def test_a_float16_draft_on_a_bfloat16_target_is_refused_and_an_explicit_dtype_passes(release: dict[str, Any]) -> None:
    """Llama-3.1-8B-Instruct (bfloat16) with its published EAGLE-3 draft (float16), --dtype left to auto."""
    entry = "draft-dtype-differs-from-target"
    hit = run(entry, release, eagle(), model=LLAMA, draft=LLAMA_DRAFT, env=ALLOW)
    refused_naming(
        hit, "target bfloat16 (--dtype auto", "draft float16 (--dtype auto", f"{LLAMA_DRAFT / 'config.json'} torch_dtype: float16"
    )
    assert run(entry, release, [*eagle(), "--dtype", "bfloat16"], model=LLAMA, draft=LLAMA_DRAFT).verdict == "ok"
    # the Kimi pair: both bfloat16 (the target's from its text_config)
    kimi = run(entry, release, eagle(), model=KIMI, draft=KIMI_DRAFT)
    assert kimi.verdict == "ok" and f"{KIMI / 'config.json'}: text_config torch_dtype: bfloat16" in kimi.text(), kimi.text()
    # no speculation, no check
    assert run(entry, release, ["--dtype", "float16"], model=LLAMA).verdict == "ok"


# --- the context length ----------------------------------------------------------------------------------------------


def test_the_target_context_above_the_drafts_needs_sglangs_env(release: dict[str, Any]) -> None:
    """Kimi-K2.5 derives 262144 (yarn with original_max_position_embeddings: factor 1); its draft 131072."""
    entry = "draft-context-longer-than-draft"
    hit = run(entry, release, eagle(), model=KIMI, draft=KIMI_DRAFT)
    refused_naming(
        hit,
        "given the target's context 262144",
        f"the draft's own 131072 ({KIMI_DRAFT / 'config.json'}: max_position_embeddings 131072)",
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN not set",
    )
    allowed = run(entry, release, eagle(), model=KIMI, draft=KIMI_DRAFT, env=ALLOW)
    assert allowed.verdict == "ok" and "allowed by SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in allowed.text(), allowed.text()
    # SGLang's EnvBool: yes is true, no is false, anything else makes SGLang raise (unknown here, never ok)
    assert run(entry, release, eagle(), model=KIMI, draft=KIMI_DRAFT, env={ENV: "yes"}).verdict == "ok"
    assert run(entry, release, eagle(), model=KIMI, draft=KIMI_DRAFT, env={ENV: "no"}).verdict == "refused"
    odd = run(entry, release, eagle(), model=KIMI, draft=KIMI_DRAFT, env={ENV: "on"})
    assert odd.verdict == "unknown", odd.text()
    # a --context-length within the draft's own needs nothing
    assert run(entry, release, [*eagle(), "--context-length", "131072"], model=KIMI, draft=KIMI_DRAFT).verdict == "ok"
    # the llama3 rope scaling multiplies nothing: 131072 against the published draft's 2048
    refused_naming(
        run(entry, release, eagle(), model=LLAMA, draft=LLAMA_DRAFT), "given the target's context 131072", "the draft's own 2048"
    )


def test_a_context_length_above_the_targets_own_is_refused_without_a_draft(release: dict[str, Any]) -> None:
    entry = "draft-context-longer-than-draft"
    refused_naming(run(entry, release, ["--context-length", "300000"], model=KIMI), "--context-length 300000 > the target's own 262144")
    assert run(entry, release, ["--context-length", "300000"], model=KIMI, env=ALLOW).verdict == "ok"
    assert run(entry, release, [], model=KIMI).verdict == "ok"


# --- the draft's class -----------------------------------------------------------------------------------------------


def test_a_target_style_draft_is_refused_for_eagle3(release: dict[str, Any]) -> None:
    """LlamaForCausalLM is registered in every release (draft-architecture-unknown passes it) but has no hot_token_id."""
    entry = "draft-not-an-eagle3-class"
    hit = run(entry, release, eagle(), model=LLAMA, draft=LLAMA)
    refused_naming(hit, "architectures[0] LlamaForCausalLM;", "LlamaForCausalLMEagle3")
    assert run(entry, release, eagle(), model=KIMI, draft=KIMI_DRAFT).verdict == "ok"
    assert run(entry, release, eagle("EAGLE"), model=LLAMA, draft=LLAMA).verdict == "ok"  # not EAGLE-3: not this check


def test_the_eagle3_draft_classes_are_read_from_the_release() -> None:
    first, last = read_release_data(tree("0.5.9")), read_release_data(tree("0.5.23"))
    assert first is not None and last is not None
    assert first.eagle3_classes == {"LlamaForCausalLMEagle3"}
    # 0.5.16 added the Kimi-K2.5 MLA draft (srt/models/kimi_k25_eagle3.py)
    assert last.eagle3_classes == {"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"}
    # read the same from the wheel as from the unpacked tree
    wheel = read_release_data(CACHE / "sglang" / "sglang-0.5.9-py3-none-any.whl")
    assert wheel is not None and wheel.eagle3_classes == first.eagle3_classes


# --- the quantization flags ------------------------------------------------------------------------------------------


def test_a_quantization_flag_the_checkpoint_does_not_back_is_refused(release: dict[str, Any]) -> None:
    entry = "quantization-flag-not-backed-by-checkpoint"
    # another method than the Kimi checkpoint's ModelOpt NVFP4
    refused_naming(
        run(entry, release, ["--quantization", "fp8"], model=KIMI),
        "--quantization fp8 against the checkpoint's modelopt_fp4",
        "does not match",
    )
    assert run(entry, release, ["--quantization", "modelopt_fp4"], model=KIMI).verdict == "ok"
    assert run(entry, release, [], model=KIMI).verdict == "ok"
    # a method that reads hf_quant_config.json on the unquantized Llama; fp8 quantizes online
    refused_naming(
        run(entry, release, ["--quantization", "modelopt_fp4"], model=LLAMA),
        "modelopt_fp4 reads hf_quant_config.json, absent from",
        "Cannot find the config file for modelopt_fp4",
    )
    assert run(entry, release, ["--quantization", "fp8"], model=LLAMA).verdict == "ok"


def test_the_drafts_quantization_flag_against_the_drafts_checkpoint(release: dict[str, Any]) -> None:
    entry = "quantization-flag-not-backed-by-checkpoint"
    argv = [*eagle(), "--quantization", "modelopt_fp4"]
    explicit = run(entry, release, [*argv, "--speculative-draft-model-quantization", "modelopt_fp4"], model=KIMI, draft=KIMI_DRAFT)
    if release["version"] == "0.5.9":
        refused_naming(explicit, "--speculative-draft-model-quantization modelopt_fp4 on a checkpoint without a quantization config")
    else:  # 0.5.18 on may quantize a draft online: not decided by this check
        assert explicit.verdict == "ok" and "not decided here" in explicit.text(), explicit.text()
    control = run(entry, release, [*argv, "--speculative-draft-model-quantization", "unquant"], model=KIMI, draft=KIMI_DRAFT)
    assert control.verdict == "ok", control.text()


# --- what the checks rest on, re-read from every release -------------------------------------------------------------


def sglang_file(version: str, *candidates: str) -> str:
    for relative in candidates:
        path = tree(version) / "sglang" / relative
        if path.is_file():
            return path.read_text(encoding="utf-8")
    raise AssertionError(f"SGLang {version}: none of {candidates} is there: read the release again")


@pytest.mark.parametrize("version", RELEASES)
def test_the_source_facts_hold_in_every_release(version: str) -> None:
    config = sglang_file(version, "srt/configs/model_config.py")
    # the dtype names and the float32 -> float16 rule of _get_and_verify_dtype
    table = re.search(r"_STR_DTYPE_TO_TORCH_DTYPE = \{(.*?)\}", config, re.S)
    assert table is not None, version
    assert dict(re.findall(r'"(\w+)": torch\.(\w+)', table.group(1))) == STR_DTYPES, version
    assert re.search(r"if config_dtype == torch\.float32:.*?torch_dtype = torch\.float16", config, re.S), version
    # the context-length refusal and its environment variable
    derive = config.split("def _derive_context_length", 1)[1].split("\n    def ", 1)[0]
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in derive and "raise ValueError" in derive, version
    # SGLang's EnvBool
    environ = sglang_file(version, "srt/environ.py")
    parse = environ.split("class EnvBool", 1)[1].split("\nclass ", 1)[0]
    assert re.findall(r"value in \[(.*?)\]", parse) == [", ".join(f'"{v}"' for v in vals) for vals in (ENV_TRUE, ENV_FALSE)], version
    # the speculative workers give the draft the target's context length
    workers = "".join(p.read_text() for p in (tree(version) / "sglang" / "srt" / "speculative").glob("*.py"))
    assert re.search(r"context_length\"?\s*[=:]\s*target\w*(\.model_runner\.model_config)?\.context_len\b", workers), version
    # the EAGLE-3 worker calls set_embed and reads hot_token_id on the draft model, unguarded
    assert re.search(r"\.model\.set_embed\(embed\)", workers) and re.search(r"\.model\.hot_token_id is not None", workers), version
    # the quantization check and the config-file refusal
    assert "compatible_quantization_methods = {" in config and "does not match the quantization" in config, version
    loader = sglang_file(version, "srt/model_loader/weight_utils.py")
    assert "Cannot find the config file for" in loader and "get_config_filenames()" in loader, version


@pytest.mark.parametrize("version", [RELEASES[0], RELEASES[-1]])
def test_the_release_tables_are_read_whole(version: str) -> None:
    data = read_release_data(tree(version))
    assert data is not None and data.compatible_quantization is not None and data.context_length_keys
    assert data.compatible_quantization["modelopt_fp4"][0] == "modelopt"
    assert data.quant_config_files["modelopt_fp4"] == ["hf_quant_config.json"] and data.quant_config_files["fp8"] == []
    assert data.context_length_keys[-1] == "max_position_embeddings"


def _parsed_eagle3_classes(sglang: Path) -> frozenset[str]:
    """The EAGLE-3 draft classes by a full parse of every srt/models file (the oracle for the regex reader)."""
    traits: dict[str, tuple[list[str], bool, bool]] = {}
    entries: set[str] = set()
    for path in sorted((sglang / "sglang" / "srt" / "models").rglob("*.py")):
        try:
            module = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        for node in module.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
                values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                entries.update(v.id for v in values if isinstance(v, ast.Name))
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases]
                embed = any(isinstance(i, ast.FunctionDef) and i.name in ("set_embed", "set_embed_and_head") for i in node.body)
                hot = any(
                    isinstance(n, (ast.Attribute, ast.Name))
                    and (n.attr if isinstance(n, ast.Attribute) else n.id) == "hot_token_id"
                    and isinstance(n.ctx, ast.Store)
                    for n in ast.walk(node)
                )
                traits.setdefault(node.name, (bases, embed, hot))
    return eagle3_capable(traits, entries)


@pytest.mark.parametrize("version", RELEASES)
def test_the_eagle3_class_reader_agrees_with_a_full_parse_of_every_release(version: str) -> None:
    """The gate reads the draft classes with regular expressions (a full parse of srt/models costs ~1 s per plan); a
    release whose sources the expressions misread fails here."""
    sglang = tree(version)
    data = read_release_data(sglang)
    assert data is not None and data.eagle3_classes is not None
    assert data.eagle3_classes == _parsed_eagle3_classes(sglang)
    assert "LlamaForCausalLMEagle3" in data.eagle3_classes


# --- the attention backends against the capability and KV dtype the release accepts ------------------------------

HOST8 = DATA / "start-failures" / "host-8x-rtx-pro-6000.json"
BACKEND_ENTRY = "backend-refuses-capability-or-kv-dtype"


def backend(release: dict[str, Any], argv: list[str], *, model: Path | None = KIMI, capability: str | None = "host") -> Any:
    """The backend entry on the 8x RTX PRO 6000 host facts, with the capability they give (12.0) unless one is named."""
    host = read_host_facts(HOST8)
    ctx = Context(
        flags=parse_argv(argv, release["aliases"]),
        env={},
        version=release["version"],
        capability=host.capability if capability == "host" else capability,
        model=read_model_dir(model) if model else None,
        host=host,
        aliases=release["aliases"],
        release=release["data"],
    )
    return evaluate_entry(ENTRIES[BACKEND_ENTRY], ctx)


def test_the_host_facts_give_sm120() -> None:
    assert read_host_facts(HOST8).capability == "12.0"


def test_fa3_is_refused_on_sm120_and_passes_where_its_registry_accepts_it(release: dict[str, Any]) -> None:
    refused_naming(
        backend(release, ["--attention-backend", "fa3"], model=LLAMA),
        "--attention-backend fa3: compute capability 12.0, SGLang accepts majors 9, 8",
        "srt/layers/attention/attention_registry.py:",
    )
    assert backend(release, ["--attention-backend", "fa3"], model=LLAMA, capability="9.0").verdict == "ok"
    assert backend(release, ["--attention-backend", "fa3"], model=LLAMA, capability="8.9").verdict == "ok"
    # SM8x only for a non-MLA model: the MLA Kimi is refused there
    refused_naming(backend(release, ["--attention-backend", "fa3"], capability="8.9"), "SGLang accepts majors 9 (")
    # the capability unknown: unknown, never ok
    assert backend(release, ["--attention-backend", "fa3"], model=LLAMA, capability=None).verdict == "unknown"


def test_trtllm_mla_takes_sm120_but_not_every_kv_dtype(release: dict[str, Any]) -> None:
    """is_blackwell_supported takes majors 10-12 (the kernel's own failure at the first prefill is trtllm-mla-on-sm120);
    its KV-dtype list says bf16, not bfloat16."""
    hit = backend(release, ["--attention-backend", "trtllm_mla", "--kv-cache-dtype", "bfloat16"])
    refused_naming(
        hit, "--attention-backend trtllm_mla with --kv-cache-dtype bfloat16: SGLang accepts fp8_e4m3", "raise unless kv_cache_dtype in"
    )
    where = "srt/server_args.py:1891" if release["version"] == "0.5.9" else "srt/arg_groups/overrides.py:1216"
    assert where in hit.text(), hit.text()
    ok = backend(release, ["--decode-attention-backend", "trtllm_mla", "--kv-cache-dtype", "bf16"])
    assert ok.verdict == "ok" and "compute capability 12.0 accepted" in ok.text(), ok.text()
    # fp4_e2m1 is accepted up to 0.5.20 only
    fp4 = backend(release, ["--attention-backend", "trtllm_mla", "--kv-cache-dtype", "fp4_e2m1"])
    assert fp4.verdict == ("ok" if release["version"] == "0.5.9" else "refused"), fp4.text()


def test_trtllm_mha_by_role_and_release(release: dict[str, Any]) -> None:
    if release["version"] == "0.5.9":  # every role needs SM100
        refused_naming(backend(release, ["--decode-attention-backend", "trtllm_mha"], model=LLAMA), "SGLang accepts majors 10 (")
        assert backend(release, ["--attention-backend", "trtllm_mha"], model=LLAMA, capability="10.0").verdict == "ok"
        return
    # 0.5.23: SM120 for prefill and decode, but its FMHAv2 prefill refuses an fp8_e4m3 KV cache
    assert backend(release, ["--decode-attention-backend", "trtllm_mha", "--kv-cache-dtype", "fp8_e4m3"], model=LLAMA).verdict == "ok"
    refused_naming(
        backend(release, ["--attention-backend", "trtllm_mha", "--kv-cache-dtype", "fp8_e4m3"], model=LLAMA),
        "--attention-backend trtllm_mha with --kv-cache-dtype fp8_e4m3 on compute capability 12.0: SGLang refuses it",
        "srt/arg_groups/attention_hook.py:219",
    )
    assert backend(release, ["--attention-backend", "trtllm_mha", "--kv-cache-dtype", "bf16"], model=LLAMA).verdict == "ok"
    # a prefill backend of its own: --attention-backend no longer names the prefill's
    split = ["--attention-backend", "trtllm_mha", "--prefill-attention-backend", "flashinfer", "--kv-cache-dtype", "fp8_e4m3"]
    assert backend(release, split, model=LLAMA).verdict == "ok"


def test_cutedsl_mla_needs_sm100_where_the_release_has_it(release: dict[str, Any]) -> None:
    argv = ["--decode-attention-backend", "cutedsl_mla", "--kv-cache-dtype", "fp8_e4m3"]
    if release["version"] == "0.5.9":
        assert backend(release, argv).verdict == "ok"  # no such rule before 0.5.13
    else:
        refused_naming(backend(release, argv), "--decode-attention-backend cutedsl_mla: compute capability 12.0, SGLang accepts majors 10")
        assert backend(release, argv, capability="10.0").verdict == "ok"


def test_the_production_backends_pass(release: dict[str, Any]) -> None:
    for argv in (["--attention-backend", "triton", "--kv-cache-dtype", "bfloat16"], ["--attention-backend", "flashinfer"], []):
        result = backend(release, argv)
        assert result.verdict == "ok", result.text()


def _backend_condition(text: str, at: int) -> str:
    """The `if` / `assert` statement whose raise carries the message at `at` (the last one that opens before it)."""
    window = text[max(0, at - 700) : at]
    opens = list(re.finditer(r"\n\s*(?:if|assert)\b", window))
    assert opens, window
    return window[opens[-1].start() :]


PREDICATE = re.compile(r"\b(?:get_platform\(\)\.)?(is_sm90|is_sm100|is_sm120|is_blackwell)(?:_supported)?\b(?:\(\))?")


@pytest.mark.parametrize("version", RELEASES)
def test_the_backend_rules_hold_in_every_release(version: str) -> None:
    """Each rule of BACKEND_RULES is where its range says and tests what the table says; a release that moves a
    message in or out of a rule's range, or changes the capability predicate or KV-dtype list, fails here."""
    base = tree(version) / "sglang"
    texts = {name: (base / name).read_text(encoding="utf-8") if (base / name).is_file() else "" for name in BACKEND_RULE_FILES}
    common = (base / "srt" / "utils" / "common.py").read_text(encoding="utf-8")
    for name, majors in CAPABILITY_PREDICATES.items():
        found = re.search(rf"^{name} = .*?device_capability_majors=\[([\d, ]+)\]", common, re.S | re.M)
        assert found and tuple(int(m) for m in found.group(1).split(",")) == majors, (version, name)
    data = read_release_data(tree(version))
    assert data is not None
    for rule in BACKEND_RULES:
        hits = [(name, m) for name, text in texts.items() for m in re.finditer(rule.anchor, text)]
        applies = _in_releases(version, rule.releases)
        if not applies:
            # outside the range the message is gone, or a rule of its own (the same message, another list) covers it
            assert not hits or any(_in_releases(version, r.releases) for r in BACKEND_RULES if r.anchor == rule.anchor), (version, rule)
            continue
        assert len(hits) == 1, (version, rule.anchor, [n for n, _ in hits])
        name, found = hits[0]
        text = texts[name]
        assert data.backend_lines[rule.anchor] == f"{name}:{text.count(chr(10), 0, found.start()) + 1}"
        cond = _backend_condition(text, found.start())
        if rule.reads in ("prefill", "decode"):
            assert f'{rule.reads}_backend == "{rule.backend}"' in cond, (version, cond)
        if rule.majors is not None and rule.backend == "fa3":
            # 0.5.9: get_device_capability()[0] == 8 ...; from 0.5.11: major, minor = get_device_capability()
            window = text[max(0, found.start() - 700) : found.start()]
            assert re.search(r"major, minor = get_device_capability\(\)|torch\.cuda\.get_device_capability\(\)\[0\] ==", window)
            capability = re.findall(r"(?:get_device_capability\(\)\[0\]|\bmajor) == (\d+)\)?( and not runner\.use_mla_backend)?", cond)
            assert {int(m) for m, mha in capability if not mha} == set(rule.majors), (version, cond)
            assert {int(m) for m, mha in capability if mha} == set(rule.mha_majors), (version, cond)
        elif rule.majors is not None:
            names = set(PREDICATE.findall(cond))
            assert names and "not" in cond, (version, cond)
            accepted = {m for n in names for m in CAPABILITY_PREDICATES[f"{n}_supported"]}
            assert accepted == set(rule.majors), (version, rule.anchor, cond)
        if rule.kv is not None:
            listed = re.search(r"kv_cache_dtype not in \[([^\]]*)\]", cond)
            assert listed and tuple(re.findall(r'"(\w+)"', listed.group(1))) == rule.kv, (version, cond)
        if rule.kv_refused:
            assert {f"{n}_supported" for n in PREDICATE.findall(cond)} == {"is_sm120_supported"} and rule.refused_on == (12,)
            assert all(f'kv_cache_dtype == "{kv}"' in cond for kv in rule.kv_refused), (version, cond)


def test_the_backend_rules_read_fast() -> None:
    """What the gate reads for them: four named files, searched once a rule."""
    import time

    texts = {name: (tree("0.5.23") / "sglang" / name).read_text(encoding="utf-8") for name in BACKEND_RULE_FILES}
    start = time.perf_counter()
    lines = backend_rule_lines(texts)
    assert time.perf_counter() - start < 0.05 and len(lines) == len({r.anchor for r in BACKEND_RULES if _in_releases("0.5.23", r.releases)})
