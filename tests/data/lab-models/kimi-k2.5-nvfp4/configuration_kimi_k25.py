# TEST FIXTURE stand-in for the model's own configuration_kimi_k25.py (tests/data/lab-models/README.md):
# the real model directory holds Moonshot's module, which config.json's auto_map names and
# --trust-remote-code loads. This one re-exports the KimiK25Config of the SGLang that imports it.
from sglang.srt.configs.kimi_k25 import KimiK25Config  # noqa: F401
