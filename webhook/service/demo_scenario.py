"""The jobs ``imex-webhook demo`` submits, and what a correct service must do with each.

Written against the built-in demo cluster (webhook/adapters/demo.py) and the built-in fabric inventory:
three cliques sharing clique number 32766 (A: 18 trays, two held by a running ComputeDomain; B: 18
trays, two busy; C: 9 trays), four HGX nodes without a clique, and a PCIe pool of four nodes with one
local GPU and four fabric slots each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.adapters import demo
from webhook.domain import keys


@dataclass(frozen=True)
class Job:
    name: str
    pods: int
    gpus: int
    compute_domain: str | None  # its pods use the ComputeDomain's channel template
    annotation_group: str | None = None  # or an explicit imex-webhook.io/group
    expect_domain: str | None = None  # the domain every pod must land in
    expect_reason: str | None = None  # or: the words the unschedulable reason must contain
    expect_attached: int = 0  # fabric GPUs the job needs attached
    what: str = ""
    extra_annotations: dict[str, str] = field(default_factory=dict)


JOBS: tuple[Job, ...] = (
    Job("train-8", 8, 4, "train-8", expect_domain=demo.clique_value("gb200-c"),
        what="8 trays: best fit is the 9-tray clique C, keeping the big racks whole"),
    Job("train-16", 16, 4, "train-16", expect_domain=demo.clique_value("gb200-a"),
        what="16 trays: rack A has exactly 16 free (2 trays held by another ComputeDomain)"),
    Job("train-4", 4, 4, "train-4", expect_domain=demo.clique_value("gb200-b"),
        what="4 trays: only rack B still has room"),
    Job("fabric-3x2", 2, 3, None, annotation_group="fabric-3x2", expect_domain=demo.FABRIC_ZONE,
        expect_attached=4, extra_annotations={keys.GROUP_SIZE_ANNOTATION: "2"},
        what="2 pods x 3 GPUs in the PCIe pool: 1 local GPU each, 2 attached from the fabric"),
    Job("train-20", 20, 4, "train-20", expect_reason="no domain can host 20 pods",
        what="20 trays: no NVLink domain is that large, said before any pod starts"),
)


def pod_create(job: Job, index: int) -> dict[str, Any]:
    """The pod as a Job controller would submit it (generateName, no name or uid yet), defaults applied."""
    obj = demo.pod(f"{job.name}-{index}", job.compute_domain, job.gpus)
    meta = obj["metadata"]
    meta.pop("name")
    meta.pop("uid")
    meta["generateName"] = f"{job.name}-"
    meta["labels"] = {"app": job.name, "batch.kubernetes.io/job-name": job.name}
    annotations = dict(job.extra_annotations)
    if job.annotation_group:
        annotations[keys.GROUP_ANNOTATION] = job.annotation_group
    meta["annotations"] = annotations
    obj["spec"]["schedulerName"] = "default-scheduler"
    obj["spec"]["terminationGracePeriodSeconds"] = 30
    obj["spec"]["dnsPolicy"] = "ClusterFirst"
    obj.pop("status", None)
    return obj


def admission_review(uid: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": demo.NAMESPACE,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
