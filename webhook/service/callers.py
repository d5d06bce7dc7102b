"""Who may call us: the extender verbs answer only a client whose certificate the TLS layer verified.

kube-scheduler presents its client certificate (the KubeSchedulerConfiguration's extender ``tlsConfig``
``certFile``/``keyFile``); the TLS layer requests a certificate from every client and fails the handshake
for one that does not chain to ``--client-ca`` or lacks the clientAuth usage (:mod:`webhook.service.tls`).
A client that presented none still gets in, since the kubelet's probes and Prometheus have none, but the
verbs that reserve domains, attach fabric GPUs and bind pods answer it 403. ``/mutate`` is guarded by the
network instead (only the API server may reach it), and reads (``/healthz``, ``/readyz``, ``/metrics``,
``/inspect``) stay open.
"""

from __future__ import annotations

import posixpath
import ssl
from collections.abc import Callable, Iterable
from typing import Any

import orjson

EXTENDER_PATHS = frozenset({"/filter", "/prioritize", "/bind", "/preempt"})
PEER_KEY = "imex_webhook.client"  # the verified client's subject CN, for the views and the logs

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def normalized(path: str) -> str:
    """``//filter/``, ``/./filter`` and ``/filter`` are one path to a router that merges slashes."""
    return posixpath.normpath("/" + path.lstrip("/")) if path else "/"


def verified_client(environ: dict[str, Any]) -> str | None:
    """The common name of the client certificate the handshake verified; ``None`` without one."""
    sock = environ.get("gunicorn.socket")
    if not isinstance(sock, ssl.SSLSocket):
        return None
    try:
        cert = sock.getpeercert()  # only a verified certificate is returned; {} when none was presented
    except (ValueError, OSError):
        return None
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for attribute in rdn:
            if attribute[0] == "commonName":
                return str(attribute[1])
    return ""


def require_client_certificate(app: WsgiApp, paths: frozenset[str] = EXTENDER_PATHS,
                               refused: Callable[[str, int], None] | None = None) -> WsgiApp:
    """``refused(path, 403)`` is told of every refusal: it never reaches the app, whose replies are counted
    in ``imex_webhook_requests_total`` there."""

    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        client = verified_client(environ)
        if client is not None:
            environ[PEER_KEY] = client
        elif normalized(environ.get("PATH_INFO", "")) in paths:
            body = orjson.dumps({
                "error": "the extender verbs need a client certificate signed by the scheduler's client CA "
                         "(--client-ca); none was presented",
                "status": 403,
            })
            start_response("403 Forbidden", [("Content-Type", "application/json"),
                                              ("Content-Length", str(len(body)))])
            if refused is not None:
                refused(normalized(environ.get("PATH_INFO", "")), 403)
            return [body]
        return app(environ, start_response)

    return guarded
