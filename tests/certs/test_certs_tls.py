"""The certificates work with real TLS stacks, not only with our own parser.

Covered, for EC and RSA: ``openssl verify`` accepts the chain (strict X.509 checks) of the serving
certificate for the server purpose only and of the scheduler's client certificate for the client purpose
only, and rejects it against another CA; the pair loads into ``ssl.SSLContext.load_cert_chain``;
a TLS handshake on 127.0.0.1 succeeds for the ServerName kube-apiserver sends (``svc.ns.svc``) and
for the IP SAN, and fails for a name the certificate does not carry or a client trusting another CA.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from certs import files, issue

Handshake = Callable[..., bytes]
OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="the openssl command is not on PATH")


@pytest.fixture(params=["ec", "rsa"])
def bundle(request: pytest.FixtureRequest, tmp_path: Path) -> files.TlsPaths:
    ca = request.getfixturevalue(f"{request.param}_ca")
    serving = request.getfixturevalue(f"{request.param}_serving")
    return files.write_bundle(tmp_path / "tls", ca, serving)


def openssl_verify(ca_cert: Path, cert: Path, *options: str) -> subprocess.CompletedProcess[str]:
    assert OPENSSL is not None
    command = [OPENSSL, "verify", *options, "-CAfile", str(ca_cert), str(cert)]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)


@needs_openssl
def test_openssl_verifies_the_serving_chain_strictly_for_servers(bundle: files.TlsPaths) -> None:
    result = openssl_verify(bundle.ca_cert, bundle.cert, "-x509_strict", "-purpose", "sslserver")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith(": OK")


@needs_openssl
def test_openssl_refuses_the_serving_certificate_as_a_client(bundle: files.TlsPaths) -> None:
    result = openssl_verify(bundle.ca_cert, bundle.cert, "-x509_strict", "-purpose", "sslclient")
    assert result.returncode != 0
    assert "unsuitable certificate purpose" in result.stdout + result.stderr


@needs_openssl
@pytest.mark.parametrize(("purpose", "accepted"), [("sslclient", True), ("sslserver", False)])
def test_openssl_takes_the_scheduler_certificate_as_a_client_only(
    bundle: files.TlsPaths, purpose: str, accepted: bool
) -> None:
    cert, _ = files.issue_client(bundle.ca_cert.parent)
    result = openssl_verify(bundle.ca_cert, cert, "-x509_strict", "-purpose", purpose)
    assert (result.returncode == 0) is accepted, result.stdout + result.stderr


@needs_openssl
def test_openssl_rejects_the_chain_against_another_ca(bundle: files.TlsPaths, tmp_path: Path) -> None:
    other = tmp_path / "other-ca.crt"
    other.write_bytes(issue.new_ca("test CA").cert_pem)  # same name, different key
    result = openssl_verify(other, bundle.cert)
    assert result.returncode != 0


def test_the_pair_loads_into_a_server_context(bundle: files.TlsPaths) -> None:
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(bundle.cert, bundle.key)


@pytest.mark.parametrize("server_hostname", ["svc.ns.svc", "svc.ns.svc.cluster.local", "127.0.0.1"])
def test_a_client_trusting_ca_crt_completes_a_handshake(
    bundle: files.TlsPaths, handshake: Handshake, server_hostname: str
) -> None:
    assert handshake(bundle.cert, bundle.key, bundle.ca_cert, server_hostname) == b"hello"


def test_a_name_missing_from_the_sans_fails_hostname_verification(bundle: files.TlsPaths, handshake: Handshake) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match=r"[Hh]ostname mismatch"):
        handshake(bundle.cert, bundle.key, bundle.ca_cert, "other.ns.svc")


def test_a_client_trusting_another_ca_refuses_the_server(
    bundle: files.TlsPaths, handshake: Handshake, tmp_path: Path
) -> None:
    other = tmp_path / "other-ca.crt"
    other.write_bytes(issue.new_ca("test CA").cert_pem)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(bundle.cert, bundle.key, other)
