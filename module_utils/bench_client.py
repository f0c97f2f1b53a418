#!/usr/bin/env python3
"""The toolkit's benchmark client: streams SGLang's native /generate at a fixed concurrency.

Standard library only, so any Python 3.9+ on the GPU host runs it (copied there by the
sglang_benchmark role and used when SGLang's own bench_serving cannot be imported). Requests
mirror bench_serving's "sglang" backend: temperature 0, ignore_eos, a fixed max_new_tokens,
streamed; TTFT and ITL are measured the same way (see bench_report.summarize).

    python3 bench_client.py --url http://127.0.0.1:30000 --prompts prompts.json \\
        --num-prompts 16 --output-len 64 --concurrency 1 --profile eagle3 \\
        --out run.json --progress progress.txt

Writes the run record (bench_report's format) to --out atomically, at the end only; one line per
finished request to --progress. An API key, if the server wants one, is read from --secrets-file
(the service's 0600 EnvironmentFile, key SGLANG_API_KEY), never from the command line or an
environment assignment that sudo would log.

    python3 bench_client.py --secrets-file /etc/sglang/secrets.env --exec -- python -m sglang.bench_serving ...

runs SGLang's own client with that key in OPENAI_API_KEY (what bench_serving sends as the bearer token).

    python3 bench_client.py --url http://127.0.0.1:30000 --unit sglang.service --evidence evidence.json

writes what the running server shows of its optimisations: its /get_server_info answer and the lines
of its unit's current run in the journal that speak of them (bench_report.effective_optimisations
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


def read_secret(path: Optional[str], name: str = "SGLANG_API_KEY") -> Optional[str]:
    """The value of `name` in a systemd EnvironmentFile (KEY="value" with \\ and \\" escapes); None when absent."""
    if not path or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            key, sep, value = line.strip().partition("=")
            if sep and key.strip() == name:
                value = value.strip()
                if len(value) >= 2 and value[0] == value[-1] == '"':
                    value = re.sub(r'\\(["\\])', r"\1", value[1:-1])
                return value
    return None


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


def stream_one(url: str, prompt: str, output_len: int, api_key: Optional[str], timeout: float) -> dict[str, Any]:
    """One streamed /generate request; timings as bench_serving measures them."""
    conn, base = _connection(url, timeout)
    body = json.dumps(
        {"text": prompt, "sampling_params": {"temperature": 0.0, "max_new_tokens": output_len, "ignore_eos": True}, "stream": True}
    )
    result: dict[str, Any] = {"ok": False, "ttft_s": None, "itl_s": [], "latency_s": None, "output_tokens": 0, "error": ""}
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
            if not chunk.get("text"):
                continue
            now = time.perf_counter()
            tokens = int((chunk.get("meta_info") or {}).get("completion_tokens", last_len + 1))
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


def accept_length(url: str, api_key: Optional[str]) -> tuple[Optional[float], Optional[str]]:
    """The server's average speculative accept length: /get_server_info (what bench_serving reads),
    else the sglang:spec_accept_length gauge of /metrics; (None, None) when neither has one."""
    info = _get(url, "/get_server_info", api_key)
    if info:
        try:
            data = json.loads(info)
            data = data["decode"][0] if "decode" in data else data
            value = (data.get("internal_states") or [{}])[0].get("avg_spec_accept_length")
            if isinstance(value, (int, float)) and value > 0:
                return float(value), "server_info"
        except (ValueError, AttributeError, IndexError, KeyError, TypeError):
            pass
    metrics = _get(url, "/metrics", api_key)
    if metrics:
        values = [float(m.group(1)) for m in re.finditer(r"^sglang:spec_accept_length(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", metrics, re.M)]
        values = [v for v in values if v > 0]
        if values:
            return sum(values) / len(values), "metrics"
    return None, None


def run(
    url: str,
    prompts: Sequence[str],
    output_len: int,
    concurrency: int,
    profile: str,
    api_key: Optional[str] = None,
    progress: Optional[str] = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Send every prompt, at most `concurrency` at a time; the run record."""
    lock = threading.Lock()
    done = [0]
    started = time.perf_counter()

    def one(prompt: str) -> dict[str, Any]:
        result = stream_one(url, prompt, output_len, api_key, timeout)
        with lock:
            done[0] += 1
            if progress:
                with open(progress, "a", encoding="utf-8") as handle:
                    handle.write(
                        f"{profile} concurrency {concurrency}: {done[0]}/{len(prompts)} requests, "
                        f"{time.perf_counter() - started:.1f} s{'' if result['ok'] else ' (failed: ' + result['error'][:120] + ')'}\n"
                    )
        return result

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        requests = list(pool.map(one, prompts))
    duration = time.perf_counter() - started
    accept, source = accept_length(url, api_key)
    return {
        "tool": "toolkit-client",
        "profile": profile,
        "concurrency": concurrency,
        "output_len": output_len,
        "duration_s": duration,
        "requests": requests,
        "accept_length": accept,
        "accept_source": source,
        "error": "",
    }


# Journal lines worth keeping as evidence (bench_report decides what each one means).
EVIDENCE_LINE = re.compile(r"cuda graph|symm|multicast|all-?reduce|fusion|speculative|eagle|accept|mixed.chunk", re.I)


def evidence(url: str, unit: Optional[str], api_key: Optional[str], max_lines: int = 200) -> dict[str, Any]:
    """The server's /get_server_info answer and the relevant journal lines of the unit's current run."""
    out: dict[str, Any] = {"url": url, "unit": unit, "server_info": None, "log": [], "error": ""}
    problems = []
    info = _get(url, "/get_server_info", api_key)
    if info is None:
        problems.append(f"GET {url}/get_server_info did not answer 200")
    else:
        try:
            out["server_info"] = json.loads(info)
        except ValueError as exc:
            problems.append(f"/get_server_info is not JSON: {exc}")
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
            ).stdout
            out["log"] = [line for line in journal.splitlines() if EVIDENCE_LINE.search(line)][-max_lines:]
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
    parser.add_argument("--secrets-file", help="EnvironmentFile holding SGLANG_API_KEY, if the server needs a key")
    parser.add_argument("--url")
    parser.add_argument("--prompts")
    parser.add_argument("--num-prompts", type=int)
    parser.add_argument("--output-len", type=int)
    parser.add_argument("--concurrency", type=int)
    parser.add_argument("--profile")
    parser.add_argument("--out")
    parser.add_argument("--progress")
    parser.add_argument("--warmup", type=int, default=1, help="requests sent (and not measured) before the run")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    parser.add_argument("--evidence", help="write the server's optimisation evidence here instead of measuring")
    parser.add_argument("--unit", help="with --evidence: the systemd unit whose journal is read")
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--exec" in argv:  # --exec [--] COMMAND...: run COMMAND with OPENAI_API_KEY set instead
        argv, command = argv[: argv.index("--exec")], argv[argv.index("--exec") + 1 :]
        command = command[1:] if command[:1] == ["--"] else command
        if not command:
            parser.error("--exec needs a command")
    args = parser.parse_args(argv)
    api_key = read_secret(args.secrets_file)
    if command:
        os.execvpe(command[0], command, {**os.environ, **({"OPENAI_API_KEY": api_key} if api_key else {})})
    if args.evidence:
        if not args.url:
            parser.error("--evidence needs --url")
        write_atomic(args.evidence, evidence(args.url, args.unit, api_key))
        return 0
    missing = [
        f"--{k.replace('_', '-')}"
        for k in ("url", "prompts", "num_prompts", "output_len", "concurrency", "profile", "out")
        if getattr(args, k) is None
    ]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    try:
        prompts = load_prompts(args.prompts, args.num_prompts)
    except PromptError as exc:
        print(exc, file=sys.stderr)
        return 2
    for prompt in prompts[: args.warmup]:
        warm = stream_one(args.url, prompt, args.output_len, api_key, args.timeout)
        if not warm["ok"]:
            print(f"warm-up request to {args.url}/generate failed: {warm['error']}", file=sys.stderr)
            return 3
    record = run(args.url, prompts, args.output_len, args.concurrency, args.profile, api_key, args.progress, args.timeout)
    write_atomic(args.out, record)
    failed = sum(1 for r in record["requests"] if not r["ok"])
    print(f"{args.profile} concurrency {args.concurrency}: {len(prompts) - failed}/{len(prompts)} requests in {record['duration_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
