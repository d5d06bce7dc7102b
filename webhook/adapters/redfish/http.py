"""The Redfish client's HTTP transport: one keep-alive ``requests.Session`` per thread, authentication (a
shared Redfish session or HTTP Basic, see ``auth.py``), deadlines, reads with retries, error texts, backoff.

``requests.Session`` is not thread-safe, so each thread gets its own (JSON headers); TLS verification
(True, False or a CA file) is passed on every request, because requests lets ``REQUESTS_CA_BUNDLE``
override a Session's ``verify`` (psf/requests#3829) and would silently swap the fabric's CA for the
system bundle. Reads are retried on no answer and 5xx (they are safe to repeat); changes are never
retried here (``converger.py`` decides after re-reading the state), except once after a 401 that a fresh
session login answers: a service authenticates before it does anything, so the refused request changed
nothing.
"""
from __future__ import annotations

import functools
import logging
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

import requests

from webhook.adapters.redfish import payloads as wire
from webhook.adapters.redfish.auth import (
    OPEN_PATHS,
    ROOT,
    AuthMode,
    Credentials,
    Login,
    SessionAuth,
    offers_no_sessions,
)
from webhook.adapters.redfish.payloads import FabricError
from webhook.errors import ImexWebhookError

log = logging.getLogger(__name__)


class NoReply(ImexWebhookError):
    """No reply (refused, reset, timed out, or the deadline passed): the request may or may not have landed."""

    def __init__(self, text: str, deadline: bool = False) -> None:
        super().__init__(text)
        self.deadline = deadline  # the caller's deadline ran out (not just this request's timeout)


def _without_userinfo(url: str) -> str:
    """The URL without ``user:password@``: credentials come from the credentials file, and a URL is
    logged, shown in /readyz and put in error messages."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class HttpTransport:
    """Requests to one service, shared by the inventory and the converger (both thread-safe)."""

    def __init__(self, base_url: str, username: str, password: str, verify: bool | str, timeout: float,
                 retries: int, backoff: float, clock: Callable[[], float], sleep: Callable[[float], None],
                 auth: AuthMode = "auto") -> None:
        self.base_url = _without_userinfo(base_url).rstrip("/")
        self._basic = (username, password)
        self.auth = SessionAuth(auth)
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
            session.headers.update({"Accept": "application/json", "OData-Version": "4.0"})
            self._local.session = session
            with self._sessions_lock:
                self._sessions.append(session)
        return session

    def url(self, path: str) -> str:
        return path if "://" in path else self.base_url + path

    def _timeout(self, deadline: float | None) -> float:
        if deadline is None:
            return self.timeout
        remaining = deadline - self.clock()
        if remaining <= 0:
            raise NoReply("deadline passed", deadline=True)
        return min(self.timeout, max(remaining, 0.05))

    def _raw(self, method: str, path: str, timeout: float, deadline: float | None, *, json: Any = None,
             headers: dict[str, str] | None = None, basic: bool = False) -> requests.Response:
        try:
            return self._session().request(method, self.url(path), json=json, headers=headers, timeout=timeout,
                                           verify=self.verify, allow_redirects=False,
                                           auth=self._basic if basic else None)
        except requests.RequestException as exc:
            # A timeout cut short to fit the deadline is the deadline running out.
            late = deadline is not None and self.clock() >= deadline
            raise NoReply(wire.short(str(exc)), deadline=late) from exc

    def send(self, method: str, path: str, *, json: Any = None, headers: dict[str, str] | None = None,
             deadline: float | None = None) -> requests.Response:
        """One request with credentials (none for the open service root); after a 401 to a session token,
        one re-login and one resend. A login that fails answers in the request's place."""
        if method == "GET" and wire.path_of(path) in OPEN_PATHS:
            resp = self._raw(method, path, self._timeout(deadline), deadline, headers=headers)
            if resp.status_code != 401:  # a service that wrongly guards its root gets credentials
                return resp
            resp.close()
        resp, creds = self._authenticated(method, path, json, headers, deadline)
        if resp.status_code != 401 or creds is None or creds.basic:
            return resp
        if self.auth.expired(creds.generation):
            log.info("the Redfish session at %s is no longer valid (HTTP 401); logging in again", self.base_url)
        resp.close()
        return self._authenticated(method, path, json, headers, deadline)[0]

    def _authenticated(self, method: str, path: str, json: Any, headers: dict[str, str] | None,
                       deadline: float | None) -> tuple[requests.Response, Credentials | None]:
        """The request with the current credentials (a login first when needed), or the login's refusal."""
        creds = self.auth.credentials(functools.partial(self._login, deadline))
        if isinstance(creds, Login):
            if creds.closed:
                raise NoReply("the client is closed")
            refusal: requests.Response = creds.refusal
            return refusal, None
        resp = self._raw(method, path, self._timeout(deadline), deadline, json=json, basic=creds.basic,
                         headers={**(headers or {}), **creds.headers()})
        return resp, creds

    def _login(self, deadline: float | None) -> Login:
        """POST the credentials to the Sessions collection; called by ``SessionAuth`` under its lock."""
        timeout = self._timeout(deadline)
        if not self.auth.sessions_uri:
            resp = self._raw("GET", ROOT, timeout, deadline)
            if resp.status_code != 200:
                return self._refused(resp, ROOT)
            self.auth.note_root(_json(resp))
        uri = self.auth.sessions_uri
        if not uri:
            if self.auth.mode == "auto":
                log.info("%s names no Redfish sessions (Links.Sessions); using HTTP Basic", self.base_url)
                return Login(basic=True)
            uri = "/redfish/v1/SessionService/Sessions"  # the URI DSP0266 fixes since 1.6.0
        user, password = self._basic
        resp = self._raw("POST", uri, timeout, deadline, json={"UserName": user, "Password": password})
        token = resp.headers.get("X-Auth-Token", "")
        if 200 <= resp.status_code < 300 and token:
            location = wire.path_of(resp.headers.get("Location") or wire.odata_id(_json(resp)))
            log.info("logged in to %s with a Redfish session (%s)", self.base_url, location or "no session URI")
            return Login(token, location)
        without = 200 <= resp.status_code < 300 or offers_no_sessions(resp.status_code,
                                                                        wire.message_ids(_json(resp)))
        if without and self.auth.mode == "auto":
            log.info("%s offers no Redfish session login (HTTP %d); using HTTP Basic", self.base_url,
                     resp.status_code)
            return Login(basic=True)
        return self._refused(resp, uri)

    def _refused(self, resp: requests.Response, uri: str) -> Login:
        """A failed login step: 401/403, 429 and 5xx answer the request that needed the login (they mean the
        same there: wrong credentials, or try again); anything else is an error of its own."""
        status = resp.status_code
        if status in (401, 403, 429) or status >= 500:
            return Login(refusal=resp)
        detail = wire.messages_text(_json(resp)) or wire.short(resp.text) or resp.reason
        if 200 <= status < 300:
            detail = "the reply has no X-Auth-Token header"
        raise FabricError("session login", uri, f"HTTP {status}: {detail} (the credentials file can set auth: "
                          "basic for a service without sessions)", status=status, phase="login")

    def logout(self) -> None:
        """Delete our session, if any (best effort: a service that is gone cannot be told)."""
        token, location = self.auth.take()
        if not token or not location:
            return
        try:
            resp = self._raw("DELETE", location, self.timeout, None, headers={"X-Auth-Token": token})
        except NoReply as exc:
            log.warning("could not log out of %s: %s", self.base_url, exc)
            return
        if resp.status_code not in (200, 202, 204, 401, 404):  # 401/404: the session was gone already
            log.warning("logging out of %s answered HTTP %d", self.base_url, resp.status_code)

    def close(self) -> None:
        self.logout()
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
        if resp.request is not None and resp.request.method == "POST" and self.auth.sessions_uri and \
                wire.path_of(resp.request.path_url) == wire.path_of(self.auth.sessions_uri):
            text = f"session login refused: {text}"
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
            except NoReply as exc:
                last = FabricError(operation, path, f"no answer: {exc}", phase="read", retryable=True,
                                   deadline=exc.deadline)
                continue
            if resp.status_code == 200:
                body = _json(resp)
                if not isinstance(body, dict):
                    raise FabricError(operation, path, f"not a JSON object: {wire.short(resp.text)}", phase="read")
                if wire.path_of(path) == ROOT:
                    self.auth.note_root(body)  # saves the login a second read of the root
                return body, resp.headers.get("ETag") or str(body.get("@odata.etag") or "")
            last = self.http_error(operation, path, resp, "read")
            if not last.retryable:
                raise last
            # Honour Retry-After (a 503 says when to come back), but never wait longer than one request may.
            after = wire.retry_after(resp.headers.get("Retry-After"))
            hint = min(after, self.timeout) if after is not None else None
        assert last is not None
        raise last


def _json(resp: requests.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return None
