"""A worker's requests in flight, from the server itself, and the wait until there are none.

Standard library only. The router's own count cannot be used: sglang-router 0.3.2's
``smg_worker_requests_active`` read 0 for a removed worker that still had 4 requests running, and
SGLang's ``sglang:num_running_reqs`` gauge is refreshed every 40 decode steps or 30 s. The server's
``GET /v1/loads`` (0.5.9 on, read in entrypoints/v1_loads.py of 0.5.9, 0.5.13 and 0.5.23) answers
``{"loads": [{"dp_rank", "num_running_reqs", "num_waiting_reqs", ...}, ...]}`` per DP rank: in 0.5.9
asked of the scheduler at each call; from 0.5.13 read from the snapshot the scheduler publishes every
15 decode steps (``--load-snapshot-publish-interval``) and at once on a prefill and when it turns idle.
``GET /get_load`` (0.5.9-0.5.20, deprecated, gone in 0.5.21; from 0.5.13 a shim over the same loads) is used
where /v1/loads is 404, and where it answers 500: SGLang 0.5.9-0.5.15's HTTP-metrics middleware
(``--enable-metrics``, ``_get_fastapi_request_path``) reads ``route.path`` of every route it matches, and FastAPI
0.137 and later put an included router (v1_loads' ``APIRouter``) in ``app.routes`` as an ``_IncludedRouter`` that has
none: ``/v1/loads`` answers 500, ``/get_load`` (declared on the app itself) answers. 0.5.16 reads it with getattr.
``[{"dp_rank", "num_reqs" (running + waiting), ...}]``. Both need the server's API key.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ..errors import ToolkitError


class DrainError(ToolkitError):
    """The server's load could not be read, or its requests did not finish in time."""


@dataclass(frozen=True)
class Load:
    """Requests in flight on one server: running and waiting, summed over its DP ranks."""

    running: int
    waiting: int
    source: str  # the endpoint read: /v1/loads or /get_load
    note: str = ""  # why the endpoint read is not /v1/loads, where it answered but failed

    @property
    def in_flight(self) -> int:
        return self.running + self.waiting


def parse_v1_loads(body: Any) -> tuple[int, int]:
    """(running, waiting) from a /v1/loads answer; ValueError when it is not one."""
    loads = body.get("loads") if isinstance(body, dict) else None
    if not isinstance(loads, list):
        raise ValueError("no 'loads' list")
    running = sum(int(item["num_running_reqs"]) for item in loads)
    waiting = sum(int(item["num_waiting_reqs"]) for item in loads)
    return running, waiting


def parse_get_load(body: Any) -> tuple[int, int]:
    """(running, waiting) from a /get_load answer (num_reqs counts both); ValueError when it is not one."""
    if not isinstance(body, list):
        raise ValueError("not a list")
    total = sum(int(item["num_reqs"]) for item in body)
    waiting = sum(int(item.get("num_waiting_reqs") or 0) for item in body)
    return total - waiting, waiting


def _get(url: str, path: str, api_key: Optional[str], timeout: float) -> tuple[int, str]:
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    conn_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_class(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        conn.request("GET", parts.path + path, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        raise DrainError(f"{url} did not answer GET {path}: {type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()


V1_LOADS_500 = (
    "GET /v1/loads answered HTTP 500: SGLang 0.5.9-0.5.15's metrics middleware (--enable-metrics) fails on FastAPI "
    "0.137 or later (start-failure catalogue: v1-loads-500-metrics-middleware-fastapi-0137)"
)


def read_load(url: str, api_key: Optional[str], timeout: float = 10.0) -> Load:
    """The server's requests in flight now: /v1/loads, or /get_load where that is 404 or 500 (module docstring)."""
    note = ""
    for path, parse in (("/v1/loads", parse_v1_loads), ("/get_load", parse_get_load)):
        status, text = _get(url, path, api_key, timeout)
        if status == 404:
            continue
        if status == 401:
            raise DrainError(f"GET {url}{path} answered 401: the worker's API key (sglang_service_api_key) was not accepted")
        if status == 500 and path == "/v1/loads":
            note = f"{V1_LOADS_500}; read /get_load instead"
            continue
        if status != 200:
            raise DrainError(f"GET {url}{path} answered HTTP {status}: {text.strip()[:300]}")
        try:
            running, waiting = parse(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise DrainError(f"GET {url}{path} answered something that is not SGLang's load ({exc}): {text.strip()[:300]}") from exc
        return Load(running, waiting, path, note)
    if note:
        raise DrainError(
            f"{url}: {V1_LOADS_500}, and it has no /get_load to read instead: its requests in flight cannot be read. "
            "Pin fastapi below 0.137 in the release's closure, or deploy SGLang 0.5.16 or later"
        )
    raise DrainError(f"{url} answers 404 to both /v1/loads and /get_load: not an SGLang server of 0.5.9 or later")


@dataclass
class DrainResult:
    drained: bool
    elapsed_s: float
    polls: int
    last: Optional[Load]
    history: list[tuple[float, int]] = field(default_factory=list)  # (seconds, requests in flight), when it changed

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["last"] = None if self.last is None else {**asdict(self.last), "in_flight": self.last.in_flight}
        return out


def wait_drained(
    read: Callable[[], Load],
    timeout: float,
    interval: float = 1.0,
    quiet_polls: int = 2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DrainResult:
    """Poll ``read`` until it reports no request in flight ``quiet_polls`` times in a row (a request
    the router sent just before the removal may still be on its way to the scheduler), or until
    ``timeout`` seconds; the result says which, and how the count went."""
    start = clock()
    result = DrainResult(drained=False, elapsed_s=0.0, polls=0, last=None)
    quiet = 0
    while True:
        load = read()
        result.polls += 1
        result.elapsed_s = round(clock() - start, 2)
        if result.last is None or load.in_flight != result.last.in_flight:
            result.history.append((result.elapsed_s, load.in_flight))
        result.last = load
        quiet = quiet + 1 if load.in_flight == 0 else 0
        if quiet >= quiet_polls:
            result.drained = True
            return result
        if clock() - start >= timeout:
            return result
        sleep(interval)
