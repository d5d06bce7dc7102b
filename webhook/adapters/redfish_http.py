"""HTTP for the Redfish client: one keep-alive ``requests.Session`` per thread, deadlines, reads with retries.

``requests.Session`` is not thread-safe, so each thread gets its own (basic auth, JSON headers); TLS
verification (True, False or a CA file) is passed on every request, because requests lets
``REQUESTS_CA_BUNDLE`` override a Session's ``verify`` (psf/requests#3829) and would silently swap the
fabric's CA for the system bundle. Reads are retried on no answer and 5xx (they are safe to repeat);
changes are never retried here: the engine in ``redfish_ops`` decides after re-reading the state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import requests

from webhook.adapters import redfish_wire as wire
from webhook.adapters.redfish_wire import FabricError


class Transport(Exception):
    """No reply (refused, reset, timed out, or the deadline passed): the request may or may not have landed."""

    def __init__(self, text: str, deadline: bool = False) -> None:
        super().__init__(text)
        self.deadline = deadline  # the caller's deadline ran out (not just this request's timeout)


class HttpClient:
    def __init__(self, base_url: str, username: str, password: str, verify: bool | str, timeout: float,
                 retries: int, backoff: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self.base_url = base_url.rstrip("/")
        self.auth = (username, password)
        self.verify = verify
        self.timeout = timeout
        self.retries, self.backoff, self.clock, self.sleep = retries, backoff, clock, sleep
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._sessions_lock = threading.Lock()

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.auth = self.auth
            session.headers.update({"Accept": "application/json", "OData-Version": "4.0"})
            self._local.session = session
            with self._sessions_lock:
                self._sessions.append(session)
        return session

    def url(self, path: str) -> str:
        return path if "://" in path else self.base_url + path

    def send(self, method: str, path: str, *, json: Any = None, headers: dict[str, str] | None = None,
             deadline: float | None = None) -> requests.Response:
        timeout = self.timeout
        if deadline is not None:
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise Transport("deadline passed", deadline=True)
            timeout = min(timeout, max(remaining, 0.05))
        try:
            return self._session().request(method, self.url(path), json=json, headers=headers, timeout=timeout,
                                           verify=self.verify, allow_redirects=False)
        except requests.RequestException as exc:
            # A timeout cut short to fit the deadline is the deadline running out.
            late = deadline is not None and self.clock() >= deadline
            raise Transport(wire.short(str(exc)), deadline=late) from exc

    def close(self) -> None:
        with self._sessions_lock:
            for session in self._sessions:
                session.close()
            self._sessions.clear()

    def http_error(self, operation: str, resource: str, resp: requests.Response, phase: str) -> FabricError:
        try:
            body: Any = resp.json()
        except ValueError:
            body = None
        text = wire.messages_text(body) or wire.short(resp.text) or resp.reason
        hint = " (check the fabric credentials)" if resp.status_code in (401, 403) else ""
        return FabricError(operation, resource, f"HTTP {resp.status_code}: {text}{hint}",
                           message_ids=wire.message_ids(body), status=resp.status_code, phase=phase,
                           retryable=resp.status_code >= 500 or resp.status_code == 429)

    def pause(self, attempt: int, deadline: float | None, hint: float | None = None) -> None:
        delay = hint if hint is not None else self.backoff * 2 ** max(0, attempt - 1)
        if deadline is not None:
            delay = min(delay, deadline - self.clock())
        if delay > 0:
            self.sleep(delay)

    def get(self, path: str, operation: str, deadline: float | None = None) -> tuple[dict[str, Any], str]:
        """GET a resource (retried on no answer and 5xx: reads are safe); returns (body, ETag)."""
        last: FabricError | None = None
        hint: float | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                self.pause(attempt, deadline, hint)
            try:
                resp = self.send("GET", path, deadline=deadline)
            except Transport as exc:
                last = FabricError(operation, path, f"no answer: {exc}", phase="read", retryable=True,
                                   deadline=exc.deadline)
                continue
            if resp.status_code == 200:
                try:
                    body = resp.json()
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    raise FabricError(operation, path, f"not a JSON object: {wire.short(resp.text)}", phase="read")
                return body, resp.headers.get("ETag") or str(body.get("@odata.etag") or "")
            last = self.http_error(operation, path, resp, "read")
            if not last.retryable:
                raise last
            # Honour Retry-After (a 503 says when to come back), but never wait longer than one request may.
            after = wire.retry_after(resp.headers.get("Retry-After"))
            hint = min(after, self.timeout) if after is not None else None
        assert last is not None
        raise last
