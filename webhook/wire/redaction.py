"""A URL never shown with its credentials: ``--fabric https://user:password@host`` in the start-up line,
a readiness detail or a log line naming the fabric manager shows ``https://***@host``."""

from __future__ import annotations

import re

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
