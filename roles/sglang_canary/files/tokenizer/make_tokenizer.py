"""TEST FIXTURE: build the small local tokenizer that SGLang's bench_serving loads (offline) in the
tests and on the lab host, where no model (and so no model tokenizer) exists.

A byte-level BPE of 512 tokens trained on roles/sglang_benchmark/files/prompts.json (both turns) and on the words
the stand-in server emits (" tok0" .. " tok999"). transformers' AutoTokenizer loads the directory
(tokenizer.json + tokenizer_config.json) with HF_HUB_OFFLINE=1. It is not any model's tokenizer: token
counts measured with it are the stand-in's, nothing more. Rebuild (deterministic) with the SGLang
runtime's Python, which has the `tokenizers` library:

    .cache/sglang-runtime/0.5.9/venv/bin/python roles/sglang_canary/files/tokenizer/make_tokenizer.py
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = Path(__file__).resolve().parent
PROMPTS = HERE.parent.parent.parent / "files" / "benchmark" / "prompts.json"
VOCAB = 512
EOS = "</s>"


def corpus() -> list[str]:
    texts = [turn["value"] for item in json.loads(PROMPTS.read_text(encoding="utf-8")) for turn in item["conversations"][:2]]
    return texts + [" ".join(f"tok{i}" for i in range(start, start + 50)) for start in range(0, 1000, 50)]


def main() -> None:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    tokenizer.save(str(HERE / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 8192,
        "eos_token": EOS,
        "clean_up_tokenization_spaces": False,
        "comment": "TEST FIXTURE: stand-in tokenizer, see make_tokenizer.py",
    }
    (HERE / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
