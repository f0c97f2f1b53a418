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
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Optional

from ..errors import ToolkitError
from .bench_client import _request
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


def served_model(url: str, api_key: Optional[str], timeout: float) -> str:
    """The first model /v1/models lists ('default' when it lists none)."""
    status, text = _request(url, "GET", "/v1/models", api_key, timeout=timeout)
    try:
        return str(json.loads(text)["data"][0]["id"]) if status == 200 else "default"
    except (ValueError, KeyError, IndexError, TypeError):
        return "default"


def check_tool_call(
    url: str, api_key: Optional[str], parser: Optional[str], timeout: float = 120.0, model: Optional[str] = None
) -> AnswerCheck:
    started = time.monotonic()
    body = tool_call_request(model or served_model(url, api_key, timeout))
    status, text = _request(url, "POST", "/v1/chat/completions", api_key, body=body, timeout=timeout)
    reason = judge_tool_call(status, text, parser)
    return AnswerCheck("tool-call", not reason, reason, round(time.monotonic() - started, 2), text.strip()[:600])


def run_checks(url: str, keys: Mapping[str, str], checks: list[str], parser: Optional[str], timeout: float) -> list[AnswerCheck]:
    """The checks asked for, in order (only 'tool-call' so far)."""
    out = []
    for name in checks:
        if name != "tool-call":
            raise AnswersError(f"unknown answer check {name!r}: expected one of tool-call")
        out.append(check_tool_call(url, keys.get("api-key"), parser, timeout))
    return out
