"""Small builders for Kubernetes objects and snapshots, so table-driven tests state only what matters."""

from __future__ import annotations

from typing import Any, Protocol

from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.model import Reservation, Snapshot
from webhook.domain.policy import Policy
from webhook.engine.engine import Engine
from webhook.state import workload_tables
from webhook.state.cluster import ClusterStore


def node(name: str, gpus: int = 4, domain: str | None = None, zone: str | None = None, slots: int = 0,
         compute_domain: str | None = None, label: str = keys.CLIQUE_LABEL) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if domain:
        labels[label] = domain
    if zone:
        labels[keys.FABRIC_ZONE_LABEL] = zone
    if compute_domain:
        labels[keys.COMPUTE_DOMAIN_LABEL] = compute_domain
    annotations = {keys.FABRIC_SLOTS_ANNOTATION: str(slots)} if slots else {}
    return {"kind": "Node", "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "status": {"allocatable": {keys.GPU_RESOURCE: str(gpus)}}}


def cd_objects(name: str, num_nodes: int, namespace: str = "ml") -> list[dict[str, Any]]:
    cd = demo.compute_domain(name, num_nodes)
    rct = demo.channel_template(name)
    for obj in (cd, rct):
        obj["metadata"]["namespace"] = namespace
    return [cd, rct]


def cd_uid(name: str, namespace: str = "ml") -> str:
    return demo.uid("cd", namespace, name)


def pod(name: str, cd: str | None = None, gpus: int = 4, node: str | None = None, phase: str = "Pending",
        annotations: dict[str, str] | None = None, namespace: str = "ml") -> dict[str, Any]:
    return demo.pod(name, cd, gpus, node=node, phase=phase, annotations=annotations, namespace=namespace)


def store(objects: list[dict[str, Any]], policy: Policy | None = None,
          fabric_free: dict[str, int] | None = None) -> ClusterStore:
    s = ClusterStore(policy or Policy())
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    for kind in ("Node", "ResourceSlice", "ComputeDomain", "ResourceClaimTemplate", "ResourceClaim", "Job",
                 "ResourceQuota",
                 *workload_tables.KINDS,
                 "Pod"):
        s.replace(kind, by_kind.get(kind, []))
    if fabric_free:
        s.set_fabric_free(fabric_free)
    return s


def snapshot(objects: list[dict[str, Any]], reservations: dict[str, Reservation] | None = None,
             fabric_free: dict[str, int] | None = None, policy: Policy | None = None) -> Snapshot:
    from dataclasses import replace

    snap = store(objects, policy, fabric_free).snapshot()
    return replace(snap, reservations=reservations or {})


def gpu_slice(name: str, node: str, gpus: int, driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    """A DRA ResourceSlice publishing ``gpus`` whole GPUs on ``node``, as NVIDIA's GPU kubelet plugin does."""
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(gpus)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node, "devices": devices,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}


def rack(prefix: str, domain: str, count: int, gpus: int = 4) -> list[dict[str, Any]]:
    return [node(f"{prefix}-{i:02d}", gpus, domain) for i in range(count)]


def allocated_claim(name: str, node: str, cd_uid: str | None, target: str = "Workload",
                    namespace: str = "ml") -> dict[str, Any]:
    """A ResourceClaim the scheduler allocated on ``node``'s compute-domain pool, as kube-apiserver stores it."""
    labels = {keys.COMPUTE_DOMAIN_LABEL: cd_uid, keys.COMPUTE_DOMAIN_TARGET_LABEL: target} if cd_uid else {}
    device = "daemon-0" if target == keys.DAEMON_TARGET else "channel-0"
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                "deviceClassName": keys.DEFAULT_CHANNEL_DEVICE_CLASSES[0]}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "r", "driver": keys.COMPUTE_DOMAIN_DRIVER, "pool": node, "device": device}]}}}}


class _Backend(Protocol):
    store: ClusterStore
    reservations: Any
    binder: Any


def engine(backend: _Backend, policy: Policy | None = None, **options: Any) -> Engine:
    """The Engine over a backend's cache, reservations and binder, as the composition root wires it; the one
    place tests build it, so a constructor change is one edit. ``options``: the Engine's keyword arguments."""
    return Engine(backend.store, backend.reservations, backend.binder, policy or Policy(), **options)
