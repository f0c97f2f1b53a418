"""The toolkit's benchmark client: streams SGLang's native /generate at a fixed concurrency.

Standard library only, so any Python 3.9+ on the GPU host runs it (copied there by the
sglang_benchmark role and used when SGLang's own bench_serving cannot be imported). Requests
mirror bench_serving's "sglang" backend: temperature 0, ignore_eos, a fixed max_new_tokens,
streamed; TTFT and ITL are measured the same way (see report.summarize).

    python3 bench_client.py --url http://127.0.0.1:30000 --prompts prompts.json \\
        --num-prompts 16 --output-len 64 --concurrency 1 --profile eagle3 \\
        --out run.json --progress progress.txt

Writes the run record (serve/report.py's format) to --out atomically, at the end only; one line per
finished request to --progress. An API key, if the server wants one, is read from --keys-file (the
0640 YAML file the service hands SGLang with --config: `api-key: "..."`, `admin-api-key: "..."`),
never from the command line or an environment assignment that sudo would log.

    python3 bench_client.py --keys-file /etc/sglang/api-keys.yaml --exec -- python -m sglang.bench_serving ...

runs SGLang's own client with that key in OPENAI_API_KEY (what bench_serving sends as the bearer token);
with --redact-after FILE it waits for the client and then replaces the keys in FILE (bench_serving's
output file records the server's /server_info, which echoes them).

    python3 bench_client.py --url http://127.0.0.1:30000 --keys-file /etc/sglang/api-keys.yaml \\
        --prompts prompts.json --reset-accept-counters

zeroes the server's cumulative accept-length counters before a bench_serving run (which reads them at
its end; a few requests with the first prompt fold SGLang's 40-step window in between two resets, see
reset_accept_counters); "reset: ..." when it did, "no reset needed: ..." for a server without
speculation, exit 1 with SGLang's answer otherwise. The client's own runs never read those
counters: their accept length comes from the requests (completion_tokens / spec_verify_ct; see
requests_accept_length).

    python3 bench_client.py --url http://127.0.0.1:30000 --unit sglang.service --evidence evidence.json

writes what the running server shows of its optimisations: its /get_server_info answer and the lines
of its unit's current run in the journal that speak of them (report.effective_optimisations
reads both).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional


class PromptError(Exception):
    """The prompt file is missing or not a ShareGPT-style list."""


def load_prompts(path: str, count: int) -> list[str]:
    """The first `count` human turns of a ShareGPT-format JSON file (the format bench_serving reads)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise PromptError(f"prompt file {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise PromptError(f"prompt file {path} is not JSON: {exc}") from exc
    if not isinstance(data, list):
        raise PromptError(f"prompt file {path}: expected a list of conversations, found {type(data).__name__}")
    prompts = []
    for i, item in enumerate(data):
        turns = item.get("conversations") if isinstance(item, Mapping) else None
        if not isinstance(turns, list) or len(turns) < 2 or not isinstance(turns[0], Mapping) or not str(turns[0].get("value", "")).strip():
            raise PromptError(
                f"prompt file {path}: entry {i} needs conversations: [{{from: human, value: ...}}, {{from: gpt, value: ...}}]"
            )
        prompts.append(str(turns[0]["value"]))
    if count > len(prompts):
        raise PromptError(f"prompt file {path} has {len(prompts)} prompts, {count} requested (sglang_benchmark_num_prompts)")
    return prompts[:count]


class KeysFileError(Exception):
    """The keys file exists but is not the `name: "value"` YAML the service writes."""


def read_keys(path: Optional[str]) -> dict[str, str]:
    """The keys in the service's API-keys file, by SGLang's flag name ("api-key", "admin-api-key").

    The file is the YAML SGLang reads with --config, as the sglang_service role writes it: one
    `name: <JSON string>` per line (a JSON string is a YAML double-quoted scalar), comments with #.
    Standard library only, so the client needs no yaml module on the host. {} when the file is absent."""
    if not path or not os.path.exists(path):
        return {}
    keys: dict[str, str] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            text = line.strip()
            if not text or text.startswith("#") or text == "---":
                continue
            name, sep, value = text.partition(":")
            try:
                parsed = json.loads(value.strip()) if sep else None
            except ValueError:
                parsed = None
            if not isinstance(parsed, str):
                raise KeysFileError(f'{path} line {number}: expected name: "value" (a double-quoted string), found something else')
            keys[name.strip()] = parsed
    return keys


def redact_keys_in_file(path: str, secrets: Sequence[str]) -> int:
    """Replace every occurrence of each secret in the file (as written and as JSON escapes it) with
    <redacted>, in place and atomically; the number replaced. A missing file is left alone (0)."""
    if not secrets or not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        text = handle.read()
    count = 0
    for secret in secrets:
        for form in {secret, json.dumps(secret)[1:-1]}:
            count += text.count(form)
            text = text.replace(form, "<redacted>")
    if count:
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write(text)
        os.chmod(tmp, os.stat(path).st_mode & 0o777)
        os.replace(tmp, path)
    return count


def _headers(api_key: Optional[str]) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"--url must be http://host:port, found {url!r}")
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout), parts.path.rstrip("/")


def _count(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def stream_one(url: str, prompt: str, output_len: int, api_key: Optional[str], timeout: float) -> dict[str, Any]:
    """One streamed /generate request; timings as bench_serving measures them. Also kept from the
    chunks' meta_info: `completion_tokens` and `spec_verify_ct` (the target model's verify steps),
    which SGLang (0.5.9 to 0.5.23, tokenizer_manager._calculate_spec_decoding_metrics) puts only in
    the final chunk, beside finish_reason, and only when the server speculates and the request had
    a verify step; None when absent; and `prompt_tokens`, the prompt's length as the server tokenized it."""
    conn, base = _connection(url, timeout)
    body = json.dumps(
        {"text": prompt, "sampling_params": {"temperature": 0.0, "max_new_tokens": output_len, "ignore_eos": True}, "stream": True}
    )
    result: dict[str, Any] = {
        "ok": False,
        "ttft_s": None,
        "itl_s": [],
        "latency_s": None,
        "output_tokens": 0,
        "completion_tokens": None,
        "spec_verify_ct": None,
        "prompt_tokens": None,
        "error": "",
    }
    start = time.perf_counter()
    try:
        conn.request("POST", base + "/generate", body=body, headers=_headers(api_key))
        response = conn.getresponse()
        if response.status != 200:
            result["error"] = f"HTTP {response.status} {response.reason}: {response.read(300).decode('utf-8', 'replace')}"
            return result
        last_time, last_len = start, 0
        while True:
            raw = response.readline()
            if not raw:
                break
            line = raw.strip().decode("utf-8", "replace")
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            meta = chunk.get("meta_info") if isinstance(chunk.get("meta_info"), Mapping) else {}
            for key in ("completion_tokens", "spec_verify_ct", "prompt_tokens"):
                if _count(meta.get(key)) is not None:
                    result[key] = meta[key]
            if not chunk.get("text"):
                continue
            now = time.perf_counter()
            tokens = int(meta.get("completion_tokens", last_len + 1))
            if result["ttft_s"] is None:
                result["ttft_s"] = now - start
            else:
                new = tokens - last_len
                if new <= 0:
                    continue
                result["itl_s"].extend([(now - last_time) / new] * new)
            last_time, last_len = now, tokens
        result.update(ok=last_len > 0, latency_s=time.perf_counter() - start, output_tokens=last_len)
        if last_len == 0:
            result["error"] = "the stream ended without any text"
    except (OSError, ValueError, http.client.HTTPException) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return result


def _get(url: str, path: str, api_key: Optional[str], timeout: float = 10.0) -> Optional[str]:
    conn, base = _connection(url, timeout)
    try:
        conn.request("GET", base + path, headers=_headers(api_key))
        response = conn.getresponse()
        text = response.read().decode("utf-8", "replace")
        return text if response.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


# The accept length of a run, from its own requests: SGLang's per-request definition
# (meta_info.spec_accept_length = completion_tokens / spec_verify_ct), summed over the run as SGLang's
# own test kit does (test/kits/spec_server_kits.py). Never the server's lifetime figure.
ACCEPT_SOURCE_REQUESTS = "requests: completion_tokens / spec_verify_ct"
# The fewest verify steps a run must have before its accept length is reported: SGLang itself reports
# none before 40 decode steps (it folds its counters every decode_log_interval = 40 steps), and below
# that the first token of each request (from the prefill, counted in completion_tokens but in no verify
# step) and one or two odd steps move the ratio by several hundredths, more than the differences the
# figure is read for.
MIN_VERIFY_STEPS = 40


def requests_accept_length(requests: Sequence[Mapping[str, Any]]) -> tuple[Optional[float], str]:
    """(accept length, "") over the completed requests that carry spec_verify_ct, else (None, why not).
    A completed request without spec_verify_ct had no verify step (SGLang leaves the field out then),
    so it counts in neither sum."""
    done = [r for r in requests if r.get("ok")]
    counted = [r for r in done if _count(r.get("completion_tokens")) is not None and (_count(r.get("spec_verify_ct")) or 0) > 0]
    if not done:
        return None, "no request completed"
    if not counted:
        return None, "no spec_verify_ct in any response: the server runs without speculative decoding"
    steps = sum(int(r["spec_verify_ct"]) for r in counted)
    if steps < MIN_VERIFY_STEPS:
        return None, f"run too short to measure: {steps} verify steps, at least {MIN_VERIFY_STEPS} needed"
    return sum(int(r["completion_tokens"]) for r in counted) / steps, ""


def http_request(
    url: str, method: str, path: str, api_key: Optional[str], body: Any = None, timeout: float = 30.0, total: Optional[float] = None
) -> tuple[int, str]:
    """(HTTP status, body); status 0 and the error when the server did not answer. `timeout` bounds each wait on
    the socket; `total` (seconds, optional) the whole exchange, which matters for a streamed body
    (text/event-stream): it is read to its end, and a server that keeps sending would otherwise keep it going.
    Used beyond this script by answers.py and answer_checks.py."""
    ends = None if total is None else time.monotonic() + total
    conn, base = _connection(url, timeout if total is None else max(0.001, min(timeout, total)))
    try:
        conn.request(method, base + path, body=None if body is None else json.dumps(body), headers=_headers(api_key))
        response = conn.getresponse()
        if ends is None:
            return response.status, response.read().decode("utf-8", "replace")
        parts = []
        while True:
            left = ends - time.monotonic()
            if left <= 0:
                return 0, f"TimeoutError: the answer was not whole after {total:g} s"
            if conn.sock is not None:
                conn.sock.settimeout(max(0.001, min(timeout, left)))
            part = response.read1(65536)
            if not part:
                return response.status, b"".join(parts).decode("utf-8", "replace")
            parts.append(part)
    except (OSError, http.client.HTTPException) as exc:
        return 0, f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


ACCEPT_RESET_ARG = "speculative_accept_threshold_acc"
# The requests sent between the two resets (see reset_accept_counters): tokens each, and at most how
# many (128 tokens give at least 2 verify steps even at 64 draft tokens a step).
DRAIN_TOKENS, DRAIN_MAX_REQUESTS = 128, 64
DRAIN_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def served_model(url: str, api_key: Optional[str], timeout: float) -> str:
    """The first model /v1/models lists ('default' when it lists none)."""
    status, text = http_request(url, "GET", "/v1/models", api_key, timeout=timeout)
    try:
        return str(json.loads(text)["data"][0]["id"]) if status == 200 else "default"
    except (ValueError, KeyError, IndexError, TypeError):
        return "default"


def _set_accept_threshold(url: str, keys: Mapping[str, str], value: float) -> tuple[bool, str]:
    """POST /set_internal_state {"server_args": {speculative_accept_threshold_acc: value}}: (accepted, what SGLang said)."""
    body = {"server_args": {ACCEPT_RESET_ARG: value}}
    status, text = http_request(url, "POST", "/set_internal_state", keys.get("admin-api-key") or keys.get("api-key"), body)
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    said = f"POST {url}/set_internal_state {json.dumps(body)} answered {f'HTTP {status}' if status else 'nothing'}: {text.strip()[:500]}"
    return status == 200 and isinstance(answer, list) and bool(answer) and all(a is True for a in answer), said


def reset_accept_counters(url: str, keys: Mapping[str, str], drain_prompt: str = DRAIN_PROMPT, timeout: float = 600.0) -> tuple[str, str]:
    """Zero the server's cumulative accept-length counters, which bench_serving reads at the end of
    its run (internal_states[0].avg_spec_accept_length). ("reset" | "not-needed" | "failed", message).

    SGLang (0.5.9 Scheduler.set_internal_state, 0.5.23 internal_state._apply_accept_threshold) zeroes
    the cumulative counters whenever /set_internal_state sets speculative_accept_threshold_acc, so it
    is set to the value it has: nothing else changes. It does not zero the current window's counters,
    folded into the cumulative ones every decode_log_interval (40) decode passes: up to 39 passes from
    before the reset would be folded in later. So: reset, then requests of our own until they have had
    decode_log_interval verify steps (one decode pass each, so the server has folded that window at
    least once since the reset), then reset again; what is left in the window is those requests'.
    /set_internal_state is an ADMIN_OPTIONAL endpoint (the admin key when the server has one, else
    the API key, else none) and answers a JSON list of booleans, one per scheduler; /server_info and
    /generate are normal ones (the API key)."""
    path = "/server_info"
    status, text = http_request(url, "GET", path, keys.get("api-key"))
    if status == 404:  # releases before /server_info
        path = "/get_server_info"
        status, text = http_request(url, "GET", path, keys.get("api-key"))
    if status != 200:
        return "failed", f"GET {url}{path} answered {f'HTTP {status}' if status else 'nothing'}: {text.strip()[:500]}"
    try:
        info = json.loads(text)
        info = info["decode"][0] if isinstance(info.get("decode"), list) and info["decode"] else info
        states = info.get("internal_states")
        state = states[0] if isinstance(states, list) and states and isinstance(states[0], Mapping) else {}
    except (ValueError, AttributeError, KeyError, TypeError) as exc:
        return "failed", f"GET {url}{path} is not SGLang's server info: {exc}"
    if not state.get("speculative_algorithm", info.get("speculative_algorithm")):
        return "not-needed", f"no reset needed: {url} runs without speculative decoding (speculative_algorithm is null)"
    # internal_states has the value in force (0.5.23 puts later overrides there, the top level is the launch value).
    value = next(
        (v for v in (state.get(ACCEPT_RESET_ARG), info.get(ACCEPT_RESET_ARG)) if isinstance(v, (int, float)) and not isinstance(v, bool)),
        None,
    )
    if value is None:
        return "failed", f"GET {url}{path} has no {ACCEPT_RESET_ARG}: cannot reset the accept-length counters without changing it"
    interval = _count(state.get("decode_log_interval", info.get("decode_log_interval"))) or 40
    ok, said = _set_accept_threshold(url, keys, value)
    if not ok:
        return "failed", said
    steps = sent = 0
    while steps < interval and sent < DRAIN_MAX_REQUESTS:
        result = stream_one(url, drain_prompt, DRAIN_TOKENS, keys.get("api-key"), timeout)
        sent += 1
        if not result["ok"] or not result["spec_verify_ct"]:
            why = result["error"] or "its response has no spec_verify_ct"
            return "failed", f"{said}; then a request to fold the {interval}-step window failed: {why}"
        steps += int(result["spec_verify_ct"])
    if steps < interval:
        return "failed", f"{said}; then {sent} requests had only {steps} verify steps, fewer than the {interval}-step window"
    ok, again = _set_accept_threshold(url, keys, value)
    if not ok:
        return "failed", f"{said}; then {sent} requests ({steps} verify steps); then {again}"
    return "reset", (
        f"reset: the speculative accept-length counters start from zero ({ACCEPT_RESET_ARG} kept at {value}): {said}; "
        f"then {sent} requests ({steps} verify steps) so that the {interval}-step window it does not zero is folded; then again: {again}"
    )


def run(
    url: str,
    prompts: Sequence[str],
    output_len: int,
    concurrency: int,
    profile: str,
    api_key: Optional[str] = None,
    progress: Optional[str] = None,
    timeout: float = 600.0,
    context_tokens: Optional[int] = None,
) -> dict[str, Any]:
    """Send every prompt, at most `concurrency` at a time; the run record (with `context_tokens`, the grid's
    context the prompts were built for, when given)."""
    lock = threading.Lock()
    done = [0]
    started = time.perf_counter()
    where = "" if context_tokens is None else f" context {context_tokens or 'short'}"

    def one(prompt: str) -> dict[str, Any]:
        result = stream_one(url, prompt, output_len, api_key, timeout)
        with lock:
            done[0] += 1
            if progress:
                with open(progress, "a", encoding="utf-8") as handle:
                    handle.write(
                        f"{profile} concurrency {concurrency}{where}: {done[0]}/{len(prompts)} requests, "
                        f"{time.perf_counter() - started:.1f} s{'' if result['ok'] else ' (failed: ' + result['error'][:120] + ')'}\n"
                    )
        return result

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        requests = list(pool.map(one, prompts))
    duration = time.perf_counter() - started
    accept, note = requests_accept_length(requests)
    return {
        "tool": "toolkit-client",
        "profile": profile,
        "concurrency": concurrency,
        "output_len": output_len,
        "duration_s": duration,
        "requests": requests,
        "accept_length": accept,
        "accept_source": ACCEPT_SOURCE_REQUESTS,
        "accept_note": note,
        "error": "",
        **({"context_tokens": context_tokens} if context_tokens is not None else {}),
    }


# ------------------------------------------------------------------ the grid's prompts and warm-up

# The calibration sample: this many characters of the prompt set, sent once to learn the server's characters per token.
CALIBRATION_CHARS = 4000


def cycle_prompts(prompts: Sequence[str], count: int) -> list[str]:
    """`count` prompts, the set repeated in order as often as needed."""
    return [prompts[i % len(prompts)] for i in range(count)]


def prompt_length(url: str, text: str, api_key: Optional[str], timeout: float) -> int:
    """The prompt's length in tokens as the server tokenizes it (meta_info.prompt_tokens of a 1-token /generate)."""
    body = {"text": text, "sampling_params": {"temperature": 0.0, "max_new_tokens": 1}}
    status, answer = http_request(url, "POST", "/generate", api_key, body, timeout=timeout)
    try:
        tokens = json.loads(answer)["meta_info"]["prompt_tokens"] if status == 200 else None
    except (ValueError, KeyError, TypeError):
        tokens = None
    if not isinstance(tokens, int) or tokens <= 0:
        raise PromptError(f"POST {url}/generate did not say the prompt's length (meta_info.prompt_tokens): HTTP {status} {answer[:300]}")
    return tokens


def long_prompts(url: str, prompts: Sequence[str], context_tokens: int, count: int, api_key: Optional[str], timeout: float) -> list[str]:
    """`count` prompts of about `context_tokens` tokens each, none sharing a prefix with another (SGLang's radix
    cache would otherwise serve the shared part from memory and the prefill would not be measured): a line naming
    the request, then the prompt set's text from an offset of its own, repeated to length, then one of the set's
    prompts. The server's characters per token are measured once on a sample of the same text."""
    corpus = "\n\n".join(prompts)
    while len(corpus) < CALIBRATION_CHARS:
        corpus += "\n\n" + corpus
    sample = corpus[:CALIBRATION_CHARS]
    chars_per_token = len(sample) / prompt_length(url, sample, api_key, timeout)
    out = []
    for i in range(count):
        head = f"Request {i + 1} of {count}. Read the notes below, then answer the last question.\n\n"
        tail = "\n\nQuestion: " + prompts[i % len(prompts)]
        want = max(0, int(context_tokens * chars_per_token) - len(head) - len(tail))
        start = (i * 7919) % len(corpus)
        body = (corpus[start:] + "\n\n" + corpus) * (want // len(corpus) + 2)
        out.append(head + body[:want] + tail)
    return out


def warm_up(
    url: str, prompt: str, output_len: int, seconds: float, concurrency: int, api_key: Optional[str], timeout: float
) -> dict[str, Any]:
    """Decode for `seconds` before measuring (a cold server reads low: CUDA graphs, caches, clocks): `concurrency`
    streams of `output_len` tokens each, one after another, until the time is up. {seconds, requests, failed, error}."""
    ends = time.monotonic() + seconds
    lock = threading.Lock()
    counts = {"requests": 0, "failed": 0, "error": ""}

    def stream() -> None:
        while time.monotonic() < ends:
            result = stream_one(url, prompt, output_len, api_key, timeout)
            with lock:
                counts["requests"] += 1
                if not result["ok"]:
                    counts["failed"] += 1
                    counts["error"] = result["error"]
                    return

    threads = [threading.Thread(target=stream) for _ in range(max(1, concurrency))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"seconds": seconds, **counts}


# Journal lines worth keeping as evidence: a broad keep-filter, no verdicts. What each line means, per
# SGLang version, is evidence.py's table, on the controller (report.py judges them there).
EVIDENCE_LINE = re.compile(
    r"cuda graph|symm|multicast|all-?reduce|fusion|flashinfer (?:comm|workspace)|speculative|eagle|accept len|mixed chunk|"
    r"server_args=|fired up and ready to roll",
    re.I,
)
READY_LINE = re.compile(r"The server is fired up and ready to roll!")  # the end of SGLang's start-up
PERIODIC_LINE = re.compile(r"\bDecode batch\b")  # printed every decode_log_interval steps while serving
SKIPPED_LINE = re.compile(r"\bPrefill batch\b")  # "cuda graph: False" on every prefill: says nothing
# Key values SGLang may print or answer: its server args (api_key='...', 'api_key': '...'), a launch
# command line (--api-key VALUE), any *_api_key / *_secret / *_token / *_password field.
_SECRET_FIELD = re.compile(r"(?:^|_)(?:api_key|secret|token|password)$")
_SECRET_IN_LINE = (
    re.compile(r"(\b\w*(?:api_key|_secret|_token|_password)\b['\"]?\s*(?:=|:)\s*)('[^']*'|\"[^\"]*\")"),
    re.compile(r"(--(?:admin-)?api-key(?:=|\s+))(?!<redacted>)(\S+)"),
)


def redact_line(line: str) -> str:
    for pattern in _SECRET_IN_LINE:
        line = pattern.sub(lambda m: m.group(1) + ("'<redacted>'" if m.group(2)[:1] in "'\"" else "<redacted>"), line)
    return line


def redact(value: Any) -> Any:
    """server_info with every key field replaced by "<redacted>" when set, at any depth (SGLang repeats
    its server args in internal_states, and in decode/prefill lists when disaggregated)."""
    if isinstance(value, Mapping):
        return {
            k: "<redacted>" if isinstance(k, str) and _SECRET_FIELD.search(k) and v is not None else redact(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return redact_line(value) if isinstance(value, str) else value


def evidence_lines(lines: Sequence[str], max_lines: int = 200) -> list[str]:
    """Every start-up line the keep-filter matches (up to and including "The server is fired up and
    ready to roll!"; all of them when it never came), whatever traffic followed; after it the last
    ``max_lines`` Decode batch lines and the last ``max_lines`` other matching lines. Redacted."""
    startup: list[str] = []
    periodic: list[str] = []
    other: list[str] = []
    ready = False
    for line in lines:
        if not EVIDENCE_LINE.search(line) or (ready and SKIPPED_LINE.search(line)):
            continue
        if not ready:
            startup.append(line)
            ready = bool(READY_LINE.search(line))
        else:
            (periodic if PERIODIC_LINE.search(line) else other).append(line)
    return [redact_line(line) for line in startup + other[-max_lines:] + periodic[-max_lines:]]


def server_info(url: str, api_key: Optional[str]) -> tuple[Optional[dict[str, Any]], Optional[str], str]:
    """The server's /server_info answer (/get_server_info on releases without it), redacted; the
    endpoint that answered; what went wrong ("" when it answered)."""
    problems = []
    for path in ("/server_info", "/get_server_info"):
        info = _get(url, path, api_key)
        if info is None:
            continue
        try:
            return redact(json.loads(info)), path, ""
        except ValueError as exc:
            problems.append(f"{path} is not JSON: {exc}")
    return None, None, "; ".join(problems) or f"GET {url}/server_info and /get_server_info did not answer 200"


def evidence(url: str, unit: Optional[str], api_key: Optional[str], max_lines: int = 200) -> dict[str, Any]:
    """The server's /server_info answer (/get_server_info on releases without it), redacted, and the
    journal lines of the unit's current run that evidence_lines keeps."""
    out: dict[str, Any] = {"url": url, "unit": unit, "server_info": None, "server_info_endpoint": None, "log": [], "journal_lines": 0}
    out["server_info"], out["server_info_endpoint"], problem = server_info(url, api_key)
    problems = [problem] if problem else []
    if unit:
        try:
            invocation = subprocess.run(
                ["systemctl", "show", "-p", "InvocationID", "--value", unit], capture_output=True, text=True, timeout=30, check=True
            ).stdout.strip()
            if not invocation:
                raise ValueError(f"{unit} has no current invocation")
            journal = subprocess.run(
                ["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager"],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout.splitlines()
            out["journal_lines"] = len(journal)
            out["log"] = evidence_lines(journal, max_lines)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            problems.append(f"journal of {unit}: {exc}")
    out["error"] = "; ".join(problems)
    return out


def write_atomic(path: str, data: Mapping[str, Any]) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
        handle.write("\n")
    os.replace(tmp, path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--keys-file", help="the service's API-keys YAML (api-key, admin-api-key), if the server needs a key")
    parser.add_argument(
        "--redact-after",
        help="with --exec: once COMMAND has finished, replace the API keys in this file (SGLang's bench_serving "
        "records the server's /server_info in its output file, and SGLang echoes its keys there)",
    )
    parser.add_argument("--url")
    parser.add_argument("--prompts")
    parser.add_argument("--num-prompts", type=int)
    parser.add_argument("--output-len", type=int)
    parser.add_argument("--concurrency", type=int)
    parser.add_argument("--profile")
    parser.add_argument("--out")
    parser.add_argument("--progress")
    parser.add_argument(
        "--warmup", type=int, default=1, help="requests sent (and not measured) before the run, at its context when --context-tokens"
    )
    parser.add_argument(
        "--warmup-seconds", type=float, default=0.0, help="decode for this long (not measured) before the --warmup requests"
    )
    parser.add_argument("--requests", type=int, help="requests in the run (the prompt set repeated); default --num-prompts")
    parser.add_argument(
        "--context-tokens",
        type=int,
        help="build prompts of about this many tokens, none sharing a prefix (0: the set as it is); recorded in the run (a grid cell)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    parser.add_argument("--evidence", help="write the server's optimisation evidence here instead of measuring")
    parser.add_argument("--unit", help="with --evidence: the systemd unit whose journal is read")
    parser.add_argument(
        "--reset-accept-counters",
        action="store_true",
        help="zero the server's cumulative accept-length counters (what bench_serving reads) instead of measuring",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--exec" in argv:  # --exec [--] COMMAND...: run COMMAND with OPENAI_API_KEY set instead
        argv, command = argv[: argv.index("--exec")], argv[argv.index("--exec") + 1 :]
        command = command[1:] if command[:1] == ["--"] else command
        if not command:
            parser.error("--exec needs a command")
    args = parser.parse_args(argv)
    try:
        keys = read_keys(args.keys_file)
    except (OSError, KeysFileError) as exc:
        print(f"--keys-file: {exc}", file=sys.stderr)
        return 2
    api_key = keys.get("api-key")
    if command:
        env = {**os.environ, **({"OPENAI_API_KEY": api_key} if api_key else {})}
        if not args.redact_after:
            os.execvpe(command[0], command, env)
        code = subprocess.call(command, env=env)
        redact_keys_in_file(args.redact_after, [v for v in keys.values() if v])
        return code
    if args.evidence:
        if not args.url:
            parser.error("--evidence needs --url")
        write_atomic(args.evidence, evidence(args.url, args.unit, api_key))
        return 0
    if args.reset_accept_counters:
        if not args.url:
            parser.error("--reset-accept-counters needs --url")
        try:
            drain = load_prompts(args.prompts, 1)[0] if args.prompts else DRAIN_PROMPT
        except PromptError as exc:
            print(exc, file=sys.stderr)
            return 2
        outcome, message = reset_accept_counters(args.url, keys, drain, args.timeout)
        print(message, file=sys.stderr if outcome == "failed" else sys.stdout)
        return 1 if outcome == "failed" else 0
    missing = [
        f"--{k.replace('_', '-')}"
        for k in ("url", "prompts", "num_prompts", "output_len", "concurrency", "profile", "out")
        if getattr(args, k) is None
    ]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    try:
        base = load_prompts(args.prompts, args.num_prompts)
        prompts = cycle_prompts(base, args.requests or len(base))
        warm_prompts = base[: args.warmup]
        if args.context_tokens:
            # the warm-up requests at the cell's own length (a first long prefill compiles its kernels: not measured),
            # with prompts of their own, so that none of them leaves a measured prompt in the radix cache
            built = long_prompts(args.url, base, args.context_tokens, len(prompts) + args.warmup, api_key, args.timeout)
            prompts, warm_prompts = built[: len(prompts)], built[len(prompts) :]
    except PromptError as exc:
        print(exc, file=sys.stderr)
        return 2
    warm = None
    if args.warmup_seconds > 0:
        warm = warm_up(args.url, base[0], args.output_len, args.warmup_seconds, min(args.concurrency, 8), api_key, args.timeout)
        if warm["failed"]:
            print(f"warm-up request to {args.url}/generate failed: {warm['error']}", file=sys.stderr)
            return 3
    for prompt in warm_prompts:
        warm_one = stream_one(args.url, prompt, args.output_len, api_key, args.timeout)
        if not warm_one["ok"]:
            print(f"warm-up request to {args.url}/generate failed: {warm_one['error']}", file=sys.stderr)
            return 3
    record = run(
        args.url,
        prompts,
        args.output_len,
        args.concurrency,
        args.profile,
        api_key,
        args.progress,
        args.timeout,
        context_tokens=args.context_tokens,
    )
    if warm:
        record["warmup"] = warm
    write_atomic(args.out, record)
    failed = sum(1 for r in record["requests"] if not r["ok"])
    print(f"{args.profile} concurrency {args.concurrency}: {len(prompts) - failed}/{len(prompts)} requests in {record['duration_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
