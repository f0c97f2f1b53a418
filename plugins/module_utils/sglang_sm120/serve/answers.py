"""Checks of what a started server answers, beyond GET /health (module sglang_answers, after a start).

The tool-call check: agent clients of Kimi-K2.5 send tools and expect OpenAI's structured
`message.tool_calls`; SGLang gives them only when it runs with a `--tool-call-parser` that reads the
model's own tool-call format (kimi_k2 for Kimi-K2.x, present from 0.5.9). Without it the call comes
back as text in `content` and the client sees no call at all, while /health stays 200. One request
with one tool and tool_choice "required" (SGLang then constrains the decode, so even a model that
would rather talk must emit a call) tells them apart: structured calls with the tool's name and
JSON arguments, and with kimi_k2 the call id in Kimi-K2's own form (functions.NAME:INDEX), which
SGLang gives only under that parser. The tool's parameters are enums, so the constrained answer
is short and always complete.

The questions check (issue 47): computed-answer questions at temperature 0, asked one at a time and then as
a burst of concurrent requests (answer_checks.run_answer_checks), so a healthy server that answers wrongly,
emits NaN or repeats one token (FlashInfer's SM120 FP4 GEMM race under load, a broken draft or verify path)
is rolled back before the release is called good. Its record keeps the figures and the first few wrong
answers and findings of each phase, not every output.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ..errors import ToolkitError
from .answer_checks import GREEDY_PROMPTS, AnswerChecksTimeout, collect_greedy, run_answer_checks
from .bench_client import http_request, served_model
from .canary import read_api_keys

TOOL_NAME = "get_weather"
TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Berlin", "Tokyo"]},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
PROMPT = "What is the weather in Paris right now, in celsius? Use the tool."
MAX_TOKENS = 256


class AnswersError(ToolkitError):
    """An answer check that cannot run as asked (its keys file, an unknown check)."""


def service_keys(path: Optional[str]) -> dict[str, str]:
    """The service's API-keys file, read as the canary reads it; AnswersError for one it cannot read."""
    return read_api_keys(path, AnswersError)


@dataclass
class AnswerCheck:
    name: str
    ok: bool
    reason: str
    seconds: float
    answer: str  # what came back, cut short
    details: dict[str, Any] = field(default_factory=dict)  # the questions check: its figures (questions_record)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tool_call_request(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "tools": [TOOL],
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": MAX_TOKENS,
    }


def judge_tool_call(status: int, text: str, parser: Optional[str]) -> str:
    """'' when the answer carries the structured call this request forces, else why not."""
    if status == 0:
        return f"POST /v1/chat/completions got no answer: {text}"
    if status != 200:
        return f"POST /v1/chat/completions answered HTTP {status}: {text.strip()[:300]}"
    try:
        choice = json.loads(text)["choices"][0]
        message = choice["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return f"the answer is not a chat completion: {text.strip()[:300]}"
    calls = message.get("tool_calls") or []
    if not calls:
        content = str(message.get("content") or "")
        return (
            f"no structured tool_calls: the call came back as text in content ({content[:200]!r}); the server runs "
            "without --tool-call-parser, or with one that does not read this model's tool-call format"
        )
    call = calls[0]
    function = call.get("function") or {}
    if function.get("name") != TOOL_NAME:
        return f"the tool call names {function.get('name')!r}, not the one tool offered ({TOOL_NAME})"
    try:
        arguments = json.loads(function.get("arguments") or "")
    except (ValueError, TypeError):
        arguments = None
    if not isinstance(arguments, dict):
        return f"the tool call's arguments are not a JSON object: {str(function.get('arguments'))[:200]!r}"
    if parser == "kimi_k2" and call.get("id") != f"functions.{TOOL_NAME}:0":
        return f"the call's id {call.get('id')!r} is not Kimi-K2's own form (functions.{TOOL_NAME}:0): the server's parser is not kimi_k2"
    return ""


def check_tool_call(
    url: str, api_key: Optional[str], parser: Optional[str], timeout: float = 120.0, model: Optional[str] = None
) -> AnswerCheck:
    started = time.monotonic()
    body = tool_call_request(model or served_model(url, api_key, timeout))
    status, text = http_request(url, "POST", "/v1/chat/completions", api_key, body=body, timeout=timeout)
    reason = judge_tool_call(status, text, parser)
    return AnswerCheck("tool-call", not reason, reason, round(time.monotonic() - started, 2), text.strip()[:600])


CHECKS = ("tool-call", "questions", "greedy")
GREEDY_TOKENS = 64  # tokens of each greedy output the benchmark compares between the EAGLE-3 server and the target alone
KEPT = 3  # wrong answers and findings kept per phase in a record


def questions_record(result: dict[str, Any]) -> dict[str, Any]:
    """An AnswerCheckResult's dict cut to what a release record keeps: the figures, per kind, and the first
    KEPT wrong answers and degenerate findings of each phase (their prompts cut to the question line)."""

    def phase(data: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        if data is None:
            return None
        wrong = [{**w, "prompt": str(w["prompt"]).split("\n", 1)[0]} for w in data["wrong"][:KEPT]]
        counts = {k: len(data[k]) for k in ("wrong", "findings", "errors")}
        return {
            **{k: v for k, v in data.items() if k not in ("wrong", "findings", "errors")},
            **counts,
            "first_wrong": wrong,
            "first_findings": data["findings"][:KEPT],
            "first_errors": data["errors"][:KEPT],
        }

    return {**result, "sequential": phase(result["sequential"]), "burst": phase(result.get("burst"))}


def check_questions(url: str, keys: Mapping[str, str], asking: Mapping[str, Any], timeout: float) -> AnswerCheck:
    """The questions check as an AnswerCheck: ok when every phase answered at least min_share_right right with no
    failed request and no degenerate output; past its time bound it fails saying where it stopped. `asking`: the
    keyword arguments of answer_checks.run_answer_checks (count, concurrency, min_share_right, seed, timeout_s);
    `timeout`: each request's bound."""
    started = time.monotonic()
    try:
        result = run_answer_checks(url, keys, request_timeout_s=timeout, **asking)
    except AnswerChecksTimeout as exc:
        partial = exc.result.get("answer_checks") or {}
        return AnswerCheck(
            "questions", False, str(exc), round(time.monotonic() - started, 2), "", questions_record(partial) if partial else {}
        )
    data = result.to_dict()
    burst = data["burst"]
    answer = f"{data['sequential']['right']}/{data['sequential']['asked']} right asked one at a time" + (
        f", {burst['right']}/{burst['asked']} in the burst of {burst['concurrency']}" if burst else ""
    )
    return AnswerCheck(
        "questions", result.ok, "; ".join(result.reasons), round(time.monotonic() - started, 2), answer, questions_record(data)
    )


def record_greedy(url: str, keys: Mapping[str, str], timeout: float, tokens: int = GREEDY_TOKENS) -> AnswerCheck:
    """The greedy outputs (temperature 0, token ids) of GREEDY_PROMPTS, one request at a time, kept whole in `details`
    (outputs: Generation dicts) for a later comparison with another server's (report.py's greedy agreement: the
    EAGLE-3 server against the target alone, which the benchmark runs in turn). ok unless a request failed (the
    reason names the prompt); what the outputs say is judged by the comparison, not here."""
    started = time.monotonic()
    try:
        outputs = collect_greedy(
            url, GREEDY_PROMPTS, keys, max_new_tokens=tokens, timeout_s=timeout * len(GREEDY_PROMPTS), request_timeout_s=timeout
        )
    except AnswerChecksTimeout as exc:
        return AnswerCheck("greedy", False, str(exc), round(time.monotonic() - started, 2), "", {})
    problems = [f"prompt {i}: {g.error}" for i, g in enumerate(outputs) if g.error]
    answer = f"{len(outputs) - len(problems)}/{len(outputs)} greedy outputs of {tokens} tokens recorded"
    details = {"prompts": list(GREEDY_PROMPTS), "tokens": tokens, "outputs": [g.to_dict() for g in outputs]}
    return AnswerCheck("greedy", not problems, "; ".join(problems[:KEPT]), round(time.monotonic() - started, 2), answer, details)


def run_checks(
    url: str,
    keys: Mapping[str, str],
    checks: list[str],
    parser: Optional[str],
    timeout: float,
    questions: Optional[Mapping[str, Any]] = None,
) -> list[AnswerCheck]:
    """The checks asked for, in order: 'tool-call' (through `parser`), 'questions' (`questions`: check_questions'
    `asking`; run_answer_checks' defaults where None), 'greedy' (record_greedy: outputs kept for a comparison)."""
    out = []
    for name in checks:
        if name == "tool-call":
            out.append(check_tool_call(url, keys.get("api-key"), parser, timeout))
        elif name == "questions":
            out.append(check_questions(url, keys, questions or {}, timeout))
        elif name == "greedy":
            out.append(record_greedy(url, keys, timeout))
        else:
            raise AnswersError(f"unknown answer check {name!r}: expected one of {', '.join(CHECKS)}")
    return out
