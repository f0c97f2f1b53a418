"""Checks that a started server's outputs are right, which /health and a tokens-per-second figure cannot see.

A healthy SGLang can still answer wrongly: FlashInfer's CUTLASS FP4 GEMM on SM120 missed its PDL barriers
and turned outputs into NaN / garbage under 64+ concurrent requests (flashinfer #2708), and a wrong EAGLE-3
draft or a broken verify path serves happily. This module holds the machinery of issue 47's first item:

- **Computed-answer questions** (`generate_questions`, `judge`): short questions whose answers a program
  computes (integer arithmetic; a string reversed, upper-cased, its length, a letter's count; a list
  sorted, its largest element, its sum, an element's count; the words of a sentence), drawn from a seed,
  each with its expected answer. The prompt asks for the answer alone after "Answer:", in a fixed form
  (an integer, a double-quoted string, a bracketed list of integers).
- **Degenerate outputs** (`degenerate_findings`): empty output, "nan" / "inf" where a number is expected,
  a non-finite logprob, one token or a short n-gram repeated back to back past a threshold; each a named
  `Finding`.
- **Greedy agreement** (`compare_greedy`): the same prompts at temperature 0 through the EAGLE-3 server and
  through the target alone. Greedy speculative decoding is exact up to numerics, so the two must agree:
  the agreement rate (token ids where the API gives them, else text), the first divergence, and a
  threshold given as data.
- **The runners**: `run_answer_checks` sends the questions to one server at temperature 0, one at a time
  and then as a burst of N concurrent requests (64 by default: where the FP4 race shows), judges every
  answer and returns an `AnswerCheckResult`; `collect_greedy` gathers one server's greedy outputs for
  `compare_greedy` (the two servers of a Kimi-K2.5 deploy do not fit on the GPUs at once, so each run is
  collected while its server is up). Both are bounded by a deadline (`AnswerChecksTimeout` with what was
  found so far) and report progress through a callback.

Standard library only (it runs on the host, beside the server). The deploy runs `run_answer_checks` after every
start through module sglang_answers' `questions` check (answers.py). Greedy agreement needs the target alone
served as well, which a deploy's start does not have; nothing runs it yet (its place is where both profiles
run, the benchmark).
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Optional

from ..errors import ToolkitError
from ..progress import Progress
from .bench_client import http_request, served_model


class AnswerChecksError(ToolkitError):
    """An output check that cannot run as asked (an unknown question kind or API, a threshold out of range,
    two greedy runs of different prompts)."""


class AnswerChecksTimeout(AnswerChecksError):
    """The checks ran past their time bound; the error's `result` holds what they had found by then."""


# ------------------------------------------------------------------ computed-answer questions

# The fixed forms a prompt asks for, by the kind of answer.
FORMS = {
    "number": "Answer: <integer>",
    "string": 'Answer: "<text>"',
    "list": "Answer: [<integer>, <integer>, ...]",
}
PROMPT = "{question}\nReply with the answer alone, in this form: {form}\nAnswer:"
# Common lowercase words (several with a doubled letter, so that a letter count is not always 1).
WORDS = (
    "apple", "river", "garden", "window", "silver", "planet", "basket", "candle", "forest", "marble",
    "pencil", "rocket", "summer", "tunnel", "violet", "yellow", "bridge", "castle", "dragon", "engine",
    "falcon", "guitar", "harbor", "island", "jacket", "kettle", "lemon", "mirror", "nickel", "orange",
    "pepper", "quartz", "rabbit", "saddle", "tomato", "umbrella", "valley", "walnut", "zipper", "banana",
    "cherry", "dinner", "letter", "coffee", "butter", "little", "middle", "bottle",
)  # fmt: skip
_OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


@dataclass(frozen=True)
class Question:
    """One question: its kind, the form of its answer (a key of FORMS), the question and the expected
    answer in its canonical text (an integer as str(int), a string as it is, a list as "[1, 2, 3]")."""

    kind: str
    form: str
    question: str
    expected: str

    @property
    def prompt(self) -> str:
        return PROMPT.format(question=self.question, form=FORMS[self.form])

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "prompt": self.prompt}


def list_text(values: Sequence[int]) -> str:
    """A list of integers as the prompts write it and the judge compares it: "[3, 1, 2]"."""
    return "[" + ", ".join(str(v) for v in values) + "]"


def _arithmetic(rng: random.Random) -> tuple[str, str]:
    a, b, op = rng.randint(2, 99), rng.randint(2, 99), rng.choice("+-*")
    if rng.random() < 0.5:
        return f"What is {a} {op} {b}?", str(_OPERATORS[op](a, b))
    c, op2 = rng.randint(2, 20), rng.choice("+-*")
    return f"What is ({a} {op} {b}) {op2} {c}?", str(_OPERATORS[op2](_OPERATORS[op](a, b), c))


def _reverse(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(WORDS)
    return f'Reverse the string "{word}".', word[::-1]


def _upper(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(WORDS)
    return f'Write the string "{word}" in upper case.', word.upper()


def _length(rng: random.Random) -> tuple[str, str]:
    text = rng.choice(WORDS) + rng.choice(WORDS)
    return f'How many characters are in the string "{text}"?', str(len(text))


def _letter_count(rng: random.Random) -> tuple[str, str]:
    text = rng.choice(WORDS) + rng.choice(WORDS)
    letter = rng.choice(text)
    return f'How many times does the letter "{letter}" occur in the string "{text}"?', str(text.count(letter))


def _sort(rng: random.Random) -> tuple[str, str]:
    values = rng.sample(range(1, 100), rng.randint(5, 7))
    return f"Sort the list {list_text(values)} in ascending order.", list_text(sorted(values))


def _max(rng: random.Random) -> tuple[str, str]:
    values = rng.sample(range(1, 100), rng.randint(5, 7))
    return f"What is the largest number in the list {list_text(values)}?", str(max(values))


def _sum(rng: random.Random) -> tuple[str, str]:
    values = [rng.randint(1, 30) for _ in range(rng.randint(4, 6))]
    return f"What is the sum of the numbers in the list {list_text(values)}?", str(sum(values))


def _element_count(rng: random.Random) -> tuple[str, str]:
    pool = rng.sample(range(1, 10), 3)
    values = [rng.choice(pool) for _ in range(rng.randint(6, 9))]
    target = rng.choice(pool)
    return f"How many times does {target} occur in the list {list_text(values)}?", str(values.count(target))


def _word_count(rng: random.Random) -> tuple[str, str]:
    words = [rng.choice(WORDS) for _ in range(rng.randint(4, 9))]
    return f'How many words are in the sentence "{" ".join(words)}"?', str(len(words))


# kind -> (form, builder); the order is the order generate_questions cycles through.
KINDS: dict[str, tuple[str, Callable[[random.Random], tuple[str, str]]]] = {
    "arithmetic": ("number", _arithmetic),
    "reverse": ("string", _reverse),
    "upper": ("string", _upper),
    "length": ("number", _length),
    "letter-count": ("number", _letter_count),
    "sort": ("list", _sort),
    "max": ("number", _max),
    "sum": ("number", _sum),
    "element-count": ("number", _element_count),
    "word-count": ("number", _word_count),
}


def generate_questions(count: int, seed: int = 0, kinds: Optional[Sequence[str]] = None) -> list[Question]:
    """`count` questions drawn from `seed` (the same seed, the same questions), cycling through `kinds`
    (default: every kind of KINDS), so that each kind is asked once `count` reaches their number."""
    chosen = list(kinds) if kinds is not None else list(KINDS)
    unknown = [k for k in chosen if k not in KINDS]
    if unknown or not chosen:
        raise AnswerChecksError(f"unknown question kinds {unknown or chosen!r}: expected some of {', '.join(KINDS)}")
    if count < 1:
        raise AnswerChecksError(f"the number of questions must be at least 1, found {count}")
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = chosen[i % len(chosen)]
        form, build = KINDS[kind]
        question, expected = build(rng)
        out.append(Question(kind, form, question, expected))
    return out


# ------------------------------------------------------------------ the judge

# An integer, with thousands separators or a ".0" allowed; not a piece of a word or of a decimal number.
_NUMBER = re.compile(r"(?<![\w.])([-\u2212]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.0+)?(?!\w|\.\d)")
_QUOTED = re.compile(r'"([^"]*)"|\u201c([^\u201d]*)\u201d')
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")
_INTEGER = re.compile(r"[-\u2212]?\d+")
_ANSWER_PREFIX = re.compile(r"^\s*answer\s*:", re.I)


@dataclass(frozen=True)
class Judgement:
    """right | wrong | malformed (no answer of the asked form could be read); `got` is the answer read, in
    the expected answer's canonical text, None when malformed."""

    verdict: str
    got: Optional[str]
    reason: str


def answer_line(text: str) -> str:
    """The line the answer is read from: the output's first line with any text, a leading "Answer:" dropped.
    The prompt ends with "Answer:" and asks for the answer alone; what a model adds on later lines is not read."""
    line = next((part for part in text.splitlines() if part.strip()), "")
    return _ANSWER_PREFIX.sub("", line, count=1).strip()


def read_number(line: str) -> Optional[int]:
    """The last integer in the line ("1,234" and "42.0" read as integers), or None."""
    matches = list(_NUMBER.finditer(line))
    if not matches:
        return None
    value = int(matches[-1].group(2).replace(",", ""))
    return -value if matches[-1].group(1) else value


def read_string(line: str) -> Optional[str]:
    """The last double-quoted string in the line (straight or typographic quotes), stripped; without quotes, the
    line itself when it is one word (a trailing full stop dropped); else None."""
    matches = list(_QUOTED.finditer(line))
    if matches:
        last = matches[-1]
        return (last.group(1) if last.group(1) is not None else last.group(2)).strip()
    bare = line.strip()
    bare = bare[:-1] if bare.endswith(".") else bare
    return bare if bare and not any(ch.isspace() for ch in bare) else None


def read_list(line: str) -> tuple[Optional[list[int]], str]:
    """(the last bracketed list of integers in the line, ""), or (None, why not)."""
    matches = _BRACKETED.findall(line)
    if not matches:
        return None, "no bracketed list"
    inner = matches[-1].strip()
    if not inner:
        return [], ""
    items = [item.strip() for item in inner.split(",")]
    bad = [item for item in items if not _INTEGER.fullmatch(item)]
    if bad:
        return None, f"the list element {bad[0]!r} is not an integer"
    return [int(item.replace("\u2212", "-")) for item in items], ""


def judge(question: Question, text: str) -> Judgement:
    """Whether `text` (a model's output) answers `question`. Strict but fair: the answer is read from the
    first line with text (answer_line); a number is the line's last integer (whitespace, a thousands
    separator, a ".0" do not matter); a string is the last quoted string, compared exactly (case and inner
    whitespace count: that is what reversing and upper-casing are about; the whitespace around it does not);
    a list is the last bracketed list, its integers compared in order."""
    line = answer_line(text)
    shown = repr(line[:120])
    if question.form == "number":
        number = read_number(line)
        if number is None:
            return Judgement("malformed", None, f"no integer in the answer {shown}")
        got: Optional[str] = str(number)
    elif question.form == "string":
        got = read_string(line)
        if got is None:
            return Judgement("malformed", None, f"no quoted string in the answer {shown}")
    else:
        values, why = read_list(line)
        if values is None:
            return Judgement("malformed", None, f"{why} in the answer {shown}")
        got = list_text(values)
    if got == question.expected:
        return Judgement("right", got, "")
    return Judgement("wrong", got, f"expected {question.expected}, got {got}")


# ------------------------------------------------------------------ degenerate outputs

# The names a Finding can have.
FINDINGS = ("empty", "nan-text", "inf-text", "nan-logprob", "inf-logprob", "repeated-token", "repeated-ngram")
DEFAULT_MIN_REPEATS = 8  # a token or n-gram repeated back to back this many times is degenerate
DEFAULT_MAX_NGRAM = 4
_NAN_TEXT = re.compile(r"(?<![A-Za-z])nan(?![A-Za-z])", re.I)
_INF_TEXT = re.compile(r"(?<![A-Za-z])inf(?:inity)?(?![A-Za-z])", re.I)
_UNITS = re.compile(r"\w+|[^\w\s]")  # the text's "tokens" when the API gives no token ids: words and single signs


@dataclass(frozen=True)
class Finding:
    """One degenerate output: its name (one of FINDINGS), what was seen, and where (the runner fills in
    the phase and the question's index)."""

    name: str
    detail: str
    phase: str = ""
    index: Optional[int] = None


def repeated_run(units: Sequence[Any], min_repeats: int, max_ngram: int = DEFAULT_MAX_NGRAM) -> Optional[tuple[int, int, int]]:
    """(n, start, repeats) of the longest back-to-back repetition of an n-gram that repeats at least
    `min_repeats` times, the shortest n (1 to max_ngram) that has one; None when there is none."""
    for n in range(1, max_ngram + 1):
        best: Optional[tuple[int, int, int]] = None
        run = 0  # how many positions i in a row have units[i] == units[i + n]
        for i in range(len(units) - n):
            run = run + 1 if units[i] == units[i + n] else 0
            repeats = run // n + 1
            if run and repeats >= min_repeats and (best is None or repeats > best[2]):
                best = (n, i + 1 - run, repeats)
        if best:
            return best
    return None


def _logprob_value(entry: Any) -> Any:
    """The logprob of one output token as the API gives it: SGLang's (logprob, token id, text) triple or a bare number."""
    return entry[0] if isinstance(entry, (list, tuple)) and entry else entry


def degenerate_findings(
    text: str,
    token_ids: Optional[Sequence[int]] = None,
    logprobs: Optional[Sequence[Any]] = None,
    number_expected: bool = False,
    min_repeats: int = DEFAULT_MIN_REPEATS,
    max_ngram: int = DEFAULT_MAX_NGRAM,
) -> list[Finding]:
    """What is degenerate in one output: `empty` (no text, or whitespace only); `nan-text` / `inf-text`
    (the word where a number is expected); `nan-logprob` / `inf-logprob` (a token's logprob NaN, null or
    infinite: SGLang's streamed JSON writes NaN as null); `repeated-token` / `repeated-ngram` (one token, or
    an n-gram of up to `max_ngram` tokens, back to back at least `min_repeats` times; over the token ids
    when given, else over the text's words and signs)."""
    found = []
    if not text.strip():
        what = "no text" if not text else f"only whitespace ({text!r})"
        found.append(Finding("empty", f"{what}{f' from {len(token_ids)} tokens' if token_ids else ''}"))
    if number_expected:
        for name, pattern in (("nan-text", _NAN_TEXT), ("inf-text", _INF_TEXT)):
            match = pattern.search(text)
            if match:
                found.append(Finding(name, f"{match.group(0)!r} at character {match.start()} where a number is expected"))
    nan, inf = [], []
    for i, entry in enumerate(logprobs or ()):
        value = _logprob_value(entry)
        if value is None:
            nan.append((i, "null"))
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            nan.append((i, repr(value)))
            continue
        if math.isnan(number):
            nan.append((i, "NaN"))
        elif math.isinf(number):
            inf.append((i, str(number)))
    for name, bad in (("nan-logprob", nan), ("inf-logprob", inf)):
        if bad:
            count = f"{len(bad)} of {len(logprobs or ())}"
            found.append(Finding(name, f"{count} token logprobs are {bad[0][1]}, the first at token {bad[0][0]}"))
    units: Sequence[Any] = list(token_ids) if token_ids else _UNITS.findall(text)
    what = "token" if token_ids else "text unit"
    run = repeated_run(units, min_repeats, max_ngram)
    if run:
        n, start, repeats = run
        if n == 1:
            found.append(Finding("repeated-token", f"{what} {units[start]!r} repeated {repeats} times from {what} {start}"))
        else:
            gram = list(units[start : start + n])
            found.append(Finding("repeated-ngram", f"the {n}-gram {gram!r} repeated {repeats} times from {what} {start}"))
    return found


# ------------------------------------------------------------------ one request


@dataclass(frozen=True)
class Generation:
    """One output at temperature 0: its text, its token ids and logprobs where the API gave them, SGLang's
    finish reason, or the error when there is no output."""

    text: str
    token_ids: Optional[tuple[int, ...]] = None
    logprobs: Optional[tuple[Optional[float], ...]] = None
    finish_reason: str = ""
    error: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: a non-finite logprob is written as the string "nan", "inf" or "-inf"."""
        data = asdict(self)
        data["token_ids"] = None if self.token_ids is None else list(self.token_ids)
        data["logprobs"] = None if self.logprobs is None else [v if v is None or math.isfinite(v) else str(v) for v in self.logprobs]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Generation:
        ids, lps = data.get("token_ids"), data.get("logprobs")
        return cls(
            text=str(data.get("text") or ""),
            token_ids=None if ids is None else tuple(int(i) for i in ids),
            logprobs=None if lps is None else tuple(None if v is None else float(v) for v in lps),
            finish_reason=str(data.get("finish_reason") or ""),
            error=str(data.get("error") or ""),
            seconds=float(data.get("seconds") or 0.0),
        )


APIS = ("generate", "completions")


def _http_error(what: str, status: int, body: str) -> str:
    return f"{what} got no answer: {body}" if status == 0 else f"{what} answered HTTP {status}: {body.strip()[:300]}"


def _joined(chunks: list[Any], completion: Any) -> Optional[list[Any]]:
    """One list field of a streamed /generate over its chunks (output_ids, output_token_logprobs): the last
    chunk's when the server streams it whole (SGLang's default) or it holds completion_tokens entries, else
    the chunks joined (--stream-output / --incremental-streaming-output stream disjoint pieces); None when absent."""
    if not chunks or any(not isinstance(c, list) for c in chunks):
        return None
    last = chunks[-1]
    whole = all(chunks[i][: len(chunks[i - 1])] == chunks[i - 1] for i in range(1, len(chunks)))
    if (isinstance(completion, int) and len(last) == completion) or whole:
        return last
    return [item for chunk in chunks for item in chunk]


def _finish(value: Any) -> str:
    return str(value.get("type") or "") if isinstance(value, Mapping) else str(value or "")


def read_generate_stream(status: int, body: str) -> Generation:
    """A streamed /generate answer (`data: {...}` lines, then `data: [DONE]`) as one Generation. SGLang streams
    the text whole in each chunk by default, in disjoint pieces with --incremental-streaming-output: a text
    each chunk of which starts with the one before is read as whole."""
    if status != 200:
        return Generation("", error=_http_error("POST /generate", status, body))
    events = []
    for raw in body.splitlines():
        line = raw.strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            event = json.loads(payload)
        except ValueError:
            return Generation("", error=f"POST /generate streamed a chunk that is not JSON: {payload[:200]}")
        if not isinstance(event, Mapping):
            return Generation("", error=f"POST /generate streamed a chunk that is not an object: {payload[:200]}")
        if event.get("error"):
            return Generation("", error=f"POST /generate streamed an error: {json.dumps(event['error'])[:300]}")
        events.append(event)
    if not events:
        return Generation("", error=f"POST /generate streamed no chunk: {body.strip()[:300]!r}")
    texts = [str(e.get("text") or "") for e in events]
    whole = all(texts[i].startswith(texts[i - 1]) for i in range(1, len(texts)))
    metas = [e.get("meta_info") if isinstance(e.get("meta_info"), Mapping) else {} for e in events]
    completion = metas[-1].get("completion_tokens")
    ids = _joined([e.get("output_ids") for e in events], completion)
    lps = _joined([m.get("output_token_logprobs") for m in metas], completion)
    values = None
    if lps is not None:
        values = tuple(_as_float(_logprob_value(entry)) for entry in lps)
    return Generation(
        text=texts[-1] if whole else "".join(texts),
        token_ids=None if ids is None else tuple(int(i) for i in ids if isinstance(i, int)),
        logprobs=values,
        finish_reason=_finish(metas[-1].get("finish_reason")),
    )


def _as_float(value: Any) -> Optional[float]:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def read_completion(status: int, body: str) -> Generation:
    """A non-streamed /v1/completions answer as one Generation (text only: the API gives no token ids)."""
    if status != 200:
        return Generation("", error=_http_error("POST /v1/completions", status, body))
    try:
        choice = json.loads(body)["choices"][0]
        return Generation(text=str(choice.get("text") or ""), finish_reason=_finish(choice.get("finish_reason")))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return Generation("", error=f"POST /v1/completions answered something that is not a completion: {body.strip()[:300]}")


def generate(
    url: str,
    prompt: str,
    max_new_tokens: int,
    api_key: Optional[str],
    timeout: float,
    api: str = "generate",
    model: Optional[str] = None,
    stop: Sequence[str] = (),
    logprobs: bool = False,
) -> Generation:
    """One greedy (temperature 0) output for `prompt`. api "generate": SGLang's native /generate, streamed
    (token ids always; logprobs with `logprobs`: streamed, a NaN logprob comes as null, where 0.5.9's non-streamed
    JSON response fails with HTTP 500); "completions": OpenAI's /v1/completions (text only). `timeout`
    bounds the whole request, a streamed answer's last chunk included."""
    started = time.monotonic()
    if api == "generate":
        params: dict[str, Any] = {"temperature": 0, "max_new_tokens": max_new_tokens}
        if stop:
            params["stop"] = list(stop)
        body: dict[str, Any] = {"text": prompt, "sampling_params": params, "stream": True}
        if logprobs:
            body["return_logprob"] = True
        status, text = http_request(url, "POST", "/generate", api_key, body=body, timeout=timeout, total=timeout)
        out = read_generate_stream(status, text)
    elif api == "completions":
        body = {"model": model or "default", "prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0}
        if stop:
            body["stop"] = list(stop)
        status, text = http_request(url, "POST", "/v1/completions", api_key, body=body, timeout=timeout, total=timeout)
        out = read_completion(status, text)
    else:
        raise AnswerChecksError(f"unknown API {api!r}: expected one of {', '.join(APIS)}")
    return replace(out, seconds=round(time.monotonic() - started, 3))


# ------------------------------------------------------------------ greedy agreement

# Prompts with room to diverge: open-ended, answered at some length.
GREEDY_PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain in a few sentences how a bicycle stays upright.",
    "List five uses of a paperclip, one per line.",
    "Describe the water cycle to a ten-year-old.",
    "Write a poem of four lines about autumn rain.",
    "What are the main differences between a lake and a pond?",
    "Give step-by-step instructions for making a cup of tea.",
    "Summarize the plot of a heist film that you invent.",
)
CONTEXT_CHARS = 40  # characters shown on each side of a divergence
CONTEXT_TOKENS = 8  # token ids shown from a divergence on


@dataclass(frozen=True)
class Divergence:
    """Where two outputs for the same prompt part: the prompt's index, the first differing token (when both
    gave ids) and character (when the texts differ), the text both share before it and each one's
    continuation from it."""

    index: int
    prompt: str
    token_offset: Optional[int]
    char_offset: Optional[int]
    before: str
    first: str
    second: str
    first_tokens: Optional[list[int]] = None
    second_tokens: Optional[list[int]] = None


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def divergence(index: int, prompt: str, first: Generation, second: Generation) -> Divergence:
    """Where `first` and `second` part (they differ in their token ids or their text)."""
    token_offset = first_tokens = second_tokens = None
    if first.token_ids is not None and second.token_ids is not None and first.token_ids != second.token_ids:
        token_offset = _common_prefix(first.token_ids, second.token_ids)
        first_tokens = list(first.token_ids[token_offset : token_offset + CONTEXT_TOKENS])
        second_tokens = list(second.token_ids[token_offset : token_offset + CONTEXT_TOKENS])
    char_offset, before, one, two = None, "", "", ""
    if first.text != second.text:
        char_offset = _common_prefix(first.text, second.text)
        before = first.text[max(0, char_offset - CONTEXT_CHARS) : char_offset]
        one = first.text[char_offset : char_offset + CONTEXT_CHARS]
        two = second.text[char_offset : char_offset + CONTEXT_CHARS]
    return Divergence(index, prompt, token_offset, char_offset, before, one, two, first_tokens, second_tokens)


@dataclass
class Agreement:
    """How far two servers' greedy outputs for the same prompts agree. `basis`: "token ids" when every output
    carries them, else "text"; a prompt a server failed on counts as a disagreement (in `errors`)."""

    labels: list[str]
    basis: str
    prompts: int
    agreed: int
    rate: float
    threshold: float
    passed: bool
    disagreeing: list[int]
    errors: list[str]
    first_divergence: Optional[Divergence]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_greedy(
    prompts: Sequence[str],
    first: Sequence[Generation],
    second: Sequence[Generation],
    threshold: float,
    labels: Sequence[str] = ("speculative", "target"),
) -> Agreement:
    """The agreement of two runs of the same prompts at temperature 0 (e.g. the EAGLE-3 server's and the target
    alone's): exact match of the token ids where both give them, else of the text; passed when the share
    of prompts that agree is at least `threshold` (0 to 1)."""
    if not 0.0 <= threshold <= 1.0:
        raise AnswerChecksError(f"the agreement threshold is a share from 0 to 1, found {threshold}")
    if not prompts or not len(prompts) == len(first) == len(second):
        raise AnswerChecksError(
            f"greedy agreement needs one output per prompt from each server: {len(prompts)} prompts, "
            f"{len(first)} outputs from {labels[0]}, {len(second)} from {labels[1]}"
        )
    ok = [g for g in (*first, *second) if not g.error]
    basis = "token ids" if ok and all(g.token_ids is not None for g in ok) else "text"
    agreed, disagreeing, errors = 0, [], []
    first_divergence = None
    for i, (one, two) in enumerate(zip(first, second)):
        if one.error or two.error:
            disagreeing.append(i)
            errors.extend(f"prompt {i}: {label}: {g.error}" for label, g in zip(labels, (one, two)) if g.error)
            continue
        same = one.token_ids == two.token_ids if basis == "token ids" else one.text == two.text
        if same:
            agreed += 1
            continue
        disagreeing.append(i)
        if first_divergence is None:
            first_divergence = divergence(i, prompts[i], one, two)
    rate = agreed / len(prompts)
    return Agreement(list(labels), basis, len(prompts), agreed, rate, threshold, rate >= threshold, disagreeing, errors, first_divergence)


# ------------------------------------------------------------------ the runners

DEFAULT_COUNT = 40
DEFAULT_CONCURRENCY = 64  # the burst: where the FP4 GEMM race showed (64+ concurrent requests at TP 8)
# The share of questions a server must answer right. A guess until measured on the real model: letter-level
# questions (reversal, letter counts) are hard for a tokenized model answering without reasoning; the
# result's by_kind shows which kinds a release gets wrong.
DEFAULT_MIN_SHARE_RIGHT = 0.8
DEFAULT_MAX_NEW_TOKENS = 32  # a right answer is a few tokens; a degenerate one runs to this limit
ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class WrongAnswer:
    """A question answered wrongly or in no readable form: where, the prompt, what was expected, what was read
    (None when nothing of the asked form was) and the output itself, cut short."""

    phase: str
    index: int
    kind: str
    prompt: str
    expected: str
    got: Optional[str]
    verdict: str
    output: str


@dataclass
class Phase:
    """One way of asking the questions: one at a time (sequential) or all at once (burst)."""

    name: str
    concurrency: int
    asked: int = 0
    right: int = 0
    wrong: list[WrongAnswer] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [right, asked]
    seconds: float = 0.0
    outputs: list[str] = field(default_factory=list)  # each answer's text (an error: ""), by question order

    @property
    def share_right(self) -> float:
        return self.right / self.asked if self.asked else 0.0

    def record(self, index: int, question: Question, out: Generation, min_repeats: int) -> str:
        """Judge one output and keep what it shows; a short line saying how it went."""
        self.asked += 1
        counts = self.by_kind.setdefault(question.kind, [0, 0])
        counts[1] += 1
        self.outputs.append(out.text)
        if out.error:
            self.errors.append(f"question {index} ({question.kind}): {out.error}")
            return f"question {index} ({question.kind}): failed"
        findings = degenerate_findings(out.text, out.token_ids, out.logprobs, question.form != "string", min_repeats)
        self.findings.extend(replace(f, phase=self.name, index=index) for f in findings)
        verdict = judge(question, out.text)
        if verdict.verdict == "right":
            self.right += 1
            counts[0] += 1
        else:
            wrong = WrongAnswer(
                self.name, index, question.kind, question.prompt, question.expected, verdict.got, verdict.verdict, out.text[:200]
            )
            self.wrong.append(wrong)
        return f"question {index} ({question.kind}): {verdict.verdict}{''.join(f', {f.name}' for f in findings)}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["share_right"] = self.share_right
        del data["outputs"]
        return data


@dataclass
class AnswerCheckResult:
    """What run_answer_checks found. `ok` when nothing in `reasons`; `complete` False only in the partial
    result an AnswerChecksTimeout carries."""

    url: str
    api: str
    seed: int
    questions: int
    min_share_right: float
    sequential: Phase
    burst: Optional[Phase]
    # Questions whose answer in the burst differs from their answer asked alone: at temperature 0 a sign of
    # outputs that depend on the load (a race), though batch-dependent numerics can do it too. Not judged.
    burst_changed: list[int] = field(default_factory=list)
    elapsed_s: float = 0.0
    complete: bool = True
    reasons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.complete and not self.reasons

    @property
    def share_right(self) -> float:
        return self.sequential.share_right

    def to_dict(self) -> dict[str, Any]:
        # the fields as they are, the phases as their own to_dict says, and the two derived figures
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("sequential", "burst")}
        phases = {"sequential": self.sequential.to_dict(), "burst": None if self.burst is None else self.burst.to_dict()}
        return {**data, **phases, "elapsed_s": round(self.elapsed_s, 2), "ok": self.ok, "share_right": self.share_right}


class _Deadline:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.timeout_s - self.elapsed()


def _first_wrong(phase: Phase) -> str:
    w = phase.wrong[0]
    question = w.prompt.split("\n", 1)[0]
    got = "nothing readable" if w.got is None else w.got
    return f"question {w.index} ({w.kind}) {question!r}: expected {w.expected}, got {got} (output {w.output[:80]!r})"


def _phase_reasons(phase: Phase, min_share_right: float) -> list[str]:
    where = "asked one at a time" if phase.name == "sequential" else f"in the burst of {phase.concurrency} concurrent requests"
    reasons = []
    if phase.errors:
        reasons.append(f"{len(phase.errors)} of {phase.asked} requests {where} failed; the first: {phase.errors[0]}")
    if phase.findings:
        f = phase.findings[0]
        reasons.append(f"{len(phase.findings)} degenerate outputs {where}; the first: question {f.index}: {f.name}: {f.detail}")
    if phase.asked and phase.share_right < min_share_right:
        first = f"; the first wrong: {_first_wrong(phase)}" if phase.wrong else ""
        reasons.append(
            f"{phase.right} of {phase.asked} questions {where} answered right ({phase.share_right:.0%}), "
            f"below the {min_share_right:.0%} asked for{first}"
        )
    return reasons


def _timeout(result: AnswerCheckResult, deadline: _Deadline, where: str) -> AnswerChecksTimeout:
    result.complete = False
    result.elapsed_s = deadline.elapsed()
    return AnswerChecksTimeout(
        f"the output checks of {result.url} ran past their {deadline.timeout_s:g} s bound {where}: raise the bound, "
        f"or ask fewer questions or a smaller burst",
        answer_checks=result.to_dict(),
    )


def run_answer_checks(
    url: str,
    keys: Mapping[str, str],
    *,
    questions: Optional[Sequence[Question]] = None,
    count: int = DEFAULT_COUNT,
    seed: int = 0,
    api: str = "generate",
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout_s: float = 300.0,
    request_timeout_s: float = 60.0,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    min_share_right: float = DEFAULT_MIN_SHARE_RIGHT,
    min_repeats: int = DEFAULT_MIN_REPEATS,
    logprobs: bool = True,
    stop: Sequence[str] = ("\n",),
    model: Optional[str] = None,
    progress: Optional[ProgressCallback] = None,
) -> AnswerCheckResult:
    """Ask a started server computed-answer questions at temperature 0, one at a time and then `concurrency`
    at once (0: no burst; the burst cycles through the questions), and judge every answer.

    `keys`: the service's API keys by SGLang's flag name, as answers.service_keys reads them ("api-key" is
    sent). `questions` (default: `count` drawn from `seed`); `api`: "generate" or "completions" (see
    generate); `stop`: where an answer ends (its line). The whole run is bounded by `timeout_s`, each request
    by `request_timeout_s` too; past the bound AnswerChecksTimeout says where it stopped and carries the
    partial result (its `answer_checks`). `progress` is called with a Progress after every answer (from the
    burst's threads, one call at a time)."""
    if api not in APIS:
        raise AnswerChecksError(f"unknown API {api!r}: expected one of {', '.join(APIS)}")
    if not 0.0 <= min_share_right <= 1.0:
        raise AnswerChecksError(f"the share of right answers asked for is from 0 to 1, found {min_share_right}")
    if concurrency < 0:
        raise AnswerChecksError(f"the burst's concurrency must be 0 (no burst) or more, found {concurrency}")
    asked = list(questions) if questions is not None else generate_questions(count, seed)
    if not asked:
        raise AnswerChecksError("no questions to ask")
    deadline = _Deadline(timeout_s)
    api_key = keys.get("api-key")
    if api == "completions" and model is None:
        model = served_model(url, api_key, min(request_timeout_s, max(1.0, deadline.left())))
    result = AnswerCheckResult(url, api, seed, len(asked), min_share_right, Phase("sequential", 1), None)
    what = f"output checks of {url}"

    def ask(question: Question) -> Generation:
        wait = min(request_timeout_s, deadline.left())
        if wait <= 0:
            return Generation("", error="not sent: the time bound had passed")
        return generate(url, question.prompt, max_new_tokens, api_key, wait, api, model, stop, logprobs)

    def report(phase: str, line: str) -> None:
        if progress:
            progress(Progress(what, phase, round(deadline.elapsed(), 1), timeout_s, line))

    sequential = result.sequential
    started = time.monotonic()
    for i, question in enumerate(asked):
        if deadline.left() <= 0:
            raise _timeout(result, deadline, f"after {i} of {len(asked)} questions asked one at a time")
        out = ask(question)
        if out.error and deadline.left() <= 0:
            raise _timeout(result, deadline, f"while question {i} of {len(asked)} was asked ({out.error})")
        line = sequential.record(i, question, out, min_repeats)
        sequential.seconds = round(time.monotonic() - started, 3)
        report(f"question {i + 1}/{len(asked)}", line)
    result.reasons.extend(_phase_reasons(sequential, min_share_right))

    if concurrency:
        if deadline.left() <= 0:
            raise _timeout(result, deadline, f"before the burst of {concurrency} concurrent requests")
        burst = result.burst = Phase("burst", concurrency)
        picked = [asked[i % len(asked)] for i in range(concurrency)]
        barrier = threading.Barrier(concurrency)
        lock = threading.Lock()
        done = [0]

        def one(question: Question) -> Generation:
            with contextlib.suppress(threading.BrokenBarrierError):  # all sent together: they are in the server at once
                barrier.wait(timeout=max(0.1, min(30.0, deadline.left())))
            out = ask(question)
            with lock:
                done[0] += 1
                report(f"burst {done[0]}/{concurrency} at once", f"{question.kind}: {'failed' if out.error else 'answered'}")
            return out

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            outs = list(pool.map(one, picked))
        burst.seconds = round(time.monotonic() - started, 3)
        for i, (question, out) in enumerate(zip(picked, outs)):
            burst.record(i % len(asked), question, out, min_repeats)
        if deadline.left() <= 0 and burst.errors:
            raise _timeout(result, deadline, f"during the burst of {concurrency} concurrent requests ({len(burst.errors)} unanswered)")
        result.burst_changed = sorted(
            {i % len(asked) for i, out in enumerate(outs) if not out.error and out.text != sequential.outputs[i % len(asked)]}
        )
        result.reasons.extend(_phase_reasons(burst, min_share_right))
    result.elapsed_s = deadline.elapsed()
    return result


def collect_greedy(
    url: str,
    prompts: Sequence[str],
    keys: Mapping[str, str],
    *,
    api: str = "generate",
    max_new_tokens: int = 64,
    timeout_s: float = 300.0,
    request_timeout_s: float = 120.0,
    model: Optional[str] = None,
    progress: Optional[ProgressCallback] = None,
) -> list[Generation]:
    """One server's greedy outputs for `prompts`, one at a time (for compare_greedy; token ids with api
    "generate"). Past `timeout_s`, AnswerChecksTimeout carrying the outputs gathered (its `outputs`)."""
    if api not in APIS:
        raise AnswerChecksError(f"unknown API {api!r}: expected one of {', '.join(APIS)}")
    deadline = _Deadline(timeout_s)
    api_key = keys.get("api-key")
    if api == "completions" and model is None:
        model = served_model(url, api_key, min(request_timeout_s, max(1.0, deadline.left())))
    outs: list[Generation] = []
    for i, prompt in enumerate(prompts):
        wait = min(request_timeout_s, deadline.left())
        out = generate(url, prompt, max_new_tokens, api_key, wait, api, model) if wait > 0 else None
        if out is None or (out.error and deadline.left() <= 0):
            raise AnswerChecksTimeout(
                f"the greedy outputs of {url} ran past their {timeout_s:g} s bound after {i} of {len(prompts)} prompts: "
                "raise the bound or send fewer prompts",
                outputs=[g.to_dict() for g in outs],
            )
        outs.append(out)
        if progress:
            line = f"prompt {i}: {'failed: ' + out.error[:100] if out.error else f'{len(out.text)} characters'}"
            progress(Progress(f"greedy outputs of {url}", f"prompt {i + 1}/{len(prompts)}", round(deadline.elapsed(), 1), timeout_s, line))
    return outs
