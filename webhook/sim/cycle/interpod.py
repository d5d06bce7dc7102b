"""InterPodAffinity's required terms (the PreFilter counts and the Filter), as kube-scheduler runs them.

PreFilter counts, over every pod on every node (bound and assumed alike), per (topologyKey, value) of the
node the pod is on, and only where that node has the key:
- affinity: pods matching *all* the incoming pod's affinity terms (one count per term);
- anti-affinity: pods matching each of the incoming pod's anti-affinity terms;
- existing anti-affinity: existing pods' anti-affinity terms that the incoming pod matches.

Filter, in this order:
1. affinity: a node lacking *any* term's topologyKey fails ("node(s) didn't match pod affinity rules",
   unresolvable), the first pod of a group included; otherwise every term needs a count > 0 in the
   node's topology value, except the first-pod case: no pod anywhere matches all the terms (on a node
   carrying the keys) and the pod matches all its own terms;
2. the incoming pod's anti-affinity: a node whose value of a term's key has a count > 0 fails;
3. existing pods' anti-affinity likewise ("... existing pods anti-affinity rules").
The hostname fast path (a gate off by default in the release we build) is not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from webhook.sim.cycle.cluster import NodeInfo
from webhook.sim.cycle.model import AffinityTerm, Pod
from webhook.sim.cycle.status import UNRESOLVABLE, UNSCHEDULABLE, Status

PLUGIN = "InterPodAffinity"
AFFINITY_NOT_MATCH = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"

Counts = Mapping[tuple[str, str], int]


@dataclass(frozen=True)
class InterPodState:
    pod: Pod
    affinity_counts: Counts
    anti_affinity_counts: Counts
    existing_anti_affinity_counts: Counts
    skip: bool


def _count(counts: dict[tuple[str, str], int], labels: Mapping[str, str], key: str) -> None:
    if key in labels:
        pair = (key, labels[key])
        counts[pair] = counts.get(pair, 0) + 1


def _matches_all(terms: Iterable[AffinityTerm], pod: Pod, ns_labels: Mapping[str, Mapping[str, str]]) -> bool:
    terms = tuple(terms)
    return bool(terms) and all(t.matches(pod, ns_labels) for t in terms)


def prefilter(pod: Pod, infos: Iterable[NodeInfo], ns_labels: Mapping[str, Mapping[str, str]]) -> InterPodState:
    affinity: dict[tuple[str, str], int] = {}
    anti: dict[tuple[str, str], int] = {}
    existing: dict[tuple[str, str], int] = {}
    for info in infos:
        labels = info.node.labels
        for other in info.pods:
            for term in other.anti_affinity:
                if term.matches(pod, ns_labels):
                    _count(existing, labels, term.topology_key)
            if _matches_all(pod.affinity, other, ns_labels):
                for term in pod.affinity:
                    _count(affinity, labels, term.topology_key)
            for term in pod.anti_affinity:
                if term.matches(other, ns_labels):
                    _count(anti, labels, term.topology_key)
    skip = not existing and not pod.affinity and not pod.anti_affinity
    return InterPodState(pod, affinity, anti, existing, skip)


def _self_match(pod: Pod, ns_labels: Mapping[str, Mapping[str, str]]) -> bool:
    return _matches_all(pod.affinity, pod, ns_labels)


def filter_node(state: InterPodState, info: NodeInfo, ns_labels: Mapping[str, Mapping[str, str]]) -> Status | None:
    if state.skip:
        return None
    labels = info.node.labels
    pod = state.pod
    if pod.affinity:
        pods_exist = True
        for term in pod.affinity:
            if term.topology_key not in labels:
                return Status(UNRESOLVABLE, (AFFINITY_NOT_MATCH,), PLUGIN)
            if state.affinity_counts.get((term.topology_key, labels[term.topology_key]), 0) <= 0:
                pods_exist = False
        if not pods_exist and not (not state.affinity_counts and _self_match(pod, ns_labels)):
            return Status(UNRESOLVABLE, (AFFINITY_NOT_MATCH,), PLUGIN)
    if state.anti_affinity_counts:
        for term in pod.anti_affinity:
            key = term.topology_key
            if key in labels and state.anti_affinity_counts.get((key, labels[key]), 0) > 0:
                return Status(UNSCHEDULABLE, (ANTI_AFFINITY_NOT_MATCH,), PLUGIN)
    if state.existing_anti_affinity_counts:
        for key, value in labels.items():
            if state.existing_anti_affinity_counts.get((key, value), 0) > 0:
                return Status(UNSCHEDULABLE, (EXISTING_ANTI_AFFINITY_NOT_MATCH,), PLUGIN)
    return None
