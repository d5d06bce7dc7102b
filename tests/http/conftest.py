"""Fixtures of the in-process HTTP tests: the Flask app built by the factory over the embedded demo cluster."""

from __future__ import annotations

import pytest
from flask import Flask

from tests import builders
from webhook.adapters import embedded
from webhook.demo import cluster as demo
from webhook.domain.policy import Policy
from webhook.http.app import create_app
from webhook.state.cluster import ClusterStore


@pytest.fixture
def demo_app() -> Flask:
    """A fresh app (own metrics registry, own reservations) on the built-in demo topology; no TLS."""
    policy = Policy()
    store = ClusterStore(policy)
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    backend.start()
    engine = builders.engine(backend, policy)
    return create_app(engine, backend, embedded=backend)
