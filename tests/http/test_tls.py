"""TLS of ``serve``: rotated certificate files are picked up without a restart (a new connection gets the
new certificate while a connection opened before keeps working), a pair that does not load half-way
through a rotation leaves the last good one serving, TLS older than 1.2 is refused, TLS 1.2 offers only
AEAD suites (every suite OpenSSL knows is tried one by one), and with --client-ca a certificate from
that CA gets in while one from another CA does not (the rest of mutual TLS: test_client_certs.py)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from cryptography import x509

from certs import files, issue
from tests import serving


def _served_cert(url: str, ca: Path) -> x509.Certificate:
    host, port = url.removeprefix("https://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _pair(tmp: Path, ca: issue.CertKey) -> tuple[Path, Path, int]:
    serving_pair = issue.new_serving(ca, ["localhost"], ["127.0.0.1"])
    files.write_pair(tmp / "tls.crt", tmp / "tls.key", serving_pair)
    return tmp / "tls.crt", tmp / "tls.key", serving_pair.certificate().serial_number


@contextmanager
def _serving_rotatable_files(tmp_path: Path) -> Iterator[tuple[serving.Served, issue.CertKey, Path, int]]:
    """``serve`` on certificate files in ``tmp_path`` that a test may replace; yields the server, the CA
    that signs the pairs, the key file and the serial of the certificate served first."""
    ca = issue.new_ca()
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    cert, key, first = _pair(tmp_path, ca)
    with serving.serve(tmp_path / "run", "--tls-cert", str(cert), "--tls-key", str(key),
                       ca=tmp_path / "ca.crt") as served:
        assert _served_cert(served.url, served.ca).serial_number == first
        yield served, ca, key, first


def test_rotated_certificate_files_are_served_to_new_connections_without_a_restart(tmp_path: Path) -> None:
    with _serving_rotatable_files(tmp_path) as (served, ca, _, first):
        session = requests.Session()  # a keep-alive connection opened before the rotation
        assert session.get(served.url + "/healthz", verify=str(served.ca), timeout=10).status_code == 200
        _, _, second = _pair(tmp_path, ca)  # replaced atomically, as a Secret update would
        assert second != first
        assert _served_cert(served.url, served.ca).serial_number == second
        assert session.get(served.url + "/healthz", verify=str(served.ca), timeout=10).status_code == 200
        assert served.get("/readyz").json()["checks"]["tls"]["ok"]


def test_a_pair_that_does_not_load_leaves_the_last_good_one_serving_and_readyz_says_so(tmp_path: Path) -> None:
    with _serving_rotatable_files(tmp_path) as (served, ca, key, first):
        files.write_atomic(key, issue.new_ca().key_pem, files.PRIVATE_MODE)  # half-way: a key of another pair
        assert _served_cert(served.url, served.ca).serial_number == first  # new connections still served
        ready = served.get("/readyz")
        assert ready.status_code == 503 and not ready.json()["checks"]["tls"]["ok"]
        _, _, second = _pair(tmp_path, ca)  # the rotation completes
        assert _served_cert(served.url, served.ca).serial_number == second
        assert served.get("/readyz").status_code == 200


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1:DeprecationWarning")
def test_tls_below_1_2_is_refused(tmp_path: Path) -> None:
    with serving.serve(tmp_path) as served:
        host, port = served.url.removeprefix("https://").rsplit(":", 1)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(str(served.ca))
        context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.0/1.1 at all
        context.maximum_version = ssl.TLSVersion.TLSv1_1
        context.minimum_version = ssl.TLSVersion.TLSv1
        with socket.create_connection((host, int(port)), timeout=10) as raw, pytest.raises(ssl.SSLError) as err:
            context.wrap_socket(raw, server_hostname=host)
        # The server's refusal, not the client's own policy ("no protocols available").
        assert "PROTOCOL_VERSION" in str(err.value).upper() or "UNSUPPORTED_PROTOCOL" in str(err.value).upper()


def test_with_a_client_ca_its_clients_get_in_and_another_cas_do_not(tmp_path: Path) -> None:
    client_ca, other_ca = issue.new_ca("clients"), issue.new_ca("clients")  # same name, other key
    (tmp_path / "client-ca.crt").write_bytes(client_ca.cert_pem)
    files.write_pair(tmp_path / "client.crt", tmp_path / "client.key", issue.new_client(client_ca, "imex-scheduler"))
    files.write_pair(tmp_path / "other.crt", tmp_path / "other.key", issue.new_client(other_ca, "imex-scheduler"))
    client = (tmp_path / "client.crt", tmp_path / "client.key")
    with serving.serve(tmp_path / "run", "--client-ca", str(tmp_path / "client-ca.crt"),
                       client_cert=client) as served:
        body = serving.fixture("extender/filter-names-plain.json")
        ok = requests.post(served.url + "/filter", json=body, verify=str(served.ca), cert=client, timeout=10)
        assert ok.status_code == 200
        with pytest.raises(requests.exceptions.RequestException):
            requests.post(served.url + "/filter", json=body, verify=str(served.ca), timeout=10,
                          cert=(tmp_path / "other.crt", tmp_path / "other.key"))


def _tls12_suites() -> list[str]:
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.set_ciphers("ALL:COMPLEMENTOFALL:@SECLEVEL=0")
    return [c["name"] for c in probe.get_ciphers() if c["protocol"] == "TLSv1.2"]


def _accepts(host: str, port: int, ca: Path, suite: str) -> bool:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(str(ca))
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(f"{suite}:@SECLEVEL=0")
    try:
        with socket.create_connection((host, port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname=host) as tls:
            return tls.cipher() is not None
    except ssl.SSLError:
        return False


@pytest.mark.parametrize("key_type", ["ec", "rsa"])
def test_tls_1_2_offers_only_aead_suites_with_forward_secrecy(tmp_path: Path, key_type: str) -> None:
    ca = issue.new_ca(key_type=key_type)  # type: ignore[arg-type]
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    files.write_pair(tmp_path / "tls.crt", tmp_path / "tls.key",
                     issue.new_serving(ca, ["localhost"], ["127.0.0.1"], key_type))  # type: ignore[arg-type]
    with serving.serve(tmp_path / "run", "--tls-cert", str(tmp_path / "tls.crt"), "--tls-key",
                       str(tmp_path / "tls.key"), ca=tmp_path / "ca.crt") as served:
        suites = _tls12_suites()
        accepted = [s for s in suites if _accepts("localhost", served.port, served.ca, s)]
    assert len(suites) > 20  # the client really offered the CBC, RSA-kx and DHE suites one by one
    assert accepted, "no TLS 1.2 suite at all"
    assert all(s.startswith("ECDHE-") and ("GCM" in s or "CHACHA20" in s) for s in accepted), accepted
    # The two CBC suites the server used to accept are among the refused.
    if key_type == "ec":
        assert {"ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384"} <= set(suites) - set(accepted)
