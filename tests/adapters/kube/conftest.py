"""The Kubernetes-mode adapter against the wire-level fake API server (``tests.kubefake``).

``connect_backend`` makes ``KubeBackend`` replicas the way ``serve --kubeconfig`` does, through a real
kubeconfig file and the official client over localhost HTTP, and stops them after the test, before the
fake goes down, so that no thread or socket outlives the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.kubefake import KubeFake, eventually, kube_fake, kubeconfig
from webhook.adapters.kube import backend as kube
from webhook.adapters.kube.watch_settings import WatchSettings
from webhook.domain.policy import Policy
from webhook.state.cluster import ClusterStore

__all__ = ["kube_fake", "kubeconfig"]  # the shared fixtures, re-exported for this package

# Quick enough to observe in a test: optional CRDs are looked for again after 0.2 s.
FAST = WatchSettings(absent_recheck=0.2)

Connect = Callable[..., kube.KubeBackend]


@pytest.fixture
def connect_backend(kubeconfig: Path) -> Iterator[Connect]:
    made: list[kube.KubeBackend] = []

    def connect(holder: str = "replica-a", *, start: bool = True, request_timeout: float = 5.0,
                watch: WatchSettings = FAST, sync: bool = True) -> kube.KubeBackend:
        backend = kube.connect(str(kubeconfig), False, ClusterStore(Policy()), holder, request_timeout,
                               watch=watch)
        made.append(backend)
        if start:
            backend.start()
            if sync:
                eventually(lambda: backend.ready()[0], what=f"{holder} synced")
        return backend

    yield connect
    for backend in made:
        backend.stop()


@pytest.fixture
def backend(connect_backend: Connect) -> kube.KubeBackend:
    return connect_backend()


@pytest.fixture
def fake(kube_fake: KubeFake) -> KubeFake:
    return kube_fake


@pytest.fixture
def api(fake: KubeFake, kubeconfig: Path) -> Iterator[kube.Api]:
    """The raw API client of a backend that is never started: for the stores and the Lease on their own."""
    backend = kube.connect(str(kubeconfig), False, ClusterStore(Policy()), "test")
    yield backend._api
    backend.stop()
