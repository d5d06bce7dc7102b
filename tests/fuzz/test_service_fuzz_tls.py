"""A sample of the fuzzed requests through the real server (``imex-webhook serve``: gunicorn, TLS), sent
with a Content-Length or chunked, and with a --max-body that the largest hostile leaves exceed: the same
verdicts as in-process (no 500, JSON, counted by status), 413 included, whatever the transfer encoding."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from tests import serving
from tests.fuzz import strategies
from tests.fuzz.conftest import RUN
from tests.fuzz.service import check_reply, counters

MAX_BODY = 200_000  # below the 300,000-character leaves: some bodies are refused whole
EXAMPLES = 160


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    with serving.serve(tmp_path_factory.mktemp("fuzz-tls"), "--max-body", str(MAX_BODY)) as s:
        yield s


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


def _counters(served: serving.Served, session: requests.Session) -> dict[tuple[str, str], float]:
    reply = session.get(served.url + "/metrics", verify=str(served.ca), timeout=30)
    assert reply.status_code == 200
    return counters(list(text_string_to_metric_families(reply.text)))


def _chunks(body: bytes) -> Iterator[bytes]:
    for start in range(0, len(body), 8192):
        yield body[start:start + 8192]


ANY_REQUEST = st.one_of(strategies.extender_args(), strategies.admission_reviews(), strategies.preemption_args(),
                        strategies.binding_args(), strategies.junk(), strategies.other_routes())


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(request=ANY_REQUEST, chunked=st.booleans())
def test_fuzzed_requests_through_the_tls_server_never_get_a_500(served: serving.Served, session: requests.Session,
                                                                  request: strategies.Request, chunked: bool) -> None:
    before = _counters(served, session)
    body = request.body
    data = _chunks(body) if chunked and body else body
    headers = {"Content-Type": request.content_type} if request.content_type else {}
    reply = session.request(request.method, served.url + request.path, data=data, headers=headers,
                            verify=str(served.ca), timeout=30)
    after = _counters(served, session)
    # A GET /metrics is counted after its reply is written: "after" counts the GET that read "before".
    after[("requests", "metrics/200")] = after.get(("requests", "metrics/200"), 0.0) - 1.0
    check_reply(request.path, request.method, reply.status_code, reply.headers.get("Content-Type", ""),
                reply.content, before, after)
    RUN.count("tls", reply.status_code)
    if body and len(body) > MAX_BODY and request.method == "POST" and request.path in strategies.POSTS:
        assert reply.status_code == 413, (chunked, len(body), reply.status_code)


def test_the_server_logged_no_traceback(served: serving.Served) -> None:
    # Runs after the fuzz test: a 500 avoided by luck in the reply would still show here.
    assert "Traceback" not in served.output(), served.output()[-3000:]


def test_the_server_is_still_ready(served: serving.Served) -> None:
    assert served.get("/readyz").status_code == 200
