"""Which links the Redfish client follows: only those on the service's own origin (scheme, host and port).

The client sends the session token or the Basic password on every request, so a link that leads anywhere
else would hand them to whoever the service (or someone who controls one of its replies) names: a
``Members@odata.nextLink`` to another host, a redirect to ``http://`` that a man in the middle answers, a
task monitor ``Location`` on another port. A link is therefore either relative (resolved against the
service URL) or absolute on exactly the origin of ``--fabric``; anything else is refused, with the link
and the expected origin in the error, before a byte is sent to it.

Checked here, in one place each: every absolute URL the transport is asked to request, every
``Location`` header (redirects, task monitors, sessions), and every link in a JSON reply the client
may follow (``@odata.id``, ``*@odata.nextLink``, action ``target``, ``TaskMonitor``). A reply is refused as a
whole when one of its links leaves the origin: a service that names itself by another host name than the
one it is reached by gets a message saying so, instead of half its links being rewritten. Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from webhook.adapters.redfish.payloads import FabricError, short

DEFAULT_PORTS = {"http": 80, "https": 443}
LINK_KEYS = frozenset({"@odata.id", "target", "TaskMonitor"})  # and any key ending in @odata.nextLink


class ForeignLink(FabricError):
    """A link (or redirect) to another origin than the service's: refused, nothing is sent there."""

    def __init__(self, link: str, origin: Origin, where: str) -> None:
        self.link = link
        self.origin = origin
        super().__init__("follow", short(link, 120), f"named by {where}: refused, not on the service's origin "
                         f"{origin} (only the --fabric URL's scheme, host and port are trusted with credentials)",
                         phase="trust")


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def origin_of(url: str) -> Origin | None:
    """The origin of an absolute http(s) URL; None for anything else (a relative link, a bad port)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return Origin(scheme, parts.hostname.lower(), port if port is not None else DEFAULT_PORTS[scheme])


def resolve(base_url: str, origin: Origin, link: str, where: str) -> str:
    """The absolute URL of ``link`` (relative to ``base_url``), provided it is on ``origin``; else ForeignLink."""
    if link.startswith("/") and not link.startswith("//"):
        return base_url + link  # a path: the service URL's own path prefix, if any, is kept
    url = urljoin(base_url + "/", link)
    if origin_of(url) != origin:
        raise ForeignLink(link, origin, where)
    return url


def is_absolute(link: str) -> bool:
    """A link that names its own origin (``scheme://`` or the scheme-relative ``//host``)."""
    return "://" in link or link.startswith("//")


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


def foreign_link(body: Any, base_url: str, origin: Origin) -> str:
    """The first link in ``body`` that leaves ``origin`` ("" when there is none)."""
    for link in _links(body):
        if is_absolute(link) and origin_of(urljoin(base_url + "/", link)) != origin:
            return link
    return ""
