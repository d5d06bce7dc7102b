"""The demo cluster as the demo's emulated kube-scheduler sees it: domain labels, IMEX channels, and the
running ComputeDomain's channels already taken."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from webhook.demo import cluster as demo
from webhook.demo import run as demo_cli
from webhook.demo import scenario as demo_scenario
from webhook.domain import keys
from webhook.domain.policy import Policy
from webhook.sim import cycle


def test_every_node_of_a_domain_carries_the_label_the_pod_affinity_keys_on() -> None:
    key = Policy().affinity_topology_key
    for node in demo_scenario.labelled_nodes():
        labels = node["metadata"]["labels"]
        domain = labels.get(keys.CLIQUE_LABEL) or labels.get(keys.FABRIC_ZONE_LABEL)
        assert labels.get(key) == domain, node["metadata"]["name"]


def test_only_gb200_trays_publish_an_imex_channel() -> None:
    published = {s["spec"]["nodeName"] for s in demo_scenario.channel_slices()}
    trays = {n["metadata"]["name"] for n in demo.nodes() if n["metadata"]["name"].startswith("gb200-")}
    assert published == trays


class Keeper:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        self.sent = list(args["NodeNames"])
        return {"NodeNames": self.sent, "Nodes": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                "Error": ""}

    def prioritize(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        return []

    def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"Error": ""}

    def preempt(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"NodeNameToMetaVictims": {}}


def test_a_compute_domain_pod_reaches_the_extender_only_on_trays_with_a_free_channel() -> None:
    sched = demo_cli.scheduler(demo_cli.Client("https://localhost:1", Path("/nonexistent")))
    job = demo_scenario.JOBS[0]
    pod = demo_scenario.pod_create(job, 0)
    pod["metadata"].update(name=f"{job.name}-0", uid="u-0")
    raw, claims = demo_cli.claims_of(pod)
    keeper = Keeper()
    state = replace(sched.cluster, claims=(*sched.cluster.claims, *cycle.parse_cluster((), claims=claims).claims))
    attempt = cycle.schedule(sched.config, state, raw, keeper)
    assert attempt.outcome == "assumed"
    trays = {n["metadata"]["name"] for n in demo.nodes() if n["metadata"]["name"].startswith("gb200-")}
    assert set(keeper.sent) == trays - set(demo.RUNNING_CD_NODES)
