"""Shared certificates (made once per run, they are immutable values) and a real TLS handshake."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from certs import issue

SERVICE, NAMESPACE = "svc", "ns"
# The TLS ServerName kube-apiserver sends when it calls a webhook Service.
APISERVER_SERVER_NAME = f"{SERVICE}.{NAMESPACE}.svc"

Handshake = Callable[..., bytes]


@pytest.fixture(scope="session")
def ec_ca() -> issue.CertKey:
    return issue.new_ca("test CA", "ec")


@pytest.fixture(scope="session")
def ec_serving(ec_ca: issue.CertKey) -> issue.CertKey:
    return issue.new_serving(ec_ca, issue.service_dns_names(SERVICE, NAMESPACE), ["127.0.0.1"], "ec")


@pytest.fixture(scope="session")
def rsa_ca() -> issue.CertKey:
    return issue.new_ca("test RSA CA", "rsa")


@pytest.fixture(scope="session")
def rsa_serving(rsa_ca: issue.CertKey) -> issue.CertKey:
    return issue.new_serving(rsa_ca, issue.service_dns_names(SERVICE, NAMESPACE), ["127.0.0.1"], "rsa")


@pytest.fixture
def handshake() -> Handshake:
    """``handshake(cert, key, ca, server_hostname)``: bytes the server sent, or the client's SSL error."""
    return _handshake


def _handshake(cert: Path, key: Path, ca: Path, server_hostname: str = APISERVER_SERVER_NAME) -> bytes:
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and hostname by default
    client_ctx.load_verify_locations(cafile=ca)
    server_errors: list[BaseException] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(5)
        thread = threading.Thread(target=_serve_once, args=(listener, server_ctx, server_errors))
        thread.start()
        try:
            with (
                socket.create_connection(listener.getsockname()[:2], timeout=5) as raw,
                client_ctx.wrap_socket(raw, server_hostname=server_hostname) as tls,
            ):
                return tls.recv(16)
        finally:
            thread.join(5)


def _serve_once(listener: socket.socket, ctx: ssl.SSLContext, errors: list[BaseException]) -> None:
    try:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            with ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"hello")
    except OSError as e:  # includes ssl.SSLError: a rejected handshake is the client's result to check
        errors.append(e)
