"""The scheduler's view of the cluster: nodes, the pods on them, claims and devices.

``ClusterState`` is immutable; every change (a pod assumed or bound, a claim allocated, a victim
evicted) returns a new one. Pods in ``Succeeded`` or ``Failed`` are left out, as kube-scheduler's pod
informer leaves them out. ``NodeInfo`` is one node with its pods and the sums the plugins read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from webhook.sim.cycle import resources as res
from webhook.sim.cycle.claims import Claim, Device, DeviceClass, parse_claim, parse_device_class, parse_slice
from webhook.sim.cycle.model import Node, Pod, parse_node, parse_pod, with_node

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class ClusterState:
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    """Bound and assumed pods (``spec.nodeName`` set), not terminated."""
    claims: tuple[Claim, ...] = ()
    devices: tuple[Device, ...] = ()
    device_classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    nominated: tuple[Pod, ...] = ()
    """Pending pods that preemption nominated to a node (``status.nominatedNodeName``)."""
    assumed: frozenset[str] = frozenset()
    """Keys of pods in ``pods`` that the scheduler assumed but has not bound yet."""

    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)

    def pod(self, key: str) -> Pod | None:
        return next((p for p in self.pods if p.key == key), None)

    def claim(self, namespace: str, name: str) -> Claim | None:
        return next((c for c in self.claims if c.namespace == namespace and c.name == name), None)

    def with_pod(self, pod: Pod, node: str, assumed: bool = False) -> ClusterState:
        placed = with_node(pod, node)
        pods = (*(p for p in self.pods if p.key != pod.key), placed)
        nominated = tuple(p for p in self.nominated if p.key != pod.key)
        marks = self.assumed | {pod.key} if assumed else self.assumed - {pod.key}
        return replace(self, pods=pods, nominated=nominated, assumed=marks)

    def without_pods(self, keys: Iterable[str]) -> ClusterState:
        gone = set(keys)
        return replace(self, pods=tuple(p for p in self.pods if p.key not in gone),
                       nominated=tuple(p for p in self.nominated if p.key not in gone),
                       assumed=self.assumed - gone)

    def with_nominated(self, pod: Pod) -> ClusterState:
        others = tuple(p for p in self.nominated if p.key != pod.key)
        return replace(self, nominated=others + ((pod,) if pod.nominated_node else ()))

    def with_claim(self, claim: Claim) -> ClusterState:
        claims = tuple(claim if c.key == claim.key else c for c in self.claims)
        return replace(self, claims=claims)


def parse_cluster(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]] = (), *,
                  assumed: Sequence[tuple[Mapping[str, Any], str]] = (),
                  claims: Sequence[Mapping[str, Any]] = (), slices: Sequence[Mapping[str, Any]] = (),
                  device_classes: Sequence[Mapping[str, Any]] = (),
                  namespaces: Sequence[Mapping[str, Any]] = ()) -> ClusterState:
    """Raw objects in, the scheduler's view out.

    ``pods`` are bound pods (``spec.nodeName`` set; others are ignored, terminated ones too); ``assumed``
    are (pod, node) pairs the scheduler has assumed onto a node but not bound yet.
    """
    parsed = [parse_pod(p) for p in pods]
    bound = tuple(p for p in parsed if p.node_name and _phase(p) not in TERMINAL_PHASES)
    state = ClusterState(
        nodes=tuple(parse_node(n) for n in nodes), pods=bound,
        claims=tuple(parse_claim(c) for c in claims),
        devices=tuple(d for s in slices for d in parse_slice(s)),
        device_classes={c.name: c for c in (parse_device_class(raw) for raw in device_classes)},
        namespace_labels={str(ns.get("metadata", {}).get("name", "")): dict(ns.get("metadata", {}).get("labels") or {})
                          for ns in namespaces})
    for raw, node in assumed:
        state = state.with_pod(parse_pod(raw), node, assumed=True)
    return state


def _phase(pod: Pod) -> str:
    return str((pod.raw.get("status") or {}).get("phase") or "")


@dataclass(frozen=True)
class NodeInfo:
    node: Node
    pods: tuple[Pod, ...]
    requested: Mapping[str, int]
    non_zero_cpu: int
    non_zero_memory: int

    @property
    def name(self) -> str:
        return self.node.name


def node_info(node: Node, pods: Iterable[Pod]) -> NodeInfo:
    members = tuple(pods)
    requested: dict[str, int] = {}
    for pod in members:
        for name, value in pod.requests.items():
            requested[name] = requested.get(name, 0) + value
    return NodeInfo(node, members, requested, sum(p.non_zero_cpu for p in members),
                    sum(p.non_zero_memory for p in members))


def node_infos(state: ClusterState, extra: Iterable[Pod] = ()) -> tuple[NodeInfo, ...]:
    """Every node with the pods on it (plus ``extra`` pods, placed on their ``node_name``)."""
    by_node: dict[str, list[Pod]] = {n.name: [] for n in state.nodes}
    for pod in (*state.pods, *extra):
        if pod.node_name in by_node:
            by_node[pod.node_name].append(pod)
    return tuple(node_info(n, by_node[n.name]) for n in state.nodes)


def allowed_pods(info: NodeInfo) -> int:
    return info.node.allocatable.get(res.PODS, 0)
