"""The one URL parser of the Redfish client: the origin check and the request both take a link apart here, so
that what is checked is what is requested.

``requests`` does not send with ``urllib.parse``: it re-parses every URL with urllib3, and the two read some
strings differently. A reply that plants such a string gets a check written with one parser to see the
service while the request goes elsewhere, with the session token or the Basic password. The classic is a
backslash: in ``http://OTHER:P\\@FABRIC:P/x`` urllib.parse reads the user name ``OTHER:P\\`` and the host
``FABRIC``, urllib3 ends the host at the backslash and connects to ``OTHER``. So neither library decides
here. A link is split by rules strict enough that no parser reads it two ways, and refused (``Refused``,
saying which rule) when it falls outside them; the caller then builds the URL it requests from the trusted
origin's own text and the link's path and query, re-encoded (``encode``), so nothing a reply wrote in an
authority reaches the request. Both libraries are still asked (``agree``), on the link and on the URL
built, and any disagreement is a refusal. Pure functions.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_LINK = 2048  # Redfish URIs are short; a longer one is refused before any parser spends time on it
SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")  # RFC 3986: a letter first, as both libraries require
# ASCII only (explicit ranges): fullwidth letters and dots are mapped to ASCII by IDNA in some parsers only.
HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")  # and IPv4 dotted quads
IPV6 = re.compile(r"\[([0-9A-Fa-f:.]+)\]")  # no zone id: "%25eth0" is decoded by some parsers, not others
STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# Kept as they are in a path or query: RFC 3986's unreserved and sub-delims, ":@/?" and percent-escapes.
SAFE = "/?:@!$&'()*+,;=-._~%"

# Why each rule: what the parsers in play (urllib.parse, urllib3, and WHATWG URL, which browsers and many
# proxies implement) do differently with such a link. Kept short: a FabricError's detail is cut at 256.
BACKSLASH = ("it contains a backslash (a '/' to WHATWG URL, the end of the host to urllib3, a plain character "
             "to urllib.parse)")
UNPRINTABLE = ("it contains whitespace or a control character (deleted by WHATWG URL and urllib.parse, encoded "
               "by urllib3)")
TOO_LONG = f"it is longer than {MAX_LINK} characters"
NOT_HTTP = "its scheme is not http or https"
NO_SLASHES = "its scheme is not followed by '//' (http:host is a path to urllib.parse, a host to WHATWG URL)"
USERINFO = "it has userinfo, an '@' before the host (parsers disagree on which '@' ends it)"
EMPTY_HOST = "it names no host (WHATWG URL skips the extra slashes of http:///host and reads a host there)"
BAD_HOST = ("its host is not a plain ASCII name or IP address (percent-encoding, zone ids and Unicode are decoded "
            "by some parsers only)")
BAD_PORT = "its port is not a number from 1 to 65535 in ASCII digits"


class Refused(ValueError):
    """A link outside the rules; the message says which rule and why it exists."""


@dataclass(frozen=True)
class Link:
    """A link taken apart. ``authority`` is the text between ``//`` and the path as written ("" for a path);
    ``scheme`` is "" for a path and for a scheme-relative ``//host`` link; ``path`` is the path and query,
    percent-encoded, without the fragment (which is never sent)."""

    scheme: str
    authority: str
    host: str  # lowercased, an IPv6 address without its brackets
    port: int | None  # None when the link writes none
    path: str


def split(link: str) -> Link:
    """``link`` taken apart, or Refused when any parser could read it differently from the others."""
    if len(link) > MAX_LINK:
        raise Refused(TOO_LONG)
    if "\\" in link:
        raise Refused(BACKSLASH)
    if any(c == " " or not c.isprintable() for c in link):
        raise Refused(UNPRINTABLE)
    rest, scheme = link, ""
    named = SCHEME.match(link)
    if named:
        scheme = named.group(1).lower()
        if scheme not in DEFAULT_PORTS:
            raise Refused(NOT_HTTP)
        rest = link[named.end():]
        if not rest.startswith("//"):
            raise Refused(NO_SLASHES)
    if not rest.startswith("//"):
        return Link("", "", "", None, encode(rest))
    end = next((i for i, c in enumerate(rest) if i >= 2 and c in "/?#"), len(rest))
    authority = rest[2:end]
    host, port = _authority(authority)
    return Link(scheme, authority, host, port, encode(rest[end:]))


def _authority(authority: str) -> tuple[str, int | None]:
    if "@" in authority:
        raise Refused(USERINFO)
    if not authority or authority.startswith(":"):
        raise Refused(EMPTY_HOST)
    if authority.startswith("["):
        close = authority.find("]") + 1
        literal, port = authority[:close], authority[close:]
        inside = IPV6.fullmatch(literal)
        if close == 0 or inside is None or not _is_ipv6(inside.group(1)):
            raise Refused(BAD_HOST)
        host = inside.group(1).lower()
    else:
        host, colon, digits = authority.partition(":")
        port = colon + digits
        if not HOST_NAME.fullmatch(host):
            raise Refused(BAD_HOST)
        host = host.lower()
    if port and not port.startswith(":"):
        raise Refused(BAD_HOST)
    digits = port[1:]
    if not digits:
        return host, None  # RFC 3986: "host:" is the default port, and both libraries agree
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 5 and 0 < int(digits) <= 65535):
        raise Refused(BAD_PORT)
    return host, int(digits)


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def encode(tail: str) -> str:
    """A path and query, fragment dropped, with everything outside RFC 3986's path and query characters
    percent-encoded (UTF-8): the URL requested is then plain ASCII that every parser reads the same way."""
    tail = tail.split("#", 1)[0]
    return quote(STRAY_PERCENT.sub("%25", tail), safe=SAFE)


def merge(directory: str, relative: str) -> str:
    """``relative`` (a path without a scheme or ``//``, already through ``split``) against ``directory``
    (a path ending in ``/``), dot segments removed, as RFC 3986 resolves a relative reference."""
    placeholder = "http://h"  # only the path is taken back: the authority never comes from this join
    return urljoin(placeholder + directory, relative)[len(placeholder):] or "/"


def agree(url: str, scheme: str, host: str, port: int) -> None:
    """Refused unless urllib.parse and urllib3 both read ``url`` as ``scheme://host:port``."""
    readings = {"urllib.parse": _stdlib(url), "urllib3": _urllib3(url)}
    expected = (scheme, host, port)
    if any(reading != expected for reading in readings.values()):
        said = ", ".join(f"{name}: {_shown(reading)}" for name, reading in readings.items())
        raise Refused(f"URL parsers disagree on where it leads ({said})")


def _stdlib(url: str) -> tuple[str, str, int | None] | str:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"refused ({exc})"
    return parts.scheme, parts.hostname or "", port or DEFAULT_PORTS.get(parts.scheme)


def _urllib3(url: str) -> tuple[str, str, int | None] | str:
    try:
        parts = parse_url(url)
    except LocationParseError as exc:
        return f"refused ({exc})"
    scheme = parts.scheme or ""
    return scheme, (parts.host or "").strip("[]").lower(), parts.port or DEFAULT_PORTS.get(scheme)


def _shown(reading: tuple[str, str, int | None] | str) -> str:
    if isinstance(reading, str):
        return reading
    scheme, host, port = reading
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def printable(text: str) -> str:
    """``text`` with control and other unprintable characters escaped, for an error message or a log line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
