"""What several real-cluster scenarios create the same way: a ComputeDomain with its channel template, and a
Job's pods as its controller would make them."""

from __future__ import annotations

from typing import Any

from tests.e2e import objects
from tests.e2e.conftest import GPUS_PER_NODE, RealCluster, rack_of
from webhook.domain import keys


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


def indexed_job(cluster: RealCluster, ns: str, name: str, pods: int, annotations: dict[str, str] | None = None,
                **pod_args: Any) -> list[str]:
    """A ComputeDomain (annotated with ``annotations``) and an Indexed Job's pods of a whole node's GPUs each,
    made as the Job controller makes them: the completion index as annotation and label."""
    body = objects.computedomain(ns, name, pods)
    body["metadata"]["annotations"] = dict(annotations or {})
    cd = cluster.api.create(body)
    cluster.api.create(objects.channel_template(ns, name, cd["metadata"]["uid"]))
    job = cluster.api.create(objects.job(ns, name, pods))
    names = []
    for rank in range(pods):
        index = {keys.COMPLETION_INDEX: str(rank)}
        cluster.api.create(objects.pod(ns, f"{name}-{rank}", gpus=GPUS_PER_NODE, claims=[channel(name)],
                                       annotations=index, labels=index, owner=job, **pod_args))
        names.append(f"{name}-{rank}")
    return names
