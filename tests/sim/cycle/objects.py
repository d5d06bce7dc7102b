"""Raw Kubernetes objects for the scheduling-cycle emulator's tests, and a fake in-process extender.

The fake speaks the extender wire format (Go field names) and records every call, so tests can assert
what kube-scheduler would have sent. It is deliberately independent of the real extender.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.sim.cycle import SchedulerConfig, parse_config

GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
GPU_DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"


def node(name: str, *, cpu: str = "8", memory: str = "32Gi", pods: str = "110", gpus: int = 0,
         labels: Mapping[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         unschedulable: bool = False) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpus:
        allocatable[GPU] = str(gpus)
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": spec, "status": {"allocatable": allocatable, "capacity": dict(allocatable)}}


def pod(name: str, *, namespace: str = "ml", cpu: str | None = "1", memory: str | None = "1Gi",
        gpus: int = 0, labels: Mapping[str, str] | None = None, priority: int | None = None,
        on: str | None = None, spec: Mapping[str, Any] | None = None,
        claims: list[dict[str, str]] | None = None, status: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A pod as the API server stores it; ``on``: bound to that node; ``spec`` entries are merged in."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    resources: dict[str, Any] = {"requests": requests}
    if gpus:
        resources["limits"] = {GPU: str(gpus)}
        requests[GPU] = str(gpus)
    pod_spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.invalid/x", "resources": resources}],
                                "schedulerName": "imex-scheduler"}
    if priority is not None:
        pod_spec["priority"] = priority
    if on is not None:
        pod_spec["nodeName"] = on
    if claims:
        pod_spec["resourceClaims"] = claims
    pod_spec.update(spec or {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                         "labels": dict(labels or {})},
            "spec": pod_spec, "status": dict(status or ({"phase": "Running"} if on else {"phase": "Pending"}))}


def affinity_term(labels: Mapping[str, str], topology_key: str = CLIQUE) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": topology_key}


def pod_affinity(*terms: dict[str, Any], anti: bool = False) -> dict[str, Any]:
    kind = "podAntiAffinity" if anti else "podAffinity"
    return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}}


def gpu_class() -> dict[str, Any]:
    expression = f"device.driver == '{GPU_DRIVER}' && device.attributes['{GPU_DRIVER}'].type == 'gpu'"
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": GPU_CLASS},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def gpu_slice(node_name: str, gpus: int) -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(gpus)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-gpus"},
            "spec": {"driver": GPU_DRIVER, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def gpu_claim(name: str, gpus: int, namespace: str = "ml") -> dict[str, Any]:
    request = {"name": "gpus", "exactly": {"deviceClassName": GPU_CLASS, "allocationMode": "ExactCount",
                                           "count": gpus}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-claim-{name}"},
            "spec": {"devices": {"requests": [request]}}}


def config(*, managed: list[str] | None = None, weight: int = 141, cache_capable: bool = True,
           preempt: bool = True, fit_weight: int | None = None, strategy: str = "MostAllocated",
           ignored: list[str] | None = None) -> SchedulerConfig:
    """A KubeSchedulerConfiguration dict shaped like ``deploy.scheduler_config`` with knobs, parsed."""
    args: dict[str, Any] = {"scoringStrategy": {"type": strategy,
                                                "resources": [{"name": "cpu", "weight": 1},
                                                              {"name": "memory", "weight": 1}]}}
    if ignored:
        args["ignoredResources"] = ignored
    profile: dict[str, Any] = {"schedulerName": "imex-scheduler",
                               "pluginConfig": [{"name": "NodeResourcesFit", "args": args}]}
    if fit_weight is not None:
        profile["plugins"] = {"multiPoint": {"enabled": [{"name": "NodeResourcesFit", "weight": fit_weight}]}}
    extender: dict[str, Any] = {"urlPrefix": "https://imex-webhook.imex-system.svc:443", "filterVerb": "filter",
                                "prioritizeVerb": "prioritize", "bindVerb": "bind", "weight": weight,
                                "nodeCacheCapable": cache_capable, "ignorable": False}
    if preempt:
        extender["preemptVerb"] = "preempt"
    if managed is not None:
        extender["managedResources"] = [{"name": m} for m in managed]
    return parse_config({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                         "profiles": [profile], "extenders": [extender]})


@dataclass
class FakeExtender:
    """Keeps every node except those it is told to reject; scores from ``scores``; binds unless
    ``bind_errors`` has an error queued; keeps every preemption candidate unless ``preempt_keep`` says."""

    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)
    scores: dict[str, int] = field(default_factory=dict)
    filter_error: str = ""
    bind_errors: list[str] = field(default_factory=list)
    preempt_keep: set[str] | None = None
    on_bind: Callable[[FakeExtender, dict[str, Any]], None] | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def verbs(self) -> list[str]:
        return [verb for verb, _ in self.calls]

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("filter", args))
        if self.filter_error:
            return {"NodeNames": None, "Nodes": None, "FailedNodes": None, "FailedAndUnresolvableNodes": None,
                    "Error": self.filter_error}
        if args["NodeNames"] is not None:
            names = list(args["NodeNames"])
        else:
            names = [n["metadata"]["name"] for n in args["Nodes"]["items"]]
        rejected = set(self.failed) | set(self.unresolvable) | self.dropped
        kept = [n for n in names if n not in rejected]
        reply: dict[str, Any] = {
            "FailedNodes": {n: r for n, r in self.failed.items() if n in names},
            "FailedAndUnresolvableNodes": {n: r for n, r in self.unresolvable.items() if n in names},
            "Error": ""}
        if args["NodeNames"] is not None:
            reply.update(NodeNames=kept, Nodes=None)
        else:
            reply.update(NodeNames=None, Nodes={"metadata": {}, "items": [n for n in args["Nodes"]["items"]
                                                                          if n["metadata"]["name"] in kept]})
        return reply

    def prioritize(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        self.calls.append(("prioritize", args))
        names = args["NodeNames"] or [n["metadata"]["name"] for n in args["Nodes"]["items"]]
        return [{"Host": n, "Score": self.scores.get(n, 0)} for n in names]

    def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("bind", args))
        if self.on_bind is not None:
            self.on_bind(self, args)
        return {"Error": self.bind_errors.pop(0) if self.bind_errors else ""}

    def preempt(self, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("preempt", args))
        if args["NodeNameToMetaVictims"] is not None:
            meta = args["NodeNameToMetaVictims"]
        else:
            meta = {n: {"Pods": [{"UID": p["metadata"]["uid"]} for p in v["Pods"]],
                        "NumPDBViolations": v["NumPDBViolations"]} for n, v in args["NodeNameToVictims"].items()}
        keep = set(meta) if self.preempt_keep is None else self.preempt_keep
        return {"NodeNameToMetaVictims": {n: v for n, v in meta.items() if n in keep}}
