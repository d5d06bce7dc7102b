"""Nodes and pods parsed from the raw objects the API server stores, as frozen values.

Each parsed value keeps its ``raw`` dict: that is what travels to the extender (``Pod``, ``Nodes``),
unchanged. Parsing reads only what the emulated plugins use; a malformed field raises ``ValueError``
naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.sim.cycle import resources as res
from webhook.sim.cycle.selectors import (
    LabelSelector,
    NodeSelector,
    Taint,
    Toleration,
    parse_label_selector,
    parse_node_selector,
    parse_taints,
    parse_tolerations,
)


def _map(raw: Any, where: str) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected an object")
    return raw


def _strings(raw: Any, where: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _map(raw, where).items()}


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    allocatable: Mapping[str, int]
    raw: Mapping[str, Any]


def parse_node(raw: Any) -> Node:
    node = _map(raw, "node")
    meta = _map(node.get("metadata"), "node.metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("node.metadata.name: expected a non-empty string")
    spec = _map(node.get("spec"), f"node {name}: spec")
    status = _map(node.get("status"), f"node {name}: status")
    allocatable = res.tracked(res.resource_list(status.get("allocatable"), f"node {name}: status.allocatable"))
    return Node(name=name, labels=_strings(meta.get("labels"), f"node {name}: metadata.labels"),
                taints=parse_taints(spec.get("taints")), unschedulable=bool(spec.get("unschedulable")),
                allocatable=allocatable, raw=node)


@dataclass(frozen=True)
class AffinityTerm:
    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str

    def matches(self, pod: Pod, namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
        in_namespace = pod.namespace in self.namespaces or (
            self.namespace_selector is not None
            and self.namespace_selector.matches(namespace_labels.get(pod.namespace, {})))
        return in_namespace and self.selector.matches(pod.labels)


def _affinity_terms(raw: Any, namespace: str, where: str) -> tuple[AffinityTerm, ...]:
    terms = []
    for i, term in enumerate(raw or []):
        at = f"{where}[{i}]"
        term = _map(term, at)
        listed = frozenset(str(n) for n in term.get("namespaces") or [])
        ns_raw = term.get("namespaceSelector")
        ns_selector = None if ns_raw is None else parse_label_selector(ns_raw, f"{at}.namespaceSelector")
        namespaces = listed if listed or ns_selector is not None else frozenset({namespace})
        terms.append(AffinityTerm(parse_label_selector(term.get("labelSelector"), f"{at}.labelSelector"),
                                  namespaces, ns_selector, str(term.get("topologyKey", ""))))
    return tuple(terms)


@dataclass(frozen=True)
class ClaimRef:
    name: str
    claim_name: str | None
    """The ResourceClaim's name; ``None`` while a template's claim is not created yet."""
    from_template: bool


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    priority: int
    preempt_never: bool
    node_name: str
    nominated_node: str
    scheduler_name: str
    requests: Mapping[str, int]
    non_zero_cpu: int
    non_zero_memory: int
    resource_names: frozenset[str]
    """Every resource a container or init container requests or limits (extender interest)."""
    node_selector: Mapping[str, str] | None
    required_node_affinity: NodeSelector | None
    tolerations: tuple[Toleration, ...]
    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    claims: tuple[ClaimRef, ...]
    raw: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _claim_refs(spec: Mapping[str, Any], status: Mapping[str, Any], where: str) -> tuple[ClaimRef, ...]:
    made = {str(s.get("name")): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []
            if isinstance(s, Mapping)}
    refs = []
    for i, item in enumerate(spec.get("resourceClaims") or []):
        item = _map(item, f"{where}.spec.resourceClaims[{i}]")
        name = str(item.get("name", ""))
        if item.get("resourceClaimName"):
            refs.append(ClaimRef(name, str(item["resourceClaimName"]), False))
        elif item.get("resourceClaimTemplateName"):
            claim = made.get(name)
            refs.append(ClaimRef(name, str(claim) if claim else None, True))
    return tuple(refs)


def parse_pod(raw: Any) -> Pod:
    pod = _map(raw, "pod")
    meta = _map(pod.get("metadata"), "pod.metadata")
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    where = f"pod {namespace}/{name}"
    spec = _map(pod.get("spec"), f"{where}: spec")
    status = _map(pod.get("status"), f"{where}: status")
    containers = [res.parse_container(c, f"{where}: spec.containers[{i}]", False)
                  for i, c in enumerate(spec.get("containers") or [])]
    inits = [res.parse_container(c, f"{where}: spec.initContainers[{i}]", True)
             for i, c in enumerate(spec.get("initContainers") or [])]
    pod_level = res.resource_list(_map(spec.get("resources"), f"{where}: spec.resources").get("requests"),
                                  f"{where}: spec.resources.requests")
    overhead = res.resource_list(spec.get("overhead"), f"{where}: spec.overhead")
    requests = res.pod_requests(containers, inits, pod_level, overhead)
    cpu, memory = res.non_zero_requests(containers, inits, pod_level, overhead, requests)
    affinity = _map(spec.get("affinity"), f"{where}: spec.affinity")
    node_aff = _map(affinity.get("nodeAffinity"), f"{where}: spec.affinity.nodeAffinity")
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    pod_aff = _map(affinity.get("podAffinity"), f"{where}: spec.affinity.podAffinity")
    anti_aff = _map(affinity.get("podAntiAffinity"), f"{where}: spec.affinity.podAntiAffinity")
    selector = spec.get("nodeSelector")
    priority = spec.get("priority")
    return Pod(
        namespace=namespace, name=name, uid=str(meta.get("uid") or ""),
        labels=_strings(meta.get("labels"), f"{where}: metadata.labels"),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        preempt_never=spec.get("preemptionPolicy") == "Never",
        node_name=str(spec.get("nodeName") or ""), nominated_node=str(status.get("nominatedNodeName") or ""),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        requests=res.tracked(requests), non_zero_cpu=cpu, non_zero_memory=memory,
        resource_names=frozenset().union(*(c.resource_names for c in [*containers, *inits])),
        node_selector=None if selector is None else _strings(selector, f"{where}: spec.nodeSelector"),
        required_node_affinity=None if required is None else parse_node_selector(
            required, f"{where}: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
        tolerations=parse_tolerations(spec.get("tolerations")),
        affinity=_affinity_terms(pod_aff.get("requiredDuringSchedulingIgnoredDuringExecution"), namespace,
                                 f"{where}: spec.affinity.podAffinity.required"),
        anti_affinity=_affinity_terms(anti_aff.get("requiredDuringSchedulingIgnoredDuringExecution"), namespace,
                                      f"{where}: spec.affinity.podAntiAffinity.required"),
        claims=_claim_refs(spec, status, where), raw=pod)


def with_node(pod: Pod, node: str) -> Pod:
    """The pod as bound (or assumed) to ``node``: ``spec.nodeName`` set, nomination cleared."""
    raw = dict(pod.raw)
    raw["spec"] = {**_map(raw.get("spec"), "pod.spec"), "nodeName": node}
    status = dict(_map(raw.get("status"), "pod.status"))
    status.pop("nominatedNodeName", None)
    raw["status"] = status
    return parse_pod(raw)


def with_status(pod: Pod, **fields: Any) -> Pod:
    """The pod with ``status`` fields replaced (``None`` removes one)."""
    raw = dict(pod.raw)
    status = dict(_map(raw.get("status"), "pod.status"))
    for key, value in fields.items():
        if value is None:
            status.pop(key, None)
        else:
            status[key] = value
    raw["status"] = status
    return parse_pod(raw)
