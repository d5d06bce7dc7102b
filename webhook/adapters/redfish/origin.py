"""Which links the Redfish client follows: only those on the service's own origin (scheme, host and port).

The client sends the session token or the Basic password on every request, so a link that leads anywhere
else would hand them to whoever the service (or someone who controls one of its replies) names: a
``Members@odata.nextLink`` to another host, a redirect to ``http://`` that a man in the middle answers, a
task monitor ``Location`` on another port. A link is therefore either relative (resolved against the
service URL) or absolute on exactly the origin of ``--fabric``; anything else is refused, with the link
and the expected origin in the error, before a byte is sent to it.

The check and the request read a link with one parser (``urls.py``), and the URL requested is built from
what was checked: the ``--fabric`` URL's own scheme and authority, and the link's path and query. A link
that parsers could read in more than one way (a backslash, userinfo, control characters, a host in
percent-encoding or Unicode...) is refused outright, with the rule it broke in the error: checking it with
one parser and sending it with another is how a check is bypassed.

Checked here, in one place each: every URL the transport is asked to request, every ``Location`` header
(redirects, task monitors, sessions), and every link in a JSON reply the client may follow (``@odata.id``,
``*@odata.nextLink``, action ``target``, ``TaskMonitor``). A reply is refused as a whole when one of its
links is refused: a service that names itself by another host name than the one it is reached by gets a
message saying so, instead of half its links being rewritten. Refusals are logged, rate-limited.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.adapters.redfish import urls
from webhook.adapters.redfish.payloads import FabricError, short
from webhook.adapters.redfish.urls import DEFAULT_PORTS

log = logging.getLogger(__name__)

LINK_KEYS = frozenset({"@odata.id", "target", "TaskMonitor"})  # and any key ending in @odata.nextLink
TRUSTED = "only the --fabric URL's scheme, host and port are trusted with credentials"


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


class ForeignLink(FabricError):
    """A link (or redirect) refused: on another origin than the service's, or written so that URL parsers
    could disagree on its origin (``problem`` says how). Nothing is sent there."""

    def __init__(self, link: str, origin: Origin, where: str, problem: str = "") -> None:
        self.link = link
        self.origin = origin
        self.problem = problem
        why = f"{problem}; the service's origin is {origin}" if problem else \
            f"not on the service's origin {origin} ({TRUSTED})"
        super().__init__("follow", short(urls.printable(link), 120), f"named by {where}: refused, {why}",
                         phase="trust")


def origin_of(url: str) -> Origin | None:
    """The origin of an absolute http(s) URL; None for anything else (a relative link, a bad port, a URL
    that URL parsers could read in more than one way)."""
    try:
        parts = urls.split(url)
        if not parts.scheme or not parts.authority:
            return None
        origin = Origin(parts.scheme, parts.host, parts.port or DEFAULT_PORTS[parts.scheme])
        urls.agree(url, origin.scheme, origin.host, origin.port)
    except urls.Refused:
        return None
    return origin


@dataclass(frozen=True)
class _Base:
    prefix: str  # scheme://authority, as the --fabric URL writes them (checked)
    path: str  # its path prefix, without a trailing slash


@functools.lru_cache(maxsize=16)
def _base(base_url: str) -> _Base:
    parts = urls.split(base_url)
    if not parts.scheme or not parts.authority:
        raise urls.Refused("the service URL is not an absolute http(s) URL")
    return _Base(f"{parts.scheme}://{parts.authority}", parts.path.split("?", 1)[0].rstrip("/"))


def check(origin: Origin, link: str, where: str) -> urls.Link:
    """``link`` taken apart, provided it is on ``origin``; else ForeignLink (naming the rule it broke)."""
    try:
        parts = urls.split(link)
        if not parts.authority:
            return parts
        scheme = parts.scheme or origin.scheme  # a scheme-relative //host link keeps the service's
        if Origin(scheme, parts.host, parts.port or DEFAULT_PORTS[scheme]) != origin:
            raise ForeignLink(link, origin, where)
        urls.agree(link if parts.scheme else f"{scheme}:{link}", origin.scheme, origin.host, origin.port)
    except urls.Refused as exc:
        raise ForeignLink(link, origin, where, str(exc)) from None
    return parts


def resolve(base_url: str, origin: Origin, link: str, where: str) -> str:
    """The absolute URL to request for ``link`` (relative to ``base_url``), provided it is on ``origin``; else
    ForeignLink. Built from ``base_url``'s own scheme and authority and the link's checked path and query."""
    parts = check(origin, link, where)
    base = _base(base_url)
    if parts.authority:
        path = parts.path if parts.path.startswith("/") else "/" + parts.path
    elif parts.path.startswith("/"):
        path = base.path + parts.path  # a path: the service URL's own path prefix, if any, is kept
    else:
        path = urls.merge(base.path + "/", parts.path)
    url = base.prefix + path
    try:  # true by construction; asked anyway, since a wrong answer here would send credentials away
        urls.agree(url, origin.scheme, origin.host, origin.port)
    except urls.Refused as exc:
        raise ForeignLink(link, origin, where, str(exc)) from None
    return url


def _links(body: Any) -> Iterator[str]:
    """Every string the client could follow in a decoded JSON body (iterative: no recursion limit)."""
    stack: list[Any] = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                if isinstance(value, str):
                    if key in LINK_KEYS or (isinstance(key, str) and key.endswith("@odata.nextLink")):
                        yield value
                elif isinstance(value, (Mapping, list)):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(item for item in node if isinstance(item, (Mapping, list)))


def foreign_link(body: Any, origin: Origin, where: str) -> ForeignLink | None:
    """The refusal of the first link in ``body`` that is refused (None when there is none)."""
    for link in _links(body):
        try:
            check(origin, link, where)
        except ForeignLink as refused:
            return refused
    return None


class RefusalLog:
    """One warning per refused link. A reply read again at every refresh names the same link again, and a
    hostile service can name a new one in every reply, so a link already logged is not logged again and the
    others share a budget (``BURST`` lines, then one per ``PERIOD`` seconds; what is held back is counted)."""

    BURST = 5
    PERIOD = 60.0
    REMEMBERED = 256

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.tokens = float(self.BURST)
        self.last = clock()
        self.held_back = 0
        self.logged: dict[tuple[str, str], None] = {}  # insertion-ordered: the oldest is forgotten first
        self.lock = threading.Lock()

    def note(self, refused: ForeignLink) -> None:
        key = (refused.link, refused.problem)
        with self.lock:
            if key in self.logged:
                return
            now = self.clock()
            self.tokens = min(float(self.BURST), self.tokens + (now - self.last) / self.PERIOD)
            self.last = now
            if self.tokens < 1:
                self.held_back += 1
                return
            self.tokens -= 1
            self.logged[key] = None
            if len(self.logged) > self.REMEMBERED:
                del self.logged[next(iter(self.logged))]
            held_back, self.held_back = self.held_back, 0
        more = f" ({held_back} more refused links not logged)" if held_back else ""
        log.warning("%s; nothing was sent there%s", refused, more)
