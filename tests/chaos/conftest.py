"""Fixtures of the chaos tests: the wire-level API-server fake and KubeBackend replicas (as in tests/adapters/kube)."""

from __future__ import annotations

from tests.adapters.kube.conftest import connect_backend, fake
from tests.kubefake import kube_fake, kubeconfig

__all__ = ["connect_backend", "fake", "kube_fake", "kubeconfig"]
