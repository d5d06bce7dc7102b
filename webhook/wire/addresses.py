"""Where a request comes from and what it asks for, as a server sees them: the peer's address (is it this
host's own?) and the request path (slashes merged, as a router that merges them reads it). The node
agent's server and the extender's both decide on these, so they live below both."""

from __future__ import annotations

import ipaddress
import posixpath


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
