"""What several real-cluster scenarios create the same way: a ComputeDomain with its channel template, and a
Job's pods as its controller would make them."""

from __future__ import annotations

from typing import Any

from tests.e2e import objects
from tests.e2e.conftest import RealCluster, rack_of


def computedomain(cluster: RealCluster, ns: str, name: str, nodes: int, *, template: bool = True) -> dict[str, Any]:
    cd = cluster.api.create(objects.computedomain(ns, name, nodes))
    if template:
        cluster.api.create(objects.channel_template(ns, name, cd["metadata"]["uid"]))
    return cd


def channel(cd_name: str) -> dict[str, str]:
    return {"name": "imex-channel", "resourceClaimTemplateName": f"{cd_name}-channel"}


def members(cluster: RealCluster, ns: str, job_name: str, count: int, **pod_args: Any) -> list[str]:
    job = cluster.api.create(objects.job(ns, job_name, count))
    names = [f"{job_name}-{i}" for i in range(count)]
    for name in names:
        cluster.api.create(objects.pod(ns, name, owner=job, **pod_args))
    return names


def domains_of(placed: dict[str, str]) -> set[str]:
    return {rack_of(node) for node in placed.values()}
