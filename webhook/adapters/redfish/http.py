"""The Redfish client's HTTP transport: one keep-alive ``requests.Session`` per thread, authentication (a
shared Redfish session or HTTP Basic, see ``auth.py``), deadlines, reads with retries, error texts, backoff.

What it takes from a service is bounded (``limits.py``: a total deadline per request, a cap on reply bodies)
and where it goes is checked (``origin.py``: only the service's own origin, redirects included; credentials
go nowhere else). Every URL requested is one that ``origin.resolve`` built from checked parts, never a string
a reply wrote. Redirects are followed by hand, for reads only, so that the check sees every hop.

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
from webhook.adapters.redfish.limits import WATCHDOG, Guard, TrackingAdapter, read_body
from webhook.adapters.redfish.origin import ForeignLink, Origin, RefusalLog, check, foreign_link, origin_of, resolve
from webhook.adapters.redfish.payloads import FabricError
from webhook.domain.limits import DEFAULT_MAX_RESPONSE
from webhook.errors import ImexWebhookError

log = logging.getLogger(__name__)

REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5


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
                 auth: AuthMode = "auto", max_response: int = DEFAULT_MAX_RESPONSE) -> None:
        self.base_url = _without_userinfo(base_url).rstrip("/")
        origin = origin_of(self.base_url)
        if origin is None:
            raise FabricError("connect to", self.base_url, "not an http:// or https:// URL with a plain host and "
                              "port (no backslash, whitespace or percent-encoding in them; an international "
                              "host name in its xn-- form)")
        self.origin: Origin = origin
        self.refusals = RefusalLog(clock)
        self.max_response = max_response
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
            for prefix in ("http://", "https://"):
                session.mount(prefix, TrackingAdapter())  # lets the deadline watchdog find the socket
            session.headers.update({"Accept": "application/json", "OData-Version": "4.0"})
            self._local.session = session
            with self._sessions_lock:
                self._sessions.append(session)
        return session

    def url(self, path: str, where: str = "request") -> str:
        """The URL to request for a path or link; ForeignLink (logged) when it is refused."""
        try:
            return resolve(self.base_url, self.origin, path, where)
        except ForeignLink as refused:
            raise self._logged(refused) from None

    def link(self, value: str, where: str) -> str:
        """A link a reply names, as a path on the service; ForeignLink (logged) when it is refused."""
        try:
            return wire.path_of(check(self.origin, value, where).path) if value else ""
        except ForeignLink as refused:
            raise self._logged(refused) from None

    def _logged(self, refusal: ForeignLink) -> ForeignLink:
        self.refusals.note(refusal)
        return refusal

    def _timeout(self, deadline: float | None) -> float:
        """The time one request may take in all: ``timeout``, or less to fit the caller's deadline."""
        if deadline is None:
            return self.timeout
        remaining = deadline - self.clock()
        if remaining <= 0:
            raise NoReply("deadline passed", deadline=True)
        return min(self.timeout, max(remaining, 0.05))

    def _raw(self, method: str, path: str, timeout: float, deadline: float | None, *, json: Any = None,
             headers: dict[str, str] | None = None, basic: bool = False) -> requests.Response:
        """One request, its body read (capped) and same-origin redirects of a read followed, all within
        ``timeout`` seconds: the watchdog cuts the connection when they pass, however slowly bytes arrive."""
        url = self.url(path, f"a {method} request")
        with Guard() as guard:
            WATCHDOG.arm(guard, timeout)
            try:
                for _ in range(MAX_REDIRECTS + 1):
                    resp = self._session().request(method, url, json=json, headers=headers, timeout=timeout,
                                                   verify=self.verify, allow_redirects=False, stream=True,
                                                   auth=self._basic if basic else None)
                    read_body(resp, method, self.max_response)
                    if guard.fired:  # a cut reply may look complete (headers or a body ended by the cut)
                        raise requests.ConnectionError("cut at the deadline")
                    location = resp.headers.get("Location")
                    if not location:
                        return resp
                    # Checked on every reply: a session or task monitor elsewhere would get our token next.
                    target = self.url(location, f"the Location of {method} {wire.short(url, 120)}")
                    if resp.status_code not in REDIRECTS or method not in ("GET", "HEAD"):
                        return resp
                    url = target  # the same origin: the same credentials may go there
                raise FabricError(method, url, f"more than {MAX_REDIRECTS} redirects", phase="read")
            except requests.RequestException as exc:
                # A timeout cut short to fit the deadline is the deadline running out.
                late = deadline is not None and self.clock() >= deadline
                if not guard.fired and not isinstance(exc, requests.Timeout):
                    raise NoReply(wire.short(str(exc)), deadline=late) from exc
                whose = "the caller's deadline" if late else "the request deadline"
                log.warning("%s %s: no complete answer within %.3gs (%s); connection dropped", method,
                            wire.short(url, 160), timeout, whose)
                raise NoReply(f"no complete answer within {timeout:.3g}s ({whose})", deadline=late) from exc

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
            self.auth.note_root(json_of(resp))
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
            body = json_of(resp)
            named = body.get("@odata.id") if isinstance(body, dict) else None  # the Location header is checked
            location = self.link(resp.headers.get("Location") or "", "the Location of the session login reply") \
                or self.link(named if isinstance(named, str) else "", "the session login reply")
            log.info("logged in to %s with a Redfish session (%s)", self.base_url, location or "no session URI")
            return Login(token, location)
        without = 200 <= resp.status_code < 300 or offers_no_sessions(resp.status_code,
                                                                        wire.message_ids(json_of(resp)))
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
        detail = wire.messages_text(json_of(resp)) or snippet(resp) or resp.reason
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
        body = json_of(resp)
        text = wire.messages_text(body) or snippet(resp) or resp.reason
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
                body = json_of(resp)
                if not isinstance(body, dict):
                    kind = resp.headers.get("Content-Type") or "no Content-Type"
                    raise FabricError(operation, path, f"the reply is not a JSON object ({wire.short(kind, 60)}): "
                                      f"{snippet(resp, 120)}", phase="read")
                foreign = foreign_link(body, self.origin, f"the reply to GET {wire.short(path, 80)} ({operation})")
                if foreign:
                    raise self._logged(foreign)
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


def json_of(resp: requests.Response) -> Any:
    """The decoded body, None when it is not JSON (a nesting too deep for the parser included)."""
    try:
        return resp.json()
    except (ValueError, RecursionError):
        return None


def snippet(resp: requests.Response, limit: int = wire.MAX_TEXT) -> str:
    """The start of a body for an error text: decoded as UTF-8 from its first bytes only (``resp.text`` would
    first guess the charset of the whole body, up to the response cap)."""
    return wire.short(resp.content[: 4 * limit].decode("utf-8", "replace"), limit)
