"""The tenant bound through the engine (webhook.domain.placement.quotas): concurrent first filters of one namespace's
groups never hold more than its ResourceQuota allows together, other namespaces are not held back by it,
and a group refused for the bound is given its domain once its pods exist."""

from __future__ import annotations

from typing import Any

from tests import builders
from tests.concurrency import run_together
from tests.engine.test_engine_events import Clock, Kept
from webhook.adapters import embedded
from webhook.domain import keys
from webhook.domain.model import Pod
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.state.cluster import ClusterStore

RACKS = {"aaaa-1111.7": "a", "bbbb-2222.7": "b", "cccc-3333.7": "c", "dddd-4444.7": "d"}


def _quota(namespace: str, hard: int, used: int) -> dict[str, Any]:
    key = f"requests.{keys.GPU_RESOURCE}"
    return {"kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": namespace},
            "spec": {"hard": {key: str(hard)}}, "status": {"hard": {key: str(hard)}, "used": {key: str(used)}}}


def _member(group: str, index: int, size: int, namespace: str) -> dict[str, Any]:
    return builders.pod(f"{group}-{index}", annotations={keys.GROUP_ANNOTATION: group,
                                                         keys.GROUP_SIZE_ANNOTATION: str(size)},
                        namespace=namespace)


class Cluster:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        nodes = [n for domain, prefix in RACKS.items() for n in builders.rack(prefix, domain, 4)]
        self.store = ClusterStore(Policy())
        backend = embedded.EmbeddedBackend(self.store, [*nodes, *objects], "test")
        backend.start()
        self.engine = builders.engine(backend, holder="t", clock=Clock(),
                             events=Kept())

    def pod(self, obj: dict[str, Any]) -> Pod:
        pod = parsing.pod(obj)
        embedded.put_pod(self.store, pod)
        return pod

    def nodes(self) -> list[str]:
        return sorted(self.store.snapshot().nodes)

    def held(self, namespace: str) -> list[str]:
        return sorted(g for g, r in self.engine.reservations.all().items() if r.namespace == namespace)


def test_racing_first_filters_of_one_namespace_stay_within_its_quota_together() -> None:
    # hard 32, used 8 by the eight first pods: 24 more GPUs, room for the absent members of two 4-pod groups.
    c = Cluster([_quota("evil", 32, 8)])
    firsts = [c.pod(_member(f"g{i}", 0, 4, "evil")) for i in range(8)]

    outs = run_together(8, lambda i: c.engine.filter(firsts[i], c.nodes()))

    assert len(c.held("evil")) == 2, c.held("evil")
    assert sum(1 for out in outs if out.passed) == 2
    refused = [out for out in outs if not out.passed]
    assert all(out.context is not None and "ResourceQuota evil/gpu" in out.context.reason for out in refused)


def test_another_namespace_is_not_held_back_by_a_full_one() -> None:
    c = Cluster([_quota("evil", 4, 4)])
    assert not c.engine.filter(c.pod(_member("hog", 0, 4, "evil")), c.nodes()).passed
    assert c.engine.filter(c.pod(_member("train", 0, 4, "ml")), c.nodes()).passed
    assert c.held("evil") == [] and c.held("ml") == ["ann:ml/train"]


def test_a_group_refused_for_the_bound_gets_its_domain_once_its_pods_exist() -> None:
    c = Cluster([_quota("ml", 16, 16)])  # the quota is spent: by the group's own four pods, once they exist
    first = c.pod(_member("train", 0, 4, "ml"))
    refused = c.engine.filter(first, c.nodes())
    assert not refused.passed and refused.context is not None and "would hold 12" in refused.context.reason
    for i in range(1, 4):
        c.pod(_member("train", i, 4, "ml"))
    assert len(c.engine.filter(first, c.nodes()).passed) == 4
