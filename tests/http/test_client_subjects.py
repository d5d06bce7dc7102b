"""Chaining to the client CA is not enough (webhook.serving.callers): the extender verbs answer only a
certificate that names clientAuth and whose subject is on --client-subject (the scheduler's by default),
/inspect and /ui only one on --inspect-subject or a loopback connection (kubectl port-forward).

Through the real TLS server: kube-apiserver's certificate from the same CA (the docs advise one CA), a
certificate with no extended key usage at all, an operator's certificate, and a subject allowed by a DNS SAN
rather than its CN. Table-driven, on the request as the server sees it: the loopback rule for the map, for
addresses a test on this machine cannot connect from."""

from __future__ import annotations

import datetime
import http.client
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
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
from webhook.serving.callers import Allowed, Identity, identity_of, refusal, require_client_certificate


@dataclass(frozen=True)
class Certs:
    ca: Path
    scheduler: tuple[Path, Path]
    apiserver: tuple[Path, Path]
    no_eku: tuple[Path, Path]
    operator: tuple[Path, Path]
    by_san: tuple[Path, Path]


def _custom(ca: issue.CertKey, cn: str, usages: list[x509.ObjectIdentifier] | None, sans: list[str],
            directory: Path, name: str) -> tuple[Path, Path]:
    """A client certificate the certs tool would never issue: no EKU at all, or a SAN beside the CN."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
               .issuer_name(ca.certificate().subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    if usages is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(s) for s in sans]), critical=False)
    cert = builder.sign(ca.private_key(), hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    paths = directory / f"{name}.crt", directory / f"{name}.key"
    files.write_pair(*paths, issue.CertKey(cert.public_bytes(serialization.Encoding.PEM), key_pem))
    return paths


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    run = tmp_path_factory.mktemp("subjects")
    tls = run / "tls"
    names = ["localhost", *issue.service_dns_names(deploy.SERVICE_NAME, deploy.NAMESPACE)]
    made = files.ensure_tls_dir(tls, names, ["127.0.0.1", "::1"])
    ca = files.read_pair(made.paths.ca_cert, tls / "ca.key")
    return Certs(
        ca=made.paths.ca_cert,
        scheduler=files.issue_client(tls),
        apiserver=files.issue_client(tls, "kube-apiserver"),
        no_eku=_custom(ca, files.SCHEDULER_CLIENT, None, [], run, "no-eku"),
        operator=files.issue_client(tls, "imex-operator"),
        by_san=_custom(ca, "scheduler-7f3c", [ExtendedKeyUsageOID.CLIENT_AUTH], ["sched.example.org"], run, "by-san"),
    )


@pytest.fixture(scope="module")
def served(certs: Certs) -> Iterator[serving.Served]:
    with serving.serve(certs.ca.parent.parent, "--client-ca", str(certs.ca), "--client-subject", "imex-scheduler",
                       "--client-subject", "sched.example.org") as s:
        yield s


def _call(served: serving.Served, path: str, cert: tuple[Path, Path]) -> tuple[int, dict[str, Any]]:
    context = ssl.create_default_context(cafile=str(served.ca))
    context.load_cert_chain(*cert)
    conn = http.client.HTTPSConnection("localhost", served.port, context=context, timeout=15)
    try:
        body = json.dumps(serving.fixture("extender/filter-names-plain.json")).encode() if path == "/filter" else None
        conn.request("POST" if body else "GET", path, body=body, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


@pytest.mark.parametrize(("which", "path", "status", "says"), [
    ("scheduler", "/filter", 200, None),
    ("by_san", "/filter", 200, None),
    ("apiserver", "/filter", 403, "CN='kube-apiserver' is not one that may call the extender verbs"),
    ("no_eku", "/filter", 403, "does not name clientAuth in its extended key usage"),
    ("operator", "/filter", 403, "--client-subject: imex-scheduler, sched.example.org"),
    ("operator", "/inspect", 200, None),
    ("apiserver", "/inspect", 200, None),  # from loopback: kubectl port-forward's way in
])
def test_a_certificate_of_the_client_ca_is_judged_by_its_usage_and_subject(
        served: serving.Served, certs: Certs, which: str, path: str, status: int, says: str | None) -> None:
    got, body = _call(served, path, getattr(certs, which))
    assert got == status, body
    if says:
        assert body["status"] == 403 and says in body["error"], body


def test_the_scheduler_keeps_its_answers_while_refused_callers_hammer_the_same_server(served: serving.Served,
                                                                                    certs: Certs) -> None:
    from concurrent.futures import ThreadPoolExecutor

    who = [("scheduler", 200), ("apiserver", 403), ("no_eku", 403)] * 8
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda w: _call(served, "/filter", getattr(certs, w[0]))[0], who))
    assert got == [status for _, status in who]


def _identity(certs: Certs, which: str) -> Identity:
    pem = getattr(certs, which)[0].read_bytes()
    return identity_of(x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER))


def test_a_certificate_says_its_cn_and_sans_and_whether_it_is_for_clients(certs: Certs) -> None:
    assert _identity(certs, "scheduler") == Identity("imex-scheduler", frozenset({"imex-scheduler"}), True)
    assert _identity(certs, "by_san") == Identity("scheduler-7f3c", frozenset({"scheduler-7f3c", "sched.example.org"}),
                                                  True)
    assert _identity(certs, "no_eku").client_auth is False


REMOTE = {"REMOTE_ADDR": "10.244.1.7"}
OPERATOR = Identity("imex-operator", frozenset({"imex-operator"}), True)
SCHEDULER = Identity("imex-scheduler", frozenset({"imex-scheduler"}), True)


@pytest.mark.parametrize(("path", "client", "environ", "refused"), [
    ("/inspect", None, REMOTE, "need a client certificate"),
    ("/ui", None, REMOTE, "or a connection through kubectl port-forward"),
    ("/inspect", SCHEDULER, REMOTE, "--inspect-subject: imex-operator"),
    ("/inspect", OPERATOR, REMOTE, None),
    ("/ui", None, {"REMOTE_ADDR": "127.0.0.1"}, None),
    ("/ui", None, {"REMOTE_ADDR": "::1"}, None),
    ("/ui", None, {"REMOTE_ADDR": "::ffff:127.0.0.1"}, None),
    ("/ui", None, {"REMOTE_ADDR": "::ffff:10.0.0.1"}, "need a client certificate"),
    ("/ui", None, {"REMOTE_ADDR": "not an address"}, "need a client certificate"),
    ("/ui", None, {}, "need a client certificate"),
    ("/filter", None, {"REMOTE_ADDR": "127.0.0.1"}, "none was presented"),  # loopback opens only the map
    ("/filter", OPERATOR, REMOTE, "is not one that may call the extender verbs"),
    ("/healthz", None, REMOTE, None),
    ("/metrics", None, REMOTE, None),
    ("/mutate", None, REMOTE, None),
])
def test_who_may_read_what(path: str, client: Identity | None, environ: dict[str, Any], refused: str | None) -> None:
    why = refusal(path, client, Allowed(), environ.get("REMOTE_ADDR"))
    assert (why is None) if refused is None else (why is not None and refused in why), why


def test_a_refused_request_never_reaches_the_app_and_is_counted_once() -> None:
    reached: list[str] = []
    counted: list[tuple[str, int]] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        reached.append(environ["PATH_INFO"])
        start_response("200 OK", [])
        return [b"{}"]

    guarded = require_client_certificate(app, Allowed(), refused=lambda p, s: counted.append((p, s)))
    statuses: list[str] = []
    for path in ("//inspect/", "/healthz"):
        body = b"".join(guarded({"PATH_INFO": path, **REMOTE}, lambda s, h: statuses.append(s)))
        assert json.loads(body) if path != "/healthz" else body == b"{}"
    assert statuses == ["403 Forbidden", "200 OK"] and reached == ["/healthz"] and counted == [("/inspect", 403)]
