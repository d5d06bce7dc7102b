"""Bounds on what one request may carry, and how values are shown back: a hostile value never whole nor
deep, a URL never with its credentials.

The string bounds are Kubernetes' own validation limits, so no object a real API server stores is ever
refused; they exist because requests do not all come from one (a hand-made ExtenderArgs, a fuzzer), and
what we parse is kept (embedded mode learns pods from requests), listed by /inspect and quoted in errors.
docs/HARDENING.md lists them with what a client gets back.
"""

from __future__ import annotations

import re
from typing import Any

# Levels of objects and arrays in one request body: orjson writes no deeper, and the /filter reply in
# NodeList mode echoes the nodes it was sent. Real Kubernetes objects stay under 20.
MAX_DEPTH = 254
NAME_MAX = 253  # object names, namespaces, UIDs, node names: a DNS subdomain at most
LABEL_KEY_MAX = 253 + 1 + 63  # DNS-subdomain prefix, "/", name
LABEL_VALUE_MAX = 63
ANNOTATIONS_MAX = 256 * 1024  # all of one object's annotation keys and values together (TotalAnnotationSizeLimitB)
GROUP_NAME_MAX = NAME_MAX  # the imex-webhook.io/group annotation: becomes part of the group's identity
SHOWN_MAX = 40  # characters of a caller's value quoted in a message


def shown(value: Any, limit: int = SHOWN_MAX) -> str:
    """A caller's value for a message: a string quoted and cut to ``limit`` characters (its length said
    when cut); a list or object described by its size, never printed (it may be huge or deeply nested)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        # str() of an int over 4,300 digits raises; JSON numbers never get there, other callers might.
        return repr(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"an object with {len(value)} keys"
    return f"a {type(value).__name__}"


def cut(text: str, limit: int = 256) -> str:
    """``text`` at most ``limit`` characters, visibly cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


# scheme://userinfo@: the userinfo runs to the last "@" before white space, as URL parsers take the last.
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^\s@]*@")
REDACTED = "***"


def redact_url(url: str) -> str:
    """``url`` without the user and password of its userinfo (``https://***@host/...``); a URL without
    userinfo is returned as it is. A password may hold "/" or "@" unescaped: all up to the last "@" goes."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    return f"{scheme}://{REDACTED}@{rest.rpartition('@')[2]}"


def redact_urls(text: str) -> str:
    """Every URL's userinfo in free text (a log line, a readiness detail) replaced by ``***``."""
    return _URL_USERINFO.sub(rf"\1{REDACTED}@", text) if "@" in text else text
