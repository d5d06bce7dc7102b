"""GPU pods outside any group: where the extender scores them, so they fill gaps instead of breaking domains.

A pod asking for ``nvidia.com/gpu`` that belongs to no group (a notebook, an inference server) would go to
kube-scheduler's default profile, whose NodeResourcesFit scores CPU and memory: every tray with a free GPU
scores alike and the pod lands anywhere, and one 1-GPU pod on an otherwise free tray keeps a 4-GPU
ComputeDomain member off it. Spread over a cluster, such pods leave no clique whole for a rack-sized job
(docs/SIMULATE.md measures it). When admission sends them to the dedicated profile
(``Policy.pack_plain_gpu_pods``), ``weigh`` ranks the nodes that passed filter for them:

- a node of an NVLink domain already in use, or of no domain at all: 5..10, the fewer GPUs left idle on the
  node after the pod the higher (best fit: the gaps other pods left are filled first, whole trays stay
  whole), and higher in a domain no single group holds most of: a domain one large job holds comes back
  whole when that job ends, unless plain pods were put beside it (measured in docs/SIMULATE.md: preferring
  the fullest domain instead made rack-sized jobs wait longer);
- a node of a domain nothing uses yet: 2..4 (a whole clique is what a rack-sized job needs);
- a node of a domain with capacity promised to a group that has members still to place: 1 (the group
  counted on it);
- a composable node (one of a fabric zone): 1 (its local GPUs are what fabric groups start from);
- a node the pod does not fit on now: 0, as for group members.

Filter (``short``) fails a node without enough free device-plugin GPUs for the pod, counted as for group
members (bound pods, GPUs attached for pods not bound yet), and for good (``never``) a node whose GPUs are
only DRA devices. In fabric mode the dedicated profile leaves
``nvidia.com/gpu`` to the extender (``ignoredResources``: attached GPUs are not in a node's allocatable before
bind), so without this check such a pod would be placed on a full node. It never gets fabric GPUs attached:
only a group's members do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from webhook.domain.model import Node, Pod, Reservation, Snapshot
from webhook.domain.placement import capacity, placement
from webhook.wire.extender import MIN_EXTENDER_PRIORITY

PROTECTED = 1  # a held domain or a composable node: only when nothing better passed
UNUSED_BASE, UNUSED_SPAN = 2, 2  # a domain nothing uses yet: 2..4
USED_BASE, USED_NODE_SPAN, USED_DOMAIN_SPAN = 5, 3, 2  # a used domain or no domain: 5..10


def asks_gpus(pod: Pod) -> bool:
    """Whether the pod asks for device-plugin GPUs (the only ones this module weighs)."""
    return pod.gpu_limit > 0


def never(pod: Pod, node: Node) -> str | None:
    """Why ``node`` can never take the pod's GPUs: they are the device plugin's, and the node publishes its
    GPUs only as DRA devices (in fabric mode kube-scheduler does not count nvidia.com/gpu, so nothing else
    would keep the pod off it). Unlike ``capacity.source_mismatch`` for group members, fabric slots do not
    count: a pod in no group never gets fabric GPUs attached."""
    return capacity.only_dra_devices(pod.gpu_limit) if node.dra_gpus and node.gpus == node.dra_gpus else None


def short(pod: Pod, node: Node, snapshot: Snapshot) -> str | None:
    """Why ``node`` cannot take the pod's GPUs now, or None when it can: its free GPUs, no more than the device
    plugin publishes (a node with DRA GPUs besides has the rest as DRA devices; one with only those is
    ``never``'s)."""
    free = min(capacity.free_local(node, snapshot, pod.uid), node.gpus - node.dra_gpus)
    if free >= pod.gpu_limit:
        return None
    return f"pod needs {pod.gpu_limit} nvidia.com/gpu; node has {free} free"


@dataclass(frozen=True, slots=True)
class DomainUse:
    used_gpus: int  # in use, or promised to pods whose fabric GPUs are attached
    gpus: int
    largest_group_gpus: int  # GPUs of the domain the members of one group use, for the group using most

    @property
    def spread(self) -> float:
        """1 when no group uses the domain's GPUs, near 0 when one group uses nearly all of them."""
        return 1.0 - min(self.largest_group_gpus, self.gpus) / self.gpus if self.gpus else 0.0


def domain_uses(domains: Iterable[str], snapshot: Snapshot) -> dict[str, DomainUse]:
    """The use of each domain. One pass over every known group member: a group's GPUs per domain are what its
    members bound there ask for (a member holds its node's channel, so one group per node; the plain pods
    beside it are no group's)."""
    wanted = set(domains)
    per_group: dict[str, Counter[str]] = {d: Counter() for d in wanted}
    for group_id, members in snapshot.members.items():
        for member in members:
            node = snapshot.nodes.get(member.pod.node_name or "")
            if node is not None and node.domain in wanted and not member.pod.terminated:
                per_group[node.domain][group_id] += max(member.pod.gpu_limit, 1)
    out = {}
    for domain in wanted:
        used = gpus = 0
        for name in snapshot.domains.get(domain, ()):
            node = snapshot.nodes.get(name)
            if node is not None:
                gpus += node.gpus
                used += snapshot.used_gpus.get(name, 0) + snapshot.promised_gpus.get(name, 0)
        out[domain] = DomainUse(used, gpus, max(per_group[domain].values(), default=0))
    return out


def held_domains(snapshot: Snapshot, live: Mapping[str, Reservation]) -> frozenset[str]:
    """Domains where a group was promised capacity for members (or spares) not placed yet."""
    return frozenset(h.domain for h in placement.holds(snapshot, live, exclude=""))


def score_node(node: Node, pod: Pod, snapshot: Snapshot, held: frozenset[str], use: Mapping[str, DomainUse]) -> int:
    free = capacity.free_local(node, snapshot, pod.uid)
    if free < pod.gpu_limit:
        return MIN_EXTENDER_PRIORITY
    if node.fabric_zone or (node.domain is not None and node.domain in held):
        return PROTECTED
    size = max(node.gpus, 1)
    tightness = 1.0 - min(free - pod.gpu_limit, size) / size
    if node.domain is None:
        return USED_BASE + round((USED_NODE_SPAN + USED_DOMAIN_SPAN) * tightness)
    domain = use[node.domain]
    if domain.used_gpus == 0:
        return UNUSED_BASE + round(UNUSED_SPAN * tightness)
    return USED_BASE + round(USED_NODE_SPAN * tightness) + round(USED_DOMAIN_SPAN * domain.spread)


def weigh(pod: Pod, candidates: Sequence[str], snapshot: Snapshot, live: Mapping[str, Reservation],
          node_view: Mapping[str, Node] | None = None) -> dict[str, int]:
    """The score of every candidate the pod fits on; the others score MIN_EXTENDER_PRIORITY."""
    if not asks_gpus(pod):
        return {}
    nodes = node_view if node_view is not None else snapshot.nodes
    found = [node for name in candidates if (node := nodes.get(name)) is not None]
    held = held_domains(snapshot, live)
    use = domain_uses(_domains(found), snapshot)
    scores = {}
    for node in found:
        score = score_node(node, pod, snapshot, held, use)
        if score > MIN_EXTENDER_PRIORITY:
            scores[node.name] = score
    return scores


def _domains(nodes: Iterable[Node]) -> set[str]:
    return {n.domain for n in nodes if n.domain is not None}
