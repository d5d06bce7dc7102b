"""Only a certificate that names one holder is a caller (webhook.serving.callers.identity_of): the extender
verbs refuse, with a JSON 403 that says why, certificates of the client CA that carry clientAuth and the
scheduler's name but are no client certificate of the scheduler's:

- a CA certificate (basic constraints CA:TRUE) named ``imex-scheduler``: whoever holds it can issue any name;
- a URI SAN ``imex-scheduler`` that is no absolute URI (no scheme): only a URI like a SPIFFE ID counts;
- a subject with two CNs, one of them ``imex-scheduler``, first or last: which one a reader takes differs
  between libraries, so neither counts.

Before, each of them got the scheduler's 200. The scheduler's own certificate, and a SPIFFE ID on
--client-subject, still do. Through the real TLS server, on fresh connections."""

from __future__ import annotations

import datetime
import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs import files, issue
from tests import serving
from webhook.service import deploy

SPIFFE = "spiffe://cluster.local/ns/kube-system/sa/imex-scheduler"
CN = NameOID.COMMON_NAME


def _issue(ca: issue.CertKey, directory: Path, name: str, subject: list[str], *, is_ca: bool = False,
           uris: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A certificate of the client CA for clients (clientAuth), with these CNs and URI SANs."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(CN, cn) for cn in subject]))
               .issuer_name(ca.certificate().subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if is_ca:  # what a CA certificate carries, so that nothing but CA:TRUE sets it apart
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    if uris:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(u) for u in uris]), critical=False)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    cert = builder.sign(ca.private_key(), hashes.SHA256())
    paths = directory / f"{name}.crt", directory / f"{name}.key"
    files.write_pair(*paths, issue.CertKey(cert.public_bytes(serialization.Encoding.PEM), key_pem))
    return paths


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    run = tmp_path_factory.mktemp("strict")
    tls = run / "tls"
    names = ["localhost", *issue.service_dns_names(deploy.SERVICE_NAME, deploy.NAMESPACE)]
    made = files.ensure_tls_dir(tls, names, ["127.0.0.1", "::1"])
    ca = files.read_pair(made.paths.ca_cert, tls / "ca.key")
    return {
        "scheduler": files.issue_client(tls),
        "spiffe": _issue(ca, run, "spiffe", ["scheduler-7f3c"], uris=(SPIFFE,)),
        "ca_true": _issue(ca, run, "ca-true", [files.SCHEDULER_CLIENT], is_ca=True),
        "bare_uri": _issue(ca, run, "bare-uri", ["scheduler-7f3c"], uris=(files.SCHEDULER_CLIENT,)),
        "two_cns_first": _issue(ca, run, "two-cns-first", [files.SCHEDULER_CLIENT, "kube-apiserver"]),
        "two_cns_last": _issue(ca, run, "two-cns-last", ["kube-apiserver", files.SCHEDULER_CLIENT]),
    }


@pytest.fixture(scope="module")
def served(certs: dict[str, tuple[Path, Path]]) -> Iterator[serving.Served]:
    ca = certs["scheduler"][0].parent / "ca.crt"
    with serving.serve(ca.parent.parent, "--client-ca", str(ca), "--client-subject", files.SCHEDULER_CLIENT,
                       "--client-subject", SPIFFE) as s:
        yield s


def _filter(served: serving.Served, cert: tuple[Path, Path]) -> tuple[int, str, dict[str, Any]]:
    context = ssl.create_default_context(cafile=str(served.ca))
    context.load_cert_chain(*cert)
    conn = http.client.HTTPSConnection("localhost", served.port, context=context, timeout=15)
    try:
        body = json.dumps(serving.fixture("extender/filter-names-plain.json")).encode()
        conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, reply.getheader("Content-Type") or "", json.loads(reply.read())
    finally:
        conn.close()


NOT_A_CLIENT = "the client certificate is not one a client may present: "
REFUSED = {
    "ca_true": NOT_A_CLIENT + "it is a CA certificate (basic constraints CA:TRUE)",
    "bare_uri": "CN='scheduler-7f3c' is not one that may call the extender verbs (--client-subject: ",
    "two_cns_first": NOT_A_CLIENT + "its subject has 2 CNs",
    "two_cns_last": NOT_A_CLIENT + "its subject has 2 CNs",
}


@pytest.mark.parametrize("which", list(REFUSED))
def test_a_certificate_that_names_the_scheduler_but_is_no_client_of_one_holder_is_refused(
        served: serving.Served, certs: dict[str, tuple[Path, Path]], which: str) -> None:
    status, kind, body = _filter(served, certs[which])
    assert status == 403 and kind == "application/json", body
    assert body["status"] == 403 and REFUSED[which] in body["error"], body


@pytest.mark.parametrize("which", ["scheduler", "spiffe"])
def test_the_schedulers_certificate_and_an_absolute_uri_san_are_accepted(
        served: serving.Served, certs: dict[str, tuple[Path, Path]], which: str) -> None:
    status, kind, body = _filter(served, certs[which])
    assert status == 200 and kind == "application/json", body
    assert "error" not in body and not body.get("Error"), body
