#!/usr/bin/python
"""Ansible module: write a tiny target and a tiny EAGLE-3 draft (random weights) from the real models' configs."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_canary_models
short_description: Generate the tiny models a start canary serves, from the real models' config.json
description:
  - Thin wrapper around plugins/module_utils/sglang_sm120/serve/tiny_models.py, run on the host. Reads the real target's
    C(config.json) (and C(hf_quant_config.json)), the real EAGLE-3 draft's C(config.json) and a
    small tokenizer; writes under O(dest) a tiny target (C(target/) with its config, a C(model.safetensors)
    of seeded random weights and the tokenizer's files), a tiny draft (C(draft/)) and the manifest
    C(canary-models.json). Nothing is downloaded; the safetensors files are written without torch.
  - The tiny target has the text model's architecture class (a C(KimiK25ForConditionalGeneration)
    gives its C(DeepseekV3ForCausalLM)), the same attention kind with the real per-head sizes
    (MLA's kv_lora_rank and head dims), the real expert count and routing, and few small layers;
    the draft is a C(LlamaForCausalLMEagle3) of the tiny target's width whose aux hidden-state
    layer ids are valid for the tiny target. What cannot be generated (NVFP4 packing, the vision
    tower, the real tokenizer, custom code) is listed in RV(differences); RV(launch_hints) says
    what a canary can pass to come closer (an fp8 KV cache where the checkpoint declares one).
  - Keyed by the sha256 of the generator version, the source configs, the tokenizer files, the
    generator's source and O(tp_size); a run whose inputs match the manifest in O(dest) changes
    nothing. Written into a temp directory and renamed into place, the manifest last.
  - Fails naming the file for a missing directory, a missing or unparsable C(config.json), and an
    architecture the generator does not know (naming it and the ones it knows).
options:
  target_model_path:
    description:
      - The real target model's directory (only its C(config.json) and C(hf_quant_config.json) are read).
      - Default, the C(--model-path) of O(argv); one of the two is required.
    type: path
  draft_model_path:
    description:
      - The real EAGLE-3 draft's directory (its C(config.json)); without it no draft is written.
      - Default, the C(--speculative-draft-model-path) of O(argv).
    type: path
  argv:
    description:
      - The release's launch flags (the launch plan's argv), read with the canary's own flag reader for the model and
        draft paths and the TP size where those options are not given.
    type: list
    elements: str
  tokenizer_path:
    description: A small tokenizer directory (C(tokenizer.json), C(tokenizer_config.json)); its vocabulary is the tiny models'.
    type: path
    required: true
  dest:
    description: Where C(target/), C(draft/) and C(canary-models.json) are written.
    type: path
    required: true
  tp_size:
    description:
      - The tensor-parallel size the canary will run at; heads and MLP widths are sized so each rank gets a usable share.
      - Default, the C(--tp-size) of O(argv), else 1.
    type: int
  unknown_architecture:
    description: >-
      What an architecture the generator does not know (target or draft) does: C(fail) fails naming it and the ones it
      knows; C(skip) succeeds with RV(generated)=false and RV(skipped_reason) naming it, writing nothing.
    type: str
    choices: [fail, skip]
    default: fail
attributes:
  check_mode:
    description: Reads the configs and the manifest and reports whether a run would write, writing nothing.
    support: full
extends_documentation_fragment:
  - sm120.sglang.sglang_sm120
  - sm120.sglang.sglang_sm120.no_diff
"""

EXAMPLES = r"""
- name: Tiny models for the start canary
  sglang_canary_models:
    target_model_path: /data/models/Kimi-K2.5-NVFP4
    draft_model_path: /data/eagle3/output_100k_sglang/4
    tokenizer_path: /opt/sglang/canary/tokenizer
    dest: /opt/sglang/canary/models
  register: canary_models
"""

RETURN = r"""
generated:
  description: Whether the tiny models exist for these inputs (false only when an unknown architecture was skipped).
  type: bool
  returned: always
  sample: true
unknown_architecture:
  description: The architecture the generator does not know, when it stopped on one.
  type: str
  returned: when skipped or failed for it
  sample: MistralForCausalLM
skipped_reason:
  description: Why no tiny models were written (the file, the architecture and the known ones).
  type: str
  returned: when skipped
  sample: "/data/m/config.json: names architecture 'MistralForCausalLM', which the tiny-model generator does not know; ..."
key:
  description: sha256 of everything the tiny models are made from (the manifest's key).
  type: str
  returned: success
  sample: c58b2a9261a0717133bfe639dc985c4dd94d9be74a50e1631c88fe190d089ac9
dest:
  description: The output directory.
  type: str
  returned: success
  sample: /opt/sglang/canary/models
target:
  description: The tiny target's directory (C(--model-path)).
  type: str
  returned: success
  sample: /opt/sglang/canary/models/target
draft:
  description: The tiny draft's directory (C(--speculative-draft-model-path)); null without O(draft_model_path).
  type: str
  returned: success
  sample: /opt/sglang/canary/models/draft
manifest:
  description: The manifest written with the models.
  type: str
  returned: success
  sample: /opt/sglang/canary/models/canary-models.json
differences:
  description: Each way the tiny models differ from the real ones beyond their size, one sentence each.
  type: list
  elements: str
  returned: success
  sample:
    - >-
      architecture: the real model is KimiK25ForConditionalGeneration, a wrapper around DeepseekV3ForCausalLM; the tiny
      target is the text model DeepseekV3ForCausalLM alone, so the wrapper's own code (its EAGLE-3 delegation to the text
      model, its language_model.* weight names, multimodal input) is not exercised
    - "vision tower: left out (the real model has a vision tower and an mm projector; the tiny target is text only)"
    - >-
      quantization: the real model is NVFP4 (modelopt, from config.json quantization_config, hf_quant_config.json); the tiny
      one is bf16 with no quantization config: NVFP4 packing (weights and scales) is not generated, so the quantized GEMM/MoE
      kernels and their runner selection are not exercised
launch_hints:
  description: What a canary can pass to come closer to the real model (C(kv_cache_dtype)) and the environment it needs (C(env)).
  type: dict
  returned: success
  sample: {kv_cache_dtype: fp8_e4m3, env: {SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "1"}}
plan:
  description: Per model, the source and tiny architecture, the attention kind, C(sizes) (key -> [real, tiny]), tensor count and bytes.
  type: dict
  returned: success
  sample:
    tp_size: 1
    target:
      source_architecture: KimiK25ForConditionalGeneration
      architecture: DeepseekV3ForCausalLM
      attention: MLA
      sizes: {hidden_size: [7168, 256], num_hidden_layers: [61, 5], kv_lora_rank: [512, 512], n_routed_experts: [384, 384]}
      tensors: 4679
      bytes: 93832320
    draft:
      source_architecture: LlamaForCausalLMEagle3
      architecture: LlamaForCausalLMEagle3
      attention: GQA
      sizes: {hidden_size: [7168, 256], draft_vocab_size: [32000, 128], eagle_aux_hidden_state_layer_ids: [[1, 29, 57], [1, 2, 3]]}
      tensors: 16
      bytes: 3640832
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.errors import run_module
from ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.serve.canary_models import UNKNOWN_ARCHITECTURE, canary_models

ARGUMENT_SPEC = dict(
    target_model_path=dict(type="path"),
    draft_model_path=dict(type="path"),
    argv=dict(type="list", elements="str"),
    tokenizer_path=dict(type="path", required=True),
    dest=dict(type="path", required=True),
    tp_size=dict(type="int"),
    unknown_architecture=dict(type="str", default="fail", choices=list(UNKNOWN_ARCHITECTURE)),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_one_of=[("target_model_path", "argv")], supports_check_mode=True)
    p = module.params
    models = (p["dest"], p["tokenizer_path"], p["argv"] or [], p["target_model_path"], p["draft_model_path"], p["tp_size"])
    run_module(module, lambda: canary_models(*models, check_mode=module.check_mode, unknown_architecture=p["unknown_architecture"]))


if __name__ == "__main__":
    main()
