"""Who may call the extender: with --client-ca, /filter, /prioritize, /bind and /preempt answer only a
client whose certificate chains to that CA and carries clientAuth (the scheduler's, from the certs tool);
one without a certificate gets a 403 JSON answer, while the probes, /metrics and /inspect stay open to it
(the kubelet and Prometheus have none). A certificate from another CA, the server's own serving
certificate (same CA, serverAuth only) and an expired client certificate are refused in the handshake,
over TLS 1.2 and 1.3. The peer is OpenSSL, through Python's ssl module and http.client."""

from __future__ import annotations

import datetime
import http.client
import json
import ssl
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from certs import files, issue
from tests import serving
from webhook.service import deploy

VERBS = ("/filter", "/prioritize", "/bind", "/preempt")
OPEN_PATHS = ("/healthz", "/readyz", "/metrics", "/inspect")
TLS_VERSIONS = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]


@dataclass(frozen=True)
class Pki:
    ca: Path
    scheduler: tuple[Path, Path]
    server_own: tuple[Path, Path]
    other_ca: tuple[Path, Path]
    expired: tuple[Path, Path]


def _write(directory: Path, name: str, pair: issue.CertKey) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    files.write_pair(cert, key, pair)
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    run = tmp_path_factory.mktemp("mtls")
    tls = run / "tls"  # what `serve --tls-dir` would make, made first so the client CA exists at start
    names = ["localhost", *issue.service_dns_names(deploy.SERVICE_NAME, deploy.NAMESPACE)]
    made = files.ensure_tls_dir(tls, names, ["127.0.0.1", "::1"])
    ca = files.read_pair(made.paths.ca_cert, tls / "ca.key")
    other = issue.new_ca("another CA")
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    return Pki(
        ca=made.paths.ca_cert,
        scheduler=files.issue_client(tls),
        server_own=(made.paths.cert, made.paths.key),
        other_ca=_write(run, "other", issue.new_client(other, files.SCHEDULER_CLIENT)),
        expired=_write(run, "expired", issue.new_client(ca, files.SCHEDULER_CLIENT, days=1, now=long_ago)),
    )


@pytest.fixture(scope="module")
def served(pki: Pki) -> Iterator[serving.Served]:
    with serving.serve(pki.ca.parent.parent, "--client-ca", str(pki.ca)) as s:
        yield s


def _body(path: str) -> bytes:
    fixture = {"/filter": "filter-names-plain.json", "/prioritize": "filter-names-plain.json",
               "/bind": "bind-train-8-0.json", "/preempt": "preempt-meta-train-4.json"}.get(path)
    return json.dumps(serving.fixture(f"extender/{fixture}")).encode() if fixture else b""


def _call(served: serving.Served, path: str, cert: tuple[Path, Path] | None,
          version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3) -> tuple[int, bytes]:
    """One request on a fresh connection; raises ssl.SSLError / OSError when the server refuses it."""
    context = ssl.create_default_context(cafile=str(served.ca))
    context.minimum_version = context.maximum_version = version
    if cert is not None:
        context.load_cert_chain(*cert)
    conn = http.client.HTTPSConnection("localhost", served.port, context=context, timeout=15)
    try:
        body = _body(path)
        conn.request("POST" if body else "GET", path, body=body or None,
                     headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


@pytest.mark.parametrize("version", TLS_VERSIONS, ids=["TLS1.2", "TLS1.3"])
@pytest.mark.parametrize("path", VERBS)
def test_the_schedulers_certificate_is_accepted_on_every_extender_verb(
        served: serving.Served, pki: Pki, path: str, version: ssl.TLSVersion) -> None:
    status, body = _call(served, path, pki.scheduler, version)
    assert status == 200, body
    assert "error" not in json.loads(body) or json.loads(body)["error"] in ("", None)


@pytest.mark.parametrize("path", VERBS)
def test_without_a_certificate_each_extender_verb_answers_403_in_json(served: serving.Served, path: str) -> None:
    status, body = _call(served, path, None)
    assert status == 403
    answer = json.loads(body)
    assert answer["status"] == 403 and "client certificate" in answer["error"] and "--client-ca" in answer["error"]


def _refusals(served: serving.Served, verb: str) -> float:
    _, text = _call(served, "/metrics", None)
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == "imex_webhook_requests_total" and sample.labels == {"verb": verb, "code": "403"}:
                return sample.value
    return 0.0


def test_every_refusal_is_counted_under_its_verb_and_403(served: serving.Served) -> None:
    before = _refusals(served, "bind")
    for _ in range(3):
        assert _call(served, "/bind", None)[0] == 403
    assert _call(served, "//bind", None)[0] == 403  # the spelling the router merges counts as /bind too
    assert _refusals(served, "bind") == before + 4


@pytest.mark.parametrize("path", ["//filter", "/filter/", "/./filter", "/bind//", "//preempt"])
def test_spelling_a_verbs_path_differently_does_not_get_past_the_check(served: serving.Served, path: str) -> None:
    status, _ = _call(served, path, None)
    assert status != 200 and status < 500


@pytest.mark.parametrize("path", OPEN_PATHS)
def test_probes_metrics_and_inspect_answer_a_client_without_a_certificate(served: serving.Served, path: str) -> None:
    status, body = _call(served, path, None)
    assert status == 200, body


# The TLS alert the server sends for each: OpenSSL's own verdict on the chain and the key usage.
REFUSED = {"other_ca": "UNKNOWN_CA", "server_own": "UNSUPPORTED_CERTIFICATE", "expired": "CERTIFICATE_EXPIRED"}


@pytest.mark.parametrize("version", TLS_VERSIONS, ids=["TLS1.2", "TLS1.3"])
@pytest.mark.parametrize("which", list(REFUSED))
def test_a_certificate_that_does_not_qualify_is_refused_in_the_handshake(
        served: serving.Served, pki: Pki, which: str, version: ssl.TLSVersion) -> None:
    # TLS 1.3 clients finish their side of the handshake before the server checks their certificate:
    # the refusal then arrives as an alert on the first read instead of an HTTP answer.
    for path in ("/filter", "/healthz"):  # a bad certificate gets nothing at all
        with pytest.raises(ssl.SSLError) as refused:
            _call(served, path, getattr(pki, which), version)
        assert REFUSED[which] in str(refused.value), refused.value


def test_concurrent_callers_with_mixed_credentials_each_get_their_own_answer(served: serving.Served,
                                                                            pki: Pki) -> None:
    callers = [("scheduler", pki.scheduler), ("none", None), ("other_ca", pki.other_ca)] * 12

    def call(caller: tuple[str, tuple[Path, Path] | None]) -> tuple[str, object]:
        try:
            return caller[0], _call(served, "/filter", caller[1])[0]
        except (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected):
            return caller[0], "refused"

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(call, callers))
    expected = {"scheduler": 200, "none": 403, "other_ca": "refused"}
    assert all(got == expected[who] for who, got in results), results
    assert served.get("/healthz").status_code == 200  # and the server is still there


def test_the_scheduler_keeps_its_connection_across_verbs(served: serving.Served, pki: Pki) -> None:
    session = requests.Session()
    session.cert = (str(pki.scheduler[0]), str(pki.scheduler[1]))
    for path in ("/filter", "/prioritize", "/filter"):
        reply = served.post(path, json.loads(_body(path)), session=session)
        assert reply.status_code == 200, reply.text


def test_without_a_client_ca_the_verbs_are_open_and_the_server_says_so(tmp_path: Path) -> None:
    with serving.serve(tmp_path) as open_server:
        assert open_server.post("/filter", serving.fixture("extender/filter-names-plain.json")).status_code == 200
        assert "no --client-ca" in open_server.output()
