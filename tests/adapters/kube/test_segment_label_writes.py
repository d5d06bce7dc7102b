"""Writing a member's segment (label imex-webhook.io/segment) through the (fake) API server: one merge patch
of that label with the pod's UID as precondition, which the pod watch then shows; a pod re-created under
the same name, a deleted pod, an RBAC refusal, a server error and a slow server each give a clear error
and no label."""

from __future__ import annotations

import pytest

from tests import builders
from tests.adapters.kube.conftest import Connect
from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube.backend import KubeBackend
from webhook.domain import keys
from webhook.domain.model import Pod
from webhook.errors import DecisionError


def _cached_pod(fake: KubeFake, backend: KubeBackend, name: str) -> Pod:
    fake.create("pods", builders.pod(name, gpus=4))
    return eventually(lambda: backend.store.pod("ml", name), what=f"pod {name} cached")


def _label(fake: KubeFake, name: str) -> str | None:
    pod = fake.get("pods", "ml", name)
    assert pod is not None
    labels: dict[str, str] = pod["metadata"].get("labels") or {}
    return labels.get(keys.SEGMENT_LABEL)


def test_the_segment_is_written_as_one_label_and_the_watch_shows_it(fake: KubeFake, backend: KubeBackend) -> None:
    pod = _cached_pod(fake, backend, "p1")
    backend.binder.label_segment(pod, 3)
    assert _label(fake, "p1") == "3"
    seen = eventually(lambda: (p := backend.store.pod("ml", "p1")) and p.labels.get(keys.SEGMENT_LABEL),
                      what="MODIFIED pod with its segment")
    assert seen == "3"


def test_a_pod_recreated_under_the_same_name_is_not_labelled(fake: KubeFake, backend: KubeBackend) -> None:
    old = _cached_pod(fake, backend, "p1")
    fake.delete("pods", "ml", "p1")
    fake.create("pods", builders.pod("p1", gpus=4))
    with pytest.raises(DecisionError, match="write segment 0 on pod ml/p1"):
        backend.binder.label_segment(old, 0)
    assert _label(fake, "p1") is None


def test_a_deleted_pod_says_it_no_longer_exists(fake: KubeFake, backend: KubeBackend) -> None:
    pod = _cached_pod(fake, backend, "p1")
    fake.delete("pods", "ml", "p1")
    with pytest.raises(DecisionError, match="pod ml/p1 no longer exists"):
        backend.binder.label_segment(pod, 0)


@pytest.mark.parametrize(("status", "reason", "expected"), [
    (403, "Forbidden", 'needs verb "patch" on "pods"'),
    (500, "InternalError", "500"),
    (422, "Invalid", "422"),
])
def test_a_refused_write_names_what_failed(fake: KubeFake, backend: KubeBackend, status: int, reason: str,
                                           expected: str) -> None:
    pod = _cached_pod(fake, backend, "p1")
    fake.fail("patch", "pods", status, reason, "the webhook may change only the label imex-webhook.io/segment",
              times=1)
    with pytest.raises(DecisionError) as raised:
        backend.binder.label_segment(pod, 1)
    assert expected in str(raised.value) and "write segment 1 on pod ml/p1" in str(raised.value)
    assert _label(fake, "p1") is None


def test_a_slow_api_server_fails_the_write_before_the_extender_deadline(fake: KubeFake,
                                                                        connect_backend: Connect) -> None:
    backend = connect_backend(request_timeout=1.0)
    pod = _cached_pod(fake, backend, "p1")
    fake.delay("patch", "pods", 1.5)
    with pytest.raises(DecisionError, match="did not answer in time"):
        backend.binder.label_segment(pod, 0)
