"""The extender and webhook service under structure-aware fuzzing, through the Flask app in-process: every
route (/filter /prioritize /bind /preempt /mutate /healthz /readyz /metrics /inspect), valid shapes with
hostile leaves in nodeNames and NodeList mode, full victims and meta victims, AdmissionReviews, raw junk,
bodies built to cost the most Python objects per byte (to an app with a small --max-body, so that decoding's
budget refuses most of them) and wrong methods. No reply is a 500 or anything but JSON, each is counted by
status, and none is an internal error. The bulk of the examples run here; tests/fuzz/test_service_fuzz_tls.py
sends a sample through the real TLS server."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import builders
from tests.fuzz import strategies
from tests.fuzz.conftest import RUN
from tests.fuzz.service import check_reply, counters
from webhook.adapters import embedded
from webhook.demo import cluster as demo
from webhook.domain.limits import DEFAULT_MAX_BODY
from webhook.domain.policy import Policy
from webhook.http.app import create_app
from webhook.state.cluster import ClusterStore

# Examples per test; together at least 2,000 a run (the floor), in well under a minute.
# IMEX_FUZZ_SCALE=10 runs ten times as many, for a longer search by hand.
SCALE = float(os.environ.get("IMEX_FUZZ_SCALE", "1"))
EXAMPLES = {name: int(n * SCALE) for name, n in
            {"extender_args": 600, "admission": 450, "preemption": 300, "binding": 150, "junk": 350,
             "routes": 200, "costly": 100}.items()}
# The costly bodies go to an app with a small --max-body, so that most of them exceed what decoding may
# cost (16 x 64 KiB) and the refusal path is searched as hard as the decoding one.
COSTLY_MAX_BODY = 64 * 1024
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


def _app(max_body: int | None = None) -> Flask:
    policy = Policy()
    store = ClusterStore(policy)
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    backend.start()
    engine = builders.engine(backend, policy)
    return create_app(engine, backend, max_body=max_body or DEFAULT_MAX_BODY, embedded=backend)


@pytest.fixture(scope="module")
def client() -> Iterator[FlaskClient]:
    # One app for the whole module: state learnt from earlier examples (pods, reservations) is part of the
    # input of later ones, as in a long-running service.
    app = _app()
    app.logger.disabled = True  # a failing example shows its own traceback; the rest would be noise
    yield app.test_client()


@pytest.fixture(scope="module")
def small_client() -> Iterator[FlaskClient]:
    app = _app(COSTLY_MAX_BODY)
    app.logger.disabled = True
    yield app.test_client()


def _send(client: FlaskClient, request: strategies.Request, test: str) -> None:
    app = client.application
    registry = app.extensions["imex"].metrics.registry
    before = counters(list(registry.collect()))
    reply = client.open(request.path, method=request.method, data=request.body,
                        content_type=request.content_type or None)
    after = counters(list(registry.collect()))
    check_reply(request.path, request.method, reply.status_code, reply.content_type or "", reply.get_data(),
                before, after)
    RUN.count(test, reply.status_code)


def _fuzz(name: str, strategy: st.SearchStrategy[strategies.Request]):  # type: ignore[no-untyped-def]
    @settings(max_examples=EXAMPLES[name], deadline=None, database=None, suppress_health_check=SLOW_OK)
    @given(request=strategy)
    def run(client: FlaskClient, request: strategies.Request) -> None:
        _send(client, request, name)

    return run


test_hostile_extender_args_in_both_modes_never_get_a_500 = _fuzz("extender_args", strategies.extender_args())
test_hostile_admission_reviews_never_get_a_500 = _fuzz("admission", strategies.admission_reviews())
test_hostile_preemption_args_never_get_a_500 = _fuzz("preemption", strategies.preemption_args())
test_hostile_binding_args_never_get_a_500 = _fuzz("binding", strategies.binding_args())
test_raw_junk_bodies_never_get_a_500 = _fuzz("junk", strategies.junk())
test_every_route_and_method_answers_json = _fuzz("routes", strategies.other_routes())


@settings(max_examples=EXAMPLES["costly"], deadline=None, database=None, suppress_health_check=SLOW_OK)
@given(request=strategies.costly())
def test_bodies_built_to_cost_the_most_per_byte_never_get_a_500(small_client: FlaskClient,
                                                                request: strategies.Request) -> None:
    _send(small_client, request, "costly")


def test_the_fuzz_run_reached_its_floor_of_examples() -> None:
    # Runs after the fuzz tests of this module (file order): hypothesis may stop early on its own.
    if not set(EXAMPLES) <= set(RUN.examples):
        pytest.skip("only part of the module ran")
    ran = sum(RUN.examples[name] for name in EXAMPLES)
    assert ran >= 2_000 * min(SCALE, 1.0), RUN.examples
