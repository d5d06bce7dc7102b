"""Who may call us: the extender verbs answer only kube-scheduler, the cluster map only operators.

The TLS layer requests a certificate from every client and fails the handshake for one that does not
chain to ``--client-ca`` (:mod:`webhook.serving.tls`); a client without one still gets in, since the
kubelet's probes and Prometheus have none. Chaining to the CA is not enough, though: the docs advise one CA
for the scheduler's and kube-apiserver's client certificates, and a certificate without any extended key
usage is valid for every purpose in OpenSSL's eyes. So each request is checked here against the path:

- ``/filter``, ``/prioritize``, ``/bind``, ``/preempt`` (they reserve domains, attach fabric GPUs and bind
  pods with the webhook's service account): a certificate that names clientAuth in its extended key usage
  and whose subject (its CN, or a DNS or URI SAN) is one of ``--client-subject`` (default the scheduler's
  identity the shipped manifests issue, ``imex-scheduler``);
- ``/inspect`` and ``/ui`` (every tenant's groups, pods and nodes): the same for ``--inspect-subject``
  (default ``imex-operator``, issued with ``imex-webhook certs --client imex-operator``), or a connection from
  loopback, which outside the pod only ``kubectl port-forward`` makes, after the API server checked the
  caller's RBAC (``pods/portforward`` in the webhook's namespace);
- ``/mutate`` is guarded by the network (only the API server may reach it), the probes and ``/metrics`` stay
  open.

Everything refused answers 403 JSON that says what was missing. Without ``--client-ca`` nothing is checked
(``serve`` warns at start): that is for a laptop, not for a cluster.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.wire.addresses import is_loopback, normalized

# The subjects the shipped manifests and ``imex-webhook certs`` issue client certificates for, which
# ``serve``'s --client-subject and --inspect-subject default to (webhook.service.settings names the same two,
# tests/service/test_caller_flags.py checks they agree): the defaults of :class:`Allowed`.
SCHEDULER_SUBJECT = "imex-scheduler"
OPERATOR_SUBJECT = "imex-operator"

EXTENDER_PATHS = frozenset({"/filter", "/prioritize", "/bind", "/preempt"})
INSPECT_PATHS = frozenset({"/inspect", "/ui"})
PEER_KEY = "imex_webhook.client"  # the verified client's subject CN, for the views and the logs

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True, slots=True)
class Identity:
    """What a verified client certificate says about its holder."""

    common_name: str
    subjects: frozenset[str]  # the one CN, every DNS SAN and every URI SAN that is an absolute URI
    client_auth: bool  # clientAuth is named in its extended key usage
    problem: str = ""  # why it is no client certificate at all, whatever its names (a CA, two CNs)


@dataclass(frozen=True, slots=True)
class Allowed:
    extender: frozenset[str] = frozenset({SCHEDULER_SUBJECT})
    inspect: frozenset[str] = frozenset({OPERATOR_SUBJECT})
    # Loopback peers count as operators (kubectl port-forward); off behind a mesh sidecar, where every
    # caller arrives from loopback (--no-loopback-operators).
    loopback_operators: bool = True


@lru_cache(maxsize=256)
def identity_of(der: bytes) -> Identity:
    """Parsed once per certificate: every request of a kept-alive connection presents the same one.

    Only names that identify one holder count: a subject with two CNs names none of them (which one a
    reader takes differs between libraries), and a URI SAN counts only as an absolute URI (a SPIFFE ID,
    say), so that a bare ``imex-scheduler`` in a URI SAN is not read as the scheduler's name. A CA
    certificate is never a client, whatever it names."""
    cert = x509.load_der_x509_certificate(der)
    names = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    subjects = set(names) if len(names) == 1 else set()
    problem = f"its subject has {len(names)} CNs" if len(names) > 1 else ""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        subjects.update(san.get_values_for_type(x509.DNSName))
        subjects.update(u for u in san.get_values_for_type(x509.UniformResourceIdentifier) if _absolute_uri(u))
    except x509.ExtensionNotFound:
        pass
    try:
        if cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            problem = "it is a CA certificate (basic constraints CA:TRUE)"
    except x509.ExtensionNotFound:
        pass
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        client_auth = ExtendedKeyUsageOID.CLIENT_AUTH in usages
    except x509.ExtensionNotFound:
        client_auth = False  # valid for anything to OpenSSL; not a client certificate to us
    return Identity(names[0] if len(names) == 1 else "", frozenset(subjects), client_auth, problem)


def _absolute_uri(text: str) -> bool:
    scheme, sep, rest = text.partition(":")
    return bool(sep and rest and scheme[:1].isalpha() and scheme.isascii()
                and all(c.isalnum() or c in "+-." for c in scheme))


def verified_client(environ: dict[str, Any]) -> Identity | None:
    """The client certificate the handshake verified; ``None`` without one."""
    return peer_identity(environ.get("gunicorn.socket"))


def peer_identity(sock: object) -> Identity | None:
    """The verified client certificate of a TLS connection (the worker's poller asks before it reads a
    body, the WSGI middleware per request); ``None`` without one."""
    if not isinstance(sock, ssl.SSLSocket):
        return None
    try:
        der = sock.getpeercert(binary_form=True)  # only a verified certificate is returned
    except (ValueError, OSError):
        return None
    if not der:
        return None
    try:
        return identity_of(der)
    except ValueError:  # OpenSSL verified it, so this would be a certificate cryptography cannot read
        return Identity("", frozenset(), False, "it cannot be read")


def needs_certificate(path: str) -> bool:
    """Whether ``path`` (as the router sees it) answers only some callers (by certificate or address)."""
    return path in EXTENDER_PATHS or path in INSPECT_PATHS


def refusal(path: str, client: Identity | None, allowed: Allowed, remote_addr: str | None) -> str | None:
    """Why ``client``, connected from ``remote_addr``, may not call ``path``; None when it may."""
    if path in EXTENDER_PATHS:
        wanted, flag, what = allowed.extender, "--client-subject", "the extender verbs"
    elif path in INSPECT_PATHS:
        if allowed.loopback_operators and is_loopback(remote_addr):
            return None
        wanted, flag, what = allowed.inspect, "--inspect-subject", "/inspect and /ui"
    else:
        return None
    names = ", ".join(sorted(wanted))
    other = (" or a connection through kubectl port-forward"
             if path in INSPECT_PATHS and allowed.loopback_operators else "")
    if client is None:
        return (f"{what} need a client certificate signed by the client CA (--client-ca) for one of: {names} "
                f"({flag}){other}; none was presented")
    if client.problem:
        return f"the client certificate is not one a client may present: {client.problem}"
    if not client.client_auth:
        return (f"the client certificate CN={client.common_name!r} does not name clientAuth in its extended key "
                f"usage; {what} need a client certificate")
    if not client.subjects & wanted:
        return (f"the client certificate CN={client.common_name!r} is not one that may call {what} "
                f"({flag}: {names}){other}")
    return None


def require_client_certificate(app: WsgiApp, allowed: Allowed | None = None,
                               refused: Callable[[str, int], None] | None = None) -> WsgiApp:
    """``refused(path, 403)`` is told of every refusal: it never reaches the app, whose replies are counted
    in ``imex_webhook_requests_total`` there."""
    rules = allowed or Allowed()

    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        client = verified_client(environ)
        if client is not None:
            environ[PEER_KEY] = client.common_name
        path = normalized(environ.get("PATH_INFO", ""))
        why = refusal(path, client, rules, environ.get("REMOTE_ADDR"))
        if why is None:
            return app(environ, start_response)
        body = orjson.dumps({"error": why, "status": 403})
        start_response("403 Forbidden", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        if refused is not None:
            refused(path, 403)
        return [body]

    return guarded
