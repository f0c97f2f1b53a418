"""docs/failure-points.json, SGLang's own failure points after its argument check (issue 48, item 1): made by
scripts/failure_points.py from the real sources of every supported release; re-run here on the first and the last."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import CACHE, ROOT
from sglang_sm120_controller.failure_points import classify, failure_points, merge, points_of_source, select

KEPT = ROOT / "docs" / "failure-points.json"


def rows(doc: dict, release: str) -> set[tuple]:
    return {(*p[:7], p[7][release]) for p in doc["points"] if release in p[7]}


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_the_kept_list_is_what_the_sources_of_a_release_give(release: str) -> None:
    tree = CACHE / "sglang" / release / "sglang"
    if not tree.is_dir():
        pytest.fail(f"no SGLang {release} sources at {tree}: run `make sglang-wheels` first")
    kept = json.loads(KEPT.read_text())
    again = {(*p[:7], p[7][release]) for p in merge({release: failure_points(tree)})["points"]}
    assert again == rows(select(kept, [release]), release), "docs/failure-points.json is stale: run scripts/failure_points.py"
    counts = {}
    for point in again:
        counts[point[4]] = counts.get(point[4], 0) + 1
    assert kept["counts"][release] == dict(sorted(counts.items()))


def test_every_supported_release_is_listed_with_the_points_the_gate_is_about() -> None:
    kept = json.loads(KEPT.read_text())
    listed = [
        line.split()[0]
        for line in (ROOT / "tests/data/sglang-wheels.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert kept["releases"] == listed

    def listed_in(release: str, function: str, needle: str) -> bool:
        return any(
            p[0] == "srt/configs/model_config.py" and p[1] == function and p[4] == "before-load" and release in p[7] and needle in p[5]
            for p in kept["points"]
        )

    for release in ("0.5.9", "0.5.23"):
        # ModelConfig refuses, after reading the checkpoint, a --quantization the checkpoint does not back: decidable before the load
        assert listed_in(release, "ModelConfig._verify_quantization", "is_compatible"), release
    # and a context length above the model's, from the config and the environment
    assert listed_in("0.5.9", "ModelConfig._derive_context_length", "context_length > derived_context_len")


def test_the_classes_follow_what_the_condition_reads() -> None:
    source = """
class Backend:
    def __init__(self, server_args, model_runner):
        if server_args.kv_cache_dtype == "fp8_e4m3" and get_device_capability()[0] == 12:
            raise ValueError("no FP8 KV on SM120")
        assert model_runner.req_to_token_pool.size > 0, "empty pool"
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA")

    def forward(self):
        raise NotImplementedError()
"""
    points = points_of_source("srt/layers/attention/x_backend.py", source)
    assert [(p.function, p.kind, p.exception, p.klass, p.line) for p in points] == [
        ("Backend.__init__", "raise", "ValueError", "before-load", 5),
        ("Backend.__init__", "assert", "AssertionError", "canary", 6),  # a memory pool: only a run has one
        ("Backend.__init__", "raise", "RuntimeError", "canary", 8),
        ("Backend.forward", "raise", "NotImplementedError", "not-decidable", 11),
    ]
    assert points[0].condition == "server_args.kv_cache_dtype == 'fp8_e4m3' and get_device_capability()[0] == 12"
    assert points[0].message == "no FP8 KV on SM120"
    assert classify("", "", "raise", "ValueError") == "not-decidable"


def test_the_script_names_what_a_release_gained() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/failure_points.py"), "--new", "0.5.23", "--since", "0.5.22"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.splitlines()[-1]
    kept = json.loads(KEPT.read_text())
    gained = [p for p in kept["points"] if "0.5.23" in p[7] and "0.5.22" not in p[7]]
    assert last == f"{len(gained)} points in 0.5.23 that 0.5.22 has not" and len(gained) > 0
