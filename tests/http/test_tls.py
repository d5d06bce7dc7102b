"""TLS of ``serve``: rotated certificate files are picked up without a restart (a new connection gets the
new certificate while a connection opened before keeps working), TLS older than 1.2 is refused, and
with --client-ca only clients presenting a certificate from that CA get in."""

from __future__ import annotations

import socket
import ssl
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


def test_rotated_certificate_files_are_served_to_new_connections_without_a_restart(tmp_path: Path) -> None:
    ca = issue.new_ca()
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    cert, key, first = _pair(tmp_path, ca)
    with serving.serve(tmp_path / "run", "--tls-cert", str(cert), "--tls-key", str(key),
                       ca=tmp_path / "ca.crt") as served:
        assert _served_cert(served.url, served.ca).serial_number == first
        session = requests.Session()  # a keep-alive connection opened before the rotation
        assert session.get(served.url + "/healthz", verify=str(served.ca), timeout=10).status_code == 200
        _, _, second = _pair(tmp_path, ca)  # replaced atomically, as a Secret update would
        assert second != first
        assert _served_cert(served.url, served.ca).serial_number == second
        assert session.get(served.url + "/healthz", verify=str(served.ca), timeout=10).status_code == 200
        assert served.get("/readyz").json()["checks"]["tls"]["ok"]


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


def test_with_a_client_ca_only_clients_with_its_certificates_get_in(tmp_path: Path) -> None:
    client_ca = issue.new_ca("clients")
    (tmp_path / "client-ca.crt").write_bytes(client_ca.cert_pem)
    scheduler = issue.new_serving(client_ca, ["imex-scheduler"], [])  # carries clientAuth too
    files.write_pair(tmp_path / "client.crt", tmp_path / "client.key", scheduler)
    client = (tmp_path / "client.crt", tmp_path / "client.key")
    with serving.serve(tmp_path / "run", "--client-ca", str(tmp_path / "client-ca.crt"),
                       client_cert=client) as served:
        ok = requests.get(served.url + "/healthz", verify=str(served.ca), cert=client, timeout=10)
        assert ok.status_code == 200
        with pytest.raises(requests.exceptions.RequestException):
            requests.get(served.url + "/healthz", verify=str(served.ca), timeout=10)
