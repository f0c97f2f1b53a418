"""The router client and the drain (plugins/module_utils/sglang_sm120/fleet/) against what the real routers
answered (tests/data/router/<distribution>-<version>/, recorded by scripts/record_router_answers.py
from the real sglang-router 0.3.2 and smg 1.13.0 wheels) and against the stand-in server's loads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

import pytest

from conftest import CACHE, DATA, ROOT, free_port, standin_server
from sglang_sm120.fleet import drain, router
from sglang_sm120.serve import bench_client

ROUTERS = ["smg-1.13.0", "sglang-router-0.3.2"]


def answer(version: str, name: str) -> dict[str, Any]:
    return json.loads((DATA / "router" / version / f"{name}.json").read_text(encoding="utf-8"))


class Replay:
    """A router that answers from recordings: per "METHOD /path" a list of recorded answers, served in
    order (the last one repeated); anything else 404. It keeps every request it got."""

    def __init__(self, script: dict[str, list[dict[str, Any]]]) -> None:
        self.script = {key: list(value) for key, value in script.items()}
        self.requests: list[tuple[str, str, Optional[str], Any]] = []

    def serve(self) -> Iterator[str]:
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def handle_one(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                replay.requests.append((self.command, self.path, self.headers.get("Authorization"), body))
                queue = replay.script.get(f"{self.command} {self.path}")
                if not queue:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                recorded = queue.pop(0) if len(queue) > 1 else queue[0]
                data = b"" if recorded["body"] is None else json.dumps(recorded["body"]).encode()
                self.send_response(recorded["status"])
                self.send_header("Content-Type", recorded.get("content_type") or "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = handle_one

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()


@pytest.fixture
def replay() -> Iterator:
    servers = []

    def start(script: dict[str, list[dict[str, Any]]]) -> tuple[Replay, str]:
        rep = Replay(script)
        gen = rep.serve()
        servers.append(gen)
        return rep, next(gen)

    yield start
    for gen in servers:
        next(gen, None)


def workers_of(version: str, name: str) -> list[dict[str, Any]]:
    return answer(version, name)["body"]["workers"]


@pytest.mark.parametrize("version", ROUTERS)
def test_the_worker_list_is_read_from_both_routers(version: str, replay) -> None:
    _, url = replay({"GET /workers": [answer(version, "workers-two-healthy")]})
    listed = router.RouterClient(url, "k").workers()
    assert [w.url for w in listed] == [w["url"] for w in workers_of(version, "workers-two-healthy")]
    assert all(w.healthy for w in listed)
    assert {w.status for w in listed} == ({"ready"} if version.startswith("smg") else {None})


@pytest.mark.parametrize("version", ROUTERS)
def test_a_wrong_router_key_names_the_variable(version: str, replay) -> None:
    recorded = answer(version, "workers-without-key")
    assert recorded["status"] == 401
    _, url = replay({"GET /workers": [recorded]})
    with pytest.raises(router.RouterError, match="sglang_router_api_key"):
        router.RouterClient(url, None).workers()


@pytest.mark.parametrize("version", ROUTERS)
def test_the_old_worker_routes_are_gone_and_a_router_without_workers_is_named(version: str, replay) -> None:
    for name in ("legacy-add_worker", "legacy-remove_worker", "legacy-list_workers"):
        assert answer(version, name)["status"] == 404
    _, url = replay({"GET /workers": [answer(version, "legacy-list_workers")]})
    with pytest.raises(router.RouterError, match="no /workers API"):
        router.RouterClient(url, "k").workers()


@pytest.mark.parametrize("version", ROUTERS)
def test_a_listed_worker_is_not_added_again(version: str, replay) -> None:
    listed = workers_of(version, "workers-two-healthy")[0]
    rep, url = replay({"GET /workers": [answer(version, "workers-two-healthy")], "POST /workers": [answer(version, "add-worker")]})
    sent, worker_id = router.RouterClient(url, "k").add(listed["url"] + "/", "wk")
    assert (sent, worker_id) == (False, listed["id"])
    assert [r[0] for r in rep.requests] == ["GET"]


@pytest.mark.parametrize("version", ROUTERS)
def test_a_new_worker_is_added_with_its_own_key_and_waited_for(version: str, replay) -> None:
    added = answer(version, "add-worker")
    script = {
        "GET /workers": [
            {"status": 200, "body": {"workers": [], "total": 0}},
            {"status": 200, "body": {"workers": [], "total": 0}},
            answer(version, "workers-two-healthy"),
        ],
        "POST /workers": [added],
    }
    rep, url = replay(script)
    client = router.RouterClient(url, "router-key")
    sent, worker_id = client.add(added["request"]["url"], "worker-key")
    assert sent and worker_id == added["body"]["worker_id"]
    post = next(r for r in rep.requests if r[0] == "POST")
    assert post[2] == "Bearer router-key" and post[3] == {"url": added["request"]["url"], "api_key": "worker-key"}
    seen = client.wait_healthy(added["request"]["url"], timeout=5, interval=0.01)
    assert seen.healthy and seen.id in {w["id"] for w in workers_of(version, "workers-two-healthy")}


def test_smg_refuses_the_same_url_twice_and_the_client_takes_the_listed_id(replay) -> None:
    again = answer("smg-1.13.0", "add-worker-again")
    assert again["status"] == 409 and again["body"]["code"] == "WORKER_ALREADY_EXISTS"
    listed = workers_of("smg-1.13.0", "workers-two-healthy")[0]
    # listed by nobody when the client looked, listed by the time the router answered 409
    script = {
        "GET /workers": [{"status": 200, "body": {"workers": []}}, answer("smg-1.13.0", "workers-two-healthy")],
        "POST /workers": [again],
    }
    _, url = replay(script)
    assert router.RouterClient(url, "k").add(listed["url"], "wk") == (False, listed["id"])


def test_sglang_router_0_3_2_accepts_the_same_url_twice_so_only_a_listed_check_prevents_it() -> None:
    assert answer("sglang-router-0.3.2", "add-worker-again")["status"] == 202


@pytest.mark.parametrize("version", ROUTERS)
def test_removal_waits_until_the_router_no_longer_lists_the_worker(version: str, replay) -> None:
    removed = answer(version, "remove-worker")
    worker_id = removed["path"].rsplit("/", 1)[-1]
    url_of = {w["id"]: w["url"] for w in workers_of(version, "workers-two-healthy")}
    script = {
        "GET /workers": [
            answer(version, "workers-two-healthy"),
            answer(version, "workers-right-after-remove"),
            answer(version, "workers-6s-after-remove"),
        ],
        f"DELETE /workers/{worker_id}": [removed],
    }
    rep, url = replay(script)
    client = router.RouterClient(url, "k")
    assert client.remove(url_of[worker_id]) == worker_id
    client.wait_gone(url_of[worker_id], timeout=5, interval=0.01)
    polls = [r for r in rep.requests if r[0] == "GET"]
    still_listed_right_after = any(w["id"] == worker_id for w in workers_of(version, "workers-right-after-remove"))
    assert still_listed_right_after == version.startswith("smg")  # smg removes in the background
    assert len(polls) == (3 if still_listed_right_after else 2)


@pytest.mark.parametrize("version", ROUTERS)
def test_a_worker_removed_meanwhile_is_not_an_error(version: str, replay) -> None:
    unknown = answer(version, "remove-unknown-worker")
    assert unknown["status"] == 404 and unknown["body"]["code"] == "WORKER_NOT_FOUND"
    listed = workers_of(version, "workers-two-healthy")[0]
    _, url = replay({"GET /workers": [answer(version, "workers-two-healthy")], f"DELETE /workers/{listed['id']}": [unknown]})
    assert router.RouterClient(url, "k").remove(listed["url"]) == listed["id"]


def test_a_worker_never_listed_healthy_is_named_at_the_timeout(replay) -> None:
    _, url = replay({"GET /workers": [answer("smg-1.13.0", "workers-6s-after-remove")]})
    gone = answer("smg-1.13.0", "remove-worker")["path"].rsplit("/", 1)[-1]
    url_of = {w["id"]: w["url"] for w in workers_of("smg-1.13.0", "workers-two-healthy")}
    with pytest.raises(router.RouterError, match=r"did not list .* as healthy within 0 s: not listed"):
        router.RouterClient(url, "k").wait_healthy(url_of[gone], timeout=0.0, interval=0.01)


def test_smg_passes_the_clients_key_to_the_worker_and_0_3_2_the_workers_own() -> None:
    """Recorded with per-worker keys: why the role pins sglang-router (workers keep keys of their own)."""
    assert answer("smg-1.13.0", "completion-through-router")["status"] == 401
    assert answer("sglang-router-0.3.2", "completion-through-router")["status"] == 200


def test_the_recordings_hold_placeholders_not_keys() -> None:
    for version in ROUTERS:
        assert answer(version, "add-worker")["request"]["api_key"] == "<worker-key>"
        texts = [p.read_text(encoding="utf-8", errors="replace") for p in (DATA / "router" / version).rglob("*") if p.is_file()]
        # the recorder's keys were 32 hex digits; none is left anywhere (a completion's "id" has that shape too)
        assert not any(re.search(r"\b[0-9a-f]{32}\b", re.sub(r'"id": "[0-9a-f]{32}"', "", text)) for text in texts)


def test_urls_compare_as_the_same_server() -> None:
    assert router.same_url("http://Host:8000/", "http://host:8000")
    assert router.same_url("http://host/", "http://host:80")
    assert not router.same_url("http://host:8000", "http://host:8001")


# ------------------------------------------------------------------ the drain


def test_load_answers_of_each_endpoint_parse() -> None:
    two_ranks = {"loads": [{"num_running_reqs": 2, "num_waiting_reqs": 1}, {"num_running_reqs": 3, "num_waiting_reqs": 0}]}
    assert drain.parse_v1_loads(two_ranks) == (5, 1)
    assert drain.parse_get_load([{"num_reqs": 4, "num_waiting_reqs": 1}]) == (3, 1)
    with pytest.raises(ValueError):
        drain.parse_v1_loads({"detail": "Not Found"})


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_the_drain_counts_streamed_requests_until_they_finish(version: str) -> None:
    env = {
        "SGLANG_STANDIN_VERSION": version,
        "SGLANG_STANDIN_LOAD_SECONDS": "0.3",
        "SGLANG_STANDIN_WARMUP_SECONDS": "0.1",
        "SGLANG_STANDIN_HEALTH_SECONDS": "0.01",
        "SGLANG_STANDIN_TOKEN_MS": "20",
    }
    with standin_server(["--model-path", "/models/tiny", "--api-key", "wk"], env) as url:
        assert drain.read_load(url, "wk").in_flight == 0
        results: list[dict[str, Any]] = []
        threads = [threading.Thread(target=lambda: results.append(bench_client.stream_one(url, "one two", 60, "wk", 30))) for _ in range(3)]
        for thread in threads:
            thread.start()
        busy = drain.wait_drained(lambda: drain.read_load(url, "wk"), timeout=0.3, interval=0.05)
        assert not busy.drained and busy.last is not None and busy.last.in_flight == 3 and busy.last.source == "/v1/loads"
        done = drain.wait_drained(lambda: drain.read_load(url, "wk"), timeout=20, interval=0.1)
        for thread in threads:
            thread.join()
        assert done.drained and done.history[-1][1] == 0 and done.history[0][1] > 0
        assert len(results) == 3 and all(r.get("ok") for r in results)
        with pytest.raises(drain.DrainError, match=r"401.*sglang_service_api_key"):
            drain.read_load(url, "wrong")


def test_a_server_without_v1_loads_is_read_from_get_load(replay) -> None:
    legacy = {"status": 200, "body": [{"dp_rank": 0, "num_reqs": 3, "num_waiting_reqs": 1, "num_tokens": 9, "ts_tic": 1.0}]}
    _, url = replay({"GET /get_load": [legacy]})
    assert drain.read_load(url, None) == drain.Load(2, 1, "/get_load")


# SGLang 0.5.9's own HTTP-metrics middleware and v1_loads router, served by uvicorn with the FastAPI of the real
# 0.5.9 runtime environment (as resolved by `make sglang-runtime`); /get_load declared on the app as http_server.py
# declares it, its answer (2 running, 1 waiting) standing in for the scheduler's.
METRICS_APP = """
import sys

import uvicorn
from fastapi import FastAPI
from sglang.srt.entrypoints.v1_loads import router as v1_loads_router
from sglang.srt.utils.common import add_prometheus_track_response_middleware

app = FastAPI()
app.include_router(v1_loads_router)


@app.get("/get_load")
async def get_load():
    return [{"dp_rank": 0, "num_reqs": 3, "num_waiting_reqs": 1, "num_tokens": 0, "num_pending_tokens": 0, "ts_tic": 0.0}]


add_prometheus_track_response_middleware(app)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def test_sglangs_metrics_middleware_fails_v1_loads_on_new_fastapi_and_the_drain_reads_get_load(
    tmp_path: Path, sglang_runtime_python: Path
) -> None:
    fastapi_version = subprocess.run(
        [str(sglang_runtime_python), "-c", "import fastapi; print(fastapi.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert tuple(int(p) for p in fastapi_version.split(".")[:2]) >= (0, 137), f"the runtime's FastAPI {fastapi_version} predates the change"
    (tmp_path / "app.py").write_text(METRICS_APP)
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("w") as out:
        env = {**os.environ, "PYTHONPATH": str(CACHE / "sglang" / "0.5.9")}
        server = subprocess.Popen(
            [str(sglang_runtime_python), str(tmp_path / "app.py"), str(port)], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                status = urllib.request.urlopen(url + "/get_load", timeout=5).status
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.5)
        assert status == 200
        load = drain.read_load(url, None)
        assert (load.running, load.waiting, load.source) == (2, 1, "/get_load")
        assert load.note.startswith("GET /v1/loads answered HTTP 500") and "v1-loads-500-metrics-middleware-fastapi-0137" in load.note
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "'_IncludedRouter' object has no attribute 'path'" in log.read_text()


def test_a_500_from_v1_loads_without_get_load_is_refused_naming_the_cause(replay) -> None:
    _, url = replay({"GET /v1/loads": [{"status": 500, "body": None, "content_type": "text/plain"}]})
    with pytest.raises(drain.DrainError, match=r"has no /get_load to read instead.*Pin fastapi below 0.137"):
        drain.read_load(url, None)


def test_a_drain_needs_two_quiet_polls_in_a_row() -> None:
    counts = iter([1, 0, 1, 0, 0, 5])
    now = [0.0]

    def clock() -> float:
        return now[0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    result = drain.wait_drained(lambda: drain.Load(next(counts), 0, "/v1/loads"), timeout=60, interval=1, clock=clock, sleep=sleep)
    assert result.drained and result.polls == 5
    assert result.history == [(0.0, 1), (1.0, 0), (2.0, 1), (3.0, 0)]


# ------------------------------------------------------------------ the router's launcher (roles/sglang_router/files/)


def launcher():
    import importlib.util

    spec = importlib.util.spec_from_file_location("router_launcher", ROOT / "roles/sglang_router/files/router_launcher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_launcher_reads_the_key_from_the_named_file(tmp_path) -> None:
    mod = launcher()
    (tmp_path / "file").write_text("from-file\n")
    assert mod.read_key({"SGLANG_ROUTER_API_KEY_FILE": str(tmp_path / "file")}) == "from-file"
    assert mod.read_key({}) is None
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SystemExit, match="empty"):
        mod.read_key({"SGLANG_ROUTER_API_KEY_FILE": str(tmp_path / "empty")})


def test_the_launcher_refuses_a_key_on_its_command_line_and_reaches_its_router_on_loopback() -> None:
    mod = launcher()
    with pytest.raises(SystemExit, match="would show in ps"):
        mod.main(["--port", "30000", "--api-key", "k"])
    assert mod.local_base(["--host", "0.0.0.0", "--port", "30100"]) == "http://127.0.0.1:30100"
    assert mod.local_base(["--host", "10.0.0.5"]) == "http://10.0.0.5:30000"
    assert mod.local_base(["--host", "fd00::5", "--port", "1"]) == "http://[fd00::5]:1"


# ------------------------------------------------------------------ the summary without a router


def test_the_summary_runs_and_names_no_router_where_the_inventory_has_none(tmp_path) -> None:
    """As the production inventory wires it with no group `router`: an empty router url and router host
    (Ansible resolves delegate_to before `when`, so an empty one would fail the whole summary)."""
    playbook = tmp_path / "summary.yml"
    playbook.write_text(f"- name: The summary\n  ansible.builtin.import_playbook: {ROOT / 'playbooks/summary.yml'}\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)]
    argv += ["-e", json.dumps({"sglang_router_url": "", "sglang_router_router_host": "", "ansible_python_interpreter": sys.executable})]
    run = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "benchmark: not run in this play" in run.stdout and "router:" not in run.stdout


def test_deploy_proves_the_release_before_the_worker_leaves_its_router() -> None:
    """A release the start canary refuses costs no drain: deploy.yml runs sglang_service's prove entry
    point (canary beside the serving server only) before the leave, and main after it, told so."""
    import yaml

    play = yaml.safe_load((ROOT / "playbooks/deploy.yml").read_text())[0]
    steps = play["tasks"][0]["block"]

    def index(role: str, entry: str) -> int:
        for i, task in enumerate(steps):
            include = task.get("ansible.builtin.include_role", {})
            if include.get("name") == role and include.get("tasks_from", "main") == entry:
                return i
        raise AssertionError(f"deploy.yml does not include {role}:{entry}")

    prove, leave, start = (
        index(f"sm120.sglang.{role}", entry)
        for role, entry in (("sglang_service", "prove"), ("sglang_router", "leave"), ("sglang_service", "main"))
    )
    assert prove < leave < start
    assert steps[prove]["vars"]["sglang_service_canary_beside_only"] is True
    assert steps[start]["vars"]["sglang_service_prepared"] is True
    # the leave waits for a server that must restart at all
    assert "sglang_service_needs_start" in steps[leave]["when"]
