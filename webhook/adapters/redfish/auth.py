"""How the Redfish client proves who it is: one Redfish session shared by every thread, or HTTP Basic.

DSP0266 gives a service two ways in. A *session*: POST ``{"UserName", "Password"}`` to the Sessions
collection named by the service root's ``Links.Sessions`` (no authentication needed for that request),
keep the ``X-Auth-Token`` of the ``201`` reply and send it on every request, DELETE the session's
``Location`` to log out. Or *HTTP Basic* on every request. Fabric managers and BMCs often switch Basic
off, so mode ``auto`` (the default) logs in with a session whenever the service offers one and uses
Basic only where it does not (no ``Links.Sessions``, or the login answered 404, 405 or 501, or a
``ServiceDisabled`` message); ``session`` and ``basic`` force one way.

The token is shared by every thread. A 401 to a request that carried it means the session is gone
(timed out, deleted, the service restarted): the caller re-logs in once and sends the request again.
When many threads meet that 401 together, exactly one logs in: each 401 names the *generation* of the
token it carried, and only the first report for the current generation clears it. Tokens and passwords
are never logged nor put into an error text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

AuthMode = Literal["auto", "session", "basic"]
AUTH_MODES: tuple[str, ...] = get_args(AuthMode)
ROOT = "/redfish/v1/"
# DSP0266: these answer without credentials; sending none keeps a session from being created just to read them.
OPEN_PATHS = frozenset({"/redfish", "/redfish/", "/redfish/v1", ROOT, "/redfish/v1/odata", "/redfish/v1/$metadata"})
NOT_OFFERED = frozenset({404, 405, 501})  # a login answered so: this service has no sessions


def sessions_uri(root: Any) -> str:
    """The Sessions collection from a service root's ``Links.Sessions`` ("" when it names none)."""
    links = root.get("Links") if isinstance(root, Mapping) else None
    sessions = links.get("Sessions") if isinstance(links, Mapping) else None
    uri = sessions.get("@odata.id") if isinstance(sessions, Mapping) else None
    return uri if isinstance(uri, str) and uri.startswith("/") else ""


def offers_no_sessions(status: int, message_ids: tuple[str, ...]) -> bool:
    return status in NOT_OFFERED or any(m.rsplit(".", 1)[-1] == "ServiceDisabled" for m in message_ids)


@dataclass(frozen=True)
class Credentials:
    """What one request carries: a token (with the generation it belongs to) or Basic."""

    token: str = ""
    generation: int = 0

    @property
    def basic(self) -> bool:
        return not self.token

    def headers(self) -> dict[str, str]:
        return {"X-Auth-Token": self.token} if self.token else {}


@dataclass(frozen=True)
class Login:
    """What a login attempt came to: a session, "use Basic" (``basic``), or the reply that refused it."""

    token: str = ""
    location: str = ""
    basic: bool = False
    refusal: Any = None  # the HTTP reply, which then answers the request that needed the login
    closed: bool = False  # the client was closed: no new session


class SessionAuth:
    """The shared authentication state; ``credentials`` is what every request asks before it is sent."""

    def __init__(self, mode: AuthMode) -> None:
        if mode not in AUTH_MODES:
            raise ValueError(f"Redfish auth mode {mode!r}: expected one of {', '.join(AUTH_MODES)}")
        self.requested = mode
        self.mode: AuthMode = mode  # "auto" until the first login decides
        self.sessions_uri = ""  # learned from the service root
        self.logins = 0
        self._lock = threading.Lock()
        self._token = ""
        self._location = ""
        self._generation = 0
        self._closed = False

    def note_root(self, root: Any) -> None:
        uri = sessions_uri(root)
        if uri:
            self.sessions_uri = uri

    def credentials(self, login: Callable[[], Login]) -> Credentials | Login:
        """The token to send (logging in first when there is none), Basic, or the Login that failed.

        The lock is held through the login, so threads that need a token meanwhile wait for this one
        instead of each creating a session."""
        with self._lock:
            if self.mode == "basic":
                return Credentials()
            if self._token:
                return Credentials(self._token, self._generation)
            if self._closed:
                return Login(closed=True)
            result = login()
            if result.basic and self.mode == "auto":
                self.mode = "basic"
                return Credentials()
            if not result.token:
                return result
            self.mode = "session"
            self._token, self._location = result.token, result.location
            self._generation += 1
            self.logins += 1
            return Credentials(self._token, self._generation)

    def expired(self, generation: int) -> bool:
        """A request with this generation's token got 401; True when this call cleared it (the first)."""
        with self._lock:
            if generation != self._generation or not self._token:
                return False
            self._token = self._location = ""
            return True

    def take(self) -> tuple[str, str]:
        """(token, session URI) to log out with, once; later requests get no new session."""
        with self._lock:
            token, location = self._token, self._location
            self._token = self._location = ""
            self._closed = True
            return token, location
