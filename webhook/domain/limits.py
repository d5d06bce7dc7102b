"""Bounds on what a peer may make us hold: what one request may carry beyond Kubernetes' own string limits
(``webhook.wire.fields``), what one Redfish reply may carry, and how long the embedded mode remembers a pod
no watch tells it about. docs/HARDENING.md lists them with what a client gets back.

The defaults of ``serve``'s ``--max-body``, ``--fabric-max-response`` and ``--pod-ttl`` live here, below
the web layer, the Redfish client and the embedded cluster that apply them, so that reading ``serve``'s
settings (every ``--help`` shows them) loads none of those.
"""

from __future__ import annotations

# Levels of objects and arrays in one request body: orjson writes no deeper, and the /filter reply in
# NodeList mode echoes the nodes it was sent. Real Kubernetes objects stay under 20.
MAX_DEPTH = 254

# The largest body of the shipped profile (nodeCacheCapable: true): an ExtenderArgs naming 20,000 nodes (about
# 1.3 MB) with a pod as etcd can hold it (1.5 MiB), with room to spare. Decoding costs up to 16x the body
# (webhook.http.common), so the default keeps a worker's spike near 256 MiB. kube-scheduler's full NodeList
# mode (nodeCacheCapable: false) sends every Node, 25-40 MiB at 5,000 nodes: such a deployment raises it.
DEFAULT_MAX_BODY = 16 * 1024 * 1024

# Per-route body limits, sized from what the real peer sends (docs/HARDENING.md, "Input limits"): one
# AdmissionReview of a Pod is bounded by kube-apiserver's own request limit (MaxRequestBodyBytes, 3 MiB);
# ExtenderBindingArgs are names and a UID; the NodeList verbs keep --max-body; GET routes take no body.
# Each is capped by --max-body too. The server's poller refuses past them before reading a body, the app
# again for whatever server runs it.
MUTATE_MAX_BODY = 3 * 1024 * 1024
SMALL_MAX_BODY = 64 * 1024
LARGE_BODY_PATHS = frozenset({"/filter", "/prioritize", "/preempt"})

# The largest Redfish reply body read (webhook.adapters.redfish.limits): an expanded 1,000-block collection
# is a few MiB.
DEFAULT_MAX_RESPONSE = 16 * 1024 * 1024

# Seconds an unbound pod learnt from requests stays in the embedded cluster after the last request naming
# it (webhook.adapters.embedded): kube-scheduler names a pending pod again at every retry, at most 5 minutes
# apart, so only pods it gave up on are forgotten.
DEFAULT_POD_TTL = 600.0


def body_limit(path: str, max_body: int) -> int:
    """The largest body the route of ``path`` (slashes merged) accepts."""
    if path in LARGE_BODY_PATHS:
        return max_body
    return min(MUTATE_MAX_BODY if path == "/mutate" else SMALL_MAX_BODY, max_body)
