"""Cluster objects shaped as the components that write them in a real GB200 cluster write them.

Nodes as GPU Feature Discovery and the node's kubelet leave them (clique label, GPU product, allocatable
``nvidia.com/gpu`` where the device plugin runs); DeviceClasses and ResourceSlices as NVIDIA's DRA driver
publishes them (``gpu.nvidia.com`` GPUs; one ``channel-0`` and one ``daemon-0`` per node from the
compute-domain plugin); ComputeDomains with the workload ResourceClaimTemplate its controller creates.
"""

from __future__ import annotations

import uuid
from typing import Any

from webhook.domain import keys

GPU_DRIVER = "gpu.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"


def computedomain_crd() -> dict[str, Any]:
    """Our own minimal schema of the driver's ComputeDomain (resource.nvidia.com/v1beta1)."""
    spec_schema = {
        "type": "object",
        "properties": {
            "numNodes": {"type": "integer", "minimum": 0},
            "channel": {
                "type": "object",
                "required": ["resourceClaimTemplate"],
                "properties": {
                    "resourceClaimTemplate": {"type": "object", "required": ["name"],
                                              "properties": {"name": {"type": "string"}}},
                    "allocationMode": {"type": "string", "enum": ["Single", "All"]},
                },
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "computedomains.resource.nvidia.com"},
        "spec": {
            "group": "resource.nvidia.com", "scope": "Namespaced",
            "names": {"plural": "computedomains", "singular": "computedomain", "kind": "ComputeDomain",
                      "listKind": "ComputeDomainList"},
            "versions": [{
                "name": "v1beta1", "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": spec_schema,
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                }}},
            }],
        },
    }


def device_classes() -> list[dict[str, Any]]:
    def cls(name: str, expression: str) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expression}}]}}

    return [
        cls(GPU_CLASS, f"device.driver == '{GPU_DRIVER}' && device.attributes['{GPU_DRIVER}'].type == 'gpu'"),
        cls(CHANNEL_CLASS, f"device.driver == '{CD_DRIVER}' && device.attributes['{CD_DRIVER}'].type == 'channel'"
                           f" && device.attributes['{CD_DRIVER}'].id == 0"),
        cls("compute-domain-daemon.nvidia.com",
            f"device.driver == '{CD_DRIVER}' && device.attributes['{CD_DRIVER}'].type == 'daemon'"),
    ]


def node(name: str, *, clique: str | None = None, fabric_zone: str | None = None, device_plugin_gpus: int = 0,
         product: str = "NVIDIA-GB200", extra_labels: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64",
              "nvidia.com/gpu.product": product, **(extra_labels or {})}
    if clique:
        labels[keys.CLIQUE_LABEL] = clique
    if fabric_zone:
        labels[keys.FABRIC_ZONE_LABEL] = fabric_zone
    resources = {"cpu": "72", "memory": "480Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    if device_plugin_gpus:
        resources[keys.GPU_RESOURCE] = str(device_plugin_gpus)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": dict(annotations or {})},
        "spec": {},
        "status": {"capacity": dict(resources), "allocatable": dict(resources),
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "message": "no kubelet: the e2e suite plays the node's part"}]},
    }


def gpu_slice(node_name: str, gpus: int) -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {
        "type": {"string": "gpu"},
        "uuid": {"string": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node_name}/{i}')}"},
        "productName": {"string": "NVIDIA GB200"},
        "architecture": {"string": "Blackwell"},
    }} for i in range(gpus)]
    return _slice(node_name, GPU_DRIVER, devices)


def channel_slice(node_name: str) -> dict[str, Any]:
    devices = [
        {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
        {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
    ]
    return _slice(node_name, CD_DRIVER, devices)


def _slice(node_name: str, driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{driver}"},
        "spec": {"driver": driver, "nodeName": node_name,
                 "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1}, "devices": devices},
    }


def computedomain(namespace: str, name: str, num_nodes: int) -> dict[str, Any]:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"numNodes": num_nodes,
                     "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}, "allocationMode": "Single"}}}


def channel_template(namespace: str, cd_name: str, cd_uid: str) -> dict[str, Any]:
    """The workload ResourceClaimTemplate the ComputeDomain controller creates for a ComputeDomain."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"{cd_name}-channel", "namespace": namespace,
                     "labels": {keys.COMPUTE_DOMAIN_LABEL: cd_uid, keys.COMPUTE_DOMAIN_TARGET_LABEL: "Workload"}},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}],
            "config": [{"requests": ["channel"], "opaque": {"driver": CD_DRIVER, "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig",
                "domainID": cd_uid, "allocationMode": "Single"}}}],
        }}},
    }


def gpu_template(namespace: str, name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpus", "exactly": {"deviceClassName": GPU_CLASS, "allocationMode": "ExactCount",
                                         "count": gpus}}]}}},
    }


def job(namespace: str, name: str, parallelism: int) -> dict[str, Any]:
    """A suspended Job: no job controller runs here, the test creates its pods as the controller would."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
                     "suspend": True,
                     "template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "main", "image": "registry.invalid/train"}]}}}}


def pod(namespace: str, name: str, *, gpus: int = 0, claims: list[dict[str, str]] | None = None,
        annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        owner: dict[str, Any] | None = None, priority_class: str | None = None,
        active_deadline: int | None = None) -> dict[str, Any]:
    """A pod as a controller creates it: ``claims`` are ``spec.resourceClaims`` entries, used by the one
    container; ``gpus`` is a device-plugin ``nvidia.com/gpu`` limit; ``active_deadline`` its
    ``activeDeadlineSeconds``."""
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/train:1",
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    if gpus:
        container["resources"]["limits"] = {keys.GPU_RESOURCE: str(gpus)}
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never", "terminationGracePeriodSeconds": 0}
    if claims:
        spec["resourceClaims"] = claims
        container["resources"]["claims"] = [{"name": c["name"]} for c in claims]
    if priority_class:
        spec["priorityClassName"] = priority_class
    if active_deadline is not None:
        spec["activeDeadlineSeconds"] = active_deadline
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                            "annotations": dict(annotations or {})}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"], "controller": True,
                                    "blockOwnerDeletion": True}]
        meta["labels"]["job-name"] = owner["metadata"]["name"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def pod_group(namespace: str, name: str, min_count: int, topology_key: str | None = None) -> dict[str, Any]:
    """A scheduling.k8s.io/v1beta1 gang PodGroup, with KEP-5732's topology constraint on ``topology_key``
    (``spec.schedulingConstraints.topology[].key``: the API allows one)."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}
