"""A stranger gets nothing but a refusal, at the cost of refusing (docs/HARDENING.md, "A stranger's cost").

Through the real server over TLS, with ``--client-ca`` as in a cluster:

- an extender verb called without the scheduler's certificate is refused as soon as its head is read: the
  403 arrives while the body is still being sent, and what the client sends after it is discarded in
  linear time (before, the body was read whole, then drained 1 KiB at a time with a copy of the rest for
  every KiB: 82 s for 15.9 MiB, with a thread held all along);
- strangers sending the largest bodies the verbs admit leave kube-scheduler's ``/filter`` answering;
- a chunked body reaches the app whole however it is cut, but not in more chunks than any client sends;
- ``/mutate`` answers a review in proportion to our bounds, not to what the pod carries: a group pod with
  150,000 nodeSelectorTerms (a 3 MB review that got a 42 MB reply) is denied in a few hundred bytes, and
  clients that never read their replies leave ``/filter`` answering;
- when the service port stops answering (every thread held), the probe port's ``/healthz`` says so, and
  says so no more once it answers again.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests import serving
from tests.kubefake import eventually
from webhook.serving.framing import MAX_CHUNKS
from webhook.tools.bench import payloads
from webhook.tools.stats import percentile

VERBS = ("/filter", "/prioritize", "/bind", "/preempt")
LARGEST = 16 * 1024 * 1024 - 100 * 1024  # just under the verbs' default --max-body (16 MiB)
HEAD_OF_BODY = 64 * 1024



@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> serving.Pki:
    return serving.scheduler_pki(tmp_path_factory.mktemp("strangers"))


@pytest.fixture(scope="module")
def served(pki: serving.Pki) -> Iterator[serving.Served]:
    with serving.serve_with_client_ca(pki) as s:
        yield s


def _tls(served: serving.Served, cert: tuple[Path, Path] | None = None) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(served.ca))
    if cert is not None:
        context.load_cert_chain(*cert)
    return context.wrap_socket(socket.create_connection(("127.0.0.1", served.port), timeout=60),
                               server_hostname="localhost")


def _head(path: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _answer(sock: ssl.SSLSocket) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-case names), body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a whole head: {data[:200]!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(status_line.split()[1]), headers, body


def _counted(served: serving.Served, name: str, labels: dict[str, str]) -> float:
    text = requests.get(served.url + "/metrics", verify=str(served.ca), timeout=30).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


# -- Refused before the body is read --------------------------------------------------------------------------

@pytest.mark.parametrize("path", VERBS)
def test_an_uncertified_verb_call_is_refused_while_its_body_is_still_on_the_way(
        served: serving.Served, path: str) -> None:
    # Only the head and the body's first 64 KiB are sent: a server that reads the body first never answers
    # (until its body deadline, with a 408), one that refuses on the head answers at once.
    with _tls(served) as sock:
        sock.sendall(_head(path, LARGEST) + b" " * HEAD_OF_BODY)
        status, headers, body = _answer(sock)
    assert status == 403, body
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    answer = json.loads(body)
    assert answer["status"] == 403 and "client certificate" in answer["error"]


def test_the_rest_of_a_refused_body_is_discarded_and_the_answer_waits_for_the_client(
        served: serving.Served) -> None:
    refused_before = _counted(served, "imex_webhook_connections_dropped_total", {"reason": "refused-caller"})
    counted_before = _counted(served, "imex_webhook_requests_total", {"verb": "filter", "code": "403"})
    with _tls(served) as sock:
        sock.sendall(_head("/filter", LARGEST) + b"[" + b"1," * (LARGEST // 2 - 1) + b"1")  # all of it
        status, headers, _ = _answer(sock)
        assert status == 403 and headers["connection"] == "close"
        assert sock.recv(1) == b""  # then an orderly close, not a reset
    assert _counted(served, "imex_webhook_connections_dropped_total",
                    {"reason": "refused-caller"}) == refused_before + 1
    assert _counted(served, "imex_webhook_requests_total", {"verb": "filter", "code": "403"}) == counted_before + 1
    assert "dropped a connection from 127.0.0.1" in served.output() and "refused-caller (/filter:" in served.output()


def test_the_schedulers_certificate_still_gets_its_large_body_read_and_answered(
        served: serving.Served, pki: serving.Pki) -> None:
    body = json.dumps(payloads.extender_args(serving.fixture("extender/filter-names-plain.json")["Pod"],
                                             20_000, full=False)).encode()
    with _tls(served, pki.scheduler) as sock:
        sock.sendall(_head("/filter", len(body)) + body)
        status, _, answer = _answer(sock)
    assert status == 200 and "NodeNames" in json.loads(answer)


def test_strangers_sending_the_largest_bodies_leave_the_scheduler_answering(
        served: serving.Served, pki: serving.Pki) -> None:
    stop = threading.Event()
    strangers = 4
    refused = [0] * strangers
    body = b" " * LARGEST

    def stranger(i: int) -> None:
        while not stop.is_set():
            try:
                with _tls(served) as sock:
                    sock.sendall(_head("/filter", LARGEST) + body)
                    if _answer(sock)[0] == 403:
                        refused[i] += 1
            except OSError:
                pass  # refused before the whole body went: what a stranger may see

    session = requests.Session()
    session.cert = tuple(str(p) for p in pki.scheduler)  # type: ignore[assignment]
    request = serving.fixture("extender/filter-names-plain.json")
    latencies: list[float] = []
    with ThreadPoolExecutor(strangers) as pool:
        for i in range(strangers):
            pool.submit(stranger, i)
        try:
            ends = time.monotonic() + 8
            while time.monotonic() < ends or len(latencies) < 40:
                started = time.monotonic()
                reply = session.post(served.url + "/filter", json=request, verify=str(served.ca), timeout=30)
                assert reply.status_code == 200, reply.text
                latencies.append(time.monotonic() - started)
                time.sleep(0.05)
        finally:
            stop.set()
    assert sum(refused) >= strangers, refused  # every stranger was refused at least once meanwhile
    assert percentile(latencies, 99) < 2.0, sorted(latencies)[-5:]


# -- Chunked bodies -------------------------------------------------------------------------------------------

def _chunked(path: str, body: bytes, size: int) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n").encode()
    chunks = [b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size]) for i in range(0, len(body), size)]
    return head + b"".join(chunks) + b"0\r\n\r\n"


def test_a_review_in_thousands_of_small_chunks_reaches_the_app_whole(served: serving.Served) -> None:
    review = serving.fixture("admission/create-annotation-group.json")
    review["request"]["object"]["metadata"]["annotations"]["padding"] = "x" * 400_000
    body = json.dumps(review).encode()
    with _tls(served) as sock:
        sock.sendall(_chunked("/mutate", body, size=len(body) // 40_000 + 1))
        status, _, answer = _answer(sock)
    assert status == 200, answer[:300]
    response = json.loads(answer)["response"]
    assert response["uid"] == review["request"]["uid"] and response["allowed"] is True and response["patch"]


def test_a_body_in_more_chunks_than_any_client_sends_is_refused_at_once(served: serving.Served) -> None:
    with _tls(served) as sock:
        sock.sendall(_chunked("/mutate", b"1" * (MAX_CHUNKS + 10), size=1))
        status, headers, body = _answer(sock)
    assert status == 400 and headers["connection"] == "close"
    assert f"more than {MAX_CHUNKS} chunks" in json.loads(body)["error"]


# -- /mutate's reply is bounded ------------------------------------------------------------------------------

def _review_with_terms(count: int) -> bytes:
    review = serving.fixture("admission/create-job-pod-generate-name.json")
    # The smallest term that gets an op (an empty one selects no node and is left alone): 20 bytes each.
    terms = [{"matchFields": [0]}] * count
    review["request"]["object"]["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    return json.dumps(review, separators=(",", ":")).encode()


def test_a_review_with_150000_node_terms_gets_a_small_denial_not_a_44_mb_patch(served: serving.Served) -> None:
    body = _review_with_terms(150_000)  # just under /mutate's 3 MiB
    assert len(body) > 3_000_000
    with _tls(served) as sock:
        sock.sendall(_head("/mutate", len(body)) + body)
        status, _, answer = _answer(sock)
    assert status == 200 and len(answer) < 8 * 1024, len(answer)
    response = json.loads(answer)["response"]
    assert response["allowed"] is False and "patch" not in response
    assert "150000 nodeSelectorTerms" in response["status"]["message"]


def test_clients_that_never_read_their_mutate_replies_leave_the_scheduler_answering(
        served: serving.Served, pki: serving.Pki) -> None:
    body = _review_with_terms(150_000)
    holders = []
    for _ in range(8):
        sock = _tls(served)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(_head("/mutate", len(body)) + body)
        holders.append(sock)  # never read
    session = requests.Session()
    session.cert = tuple(str(p) for p in pki.scheduler)  # type: ignore[assignment]
    request = serving.fixture("extender/filter-names-plain.json")
    latencies = []
    try:
        for _ in range(40):
            started = time.monotonic()
            reply = session.post(served.url + "/filter", json=request, verify=str(served.ca), timeout=30)
            assert reply.status_code == 200, reply.text
            latencies.append(time.monotonic() - started)
    finally:
        for sock in holders:
            sock.close()
    assert percentile(latencies, 99) < 2.0, sorted(latencies)[-5:]


# -- A stalled service port is seen by the probes ------------------------------------------------------------

def test_the_probe_port_fails_healthz_while_the_service_port_is_stalled(tmp_path: Path) -> None:
    probe = f"127.0.0.1:{serving.free_port()}"
    # One thread, held by a client that never reads a /filter reply larger than the output buffer: the
    # thread waits for it until the write deadline, and nothing else on the service port is answered.
    args = ("--threads", "1", "--probe-bind", probe, "--bind-budget", "1", "--stall-timeout", "2",
            "--write-timeout", "120")
    request = payloads.extender_args(serving.fixture("extender/filter-names-plain.json")["Pod"], 2500, full=True)
    body = json.dumps(request).encode()
    with serving.serve(tmp_path, *args, "--max-body", str(64 * 1024 * 1024)) as served:
        assert requests.get(f"http://{probe}/healthz", timeout=30).status_code == 200
        holder = _tls(served)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        holder.sendall(_head("/filter", len(body)) + body)
        reply = _healthz_answers(probe, 503)
        detail = reply.json()["checks"]["service-port"]["detail"]
        assert reply.json()["status"] == "stalled" and "a request to /filter has waited" in detail
        assert "--stall-timeout 2 s" in detail
        holder.close()  # the client goes: its thread is released
        _healthz_answers(probe, 200)
        assert "the service port is stalled" in served.output()
        assert "the service port answers again" in served.output()



def _healthz_answers(probe: str, status: int) -> requests.Response:
    """The probe port's /healthz, once it answers ``status`` (``eventually``: as soon as it does, 90 s at most)."""
    # A list around the reply: a Response is falsy whenever its status is not 2xx.
    return eventually(lambda: (r := requests.get(f"http://{probe}/healthz", timeout=30)).status_code == status
                      and [r], timeout=90, what=f"/healthz answering {status}")[0]
