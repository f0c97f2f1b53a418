"""Outputs a program can check (issue 47 item 1, the machinery): computed-answer questions and their judge,
degenerate-output findings, greedy agreement between two servers, and the runners against the stand-in server
(TEST FIXTURE, tests/fixtures/sglang-standin: it answers these questions right by default and misbehaves on
request: SGLANG_STANDIN_ANSWERS=corrupt | spec-diverge | burst-nan)."""

from __future__ import annotations

import ast
import collections
import functools
import heapq
import http.client
import json
import math
import re
import string
import sys
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from conftest import DATA, ROOT, standin_server
from sglang_sm120.progress import Progress
from sglang_sm120.serve import answer_checks
from sglang_sm120.serve.answer_checks import (
    KINDS,
    AnswerChecksError,
    AnswerChecksTimeout,
    Generation,
    Question,
    compare_greedy,
    degenerate_findings,
    generate_questions,
    judge,
    read_generate_stream,
    repeated_run,
)

sys.path.insert(0, str(ROOT / "tests/fixtures/sglang-standin"))
from sglang_standin import answers as standin_answers

FAST = {
    "SGLANG_STANDIN_VERSION": "0.5.9",
    "SGLANG_STANDIN_LOAD_SECONDS": "0.3",
    "SGLANG_STANDIN_WARMUP_SECONDS": "0.2",
    "SGLANG_STANDIN_HEALTH_SECONDS": "0.01",
    "SGLANG_STANDIN_TOKEN_MS": "2",
}
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
SPEC += ["--speculative-num-draft-tokens", "4"]
REAL = DATA / "real-server/0.5.13-h200"


# ------------------------------------------------------------------ an independent computation of each answer


def _evaluate(node: ast.AST) -> int:
    """An integer expression of +, -, * as Python's own parser reads it."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    assert isinstance(node, ast.BinOp), ast.dump(node)
    left, right = _evaluate(node.left), _evaluate(node.right)
    return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}[type(node.op)]


def _numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"-?\d+", text)]


def independent_answer(question: str) -> str:
    """The answer to a question, computed here from its text alone, by other means than the generator's."""
    quoted = re.findall(r'"([^"]*)"', question)
    listed = _numbers(question[question.find("[") :]) if "[" in question else []
    if question.startswith("What is") and "list" not in question:
        return str(_evaluate(ast.parse(question[len("What is ") : -1], mode="eval")))
    if question.startswith("Reverse"):
        return "".join(quoted[0][i] for i in range(len(quoted[0]) - 1, -1, -1))
    if question.startswith("Write the string"):
        return quoted[0].translate(str.maketrans(string.ascii_lowercase, string.ascii_uppercase))
    if question.startswith("How many characters"):
        return str(sum(1 for _ in quoted[0]))
    if question.startswith("How many times does the letter"):
        return str(sum(ch == quoted[0] for ch in quoted[1]))
    if question.startswith("Sort"):
        return "[" + ", ".join(map(str, heapq.nsmallest(len(listed), listed))) + "]"
    if question.startswith("What is the largest"):
        return str(functools.reduce(lambda a, b: a if a > b else b, listed))
    if question.startswith("What is the sum"):
        return str(int(math.fsum(listed)))
    if question.startswith("How many times does"):
        target = int(re.match(r"How many times does (-?\d+)", question).group(1))  # type: ignore[union-attr]
        return str(collections.Counter(listed)[target])
    if question.startswith("How many words"):
        return str(len(re.findall(r"\S+", quoted[0])))
    raise AssertionError(f"a question of no known kind: {question}")


# ------------------------------------------------------------------ the questions


def test_the_same_seed_gives_the_same_questions_another_seed_others() -> None:
    first, again, other = generate_questions(40, seed=7), generate_questions(40, seed=7), generate_questions(40, seed=8)
    assert first == again
    assert first != other
    assert collections.Counter(q.kind for q in first) == {kind: 4 for kind in KINDS}  # every kind, in turn
    assert [q.kind for q in generate_questions(3, kinds=["sum", "reverse"])] == ["sum", "reverse", "sum"]


def test_every_expected_answer_agrees_with_two_independent_computations() -> None:
    """The generator's expected answer, this test's own computation from the question's text, and the stand-in's
    (which reads the prompt as a server would) agree, over many seeds."""
    questions = [q for seed in range(30) for q in generate_questions(20, seed=seed)]
    for q in questions:
        assert independent_answer(q.question) == q.expected, q
        value, form = standin_answers.solve(q.prompt)  # type: ignore[misc]
        assert form == q.form and standin_answers.answer_text(value, form).strip().strip('"') == q.expected, q
    assert len({q.question for q in questions}) > len(questions) * 0.8  # not the same few questions over and over


def test_the_prompt_asks_for_the_answer_alone_in_its_form_and_ends_with_answer() -> None:
    for q in generate_questions(len(KINDS)):
        lines = q.prompt.split("\n")
        assert lines == [q.question, f"Reply with the answer alone, in this form: {answer_checks.FORMS[q.form]}", "Answer:"]


def test_a_question_set_that_cannot_be_drawn_is_refused() -> None:
    with pytest.raises(AnswerChecksError, match=r"unknown question kinds \['trivia'\]: expected some of arithmetic"):
        generate_questions(5, kinds=["sum", "trivia"])
    with pytest.raises(AnswerChecksError, match="at least 1, found 0"):
        generate_questions(0)


# ------------------------------------------------------------------ the judge


def q(kind: str, form: str, expected: str) -> Question:
    return Question(kind, form, "(the question)", expected)


NUMBER, REVERSE = q("sum", "number", "1234"), q("reverse", "string", "tibbar")
UPPER, SORT = q("upper", "string", "QUARTZ"), q("sort", "list", "[1, 2, 13]")


@pytest.mark.parametrize(
    ("question", "text"),
    [
        (NUMBER, " 1234"),
        (NUMBER, "Answer: 1234"),
        (NUMBER, " 1,234."),
        (NUMBER, "1234.0"),
        (NUMBER, "\n\n  1234\nQuestion: What is 2 + 2?\nAnswer: 4"),  # only the first line with text is read
        (NUMBER, " 12 + 22 = 1234"),  # the last integer of the line
        (q("arithmetic", "number", "-48"), " \u221248"),  # a typographic minus
        (REVERSE, ' "tibbar"'),
        (REVERSE, " \u201ctibbar\u201d"),
        (REVERSE, " tibbar."),  # one word without quotes
        (REVERSE, ' "  tibbar "'),  # the whitespace around it does not count
        (UPPER, ' "QUARTZ"'),
        (SORT, " [1, 2, 13]"),
        (SORT, "[1,2,13]"),
        (SORT, " [ 1 , 2 , 13 ] "),
        (q("sort", "list", "[]"), " []"),
    ],
)
def test_the_judge_accepts_a_right_answer_in_any_fair_form(question: Question, text: str) -> None:
    verdict = judge(question, text)
    assert (verdict.verdict, verdict.got, verdict.reason) == ("right", question.expected, "")


@pytest.mark.parametrize(
    ("question", "text", "got"),
    [
        (NUMBER, " 1235", "1235"),
        (NUMBER, " 1234 or 1235", "1235"),
        (REVERSE, ' "TIBBAR"', "TIBBAR"),  # case counts in a string
        (REVERSE, ' "tib bar"', "tib bar"),  # and so does the whitespace inside it
        (UPPER, ' "Quartz"', "Quartz"),
        (SORT, " [2, 1, 13]", "[2, 1, 13]"),  # order counts in a list
        (SORT, " [1, 2]", "[1, 2]"),
    ],
)
def test_the_judge_names_a_wrong_answer_and_what_it_read(question: Question, text: str, got: str) -> None:
    verdict = judge(question, text)
    assert (verdict.verdict, verdict.got) == ("wrong", got)
    assert verdict.reason == f"expected {question.expected}, got {got}"


@pytest.mark.parametrize(
    ("question", "text", "reason"),
    [
        (NUMBER, "", "no integer in the answer ''"),
        (NUMBER, " nan", "no integer in the answer 'nan'"),
        (NUMBER, " 1234.5", "no integer in the answer '1234.5'"),
        (NUMBER, " tok1234", "no integer in the answer 'tok1234'"),
        (REVERSE, " two words", "no quoted string in the answer 'two words'"),
        (SORT, " 1, 2, 13", "no bracketed list in the answer '1, 2, 13'"),
        (SORT, " [1, two, 13]", "the list element 'two' is not an integer in the answer '[1, two, 13]'"),
    ],
)
def test_the_judge_calls_an_answer_of_no_readable_form_malformed(question: Question, text: str, reason: str) -> None:
    assert judge(question, text) == answer_checks.Judgement("malformed", None, reason)


# ------------------------------------------------------------------ degenerate outputs


def names(findings: list[answer_checks.Finding]) -> list[str]:
    return [f.name for f in findings]


def test_a_clean_answer_has_no_finding() -> None:
    assert degenerate_findings(" 42", token_ids=[220, 2983], logprobs=[[-0.1, 220, None], [-0.01, 2983, None]], number_expected=True) == []
    assert degenerate_findings(' "banana"', number_expected=True) == []  # "nan" inside a word is not NaN
    assert degenerate_findings(" [1, 2, 3, 4, 5, 6, 7, 8, 9]", number_expected=True) == []  # a list is not a repeated n-gram


def test_empty_nan_and_inf_outputs_are_named() -> None:
    assert names(degenerate_findings("")) == ["empty"]
    assert degenerate_findings(" \n ", token_ids=[13, 13])[0].detail == "only whitespace (' \\n ') from 2 tokens"
    assert names(degenerate_findings(" nan", number_expected=True)) == ["nan-text"]
    assert names(degenerate_findings(" -inf", number_expected=True)) == ["inf-text"]
    assert names(degenerate_findings(" Infinity", number_expected=True)) == ["inf-text"]
    assert degenerate_findings(" nan", number_expected=False) == []  # a string may be "nan"


def test_non_finite_logprobs_are_named_null_included() -> None:
    """SGLang's streamed JSON (orjson) writes a NaN logprob as null; a parser that keeps NaN gives a float."""
    null = degenerate_findings(" 4", logprobs=[[-0.5, 1, None], [None, 0, None], [None, 0, None]])
    assert [(f.name, f.detail) for f in null] == [("nan-logprob", "2 of 3 token logprobs are null, the first at token 1")]
    assert names(degenerate_findings(" 4", logprobs=[math.nan])) == ["nan-logprob"]
    assert names(degenerate_findings(" 4", logprobs=[-0.1, -math.inf])) == ["inf-logprob"]


def test_a_repeated_token_or_ngram_past_the_threshold_is_named() -> None:
    run = degenerate_findings("!" * 12)
    assert [(f.name, f.detail) for f in run] == [("repeated-token", "text unit '!' repeated 12 times from text unit 0")]
    ids = degenerate_findings("xyz", token_ids=[5, 6, *[0] * 9])
    assert [(f.name, f.detail) for f in ids] == [("repeated-token", "token 0 repeated 9 times from token 2")]
    gram = degenerate_findings(" the end" + " is near the end" * 8)
    assert [(f.name, f.detail) for f in gram] == [
        ("repeated-ngram", "the 4-gram ['the', 'end', 'is', 'near'] repeated 8 times from text unit 0")
    ]
    assert degenerate_findings("!" * 7) == []  # below the default threshold (8)
    assert names(degenerate_findings("!" * 3, min_repeats=3)) == ["repeated-token"]


@pytest.mark.parametrize(
    ("units", "expected"),
    [
        ("aaaaa", (1, 0, 5)),
        ("xyaaaaz", (1, 2, 4)),
        ("ababab", (2, 0, 3)),
        ("abababa", (2, 0, 3)),  # three whole repetitions, a trailing half
        ("qabcabcabcq", (3, 1, 3)),
        ("abcdef", None),
        ("aaabbbbb", (1, 3, 5)),  # the longest run
    ],
)
def test_repeated_run_finds_the_shortest_period_and_its_longest_run(units: str, expected: Optional[tuple[int, int, int]]) -> None:
    assert repeated_run(list(units), 3) == expected


def test_a_real_random_weights_server_output_is_a_repeated_ngram() -> None:
    """The real SGLang 0.5.13 capture (tiny model, random weights) emits "0202...": what random weights do, and
    why an answer check on them shows the machinery, not accuracy."""
    out = read_generate_stream(200, (REAL / "generate-stream-baseline.txt").read_text())
    assert [f.name for f in degenerate_findings(out.text, out.token_ids, out.logprobs)] == ["repeated-ngram"]


# ------------------------------------------------------------------ reading a server's answer


def stream(*chunks: dict[str, Any]) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def test_a_real_streamed_generate_is_read_whole() -> None:
    """The real capture streams the text and output_ids whole in every chunk (SGLang's default)."""
    for name in ("baseline", "eagle3"):
        out = read_generate_stream(200, (REAL / f"generate-stream-{name}.txt").read_text())
        assert out.error == "" and out.finish_reason == "length"
        assert out.text == "02" * 16 and out.token_ids == (16, 18) * 16 and out.logprobs is None


def test_a_stream_of_disjoint_pieces_is_joined_and_errors_are_named() -> None:
    first = {"completion_tokens": 2, "output_token_logprobs": [[-0.1, 1, None], [-0.2, 2, None]]}
    last = {"completion_tokens": 3, "output_token_logprobs": [[None, 3, None]], "finish_reason": {"type": "stop"}}
    pieces = stream({"text": "ab", "output_ids": [1, 2], "meta_info": first}, {"text": "c", "output_ids": [3], "meta_info": last})
    out = read_generate_stream(200, pieces)
    assert (out.text, out.token_ids, out.logprobs, out.finish_reason) == ("abc", (1, 2, 3), (-0.1, -0.2, None), "stop")
    assert read_generate_stream(401, '{"error": "Unauthorized"}').error == 'POST /generate answered HTTP 401: {"error": "Unauthorized"}'
    refused = "ConnectionRefusedError: [Errno 111]"
    assert read_generate_stream(0, refused).error == f"POST /generate got no answer: {refused}"
    failed = read_generate_stream(200, stream({"error": {"message": "boom"}}))
    assert failed.error == 'POST /generate streamed an error: {"message": "boom"}'
    assert read_generate_stream(200, "data: [DONE]\n\n").error.startswith("POST /generate streamed no chunk")


def test_a_generation_keeps_non_finite_logprobs_through_json() -> None:
    out = Generation(" 4", (1, 2, 3), (-0.5, math.nan, -math.inf), "stop", "", 0.1)
    data = json.loads(json.dumps(out.to_dict(), allow_nan=False))
    back = Generation.from_dict(data)
    assert back.logprobs is not None and back.logprobs[0] == -0.5 and math.isnan(back.logprobs[1]) and back.logprobs[2] == -math.inf
    assert (back.text, back.token_ids, back.finish_reason) == (" 4", (1, 2, 3), "stop")


# ------------------------------------------------------------------ greedy agreement


def gen(text: str, ids: Optional[tuple[int, ...]] = None, error: str = "") -> Generation:
    return Generation(text, ids, error=error)


PROMPTS = ["p0", "p1", "p2", "p3"]


def test_identical_outputs_agree_on_their_token_ids() -> None:
    runs = [gen(f" tok{i} tok{i + 1}", (i, i + 1)) for i in range(4)]
    result = compare_greedy(PROMPTS, runs, list(runs), threshold=1.0)
    assert (result.basis, result.agreed, result.rate, result.passed, result.first_divergence) == ("token ids", 4, 1.0, True, None)


def test_the_first_divergence_names_the_prompt_the_offsets_and_both_continuations() -> None:
    first = [gen("abc", (1, 2, 3)), gen("the cat sat on the mat", (10, 11, 12, 13, 14, 15)), gen("x", (7,)), gen("y z", (8, 9))]
    second = [gen("abc", (1, 2, 3)), gen("the cat ran off", (10, 11, 20, 21)), gen("x", (7,)), gen("y w", (8, 30))]
    result = compare_greedy(PROMPTS, first, second, threshold=0.5)
    assert (result.agreed, result.rate, result.passed, result.disagreeing) == (2, 0.5, True, [1, 3])
    d = result.first_divergence
    assert d is not None and (d.index, d.prompt, d.token_offset, d.char_offset) == (1, "p1", 2, 8)
    assert (d.before, d.first, d.second) == ("the cat ", "sat on the mat", "ran off")
    assert (d.first_tokens, d.second_tokens) == ([12, 13, 14, 15], [20, 21])
    assert not compare_greedy(PROMPTS, first, second, threshold=0.75).passed  # the threshold is data


def test_without_token_ids_the_text_decides_and_a_failed_request_disagrees() -> None:
    first = [gen("same"), gen("same"), gen("", error="HTTP 500"), gen("a longer one")]
    second = [gen("same"), gen("same"), gen("ok"), gen("a long")]
    result = compare_greedy(PROMPTS, first, second, threshold=0.5, labels=("eagle3", "target"))
    assert (result.basis, result.agreed, result.disagreeing, result.errors) == ("text", 2, [2, 3], ["prompt 2: eagle3: HTTP 500"])
    d = result.first_divergence
    assert d is not None and (d.index, d.token_offset, d.char_offset, d.first, d.second) == (3, None, 6, "er one", "")
    assert json.loads(json.dumps(result.to_dict()))["first_divergence"]["char_offset"] == 6


def test_agreement_refuses_runs_that_do_not_pair_up_or_a_threshold_out_of_range() -> None:
    with pytest.raises(AnswerChecksError, match="4 prompts, 4 outputs from speculative, 3 from target"):
        compare_greedy(PROMPTS, [gen("a")] * 4, [gen("a")] * 3, 1.0)
    with pytest.raises(AnswerChecksError, match="from 0 to 1, found 95"):
        compare_greedy(PROMPTS, [gen("a")] * 4, [gen("a")] * 4, 95)


def test_the_real_eagle3_and_baseline_servers_agree() -> None:
    """The real 0.5.13 capture: the same prompt through the EAGLE-3 server and the target alone, greedy."""
    eagle3 = read_generate_stream(200, (REAL / "generate-stream-eagle3.txt").read_text())
    baseline = read_generate_stream(200, (REAL / "generate-stream-baseline.txt").read_text())
    result = compare_greedy(["the captured prompt"], [eagle3], [baseline], threshold=1.0)
    assert (result.basis, result.rate, result.passed) == ("token ids", 1.0, True)


# ------------------------------------------------------------------ the runners against the stand-in


def standin(mode: str, *flags: str, **env: str):
    return standin_server(["--model-path", "/models/target", *flags], {**FAST, "SGLANG_STANDIN_ANSWERS": mode, **env})


def test_a_server_that_answers_right_passes_alone_and_in_a_burst() -> None:
    seen: list[Progress] = []
    with standin("right") as url:
        result = answer_checks.run_answer_checks(url, {}, count=20, concurrency=32, timeout_s=120, progress=seen.append)
    assert result.ok and result.reasons == [], result.reasons
    assert (result.share_right, result.sequential.asked, result.sequential.findings, result.sequential.errors) == (1.0, 20, [], [])
    burst = result.burst
    assert burst is not None and (burst.asked, burst.right, burst.errors, burst.findings) == (32, 32, [], [])
    assert result.burst_changed == [] and result.complete
    assert result.sequential.by_kind == {kind: [2, 2] for kind in KINDS}
    assert [p.phase for p in seen[:2]] == ["question 1/20", "question 2/20"] and seen[0].what == f"output checks of {url}"
    assert seen[0].last_log_line == "question 0 (arithmetic): right"
    assert sorted(p.phase for p in seen[20:]) == sorted(f"burst {i}/32 at once" for i in range(1, 33))
    report = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert report["ok"] and report["share_right"] == 1.0 and report["burst"]["concurrency"] == 32


def test_corrupted_answers_fail_with_each_wrong_answer_named() -> None:
    questions = generate_questions(10, seed=3)
    with standin("corrupt") as url:
        result = answer_checks.run_answer_checks(url, {}, questions=questions, concurrency=0, timeout_s=120)
    assert not result.ok and result.share_right == 0.0 and result.burst is None
    assert [(w.index, w.prompt, w.expected) for w in result.sequential.wrong] == [
        (i, q.prompt, q.expected) for i, q in enumerate(questions)
    ]
    assert all(w.verdict == "wrong" and w.got not in (None, w.expected) for w in result.sequential.wrong)
    first = questions[0]
    assert result.reasons == [
        f"0 of 10 questions asked one at a time answered right (0%), below the 80% asked for; the first wrong: question 0 "
        f"(arithmetic) {first.question!r}: expected {first.expected}, got {result.sequential.wrong[0].got} "
        f"(output {result.sequential.wrong[0].output!r})"
    ]


def test_nan_and_repeats_under_a_burst_are_found_while_answers_asked_alone_are_right() -> None:
    """burst-nan misbehaves only above 4 requests in flight: the questions asked alone are right, the burst's
    outputs are NaN text, token 0 repeated, and null logprobs."""
    with standin("burst-nan", SGLANG_STANDIN_BURST_THRESHOLD="4", SGLANG_STANDIN_TOKEN_MS="5") as url:
        result = answer_checks.run_answer_checks(url, {}, count=10, concurrency=32, timeout_s=120)
    assert result.sequential.share_right == 1.0 and result.sequential.findings == []
    burst = result.burst
    assert burst is not None and burst.errors == [] and burst.right < burst.asked
    found = {f.name for f in burst.findings}
    assert {"nan-logprob", "repeated-token"} <= found and found & {"nan-text"}, found
    assert all(f.phase == "burst" and f.index is not None for f in burst.findings)
    assert not result.ok
    assert any(r.startswith(f"{len(burst.findings)} degenerate outputs in the burst of 32 concurrent requests") for r in result.reasons)
    assert result.burst_changed  # the same questions answered differently under load


def test_a_server_that_diverges_only_under_speculation_fails_the_agreement() -> None:
    prompts = list(answer_checks.GREEDY_PROMPTS[:4]) + [q.prompt for q in generate_questions(4)]
    with standin("spec-diverge", *SPEC) as speculative, standin("spec-diverge") as target, standin("right", *SPEC) as good:
        eagle3 = answer_checks.collect_greedy(speculative, prompts, {}, max_new_tokens=24)
        alone = answer_checks.collect_greedy(target, prompts, {}, max_new_tokens=24)
        right = answer_checks.collect_greedy(good, prompts, {}, max_new_tokens=24)
        target_answers = answer_checks.run_answer_checks(target, {}, count=10, concurrency=0, timeout_s=60)
    assert compare_greedy(prompts, right, alone, threshold=1.0).passed  # the target alone is what a right EAGLE-3 server gives
    result = compare_greedy(prompts, eagle3, alone, threshold=0.9)
    assert (result.basis, result.passed) == ("token ids", False) and result.rate < 0.9
    d = result.first_divergence
    assert d is not None and d.index == 0 and d.token_offset is not None and d.token_offset > 0
    assert eagle3[0].token_ids[: d.token_offset] == alone[0].token_ids[: d.token_offset]  # type: ignore[index]
    assert d.first_tokens and d.second_tokens and d.first_tokens[0] != d.second_tokens[0] and d.first != d.second
    assert target_answers.ok  # the target alone answers right


def test_the_benchmark_verdict_carries_the_greedy_agreement_of_eagle3_and_the_target_alone() -> None:
    """What the sglang_benchmark role does with two profiles: module sglang_answers' greedy check while each serves,
    then report.with_agreement on both records (through JSON, as the module returns them)."""
    from sglang_sm120.serve.answers import record_greedy
    from sglang_sm120.serve.report import BenchError, with_agreement

    with standin("spec-diverge", *SPEC) as diverging, standin("right") as target, standin("right", *SPEC) as good:
        records = {
            name: json.loads(json.dumps(record_greedy(url, {}, 30.0, tokens=24).to_dict()))
            for name, url in (("broken", diverging), ("baseline", target), ("eagle3", good))
        }
    assert all(r["ok"] and len(r["details"]["outputs"]) == len(answer_checks.GREEDY_PROMPTS) for r in records.values())
    speed = {"baseline": "baseline", "candidate": "eagle3", "gate": "fail", "status": "pass", "message": "eagle3 is faster"}
    fine = with_agreement(dict(speed), {"baseline": records["baseline"], "eagle3": records["eagle3"]}, 0.9)
    assert fine["status"] == "pass" and fine["agreement"]["rate"] == 1.0 and fine["agreement"]["basis"] == "token ids"
    assert (
        fine["message"]
        == "eagle3 is faster; greedy outputs: eagle3 agrees with baseline on 8 of 8 prompts (token ids; at least 90% wanted)"
    )
    broken = with_agreement(dict(speed), {"baseline": records["baseline"], "eagle3": records["broken"]}, 0.9)
    assert broken["status"] == "fail" and not broken["agreement"]["passed"] and broken["agreement"]["first_divergence"]["index"] == 0
    assert re.search(r"agrees with baseline on 0 of 8 prompts .*, first apart in prompt 0 at token \d+: ", broken["message"])
    assert broken["message"].endswith("; gate fail: eagle3's outputs leave the target's")
    assert with_agreement(dict(speed, gate="off"), {"baseline": records["baseline"], "eagle3": records["broken"]}, 0.9)["status"] == "pass"
    assert with_agreement(dict(speed), {"eagle3": records["eagle3"]}, 0.9)["agreement"] is None  # one profile: nothing compared
    with pytest.raises(BenchError, match="sglang_benchmark_agreement_min must be a share from 0 to 1, found 2"):
        with_agreement(dict(speed), {"baseline": records["baseline"], "eagle3": records["eagle3"]}, 2)


def test_the_completions_api_and_the_api_key_are_used() -> None:
    key = "sk-answer-checks-0123"
    with standin("right", "--api-key", key) as url:
        result = answer_checks.run_answer_checks(url, {"api-key": key}, count=10, concurrency=4, api="completions", timeout_s=60)
        refused = answer_checks.run_answer_checks(url, {}, count=2, concurrency=0, timeout_s=60)
        texts = answer_checks.collect_greedy(url, ["hello there"], {"api-key": key}, api="completions", max_new_tokens=5)
    assert result.ok and result.share_right == 1.0, result.reasons
    assert not refused.ok and refused.sequential.errors[0].startswith("question 0 (arithmetic): POST /generate answered HTTP 401")
    assert texts[0].token_ids is None and len(texts[0].text.split()) == 5


def test_a_deadline_stops_the_checks_with_what_they_found() -> None:
    with standin("right", SGLANG_STANDIN_TOKEN_MS="300") as url:  # each answer takes a few forward passes
        started = time.monotonic()
        with pytest.raises(AnswerChecksTimeout, match=r"ran past their 1 s bound (after|while) .* of 10 .*: raise the bound") as caught:
            answer_checks.run_answer_checks(url, {}, count=10, concurrency=0, timeout_s=1.0)
        took = time.monotonic() - started
        with pytest.raises(AnswerChecksTimeout, match=r"greedy outputs of .* ran past their 0.5 s bound after 0 of 3 prompts") as greedy:
            answer_checks.collect_greedy(url, ["a", "b", "c"], {}, max_new_tokens=8, timeout_s=0.5)
    partial = caught.value.result["answer_checks"]
    assert partial["complete"] is False and partial["ok"] is False and partial["sequential"]["asked"] < 10
    assert took < 5, took
    assert greedy.value.result["outputs"] == []


def test_checks_that_cannot_run_as_asked_are_refused() -> None:
    with pytest.raises(AnswerChecksError, match="unknown API 'chat': expected one of generate, completions"):
        answer_checks.run_answer_checks("http://127.0.0.1:9", {}, api="chat")
    with pytest.raises(AnswerChecksError, match="from 0 to 1, found 80"):
        answer_checks.run_answer_checks("http://127.0.0.1:9", {}, min_share_right=80)


# ------------------------------------------------------------------ the stand-in's answers


def post(url: str, path: str, body: dict[str, Any]) -> tuple[int, str]:
    host, port = url.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_the_standin_answers_end_with_an_eos_and_the_filler_is_unchanged() -> None:
    question = generate_questions(1)[0]
    with standin("right") as url:
        status, text = post(url, "/generate", {"text": question.prompt, "sampling_params": {"max_new_tokens": 32}})
        filler = json.loads(post(url, "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 3}})[1])
    answer = json.loads(text)
    assert status == 200 and answer["text"] == f" {question.expected}"
    assert answer["meta_info"]["finish_reason"] == {"type": "stop", "matched": 2}
    assert answer["meta_info"]["completion_tokens"] == len(answer["output_ids"]) < 32
    seed = sum(b"hello") % 97
    assert filler["text"] == "".join(f" tok{(seed + i) % 1000}" for i in range(3))  # what the stand-in always generated
    assert filler["meta_info"]["finish_reason"] == {"type": "length", "length": 3}


@pytest.mark.parametrize("version", ["0.5.9", "0.5.13"])
def test_the_standin_answers_mode_follows_its_control_file_and_writes_a_nan_as_that_release(tmp_path: Path, version: str) -> None:
    """A NaN logprob: 0.5.9 hands its non-streamed answer to FastAPI's JSONResponse, which cannot write it (HTTP 500);
    from 0.5.10 SGLang writes it with orjson, as null, as every release's stream does."""
    question = generate_questions(1)[0]
    body = {"text": question.prompt, "sampling_params": {"max_new_tokens": 8}, "return_logprob": True}
    control = {"SGLANG_STANDIN_CONTROL_DIR": str(tmp_path), "SGLANG_STANDIN_BURST_THRESHOLD": "0", "SGLANG_STANDIN_VERSION": version}
    with standin("right", **control) as url:
        right = json.loads(post(url, "/generate", body)[1])
        (tmp_path / "answers").write_text("corrupt\n")
        corrupt = json.loads(post(url, "/generate", body)[1])
        (tmp_path / "answers").write_text("burst-nan\n")  # threshold 0: every request is "in a burst"
        status, text = post(url, "/generate", body)
        streamed = read_generate_stream(*post(url, "/generate", {**body, "stream": True}))
    assert right["text"] == f" {question.expected}" and corrupt["text"] != right["text"]
    assert all(isinstance(lp[0], float) and lp[1] == i for lp, i in zip(right["meta_info"]["output_token_logprobs"], right["output_ids"]))
    if version == "0.5.9":
        assert (status, text) == (500, "Internal Server Error")
    else:
        assert status == 200 and all(lp[0] is None for lp in json.loads(text)["meta_info"]["output_token_logprobs"])
    assert streamed.logprobs and all(v is None for v in streamed.logprobs)


def test_an_unknown_answers_mode_stops_the_standin() -> None:
    import os
    import subprocess

    env = {**os.environ, **FAST, "SGLANG_STANDIN_ANSWERS": "wrong", "PYTHONPATH": str(ROOT / "tests/fixtures/sglang-standin")}
    done = subprocess.run(
        [sys.executable, "-m", "sglang_standin", "--model-path", "/m", "--port", "9"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1
    assert "SGLANG_STANDIN_ANSWERS='wrong' is not one of right, corrupt, spec-diverge, burst-nan" in done.stderr
