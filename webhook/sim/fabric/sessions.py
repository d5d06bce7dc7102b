"""Redfish sessions (DSP0266 "Session management"): login, the X-Auth-Token, logout, inactivity timeout.

A client POSTs ``{"UserName", "Password"}`` to the Sessions collection (the one request that needs no
authentication) and gets ``201 Created`` with the token in ``X-Auth-Token``, the session's URI in
``Location`` and the Session as body. It then sends the token on every request and DELETEs the session to
log out. A session unused for the SessionService's ``SessionTimeout`` seconds is closed; a request whose
token names no open session is answered 401 ``NoValidSession``, whatever else it carries.

Tokens are 256 random bits and only their SHA-256 is kept: a lookup's timing says nothing about a token,
and no snapshot can leak one. Session Ids are random too, because every client can list them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.sim.fabric import payloads
from webhook.sim.fabric.inventory import Credentials, Options
from webhook.sim.fabric.messages import RedfishError, Reply, message, not_found
from webhook.sim.fabric.state import Model, now_iso

SERVICE = f"{payloads.ROOT}/SessionService"
SESSIONS = payloads.SESSIONS
_CREATE = {"UserName", "Password", "Context"}
_READ_ONLY = {"Id", "Name", "Description", "SessionType", "CreatedTime", "ClientOriginIPAddress", "Roles", "Links",
              "Actions", "Oem", "OemSessionType", "Token", "ExpirationTime"}


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _same(given: str, expected: str) -> bool:
    # surrogatepass: a JSON "\ud800" is a valid Python str that plain encode() refuses.
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


def credentials_match(user: str, password: str, creds: Credentials) -> bool:
    """Both compared in constant time, so a wrong user name takes as long as a wrong password."""
    user_ok = _same(user, creds.username)
    return _same(password, creds.password) and user_ok


@dataclass
class SessionRec:
    id: str
    digest: str
    user: str
    created: str
    last_used: float
    origin: str = ""
    context: str | None = None


@dataclass
class SessionStats:
    logins: int = 0  # sessions created
    logouts: int = 0  # sessions deleted by a client
    expired: int = 0  # sessions closed by the inactivity timeout
    refused_logins: int = 0  # 401 to a login (wrong credentials)
    refused_tokens: int = 0  # 401 to a request whose token names no open session
    dropped: int = 0  # sessions removed through the test endpoint


@dataclass
class SessionStore:
    clock: Callable[[], float]
    lock: threading.Lock = field(default_factory=threading.Lock)
    stats: SessionStats = field(default_factory=SessionStats)
    _by_id: dict[str, SessionRec] = field(default_factory=dict)
    _by_digest: dict[str, str] = field(default_factory=dict)

    def _purge(self, timeout: int) -> None:
        now = self.clock()
        for rec in [r for r in self._by_id.values() if now - r.last_used > timeout]:
            self._remove(rec.id)
            self.stats.expired += 1

    def _remove(self, session_id: str) -> None:
        rec = self._by_id.pop(session_id)
        self._by_digest.pop(rec.digest, None)

    def create(self, body: Any, options: Options, creds: Credentials, origin: str) -> Reply:
        if not options.sessions:
            raise RedfishError(405, message("ServiceDisabled", SERVICE), headers={"Allow": "GET, HEAD"})
        user, password, context = _login_fields(body)
        with self.lock:
            self._purge(options.session_timeout_s)
            if not credentials_match(user, password, creds):
                self.stats.refused_logins += 1
                raise RedfishError(401, message("AccessUnauthorized"))  # never says which of the two was wrong
            if len(self._by_id) >= options.max_sessions:
                raise RedfishError(503, message("SessionLimitExceeded"))
            token = secrets.token_urlsafe(32)
            rec = SessionRec(secrets.token_hex(8), _digest(token), user, now_iso(), self.clock(), origin, context)
            self._by_id[rec.id] = rec
            self._by_digest[rec.digest] = rec.id
            self.stats.logins += 1
            uri = f"{SESSIONS}/{rec.id}"
            return Reply(201, session(rec), {"X-Auth-Token": token, "Location": uri})

    def authenticate(self, token: str, options: Options) -> bool:
        """True when ``token`` names an open session (which then counts as used now)."""
        with self.lock:
            self._purge(options.session_timeout_s)
            session_id = self._by_digest.get(_digest(token))
            if session_id is None:
                self.stats.refused_tokens += 1
                return False
            self._by_id[session_id].last_used = self.clock()
            return True

    def delete(self, session_id: str) -> Reply:
        with self.lock:
            if session_id not in self._by_id:
                raise not_found("Session", session_id)
            self._remove(session_id)
            self.stats.logouts += 1
            return Reply(204)

    def drop_all(self) -> int:
        """Close every session (as a service restart would); returns how many were open."""
        with self.lock:
            count = len(self._by_id)
            self._by_id.clear()
            self._by_digest.clear()
            self.stats.dropped += count
            return count

    def snapshot(self, options: Options) -> dict[str, Any]:
        with self.lock:
            self._purge(options.session_timeout_s)
            return {"open": len(self._by_id), **vars(self.stats)}

    def render(self, m: Model, parts: list[str], query: Mapping[str, str]) -> dict[str, Any]:
        """GET of the SessionService, its Sessions collection or one Session (``parts`` after the root)."""
        with self.lock:
            self._purge(m.options.session_timeout_s)
            records = dict(self._by_id)
        match parts:
            case ["SessionService"]:
                return service(m.options)
            case ["SessionService", "Sessions"]:
                members = [f"{SESSIONS}/{s}" for s in records]
                return payloads.collection(m, "SessionCollection", "Sessions", SESSIONS, members, query,
                                           lambda uri: session(records[uri.rsplit("/", 1)[1]]))
            case ["SessionService", "Sessions", session_id] if session_id in records:
                return session(records[session_id])
        raise not_found("Resource", "/".join([payloads.ROOT, *parts]))


def _login_fields(body: Any) -> tuple[str, str, str | None]:
    """UserName, Password and Context of a login body, or RedfishError 400 naming what is wrong."""
    if body is None:
        raise RedfishError(400, message("PropertyMissing", "UserName"))
    if not isinstance(body, dict):
        raise RedfishError(400, message("PropertyValueTypeError", str(body)[:64], "(body)"))
    for key in body:
        if key in _READ_ONLY:
            raise RedfishError(400, message("PropertyNotWritable", key))
        if key not in _CREATE and not key.startswith("@"):
            raise RedfishError(400, message("PropertyUnknown", key))
    for key in ("UserName", "Password"):
        if key not in body:
            raise RedfishError(400, message("PropertyMissing", key))
        if not isinstance(body[key], str):
            shown = "<hidden>" if key == "Password" else str(body[key])[:64]
            raise RedfishError(400, message("PropertyValueTypeError", shown, key))
    context = body.get("Context")
    if context is not None and not isinstance(context, str):
        raise RedfishError(400, message("PropertyValueTypeError", str(context)[:64], "Context"))
    return body["UserName"], body["Password"], context


def patched_timeout(body: Any) -> int | None:
    """The SessionTimeout a PATCH of the SessionService asks for (None: no change), or RedfishError 400."""
    if not isinstance(body, dict):
        raise RedfishError(400, message("PropertyValueTypeError", str(body)[:64], "(body)"))
    for key in body:
        if key in ("ServiceEnabled", "Sessions", "Id", "Name", "Description", "Status"):
            raise RedfishError(400, message("PropertyNotWritable", key))
        if key != "SessionTimeout" and not key.startswith("@"):
            raise RedfishError(400, message("PropertyUnknown", key))
    if "SessionTimeout" not in body:
        return None
    value = body["SessionTimeout"]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RedfishError(400, message("PropertyValueTypeError", str(value)[:64], "SessionTimeout"))
    if not 30 <= value <= 86400:  # the schema's range
        raise RedfishError(400, message("PropertyValueOutOfRange", str(value)[:64], "SessionTimeout"))
    return value


def service(options: Options) -> dict[str, Any]:
    return {
        "@odata.type": "#SessionService.v1_2_0.SessionService",
        "@odata.id": SERVICE,
        "Id": "SessionService",
        "Name": "Session Service",
        "Description": "Redfish sessions: POST UserName and Password to Sessions, then send X-Auth-Token",
        "Status": {"State": "Enabled" if options.sessions else "Disabled", "Health": "OK"},
        "ServiceEnabled": options.sessions,
        "SessionTimeout": options.session_timeout_s,
        "Sessions": payloads.link(SESSIONS),
    }


def session(rec: SessionRec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "@odata.type": "#Session.v1_8_0.Session",
        "@odata.id": f"{SESSIONS}/{rec.id}",
        "Id": rec.id,
        "Name": f"Session of {rec.user[:64]}",
        "UserName": rec.user,
        "Password": None,  # the schema: always null in responses
        "SessionType": "Redfish",
        "CreatedTime": rec.created,
    }
    if rec.origin:
        out["ClientOriginIPAddress"] = rec.origin
    if rec.context is not None:
        out["Context"] = rec.context
    return out
