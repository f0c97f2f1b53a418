"""SGLang's router (PyPI `sglang-router` 0.3.x and its successor `smg`): its run-time worker API.

Standard library only. What both versions answer was recorded from the real wheels on this project's
CPU (tests/data/router/, scripts/record_router_answers.py), and the client is tested against it:

- ``GET /workers`` -> 200 ``{"workers": [{"id", "url", "is_healthy", ...}], "total", "stats"}``;
  smg adds ``"status": "ready"|"draining"``; 401 without the router's key (both).
- ``POST /workers {"url", "api_key"}`` -> 202 ``{"status": "accepted", "worker_id", ...}``: queued, the
  worker is listed once the router has read its /model_info and found it healthy. The same URL again:
  smg 409 ``WORKER_ALREADY_EXISTS``; 0.3.2 202 and a job that then fails. So add only what is not listed.
- ``DELETE /workers/{id}`` -> 202, queued: 0.3.2 no longer lists the worker at once, smg still lists it
  as "ready" right after and not 6 s later. New requests can reach it while it is listed, so the
  caller waits until it is gone (``wait_gone``) before it counts the worker's running requests.
  An unknown id: 404 ``WORKER_NOT_FOUND`` (both).
- ``/add_worker``, ``/remove_worker``, ``/list_workers`` (older routers, still in 0.3.2's README): 404.
- smg forwards the client's ``Authorization`` header to the worker; 0.3.2 sends the worker's own key
  (recorded: a completion through smg with per-worker keys is answered 401 by the worker).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Optional

from ..errors import ToolkitError


class RouterError(ToolkitError):
    """The router answered something other than what its API promises, or not at all."""


@dataclass(frozen=True)
class RouterWorker:
    """One worker as the router lists it."""

    id: str
    url: str
    healthy: bool
    status: Optional[str]  # smg: ready | draining; sglang-router 0.3.x: not given (None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def same_url(a: str, b: str) -> bool:
    """Whether two worker URLs name the same server (scheme and host case, a trailing slash, a default port)."""
    return _norm(a) == _norm(b)


def _norm(url: str) -> tuple[str, str, int, str]:
    parts = urllib.parse.urlsplit(url.strip())
    scheme = parts.scheme.lower() or "http"
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")


class RouterClient:
    """The router's admin API at ``base_url`` with its API key (None: a router started without one)."""

    def __init__(self, base_url: str, api_key: Optional[str], timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    # ---- HTTP

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any, str]:
        """(status, parsed JSON or None, text). RouterError when the router does not answer."""
        parts = urllib.parse.urlsplit(self.base_url)
        conn_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = conn_class(parts.hostname or "127.0.0.1", parts.port, timeout=self.timeout)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            conn.request(method, parts.path + path, body=None if body is None else json.dumps(body), headers=headers)
            response = conn.getresponse()
            text = response.read().decode("utf-8", "replace")
            status = response.status
        except (OSError, http.client.HTTPException) as exc:
            raise RouterError(f"the router at {self.base_url} did not answer {method} {path}: {type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        return status, parsed, text

    def _refused(self, method: str, path: str, status: int, text: str) -> RouterError:
        if status == 401:
            why = "401: the router refused its API key (sglang_router_api_key must be the key the router runs with)"
        elif status == 404 and path.startswith("/workers") and method == "GET":
            why = "404: this router has no /workers API (sglang-router older than 0.3, or not a router at this address)"
        else:
            why = f"HTTP {status}: {text.strip()[:300]}"
        return RouterError(f"{method} {self.base_url}{path} answered {why}", router_status=status)

    # ---- the worker API

    def workers(self) -> list[RouterWorker]:
        """The workers the router lists now."""
        status, body, text = self._call("GET", "/workers")
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("workers"), list):
            raise self._refused("GET", "/workers", status, text)
        return [
            RouterWorker(
                id=str(w.get("id")),
                url=str(w.get("url")),
                healthy=bool(w.get("is_healthy")),
                status=str(w["status"]) if w.get("status") is not None else None,
            )
            for w in body["workers"]
            if isinstance(w, dict)
        ]

    def find(self, url: str) -> Optional[RouterWorker]:
        return next((w for w in self.workers() if same_url(w.url, url)), None)

    def add(self, url: str, api_key: Optional[str]) -> tuple[bool, str]:
        """Register ``url`` with its own key unless it is listed: (whether a request was sent, its id)."""
        listed = self.find(url)
        if listed is not None:
            return False, listed.id
        body: dict[str, Any] = {"url": url}
        if api_key:
            body["api_key"] = api_key
        status, answer, text = self._call("POST", "/workers", body)
        if status == 409 and isinstance(answer, dict) and answer.get("code") == "WORKER_ALREADY_EXISTS":
            listed = self.find(url)  # added meanwhile by someone else
            if listed is not None:
                return False, listed.id
        if status not in (200, 201, 202) or not isinstance(answer, dict) or not answer.get("worker_id"):
            raise self._refused("POST", "/workers", status, text)
        return True, str(answer["worker_id"])

    def remove(self, url: str) -> Optional[str]:
        """Ask the router to remove ``url``: its id, or None when it was not listed."""
        listed = self.find(url)
        if listed is None:
            return None
        status, answer, text = self._call("DELETE", f"/workers/{urllib.parse.quote(listed.id, safe='')}")
        if status == 404 and isinstance(answer, dict) and answer.get("code") == "WORKER_NOT_FOUND":
            return listed.id  # removed meanwhile
        if status not in (200, 202, 204):
            raise self._refused("DELETE", f"/workers/{listed.id}", status, text)
        return listed.id

    # ---- waiting for the router's queued work

    def wait_healthy(
        self,
        url: str,
        timeout: float,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> RouterWorker:
        """Until the router lists ``url`` healthy (and not draining); RouterError naming what it saw at the timeout."""
        deadline = clock() + timeout
        seen: Optional[RouterWorker] = None
        while True:
            seen = self.find(url)
            if seen is not None and seen.healthy and seen.status in (None, "ready"):
                return seen
            if clock() >= deadline:
                state = "not listed" if seen is None else f"listed, healthy={seen.healthy}, status={seen.status}"
                raise RouterError(
                    f"the router at {self.base_url} did not list {url} as healthy within {timeout:.0f} s: {state}",
                    worker=None if seen is None else seen.to_dict(),
                )
            sleep(interval)

    def wait_gone(
        self,
        url: str,
        timeout: float,
        interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> float:
        """Until the router no longer lists ``url`` (no new request can reach it): seconds waited."""
        start = clock()
        while True:
            seen = self.find(url)
            if seen is None:
                return clock() - start
            if clock() - start >= timeout:
                raise RouterError(
                    f"the router at {self.base_url} still lists {url} {timeout:.0f} s after its removal "
                    f"(healthy={seen.healthy}, status={seen.status})",
                    worker=seen.to_dict(),
                )
            sleep(interval)

    def healthy_count(self) -> int:
        return sum(1 for w in self.workers() if w.healthy and w.status in (None, "ready"))
