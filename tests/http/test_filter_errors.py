"""/filter answers 200 with ``Error`` whatever goes wrong, and tells a decision it could not complete apart
from a bug: the first kind is the reason the scheduler shows and retries on, the second is counted as an
internal error with its traceback logged."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask import Flask

from tests import serving
from webhook.errors import DecisionError


def _filter(app: Flask) -> dict[str, Any]:
    reply = app.test_client().post("/filter", data=json.dumps(serving.fixture("extender/filter-names-train-8.json")),
                                   content_type="application/json")
    assert reply.status_code == 200
    body: dict[str, Any] = reply.get_json()
    return body


def _metrics(app: Flask) -> str:
    return app.test_client().get("/metrics").get_data(as_text=True)


def test_a_reservation_that_cannot_be_stored_is_the_reason_the_scheduler_shows(
        demo_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    why = "could not reserve a domain for group ml/train-8: the API server answered 503; the scheduler retries"

    def refuse(*_: Any, **__: Any) -> Any:
        raise DecisionError(why)

    monkeypatch.setattr(demo_app.extensions["imex"].engine, "filter", refuse)
    body = _filter(demo_app)
    assert body["Error"] == why and body["NodeNames"] is None
    metrics = _metrics(demo_app)
    assert 'imex_webhook_decisions_total{outcome="error",reason="reservation",verb="filter"} 1.0' in metrics
    assert 'imex_webhook_internal_errors_total{verb="filter"}' not in metrics


def test_a_bug_is_an_internal_error_with_its_kind_named(demo_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise KeyError("gb200-a-00")

    monkeypatch.setattr(demo_app.extensions["imex"].engine, "filter", broken)
    body = _filter(demo_app)
    assert body["Error"].startswith("imex-webhook internal error (KeyError)")
    assert 'imex_webhook_internal_errors_total{verb="filter"} 1.0' in _metrics(demo_app)
