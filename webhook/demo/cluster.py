"""The built-in demo cluster: what ``serve`` runs on when no --cluster file and no API server is given.

Shaped like a small GB200 installation, with the traps real clusters have:
- three NVLink cliques whose ``nvidia.com/gpu.clique`` values share the clique number 32766 but not the
  cluster UUID (two NVL72 racks of 18 trays x 4 GPUs, and one NVL36 half-rack of 9 trays);
- HGX nodes with GPUs but no clique label (NVSwitch inside the node only, no multi-node NVLink);
- a PCIe composable pool (``imex-webhook.io/fabric-zone``) whose nodes take GPUs attached from the fabric;
- ComputeDomains with the ResourceClaimTemplates the NVIDIA DRA driver creates for them, one of them
  already running on two trays of rack A (its node label says so), and a few busy GPUs in rack B;
- one tray of rack B whose node agent reports degraded NVLink fabric (``imex-webhook.io/fabric-health``), so
  rack B is a second choice for a new group while a healthy domain fits.
"""

from __future__ import annotations

import uuid
from typing import Any

from webhook.domain import keys

NAMESPACE = "ml"
CLIQUES = {
    "gb200-a": ("3183419e-5b1e-4e5a-9d4c-0e6d2a1c7f01", 32766, 18),
    "gb200-b": ("bbc2edac-7a41-4c1f-8e2b-5d9e3f6a0b02", 32766, 18),
    "gb200-c": ("9277d399-2c3d-4f8a-b1e6-d85bb19ce2b0", 32766, 9),
}
GPUS_PER_TRAY = 4
HGX_NODES = 4
FABRIC_ZONE = "pcie-pool-1"
FABRIC_NODES = 4
FABRIC_SLOTS = 4
FABRIC_LOCAL_GPUS = 1
# (name, numNodes): sizes the demo and the tests exercise; numNodes 0 means "size unknown".
COMPUTE_DOMAINS = (("train-8", 8), ("train-16", 16), ("train-20", 20), ("train-4", 4), ("elastic", 0),
                   ("inference-2", 2))
RUNNING_CD = "inference-2"
RUNNING_CD_NODES = ("gb200-a-00", "gb200-a-01")
BUSY_NODES = ("gb200-b-16", "gb200-b-17")
DEGRADED_NODES = ("gb200-b-05",)


def uid(*parts: str) -> str:
    """Stable UIDs, so reservations and logs of two demo runs can be compared."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "imex-webhook-demo/" + "/".join(parts)))


def clique_value(rack: str) -> str:
    cluster, clique, _ = CLIQUES[rack]
    return f"{cluster}.{clique}"


def _node(name: str, gpus: int, labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": uid("node", name), "labels": {"kubernetes.io/hostname": name, **labels},
                     "annotations": annotations or {}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "144", "memory": "884Gi", keys.GPU_RESOURCE: str(gpus), "pods": "110"},
            "allocatable": {"cpu": "140", "memory": "860Gi", keys.GPU_RESOURCE: str(gpus), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def nodes() -> list[dict[str, Any]]:
    out = []
    for rack, (_, _, trays) in CLIQUES.items():
        for i in range(trays):
            name = f"{rack}-{i:02d}"
            labels = {keys.CLIQUE_LABEL: clique_value(rack), "nvidia.com/gpu.product": "NVIDIA-GB200"}
            if rack == "gb200-a" and name in RUNNING_CD_NODES:
                labels[keys.COMPUTE_DOMAIN_LABEL] = uid("cd", NAMESPACE, RUNNING_CD)
            if name in DEGRADED_NODES:
                labels[keys.HEALTH_LABEL] = "degraded"
            out.append(_node(name, GPUS_PER_TRAY, labels))
    for i in range(HGX_NODES):
        out.append(_node(f"hgx-{i:02d}", 8, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}))
    for i in range(FABRIC_NODES):
        name = f"fab-{i:02d}"
        out.append(_node(name, FABRIC_LOCAL_GPUS, {keys.FABRIC_ZONE_LABEL: FABRIC_ZONE},
                         {keys.FABRIC_SLOTS_ANNOTATION: str(FABRIC_SLOTS),
                          keys.REDFISH_SYSTEM_ANNOTATION: f"/redfish/v1/Systems/{name}"}))
    return out


def template_name(cd: str) -> str:
    return f"{cd}-channel"


def compute_domain(name: str, num_nodes: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid("cd", NAMESPACE, name)},
        "spec": {"numNodes": num_nodes,
                 "channel": {"resourceClaimTemplate": {"name": template_name(name)}, "allocationMode": "Single"}},
        "status": {"status": "NotReady"},
    }


def channel_template(cd: str) -> dict[str, Any]:
    """The workload ResourceClaimTemplate the driver's controller creates for a ComputeDomain."""
    cd_uid = uid("cd", NAMESPACE, cd)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": template_name(cd), "namespace": NAMESPACE, "uid": uid("rct", NAMESPACE, cd),
            "labels": {keys.COMPUTE_DOMAIN_LABEL: cd_uid, keys.COMPUTE_DOMAIN_TARGET_LABEL: "Workload"},
            "finalizers": ["resource.nvidia.com/computeDomain"],
        },
        "spec": {"spec": {"devices": {
            "requests": [{"name": "channel",
                          "exactly": {"deviceClassName": keys.DEFAULT_CHANNEL_DEVICE_CLASSES[0]}}],
            "config": [{"requests": ["channel"], "opaque": {"driver": "compute-domain.nvidia.com", "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1", "kind": keys.COMPUTE_DOMAIN_CHANNEL_CONFIG_KIND,
                "domainID": cd_uid, "allocationMode": "Single"}}}],
        }}},
    }


def pod(name: str, cd: str | None, gpus: int, node: str | None = None, phase: str = "Pending",
        annotations: dict[str, str] | None = None, namespace: str = NAMESPACE) -> dict[str, Any]:
    """A pod shaped as kube-apiserver stores it (defaults applied), optionally in a ComputeDomain."""
    resources: dict[str, Any] = {}
    if gpus:
        resources["limits"] = {keys.GPU_RESOURCE: str(gpus)}
        resources["requests"] = {keys.GPU_RESOURCE: str(gpus)}
    if cd:
        resources["claims"] = [{"name": "imex-channel"}]
    spec: dict[str, Any] = {
        "schedulerName": "imex-scheduler" if cd else "default-scheduler",
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3", "resources": resources}],
    }
    if cd:
        spec["resourceClaims"] = [{"name": "imex-channel", "resourceClaimTemplateName": template_name(cd)}]
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid("pod", namespace, name),
                     "labels": {"app": name.rsplit("-", 1)[0]}, "annotations": annotations or {}},
        "spec": spec,
        "status": {"phase": phase},
    }


def objects() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = nodes()
    for name, num in COMPUTE_DOMAINS:
        out += [compute_domain(name, num), channel_template(name)]
    for i, node in enumerate(RUNNING_CD_NODES):
        out.append(pod(f"{RUNNING_CD}-{i}", RUNNING_CD, GPUS_PER_TRAY, node=node, phase="Running"))
    for i, node in enumerate(BUSY_NODES):
        out.append(pod(f"notebook-{i}", None, GPUS_PER_TRAY, node=node, phase="Running", namespace="research"))
    return out
