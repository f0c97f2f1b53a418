"""The accept length is this run's, never the server's lifetime figure (issue 21 item 2).

The toolkit client measures it from its own requests: completion_tokens / spec_verify_ct, summed,
read from the final chunk of each streamed /generate response; a small HTTP server here replays the
streams a real SGLang 0.5.13 server sent (tests/data/real-server/0.5.13-h200/generate-stream-*.txt,
captured on an H200). SGLang's bench_serving reads the server's cumulative counters at the end of its
run, so the role zeroes them right before (bench_client --reset-accept-counters: /set_internal_state,
requests that make the server fold the window it does not zero, /set_internal_state again). The last
tests run both against the stand-in server (TEST FIXTURE) with earlier traffic at another accept length.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from conftest import DATA, ROOT, free_port, standin_server
from sglang_sm120.serve import bench_client
from sglang_sm120.serve.report import ACCEPT_SOURCE_BENCH_SERVING, figure_lines, from_bench_serving, render_markdown, summarize

CLIENT = ROOT / "plugins/module_utils/sglang_sm120/serve/bench_client.py"
PROMPTS = ROOT / "roles/sglang_benchmark/files/prompts.json"


# ------------------------------------------------------------------ a replay of a real server

REAL = DATA / "real-server/0.5.13-h200"


def real_stream(name: str) -> bytes:
    """A real server's streamed /generate answer, byte for byte (32 tokens, temperature 0). With EAGLE-3
    the final chunk's meta_info carries spec_verify_ct 31 beside finish_reason (random draft weights:
    each verify step accepted only its bonus token); without speculation it has none."""
    return (REAL / f"generate-stream-{name}.txt").read_bytes()


class FakeServer:
    """A stdlib HTTP server on 127.0.0.1: answers from `routes` ({(method, path): (status, body bytes)})
    and records each request (method, path, Authorization header, JSON body)."""

    def __init__(self, routes: dict[tuple[str, str], tuple[int, bytes]]) -> None:
        self.routes, self.seen = routes, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: object) -> None:
                pass

            def answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                owner.seen.append((method, self.path, self.headers.get("Authorization"), json.loads(raw) if raw else None))
                status, body = owner.routes.get((method, self.path), (404, b'{"detail":"Not Found"}'))
                self.send_response(status)
                self.send_header("Content-Type", "text/event-stream" if body.startswith(b"data:") else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.answer("GET")

            def do_POST(self) -> None:
                self.answer("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def fake() -> Iterator[Any]:
    servers: list[FakeServer] = []

    def start(routes: dict[tuple[str, str], tuple[int, bytes]]) -> FakeServer:
        servers.append(FakeServer(routes))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def replay(fake: Any, name: str) -> FakeServer:
    return fake({("POST", "/generate"): (200, real_stream(name))})


# ------------------------------------------------------------------ the toolkit client


def test_the_final_chunk_gives_completion_tokens_and_spec_verify_ct(fake: Any) -> None:
    chunks = [json.loads(line[5:]) for line in real_stream("eagle3").decode().splitlines() if line.startswith("data: {")]
    # Only the final chunk, the one with finish_reason, carries spec_verify_ct.
    shape = [("spec_verify_ct" in c["meta_info"], c["meta_info"]["finish_reason"] is not None) for c in chunks]
    assert shape == [(False, False)] * 31 + [(True, True)]
    eagle3 = bench_client.stream_one(replay(fake, "eagle3").url, "hi", 32, None, 10.0)
    assert eagle3["ok"] and eagle3["output_tokens"] == 32 and len(eagle3["itl_s"]) == 31
    assert (eagle3["completion_tokens"], eagle3["spec_verify_ct"]) == (32, 31)
    baseline = bench_client.stream_one(replay(fake, "baseline").url, "hi", 32, None, 10.0)
    assert baseline["ok"] and (baseline["completion_tokens"], baseline["spec_verify_ct"]) == (32, None)


def test_a_run_measures_the_accept_length_from_its_own_requests(fake: Any) -> None:
    server = replay(fake, "eagle3")
    record = bench_client.run(server.url, ["a b c d", "e f g h"], 32, 2, "eagle3")
    # 2 x 32 tokens over 2 x 31 verify steps: SGLang's own per-request figure (1.032), summed.
    assert record["accept_length"] == pytest.approx(64 / 62) and record["accept_note"] == ""
    assert record["accept_source"] == bench_client.ACCEPT_SOURCE_REQUESTS == "requests: completion_tokens / spec_verify_ct"
    assert [path for _, path, _, _ in server.seen] == ["/generate", "/generate"]  # nothing asked of the server's counters
    fig = summarize(record)
    assert fig["accept_length"] == 1.032 and fig["accept_source"] == bench_client.ACCEPT_SOURCE_REQUESTS and fig["accept_note"] == ""
    assert figure_lines({"eagle3": {"c1": fig}})[0].endswith(", accept length 1.03 (requests: completion_tokens / spec_verify_ct)")


def test_a_server_without_speculation_has_no_accept_length_and_says_why(fake: Any) -> None:
    record = bench_client.run(replay(fake, "baseline").url, ["a b c d"] * 2, 32, 1, "baseline")
    note = "no spec_verify_ct in any response: the server runs without speculative decoding"
    assert record["accept_length"] is None and record["accept_note"] == note
    fig = summarize(record)
    assert fig["accept_length"] is None and fig["accept_note"] == note
    assert figure_lines({"baseline": {"c1": fig}})[0].endswith(f", accept length none: {note}")


def test_a_run_too_short_has_no_accept_length_and_says_why(fake: Any) -> None:
    record = bench_client.run(replay(fake, "eagle3").url, ["a b c d"], 32, 1, "eagle3")
    assert record["accept_length"] is None
    assert record["accept_note"] == f"run too short to measure: 31 verify steps, at least {bench_client.MIN_VERIFY_STEPS} needed"
    assert bench_client.MIN_VERIFY_STEPS == 40


def test_only_completed_requests_with_verify_steps_count() -> None:
    ok = {"ok": True, "completion_tokens": 100, "spec_verify_ct": 40}
    one_token = {"ok": True, "completion_tokens": 1, "spec_verify_ct": None}  # finished at the prefill: SGLang omits the field
    failed = {"ok": False, "completion_tokens": 50, "spec_verify_ct": 5}
    assert bench_client.requests_accept_length([ok, one_token, failed, ok]) == (2.5, "")
    assert bench_client.requests_accept_length([failed]) == (None, "no request completed")
    assert bench_client.requests_accept_length([]) == (None, "no request completed")


def test_the_client_never_reads_the_lifetime_figure() -> None:
    source = CLIENT.read_text()
    assert not hasattr(bench_client, "accept_length")
    assert "avg_spec_accept_length" not in source.split("def reset_accept_counters")[0]
    assert "sglang:spec_accept_length" not in source


# ------------------------------------------------------------------ the reset before bench_serving


def server_info(threshold: Optional[float] = 0.7, algorithm: Optional[str] = "EAGLE3") -> bytes:
    """/server_info as 0.5.13 answers it (trimmed): the launch value at the top, the value in force in
    internal_states (0.5.23 puts later /set_internal_state overrides there)."""
    state: dict[str, Any] = {"speculative_algorithm": algorithm, "avg_spec_accept_length": 1.0}
    if threshold is not None:
        state["speculative_accept_threshold_acc"] = threshold
    return json.dumps({"speculative_algorithm": algorithm, "speculative_accept_threshold_acc": 1.0, "internal_states": [state]}).encode()


def keys_file(tmp_path: Path, **keys: str) -> str:
    path = tmp_path / "api-keys.yaml"
    path.write_text("# managed\n" + "".join(f"{name.replace('_', '-')}: {json.dumps(value)}\n" for name, value in keys.items()))
    return str(path)


def reset_routes(info: bytes, answer: bytes = b"[true]", info_path: str = "/server_info") -> dict[tuple[str, str], tuple[int, bytes]]:
    """A speculating server: its info, its answer to /set_internal_state, and /generate replaying the
    real EAGLE-3 stream (31 verify steps a request: two requests fold a 40-step window)."""
    return {
        ("GET", info_path): (200, info),
        ("POST", "/set_internal_state"): (200, answer),
        ("POST", "/generate"): (200, real_stream("eagle3")),
    }


def test_the_reset_sets_the_threshold_to_its_value_with_the_admin_key(fake: Any, tmp_path: Path, capsys: Any) -> None:
    server = fake(reset_routes(server_info(0.7)))
    keys = keys_file(tmp_path, api_key="user-key", admin_api_key="admin-key")
    argv = ["--url", server.url, "--keys-file", keys, "--prompts", str(PROMPTS), "--reset-accept-counters"]
    assert bench_client.main(argv) == 0
    # /server_info and /generate are normal endpoints (the API key); /set_internal_state is ADMIN_OPTIONAL: the admin key when there is one.
    reset = ("POST", "/set_internal_state", "Bearer admin-key", {"server_args": {"speculative_accept_threshold_acc": 0.7}})
    drain = {
        "text": bench_client.load_prompts(str(PROMPTS), 1)[0],
        "sampling_params": {"temperature": 0.0, "max_new_tokens": bench_client.DRAIN_TOKENS, "ignore_eos": True},
        "stream": True,
    }
    assert server.seen == [
        ("GET", "/server_info", "Bearer user-key", None),
        reset,
        ("POST", "/generate", "Bearer user-key", drain),
        ("POST", "/generate", "Bearer user-key", drain),
        reset,
    ]
    out = capsys.readouterr().out
    assert out.startswith("reset: the speculative accept-length counters start from zero (speculative_accept_threshold_acc kept at 0.7)")
    assert "answered HTTP 200: [true]; then 2 requests (62 verify steps) so that the 40-step window it does not zero is folded" in out


def test_the_reset_uses_the_api_key_without_an_admin_key_and_old_servers_get_server_info(fake: Any, tmp_path: Path) -> None:
    server = fake(reset_routes(server_info(None), answer=b"[true, true]", info_path="/get_server_info"))
    assert bench_client.reset_accept_counters(server.url, {"api-key": "user-key"})[0] == "reset"
    assert [(m, p, auth) for m, p, auth, _ in server.seen] == [
        ("GET", "/server_info", "Bearer user-key"),
        ("GET", "/get_server_info", "Bearer user-key"),
        ("POST", "/set_internal_state", "Bearer user-key"),
        ("POST", "/generate", "Bearer user-key"),
        ("POST", "/generate", "Bearer user-key"),
        ("POST", "/set_internal_state", "Bearer user-key"),
    ]
    assert server.seen[2][3] == {"server_args": {"speculative_accept_threshold_acc": 1.0}}  # the top-level value when that is all
    assert server.seen[3][3]["text"] == bench_client.DRAIN_PROMPT
    server.seen.clear()
    assert bench_client.reset_accept_counters(server.url, {})[0] == "reset"
    assert all(auth is None for _, _, auth, _ in server.seen)


def test_a_server_without_speculation_needs_no_reset(fake: Any, tmp_path: Path) -> None:
    server = fake({("GET", "/server_info"): (200, server_info(1.0, algorithm=None))})
    proc = subprocess.run(
        [sys.executable, str(CLIENT), "--url", server.url, "--reset-accept-counters"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.startswith("no reset needed: ") and "without speculative decoding" in proc.stdout
    assert [p for _, p, _, _ in server.seen] == ["/server_info"]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ((401, b'{"error":"Unauthorized"}'), 'answered HTTP 401: {"error":"Unauthorized"}'),
        ((200, b"[false]"), "answered HTTP 200: [false]"),  # 0.5.23 refusing the update
    ],
)
def test_a_refused_reset_exits_non_zero_with_sglangs_answer(fake: Any, tmp_path: Path, answer: tuple[int, bytes], expected: str) -> None:
    server = fake({("GET", "/server_info"): (200, server_info()), ("POST", "/set_internal_state"): answer})
    proc = subprocess.run(
        [sys.executable, str(CLIENT), "--url", server.url, "--reset-accept-counters"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 1 and proc.stdout == "" and expected in proc.stderr and "/set_internal_state" in proc.stderr
    assert [p for _, p, _, _ in server.seen] == ["/server_info", "/set_internal_state"]
    unanswered = subprocess.run(
        [sys.executable, str(CLIENT), "--url", f"http://127.0.0.1:{free_port()}", "--reset-accept-counters"], capture_output=True, text=True
    )
    assert unanswered.returncode == 1 and "/server_info answered nothing: ConnectionRefusedError" in unanswered.stderr


def test_a_reset_whose_window_cannot_be_folded_fails(fake: Any) -> None:
    routes = reset_routes(server_info())
    routes[("POST", "/generate")] = (200, real_stream("baseline"))  # speculation claimed, no spec_verify_ct answered
    outcome, message = bench_client.reset_accept_counters(fake(routes).url, {})
    assert outcome == "failed" and message.endswith("then a request to fold the 40-step window failed: its response has no spec_verify_ct")
    del routes[("POST", "/generate")]
    outcome, message = bench_client.reset_accept_counters(fake(routes).url, {})
    assert outcome == "failed" and "failed: HTTP 404" in message


def test_the_role_resets_before_each_bench_serving_run_only() -> None:
    tasks = yaml.safe_load((ROOT / "roles/sglang_benchmark/tasks/run.yml").read_text())
    names = [t["name"] for t in tasks]
    reset = next(i for i, n in enumerate(names) if n.startswith("Reset the server's accept-length counters"))
    assert names[reset + 1].startswith("Start the run, detached")
    task = tasks[reset]
    assert task["when"] == "sglang_benchmark_tool == 'bench_serving'"
    argv = task["ansible.builtin.command"]["argv"]
    assert argv[-1] == "--reset-accept-counters" and argv[argv.index("--keys-file") + 1] == "{{ sglang_benchmark_keys_file }}"
    assert argv[argv.index("--prompts") + 1] == "{{ sglang_benchmark_dir }}/prompts.json"  # the drain requests use the first prompt
    assert task["changed_when"] == "sglang_benchmark_reset.stdout is match('reset:')"


# ------------------------------------------------------------------ bench_serving's record


def bench_serving_line(accept: Optional[float], algorithm: Optional[str] = "EAGLE3") -> dict[str, Any]:
    return {
        "duration": 2.0,
        "max_concurrency": 1,
        "accept_length": accept,
        "server_info": {"speculative_algorithm": algorithm, "internal_states": [{}]},
        "ttfts": [0.1],
        "itls": [[0.01] * 3],
        "output_lens": [4],
        "errors": [""],
    }


def test_bench_serving_reports_the_reset_counters_or_says_why_not() -> None:
    run = from_bench_serving(bench_serving_line(2.4), "eagle3", 4)
    assert (run["accept_length"], run["accept_source"], run["accept_note"]) == (2.4, ACCEPT_SOURCE_BENCH_SERVING, "")
    assert "reset before the run" in ACCEPT_SOURCE_BENCH_SERVING and "warm-up request included" in ACCEPT_SOURCE_BENCH_SERVING
    short = summarize(from_bench_serving(bench_serving_line(None), "eagle3", 4))
    assert short["accept_length"] is None
    assert short["accept_note"] == "run too short to measure: the server folds its counters every 40 decode steps"
    plain = summarize(from_bench_serving(bench_serving_line(None, algorithm=None), "baseline", 4))
    assert plain["accept_note"].startswith("no speculation: the server runs without speculative decoding")
    unknown = {k: v for k, v in bench_serving_line(None).items() if k != "server_info"}
    note = from_bench_serving(unknown, "eagle3", 4)["accept_note"]
    assert note.endswith("(or it runs without speculation: bench_serving recorded no server_info)")
    assert figure_lines({"eagle3": {"c1": summarize(run)}})[0].endswith(f", accept length 2.40 ({ACCEPT_SOURCE_BENCH_SERVING})")


def test_the_report_names_the_method_or_says_why_there_is_no_number() -> None:
    measured = summarize(from_bench_serving(bench_serving_line(2.4), "eagle3", 4))
    short = summarize(from_bench_serving(bench_serving_line(None), "eagle3", 4))
    legacy = summarize({"tool": "toolkit-client", "profile": "x", "concurrency": 1, "requests": [], "accept_length": None})
    assert legacy["accept_note"] == "no accept length recorded"
    report = {
        "release": "r",
        "host": "h",
        "generated": "now",
        "state": "ready",
        "service": {"configured_profile": "eagle3", "profile": "eagle3", "argv": [], "flag_check": "x", "flag_warnings": [], "health": {}},
        "benchmark": {"settings": {}, "profiles": {"eagle3": {"c1": measured, "batch": short}}, "verdict": {}},
        "optimisations": [],
    }
    md = render_markdown(report)
    assert "| 2.40 (server counters, reset before the run (bench_serving's warm-up request included)) |" in md.replace("&#x27;", "'")
    assert "| none: run too short to measure: the server folds its counters every 40 decode steps |" in md


# ------------------------------------------------------------------ the acceptance test, on the stand-in


STANDIN_PACKAGE = ROOT / "tests/fixtures/sglang-standin/sglang_standin"
STANDIN_READY = "SGLANG_STANDIN_CONTROL_DIR" in "".join(p.read_text() for p in STANDIN_PACKAGE.glob("*.py"))


@pytest.fixture()
def standin(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The stand-in server (TEST FIXTURE) with EAGLE-3, its accept length set through its control directory."""
    if not STANDIN_READY:
        pytest.fail("the stand-in server has no SGLANG_STANDIN_CONTROL_DIR (the accept-length control this test needs)")
    control = tmp_path / "control"
    control.mkdir()
    env = {
        "SGLANG_STANDIN_LOAD_SECONDS": "0.2",
        "SGLANG_STANDIN_WARMUP_SECONDS": "0.2",
        "SGLANG_STANDIN_HEALTH_SECONDS": "0.2",
        "SGLANG_STANDIN_TOKEN_MS": "1",
        "SGLANG_STANDIN_CONTROL_DIR": str(control),
    }
    with standin_server(["--model-path", "m", "--speculative-algorithm", "EAGLE3"], env) as url:
        assert bench_client._get(url, "/health", None) is not None, "the stand-in did not become healthy"
        yield url, control


def lifetime_figure(url: str) -> Optional[float]:
    info = json.loads(bench_client._get(url, "/server_info", None) or "{}")
    return (info.get("internal_states") or [{}])[0].get("avg_spec_accept_length")


# Earlier traffic at accept length 1.0, then the measured run at 2.5: 100-token requests (40 steps of
# 2.5 tokens each), enough that the server's lifetime figure is far from 2.5 before and after.
PRIOR, MEASURED, OUTPUT_LEN, CONCURRENCY = 16, 16, 100, 4


def prior_traffic(url: str, control: Path) -> None:
    (control / "accept-length").write_text("1.0\n")
    prompts = bench_client.load_prompts(str(PROMPTS), PRIOR)
    assert all(r["ok"] for r in bench_client.run(url, prompts, OUTPUT_LEN, CONCURRENCY, "earlier")["requests"])
    (control / "accept-length").write_text("2.5\n")


def test_acceptance_the_toolkit_client_reports_this_runs_accept_length(standin: tuple[str, Path], tmp_path: Path) -> None:
    url, control = standin
    prior_traffic(url, control)
    out = tmp_path / "run.json"
    argv = ["--url", url, "--prompts", str(PROMPTS), "--num-prompts", str(MEASURED), "--output-len", str(OUTPUT_LEN)]
    assert bench_client.main([*argv, "--concurrency", str(CONCURRENCY), "--profile", "eagle3", "--out", str(out)]) == 0
    fig = summarize(json.loads(out.read_text()))
    assert fig["ok"] and fig["accept_source"] == bench_client.ACCEPT_SOURCE_REQUESTS, fig
    assert fig["accept_length"] == pytest.approx(2.5, abs=0.05), fig["accept_note"]
    lifetime = lifetime_figure(url)
    assert lifetime is not None and lifetime < 2.0, f"the server's lifetime figure {lifetime} should blend the earlier traffic"


def test_acceptance_the_reset_makes_the_servers_figure_this_runs(standin: tuple[str, Path]) -> None:
    url, control = standin
    prior_traffic(url, control)
    before = lifetime_figure(url)
    assert before is not None and before < 1.5, before
    outcome, message = bench_client.reset_accept_counters(url, {})
    assert outcome == "reset", message
    # What bench_serving does after the reset: its warm-up request, its run, then it reads the server's figure.
    prompts = bench_client.load_prompts(str(PROMPTS), MEASURED)
    assert bench_client.stream_one(url, prompts[0], OUTPUT_LEN, None, 60)["ok"]
    record = bench_client.run(url, prompts, OUTPUT_LEN, CONCURRENCY, "eagle3")
    line = {
        "duration": record["duration_s"],
        "max_concurrency": CONCURRENCY,
        "accept_length": lifetime_figure(url),
        "server_info": json.loads(bench_client._get(url, "/server_info", None) or "{}"),
        "ttfts": [r["ttft_s"] for r in record["requests"]],
        "itls": [r["itl_s"] for r in record["requests"]],
        "output_lens": [r["output_tokens"] for r in record["requests"]],
        "errors": [r["error"] for r in record["requests"]],
    }
    fig = summarize(from_bench_serving(line, "eagle3", OUTPUT_LEN))
    assert fig["ok"] and fig["accept_source"] == ACCEPT_SOURCE_BENCH_SERVING
    assert fig["accept_length"] == pytest.approx(2.5, abs=0.05), fig["accept_note"]
