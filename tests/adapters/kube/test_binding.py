"""Binding pods through the ``pods/binding`` subresource of the (fake) API server.

Covered: a bind creates exactly one binding carrying the pod's UID as precondition, and the pod watch
then shows the pod on its node; binding an already bound pod again reports kube-apiserver's "already
assigned"; a pod re-created under the same name (new UID) is refused; a deleted pod gives a clear
error; ``read_pod`` parses the fresh pod or returns None; RBAC refusals name the missing permission and
long API messages are truncated; a slow API server fails the bind before the extender's deadline; and
the engine places a whole ComputeDomain job into one domain through this backend (one reservation
object, one binding per pod).
"""

from __future__ import annotations

import time

import pytest

from tests import builders
from tests.adapters.kube.conftest import Connect
from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube.backend import KubeBackend
from webhook.demo import cluster as demo
from webhook.domain.model import Pod
from webhook.errors import DecisionError


def _cached_pod(fake: KubeFake, backend: KubeBackend, name: str) -> Pod:
    fake.create("pods", builders.pod(name, gpus=4))
    return eventually(lambda: backend.store.pod("ml", name), what=f"pod {name} cached")


def test_bind_creates_exactly_one_binding_and_the_watch_shows_the_node(fake: KubeFake, backend: KubeBackend) -> None:
    pod = _cached_pod(fake, backend, "p1")

    backend.binder.bind(pod, "node-1")

    (binding,) = fake.bindings()
    assert binding["status"] == 201 and (binding["namespace"], binding["name"]) == ("ml", "p1")
    assert binding["body"] == {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1", "namespace": "ml", "uid": pod.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    }
    bound = eventually(lambda: (p := backend.store.pod("ml", "p1")) and p.node_name, what="MODIFIED pod")
    assert bound == "node-1"


def test_binding_an_already_bound_pod_again_reports_already_assigned(fake: KubeFake, backend: KubeBackend) -> None:
    pod = _cached_pod(fake, backend, "p1")
    backend.binder.bind(pod, "node-1")

    with pytest.raises(DecisionError, match='already assigned to node "node-1"'):
        backend.binder.bind(pod, "node-1")
    assert [b["status"] for b in fake.bindings()] == [201, 409]


def test_a_pod_recreated_under_the_same_name_is_refused_by_the_uid_precondition(fake: KubeFake,
                                                                                backend: KubeBackend) -> None:
    old = _cached_pod(fake, backend, "p1")
    fake.delete("pods", "ml", "p1")
    fake.create("pods", builders.pod("p1", gpus=4))

    with pytest.raises(DecisionError, match="Precondition failed: UID in precondition: " + old.uid):
        backend.binder.bind(old, "node-1")
    pod = fake.get("pods", "ml", "p1")
    assert pod is not None and "nodeName" not in pod["spec"]


def test_binding_a_deleted_pod_says_it_no_longer_exists(fake: KubeFake, backend: KubeBackend) -> None:
    pod = _cached_pod(fake, backend, "p1")
    fake.delete("pods", "ml", "p1")

    with pytest.raises(DecisionError, match="pod ml/p1 no longer exists"):
        backend.binder.bind(pod, "node-1")


def test_read_pod_returns_the_fresh_pod_or_none(fake: KubeFake, backend: KubeBackend) -> None:
    created = fake.create("pods", builders.pod("p1", gpus=4, node="node-2"))

    pod = backend.binder.read_pod("ml", "p1")
    assert pod is not None and (pod.uid, pod.node_name, pod.gpu_limit) == (created["metadata"]["uid"], "node-2", 4)
    assert backend.binder.read_pod("ml", "nobody") is None


def test_an_rbac_refusal_names_the_missing_permission(fake: KubeFake, backend: KubeBackend) -> None:
    pod = _cached_pod(fake, backend, "p1")
    message = ('pods "p1" is forbidden: User "system:serviceaccount:imex-system:imex-webhook" cannot create '
               'resource "pods/binding" in API group "" in the namespace "ml" ' + "x" * 500)
    fake.fail("post", "pods", 403, "Forbidden", message, subresource="binding")

    with pytest.raises(DecisionError) as raised:
        backend.binder.bind(pod, "node-1")
    text = str(raised.value)
    assert 'needs verb "create" on "pods/binding"' in text and "cannot create resource" in text
    assert text.endswith("...") and len(text) < 400  # the API message is cut at 256 characters


def test_a_slow_api_server_fails_the_bind_before_the_extender_deadline(fake: KubeFake,
                                                                       connect_backend: Connect) -> None:
    backend = connect_backend(request_timeout=1.0)  # the caller waits 1 s: one call may take 0.6 s
    pod = _cached_pod(fake, backend, "p1")
    fake.delay("post", "pods", 1.0, subresource="binding")

    started = time.monotonic()
    with pytest.raises(DecisionError, match="did not answer in time"):
        backend.binder.bind(pod, "node-1")
    assert time.monotonic() - started < 1.0


def test_the_engine_binds_a_whole_job_into_one_domain_through_the_api(fake: KubeFake,
                                                                       connect_backend: Connect) -> None:
    fake.seed(demo.objects())
    for i in range(4):
        fake.create("pods", demo.pod(f"train-4-{i}", "train-4", demo.GPUS_PER_TRAY))
    backend = connect_backend()
    engine = builders.engine(backend, holder="replica-a")

    nodes = sorted(backend.store.snapshot().nodes)
    for i in range(4):
        pod = backend.store.pod("ml", f"train-4-{i}")
        assert pod is not None
        passed = engine.filter(pod, nodes).passed
        assert passed, f"member {i} found no node"
        # The first filter stored the reservation: every pass is inside its domain before any bind.
        (stored,) = engine.reservations.all().values()
        assert {backend.store.snapshot().nodes[n].domain for n in passed} == {stored.domain}
        outcome = engine.bind("ml", pod.name, pod.uid, passed[0])
        assert outcome.outcome == "bound"
        eventually(lambda pod=pod: (p := backend.store.pod("ml", pod.name)) and p.node_name, what="bound in cache")

    placed = [backend.store.pod("ml", f"train-4-{i}") for i in range(4)]
    snapshot = backend.store.snapshot()
    domains = {snapshot.nodes[p.node_name].domain for p in placed if p and p.node_name}
    (reservation,) = [o for o in fake.items("domainreservations") if o["metadata"]["name"].startswith("r-")]
    assert domains == {reservation["spec"]["domain"]}
    assert reservation["spec"]["size"] == 4 and "placedAt" in reservation["spec"]
    assert len(fake.bindings()) == 4
