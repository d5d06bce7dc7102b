"""The operator hears when the domain of a running group changes health (webhook.engine.health_watch): one
Warning Event on the group's ComputeDomain and first running pod per change to degraded or unhealthy, a
Normal one on recovery, nothing for a group not running yet or a change that does not change the
domain's health; concurrent housekeeping rounds report each change once."""

from __future__ import annotations

import copy
from typing import Any

from tests import builders
from tests.concurrency import run_together
from tests.engine.test_engine_events import Clock, Kept
from webhook.adapters import embedded
from webhook.domain import keys
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.state.cluster import ClusterStore

A, B = "aaaa-1111.7", "bbbb-2222.7"


class Cluster:
    def __init__(self) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in [*builders.rack("a", A, 4), *builders.rack("b", B, 4)]}
        self.store = ClusterStore(Policy())
        backend = embedded.EmbeddedBackend(self.store, [*self.nodes.values(), *builders.cd_objects("job", 2)],
                                           "test")
        backend.start()
        self.sink = Kept()
        self.engine = builders.engine(backend, holder="t", clock=Clock(),
                             events=self.sink)

    def run_group(self) -> str:
        """A 2-pod ComputeDomain group placed and bound; returns its domain."""
        pods = [parsing.pod(builders.pod(f"job-{i}", cd="job")) for i in range(2)]
        for pod in pods:
            embedded.put_pod(self.store, pod)
        for pod in pods:
            node = self.engine.filter(pod, sorted(self.store.snapshot().nodes)).passed[0]
            self.engine.bind(pod.namespace, pod.name, pod.uid, node)
        return self.store.snapshot().nodes[self.store.pod("ml", "job-0").node_name or ""].domain or ""

    def label(self, name: str, health: str | None) -> None:
        node: dict[str, Any] = copy.deepcopy(self.nodes[name])
        if health is not None:
            node["metadata"]["labels"][keys.HEALTH_LABEL] = health
        self.store.apply("Node", "MODIFIED", node)

    def health_events(self) -> list[tuple[str, str, str]]:
        return [s for s in self.sink.seen() if s[0].startswith("Domain") and s[0] != "DomainReserved"]


def test_a_running_groups_domain_turning_degraded_then_unhealthy_then_healthy_is_told_once_each() -> None:
    c = Cluster()
    domain = c.run_group()
    node = sorted(n for n, v in c.store.snapshot().nodes.items() if v.domain == domain)[0]
    c.engine.housekeep()
    assert c.health_events() == []
    c.label(node, "degraded")
    c.engine.housekeep()
    c.engine.housekeep()  # the same state again: no second Event
    assert c.health_events() == [("DomainDegraded", "Pod", "job-0"), ("DomainDegraded", "ComputeDomain", "job")]
    note = c.sink.items[-1].note
    assert f"NVLink domain {domain}" in note and f"degraded fabric on {node}" in note and "not moved" in note
    for other in sorted(n for n, v in c.store.snapshot().nodes.items() if v.domain == domain):
        c.label(other, "unhealthy")
    c.engine.housekeep()
    assert c.health_events()[-1] == ("DomainUnhealthy", "ComputeDomain", "job")
    for other in sorted(n for n, v in c.store.snapshot().nodes.items() if v.domain == domain):
        c.label(other, "healthy")
    c.engine.housekeep()
    assert c.health_events()[-2:] == [("DomainRecovered", "Pod", "job-0"), ("DomainRecovered", "ComputeDomain", "job")]
    assert c.sink.items[-1].reason.type == "Normal"


def test_a_group_not_running_yet_and_other_domains_raise_no_event() -> None:
    c = Cluster()
    domain = c.run_group()
    other = next(n for n, v in c.store.snapshot().nodes.items() if v.domain != domain)
    c.label(other, "unhealthy")
    c.engine.housekeep()
    assert c.health_events() == []
    fresh = Cluster()
    pod = parsing.pod(builders.pod("job-0", cd="job"))
    embedded.put_pod(fresh.store, pod)
    fresh.engine.filter(pod, sorted(fresh.store.snapshot().nodes))  # reserved, nothing bound
    for name in sorted(fresh.nodes):
        fresh.label(name, "degraded")
    fresh.engine.housekeep()
    assert fresh.health_events() == []


def test_concurrent_rounds_report_each_change_once() -> None:
    c = Cluster()
    domain = c.run_group()
    node = sorted(n for n, v in c.store.snapshot().nodes.items() if v.domain == domain)[0]
    c.label(node, "degraded")
    run_together(8, lambda _: c.engine.health_watch.check(c.engine.snapshot(), c.engine.report))
    assert [e[0] for e in c.health_events()] == ["DomainDegraded", "DomainDegraded"]
