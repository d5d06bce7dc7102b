"""Bounds on what one request may carry beyond Kubernetes' own string limits (``webhook.wire.fields``), and
a URL never shown with its credentials. docs/HARDENING.md lists them with what a client gets back.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re

from webhook.wire.fields import NAME_MAX

# Levels of objects and arrays in one request body: orjson writes no deeper, and the /filter reply in
# NodeList mode echoes the nodes it was sent. Real Kubernetes objects stay under 20.
MAX_DEPTH = 254
GROUP_NAME_MAX = NAME_MAX  # the imex-webhook.io/group annotation: becomes part of the group's identity

# Per-route body limits, sized from what the real peer sends (docs/HARDENING.md, "Input limits"): one
# AdmissionReview of a Pod is bounded by kube-apiserver's own request limit (MaxRequestBodyBytes, 3 MiB);
# ExtenderBindingArgs are names and a UID; the NodeList verbs keep --max-body; GET routes take no body.
# Each is capped by --max-body too. The server's poller refuses past them before reading a body, the app
# again for whatever server runs it.
MUTATE_MAX_BODY = 3 * 1024 * 1024
SMALL_MAX_BODY = 64 * 1024
LARGE_BODY_PATHS = frozenset({"/filter", "/prioritize", "/preempt"})


def is_loopback(address: str | None) -> bool:
    """Whether a peer address is this host's (or, in a pod, this pod's) own: 127.0.0.0/8, ::1, or an
    IPv4-mapped loopback address. The node agent's /gpus and the extender's map answer such peers."""
    try:
        ip = ipaddress.ip_address((address or "").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def normalized(path: str) -> str:
    """``//filter/``, ``/./filter`` and ``/filter`` are one path to a router that merges slashes."""
    return posixpath.normpath("/" + path.lstrip("/")) if path else "/"


def body_limit(path: str, max_body: int) -> int:
    """The largest body the route of ``path`` (slashes merged) accepts."""
    if path in LARGE_BODY_PATHS:
        return max_body
    return min(MUTATE_MAX_BODY if path == "/mutate" else SMALL_MAX_BODY, max_body)


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
