"""SGLang's own bench_serving (the real 0.5.9, from .cache/sglang/0.5.9) and the toolkit's client
measure the same stand-in server (TEST FIXTURE, 127.0.0.1) with the same prompts, output length and
concurrency, and agree; bench_serving loads the small local test tokenizer (roles/sglang_canary/files/tokenizer)
offline, as the lab host does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, standin_server
from sglang_sm120.serve import bench_client
from sglang_sm120.serve.report import ACCEPT_SOURCE_BENCH_SERVING, load_run, summarize

PROMPTS = ROOT / "roles/sglang_benchmark/files/prompts.json"
TOKENIZER = ROOT / "roles/sglang_canary/files/tokenizer"
NUM_PROMPTS, OUTPUT_LEN, CONCURRENCY = 12, 24, 3
# The stand-in sleeps 20 ms x 1.25 per speculative step and emits 2.5 tokens per step, so a request
# takes ~10 steps (~250 ms) and the server's own timing dominates both clients' overheads (an
# aiohttp event loop against a thread per request). Tolerances: output tok/s within 15% (the
# run's wall time includes each client's scheduling, a few ms per request); median TTFT within
# 25% or 30 ms: the stand-in, like SGLang's scheduler, runs one forward pass at a time, so a request
# that arrives during another's 25 ms decode step waits for it before its prefill, and two clients
# whose requests arrive at other phases of the steps differ by up to one step (plus connection
# setup); median ITL within 15% (both divide a chunk's gap by the tokens it added, as bench_serving
# defines it).
# ITL is a few milliseconds a token here, and both clients run beside the stand-in on a 2-core machine that
# make test also runs molecule lanes on: one CI run saw medians of 10.2 and 8.4 ms (22%), so 25% as for TTFT.
TOK_S_REL, TTFT_REL, TTFT_ABS_MS, ITL_REL = 0.15, 0.25, 30.0, 0.25


@pytest.fixture()
def standin():
    env = {"SGLANG_STANDIN_LOAD_SECONDS": "0", "SGLANG_STANDIN_TOKEN_MS": "20"}
    with standin_server(["--model-path", "/data/standin-model", "--speculative-algorithm", "EAGLE3"], env) as url:
        yield int(url.rsplit(":", 1)[1])


def bench_serving_env(sglang_tree: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(sglang_tree), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_the_test_tokenizer_loads_offline_and_is_small(sglang_runtime_python: Path, sglang_tree: Path) -> None:
    assert sorted(p.name for p in TOKENIZER.iterdir() if p.suffix == ".json") == ["tokenizer.json", "tokenizer_config.json"]
    assert (TOKENIZER / "tokenizer.json").stat().st_size < 100_000
    probe = (
        "import sys; from sglang.bench_serving import get_tokenizer; t = get_tokenizer(sys.argv[1]);"
        " print(type(t).__name__, len(t), len(t.encode(' tok12 tok13', add_special_tokens=False)))"
    )
    proc = subprocess.run(
        [str(sglang_runtime_python), "-c", probe, str(TOKENIZER)], env=bench_serving_env(sglang_tree), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    name, size, count = proc.stdout.split()[-3:]
    assert name == "PreTrainedTokenizerFast" and int(size) == 512 and 2 <= int(count) <= 8


def test_bench_serving_and_the_toolkit_client_agree_on_the_same_server(
    standin: int, sglang_runtime_python: Path, sglang_tree: Path, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{standin}"
    ours = tmp_path / "toolkit.json"
    argv = ["--url", url, "--prompts", str(PROMPTS), "--num-prompts", str(NUM_PROMPTS), "--output-len", str(OUTPUT_LEN)]
    assert bench_client.main([*argv, "--concurrency", str(CONCURRENCY), "--profile", "eagle3", "--out", str(ours)]) == 0
    theirs = tmp_path / "bench_serving.jsonl"
    # As the role does before each bench_serving run: zero the server's accept-length counters (the
    # toolkit client's run above moved them; bench_serving reads them at its end).
    assert bench_client.main(["--url", url, "--prompts", str(PROMPTS), "--reset-accept-counters"]) == 0
    # The role's argv (roles/sglang_benchmark/tasks/run.yml), against the test's port.
    command = [
        str(sglang_runtime_python), "-m", "sglang.bench_serving", "--backend", "sglang", "--host", "127.0.0.1", "--port", str(standin),
        "--dataset-name", "sharegpt", "--dataset-path", str(PROMPTS), "--num-prompts", str(NUM_PROMPTS),
        "--sharegpt-output-len", str(OUTPUT_LEN), "--max-concurrency", str(CONCURRENCY), "--seed", "1", "--warmup-requests", "1",
        "--disable-tqdm", "--output-details", "--output-file", str(theirs), "--tokenizer", str(TOKENIZER),
    ]  # fmt: skip
    proc = subprocess.run(command, env=bench_serving_env(sglang_tree), cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    printed = re.search(r"^Accept length:\s+([0-9.]+)", proc.stdout, re.M)
    a = summarize(load_run(ours, "eagle3", OUTPUT_LEN))
    b = summarize(load_run(theirs, "eagle3", OUTPUT_LEN))
    assert a["ok"] and b["ok"], (a["problem"], b["problem"])
    assert b["tool"] == "bench_serving" and b["concurrency"] == CONCURRENCY and b["completed"] == NUM_PROMPTS
    assert a["output_tokens"] == b["output_tokens"] == NUM_PROMPTS * OUTPUT_LEN
    # The accept length, each by its own method: ours from the requests (24 tokens over 10 verify steps
    # each: 2.4, the prefill's first token counted as SGLang counts it), bench_serving's from the
    # server's counters zeroed before its run (the stand-in's 2.5 a step, its requests' last steps cut
    # short, folded every 40 decode passes: between 2.3 and 2.5). bench_serving printed what we read.
    assert a["accept_source"] == bench_client.ACCEPT_SOURCE_REQUESTS and b["accept_source"] == ACCEPT_SOURCE_BENCH_SERVING
    assert a["accept_length"] == pytest.approx(2.5, abs=0.15) and b["accept_length"] == pytest.approx(2.5, abs=0.2), (a, b)
    assert printed and float(printed.group(1)) == pytest.approx(b["accept_length"], abs=0.005)
    # bench_serving's own summary line agrees with our reading of its file.
    record = json.loads(theirs.read_text().splitlines()[-1])
    assert record["output_throughput"] == pytest.approx(b["output_tok_s"], rel=0.01)
    assert b["output_tok_s"] == pytest.approx(a["output_tok_s"], rel=TOK_S_REL)
    assert abs(b["ttft_ms"]["median"] - a["ttft_ms"]["median"]) <= max(TTFT_ABS_MS, TTFT_REL * a["ttft_ms"]["median"])
    assert b["itl_ms"]["median"] == pytest.approx(a["itl_ms"]["median"], rel=ITL_REL)
    # And they measured the stand-in's real pace: ~10 steps of 25 ms per request, 3 at a time.
    expected_tok_s = CONCURRENCY * OUTPUT_LEN / (10 * 0.025)
    assert 0.6 * expected_tok_s < a["output_tok_s"] < 1.05 * expected_tok_s
