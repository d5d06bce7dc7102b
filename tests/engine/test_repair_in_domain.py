"""A running group's replacement through the engine (webhook.domain.placement.repair): it is placed only in the group's
domain; when that domain has no usable node it is refused everywhere, the pod and the ComputeDomain get one
ReplacementWaiting Warning with the counts, and it passes once a node of the domain is usable again; racing
filters of the same replacement all agree."""

from __future__ import annotations

import copy
from typing import Any

from tests import builders
from tests.concurrency import run_together
from tests.engine.test_engine_events import Clock, Kept
from webhook.adapters import embedded
from webhook.domain.model import Pod
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.state.cluster import ClusterStore

A, B = "aaaa-1111.7", "bbbb-2222.7"


class Cluster:
    def __init__(self) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in [*builders.rack("a", A, 2), *builders.rack("b", B, 4)]}
        self.store = ClusterStore(Policy())
        backend = embedded.EmbeddedBackend(self.store, [*self.nodes.values(), *builders.cd_objects("job", 2)],
                                           "test")
        backend.start()
        self.sink = Kept()
        self.engine = builders.engine(backend, holder="t", clock=Clock(),
                             events=self.sink)
        pods = [parsing.pod(builders.pod(f"job-{i}", cd="job")) for i in range(2)]
        for pod in pods:
            embedded.put_pod(self.store, pod)
        for pod in pods:
            node = self.engine.filter(pod, self.all_nodes()).passed[0]
            self.engine.bind(pod.namespace, pod.name, pod.uid, node)

    def all_nodes(self) -> list[str]:
        return sorted(self.store.snapshot().nodes)

    def lose_member(self) -> Pod:
        """job-0's node is cordoned and the pod failed; its controller makes job-r0."""
        failed = self.store.pod("ml", "job-0")
        assert failed is not None and failed.node_name is not None
        self.cordon(failed.node_name, True)
        embedded.put_pod(self.store, parsing.pod(builders.pod("job-0", cd="job", node=failed.node_name,
                                                              phase="Failed")))
        replacement = parsing.pod(builders.pod("job-r0", cd="job"))
        embedded.put_pod(self.store, replacement)
        return replacement

    def cordon(self, name: str, cordoned: bool) -> None:
        node: dict[str, Any] = copy.deepcopy(self.nodes[name])
        if cordoned:
            node["spec"] = {"unschedulable": True}
        self.store.apply("Node", "MODIFIED", node)


def test_a_replacement_waits_in_its_groups_full_domain_and_binds_there_once_a_node_returns() -> None:
    c = Cluster()
    assert {c.store.snapshot().nodes[n].domain for n in ("a-00", "a-01")} == {A}
    replacement = c.lose_member()
    out = c.engine.filter(replacement, c.all_nodes())
    assert out.passed == ()  # rack b has 4 free nodes, and none is offered
    waiting = [(o.regarding.kind, o.regarding.name) for o in c.sink.items if o.reason.name == "ReplacementWaiting"]
    assert waiting == [("Pod", "job-r0"), ("ComputeDomain", "job")]
    note = next(o.note for o in c.sink.items if o.reason.name == "ReplacementWaiting")
    assert f"waits in NVLink domain {A}, where 1 members run" in note
    assert f"domain {A}: 2 nodes, 1 already running a member, 1 cordoned, 0 < 1 needed" in note, note
    c.cordon("a-00", False)
    assert c.engine.filter(replacement, c.all_nodes()).passed == ("a-00",)


def test_racing_filters_of_one_replacement_agree_on_its_groups_domain() -> None:
    c = Cluster()
    replacement = c.lose_member()
    c.cordon("a-00", False)
    results = run_together(8, lambda _: c.engine.filter(replacement, c.all_nodes()))
    assert {r.passed for r in results} == {("a-00",)}
    assert len(c.engine.reservations.all()) == 1
