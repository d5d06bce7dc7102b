"""Bounds on what one request may carry beyond Kubernetes' own string limits (``webhook.wire.fields``), and
a URL never shown with its credentials. docs/HARDENING.md lists them with what a client gets back.
"""

from __future__ import annotations

import re

from webhook.wire.fields import NAME_MAX

# Levels of objects and arrays in one request body: orjson writes no deeper, and the /filter reply in
# NodeList mode echoes the nodes it was sent. Real Kubernetes objects stay under 20.
MAX_DEPTH = 254
GROUP_NAME_MAX = NAME_MAX  # the imex-webhook.io/group annotation: becomes part of the group's identity


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
