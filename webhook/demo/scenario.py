"""The jobs ``imex-webhook demo`` submits, what a correct service must do with each, and the cluster as
kube-scheduler sees it.

Written against the built-in demo cluster (webhook/demo/cluster.py) and the built-in fabric inventory:
three cliques sharing clique number 32766 (A: 18 trays, two held by a running ComputeDomain; B: 18
trays, two busy, one with degraded NVLink fabric; C: 9 trays), four HGX nodes without a clique, and a PCIe
pool of four nodes with one local GPU and four fabric slots each.

What the scheduler sees beyond ``demo.objects()``, as a cluster with the NVIDIA DRA driver and the
service would show it: every node of a domain carries ``imex-webhook.io/domain``, the label the
admission webhook's pod affinity and node requirement use (written by the service's node domain
labeller), and every GB200 tray publishes one IMEX channel (ResourceSlice of
``compute-domain.nvidia.com``; HGX and PCIe nodes have no NVLink, so no channel) of the DeviceClass the
ComputeDomain's claim template names.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.policy import Policy
from webhook.domain.reading import node_labels
from webhook.sim.dra_objects import CD_DRIVER, channel_slice


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
        what="16 trays: racks A and B have 16 free each; B's fabric is degraded, so A (2 trays held by "
             "another ComputeDomain)"),
    Job("train-4", 4, 4, "train-4", expect_domain=demo.clique_value("gb200-b"),
        what="4 trays: only rack B still has room, so its degraded fabric is accepted (no healthy domain fits)"),
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


def labelled_nodes() -> list[dict[str, Any]]:
    """The demo's nodes with ``imex-webhook.io/domain`` (the key the admission webhook's pod affinity and
    node requirement use) as the service's node domain labeller writes it (``node_labels.state_of``)."""
    policy = Policy()
    out = []
    for node in demo.nodes():
        state = node_labels.state_of(node, policy)
        labels = node["metadata"]["labels"]
        if state.value is None:
            labels.pop(node_labels.DOMAIN_LABEL, None)
        else:
            labels[node_labels.DOMAIN_LABEL] = state.value
        out.append(node)
    return out


def _has_nvlink(node: dict[str, Any]) -> bool:
    return keys.CLIQUE_LABEL in node["metadata"]["labels"]


def channel_slices() -> list[dict[str, Any]]:
    """One IMEX channel per GB200 tray, as the ComputeDomain kubelet plugin publishes it."""
    return [channel_slice(n["metadata"]["name"]) for n in demo.nodes() if _has_nvlink(n)]


def template_claim_spec(template: str) -> dict[str, Any]:
    """The claim spec of the demo cluster's ResourceClaimTemplate ``template``."""
    for obj in demo.objects():
        if obj["kind"] == "ResourceClaimTemplate" and obj["metadata"]["name"] == template:
            spec: dict[str, Any] = obj["spec"]["spec"]
            return spec
    raise KeyError(f"no ResourceClaimTemplate {template} in the demo cluster")


def channel_allocation(node: str) -> dict[str, Any]:
    """A claim's ``status.allocation`` holding ``node``'s IMEX channel."""
    return {"devices": {"results": [{"request": "channel", "driver": CD_DRIVER, "pool": node,
                                     "device": "channel-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}


def admitted(pod: dict[str, Any], answer: dict[str, Any], name: str) -> dict[str, Any]:
    """What kube-apiserver stores after our admission ``answer`` for ``pod``: the patch applied, then the
    name and UID (generated after admission). A denial raises, naming the pod and the message."""
    if not answer.get("allowed"):
        raise RuntimeError(f"admission denied {name}: {answer.get('status', {}).get('message')}")
    if "patch" in answer:
        pod = jsonpatch.apply_patch(pod, base64.b64decode(answer["patch"]).decode())
    meta = pod["metadata"]
    meta["name"] = name
    meta["uid"] = demo.uid("pod", demo.NAMESPACE, name)
    return pod
