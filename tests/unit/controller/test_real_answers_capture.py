"""The toolkit's output checks (issue 47, item 6) on what REAL SGLang 0.5.13 servers answered on a GPU
(tests/data/real-server/0.5.13-h200-answers/, made by scripts/real_answers_proof.py; the README section says how).

The tiny Kimi-shaped target and its EAGLE-3 draft have random weights: they answer no question right. What the capture
shows is the machinery on a real server: 40 questions one at a time and a burst of 64 at once answered and judged, the
degenerate outputs named, and the greedy agreement of speculative (EAGLE-3) and plain decoding of the same target.
Every figure checked here is recomputed by the toolkit's own code from the captured outputs.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sglang_sm120.serve import answer_checks
from sglang_sm120.serve.answer_checks import Generation, Phase

ROOT = Path(__file__).resolve().parents[3]
CAPTURE = ROOT / "tests/data/real-server/0.5.13-h200-answers"
SUMMARY = json.loads((CAPTURE / "summary.json").read_text())
SERVERS = ("eagle3", "baseline")


def questions(name: str) -> dict[str, Any]:
    return json.loads((CAPTURE / f"questions-{name}.json").read_text())


def greedy(name: str) -> tuple[list[str], list[Generation]]:
    data = json.loads((CAPTURE / f"greedy-{name}.json").read_text())
    return data["prompts"], [Generation.from_dict(g) for g in data["outputs"]]


def replay(name: str) -> tuple[Phase, Phase, list[answer_checks.Question]]:
    """The two phases rebuilt by the runner's own Phase.record from the captured questions and outputs."""
    data = questions(name)
    asked = answer_checks.generate_questions(SUMMARY["questions"], SUMMARY["seed"])
    # the questions the proof asked are the ones the seed draws
    assert [q.to_dict() for q in asked] == data["questions"]
    sequential, burst = Phase("sequential", 1), Phase("burst", SUMMARY["burst"])
    for out in data["outputs"]["sequential"]:
        sequential.record(out["question"], asked[out["question"]], Generation.from_dict(out), answer_checks.DEFAULT_MIN_REPEATS)
    for out in data["outputs"]["burst"]:
        burst.record(out["question"], asked[out["question"]], Generation.from_dict(out), answer_checks.DEFAULT_MIN_REPEATS)
    return sequential, burst, asked


@pytest.mark.parametrize("name", SERVERS)
def test_both_real_servers_started_and_were_asked_everything(name: str) -> None:
    server = SUMMARY["servers"][name]
    assert server["start"]["phase"] == "healthy" and server["start"]["healthy"] > 0
    assert "failed" not in server
    speculative = "--speculative-algorithm" in server["argv"]
    assert speculative == (name == "eagle3")
    assert SUMMARY["sglang_version"] == "0.5.13"


@pytest.mark.parametrize("name", SERVERS)
def test_the_judge_recomputed_from_the_captured_outputs_gives_the_recorded_counts(name: str) -> None:
    sequential, burst, asked = replay(name)
    result = questions(name)["result"]
    figures = SUMMARY["servers"][name]["questions"]
    for phase, kept, summed in ((sequential, result["sequential"], figures["sequential"]), (burst, result["burst"], figures["burst"])):
        assert phase.asked == kept["asked"] == summed["asked"]
        assert phase.right == kept["right"] == summed["right"]
        assert len(phase.errors) == len(kept["errors"]) == summed["errors"]
        assert [w.verdict for w in phase.wrong] == [w["verdict"] for w in kept["wrong"]]
        assert [(f.name, f.index) for f in phase.findings] == [(f["name"], f["index"]) for f in kept["findings"]]
        assert dict(Counter(f.name for f in phase.findings)) == summed["findings_by_name"]
        assert phase.by_kind == kept["by_kind"]
    assert sequential.asked == len(asked) == SUMMARY["questions"]
    assert burst.asked == burst.concurrency == SUMMARY["burst"] == 64
    # the burst's answers that differ from the same question's answer asked alone, recomputed
    burst_outputs = questions(name)["outputs"]["burst"]
    changed = sorted({o["question"] for o in burst_outputs if not o["error"] and o["text"] != sequential.outputs[o["question"]]})
    assert changed == result["burst_changed"] == figures["burst_changed"]


def test_greedy_agreement_recomputed_from_the_captured_outputs() -> None:
    prompts, eagle3 = greedy("eagle3")
    same_prompts, baseline = greedy("baseline")
    assert prompts == same_prompts and list(answer_checks.GREEDY_PROMPTS) == prompts[: len(answer_checks.GREEDY_PROMPTS)]
    agreement = answer_checks.compare_greedy(prompts, eagle3, baseline, 1.0, labels=("eagle3", "baseline"))
    recorded = SUMMARY["agreement"]
    assert agreement.rate == recorded["rate"]
    assert agreement.basis == recorded["basis"] == "token ids"
    assert agreement.agreed == recorded["agreed"] and agreement.disagreeing == recorded["disagreeing"]
    first = agreement.to_dict()["first_divergence"]
    assert first == recorded["first_divergence"]
    assert not agreement.errors


def test_the_key_is_in_no_captured_file() -> None:
    assert SUMMARY["key_anywhere_kept"] == 0
    for name in SERVERS:
        assert SUMMARY["servers"][name]["key_in_full_log"] == 0
    text = "".join(p.read_text(errors="replace") for p in CAPTURE.iterdir() if p.is_file())
    assert not re.search(r"proof-[0-9a-f]{24}", text)  # the throwaway key's form (scripts/real_server_proof.py)


def test_the_burst_of_64_was_answered_in_full_by_both_real_servers_and_every_answer_judged() -> None:
    """No transport error at 64 at once; random weights answer nothing right and mostly repeat one token."""
    for name in SERVERS:
        sequential, burst, _ = replay(name)
        assert burst.asked == 64 and not burst.errors and burst.right == 0
        assert sequential.asked == 40 and not sequential.errors and sequential.right == 0
        assert {f.name for f in (*sequential.findings, *burst.findings)} == {"repeated-token", "repeated-ngram"}
        assert len(burst.findings) == 62 and sum(w.verdict == "malformed" for w in burst.wrong) == 48
    # the target alone decoded all 64 in one batch; the EAGLE-3 server caps running requests at 48 and queued 16
    assert "Decode batch, #running-req: 64," in (CAPTURE / "server-baseline.log").read_text()
    eagle3_log = (CAPTURE / "server-eagle3.log").read_text()
    assert "max_running_requests=48" in eagle3_log and re.search(r"#running-req: 48, .*#queue-req: 16", eagle3_log)
    assert "accept len: 1.00" in eagle3_log  # the random draft's tokens are never accepted


def test_every_logprob_was_finite_and_nearly_flat_so_greedy_ties_are_close() -> None:
    """No nan/inf logprob: the degenerate check read them all. Each chosen token's logprob is near log(1/513), the tiny
    tokenizer's size: a nearly flat distribution, where the numerics of a verify pass can flip the top token."""
    for name in SERVERS:
        outputs = questions(name)["outputs"]
        values = [v for o in (*outputs["sequential"], *outputs["burst"]) for v in Generation.from_dict(o).logprobs or ()]
        assert len(values) == 3328 and all(v is not None and -5.8 < v < -5.4 for v in values)


def test_the_deploys_questions_check_failed_both_servers_naming_why() -> None:
    for name in SERVERS:
        check = json.loads((CAPTURE / f"check-questions-{name}.json").read_text())
        assert not check["ok"] and check["answer"] == "0/40 right asked one at a time, 0/64 in the burst of 64"
        assert "degenerate outputs asked one at a time; the first: question 0: repeated-token" in check["reason"]
        assert check["details"]["burst"]["errors"] == 0


def test_eagle3_and_the_target_alone_agree_on_5_of_12_greedy_outputs_and_29_of_40_answers() -> None:
    prompts, eagle3 = greedy("eagle3")
    agreement = answer_checks.compare_greedy(prompts, eagle3, greedy("baseline")[1], 1.0)
    assert (agreement.agreed, agreement.prompts, agreement.passed) == (5, 12, False)
    first = agreement.first_divergence
    assert first is not None and (first.index, first.token_offset) == (0, 1)
    assert (first.first_tokens or [])[:1] == [87] and (first.second_tokens or [])[:1] == [172]
    # the questions asked one at a time (32 tokens at most, to the line's end) through the same comparison
    asked = [q["prompt"] for q in questions("eagle3")["questions"]]
    one, two = ([Generation.from_dict(o) for o in questions(n)["outputs"]["sequential"]] for n in SERVERS)
    answers_agreement = answer_checks.compare_greedy(asked, one, two, 1.0)
    assert (answers_agreement.agreed, answers_agreement.prompts, answers_agreement.basis) == (29, 40, "token ids")
