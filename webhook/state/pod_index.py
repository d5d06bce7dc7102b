"""What the ``ClusterStore`` derives from each pod (group, demand, GPUs held) and the aggregates over them
(GPUs used per node, groups and ComputeDomains per node, members per group), kept up to date one pod at a
time so that a snapshot is a few shallow copies.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from webhook.domain.groups import grouping
from webhook.domain.model import Catalog, Member, Node, ObjectKey, Pod
from webhook.domain.placement import capacity
from webhook.domain.policy import Policy
from webhook.state.frozen_views import FrozenView


@dataclass(frozen=True, slots=True)
class Derived:
    pod: Pod
    group_id: str | None
    compute_domain: str | None
    gpus: int  # what the pod holds on its node while bound and not terminated
    member: Member | None


def derive(pod: Pod, catalog: Catalog, policy: Policy, nodes: Mapping[str, Node]) -> Derived:
    """Raises whatever grouping or demand raises for a pod no one foresaw."""
    group = grouping.resolve(pod, catalog, policy).group
    need = capacity.demand(pod, catalog, policy)
    held = 0
    if pod.node_name and not pod.terminated:
        node = nodes.get(pod.node_name)
        held = node.gpus if need.whole_node and node else need.gpus
    member = Member(pod, need) if group is not None else None
    return Derived(pod, group.id if group else None, group.compute_domain if group else None, held, member)


def _decrement(table: dict[str, dict[str, int]], node: str, value: str | None) -> None:
    if not value:
        return
    table[node][value] -= 1
    if table[node][value] <= 0:
        del table[node][value]
    if not table[node]:
        del table[node]


K = TypeVar("K", bound=Hashable)


def _forget(table: dict[K, dict[ObjectKey, None]], at: K, key: ObjectKey) -> None:
    keys = table.get(at)
    if keys is not None:
        keys.pop(key, None)
        if not keys:
            del table[at]


class PodIndex:
    """Not thread-safe on its own: the store calls it under its lock."""

    def __init__(self) -> None:
        self.pods: dict[ObjectKey, Derived] = {}
        self.uids: dict[str, ObjectKey] = {}
        self.used: dict[str, int] = defaultdict(int)
        self.node_groups: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.node_cds: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.members: dict[str, dict[ObjectKey, Member]] = defaultdict(dict)
        self._live: dict[str, int] = {}  # group -> members not terminated
        self._placed_seen: set[str] = set()  # groups with a member seen bound and not terminated
        self.ended: set[str] = set()  # of those, the groups whose members are all gone or finished now
        # Pods by namespace, and by the shared ResourceClaim they name: what a change of a catalog object or of
        # a claim must derive again, without a scan of every pod (claims change several times per pod).
        self._by_namespace: dict[str, dict[ObjectKey, None]] = defaultdict(dict)
        self._by_claim: dict[ObjectKey, dict[ObjectKey, None]] = defaultdict(dict)
        # What snapshots copy of node_groups, node_cds and members, frozen again only where a pod changed them.
        self._groups_view: FrozenView[str, dict[str, int], frozenset[str]] = FrozenView(frozenset)
        self._cds_view: FrozenView[str, dict[str, int], frozenset[str]] = FrozenView(frozenset)
        self._members_view: FrozenView[str, dict[ObjectKey, Member], tuple[Member, ...]] = FrozenView(
            lambda m: tuple(m.values()))

    def pod(self, key: ObjectKey) -> Pod | None:
        derived = self.pods.get(key)
        return derived.pod if derived else None

    def by_uid(self, uid: str) -> Pod | None:
        key = self.uids.get(uid)
        return self.pod(key) if key else None

    def in_namespace(self, namespace: str) -> list[Pod]:
        return [self.pods[k].pod for k in self._by_namespace.get(namespace, ())]

    def naming_claim(self, namespace: str, claim: str) -> list[Pod]:
        """The pods whose ``spec.resourceClaims`` name the ResourceClaim (not a template's claims)."""
        return [self.pods[k].pod for k in self._by_claim.get((namespace, claim), ())]

    def set(self, derived: Derived) -> None:
        pod = derived.pod
        self.unset(pod.key)
        self.pods[pod.key] = derived
        self._by_namespace[pod.namespace][pod.key] = None
        for ref in pod.claims:
            if ref.claim:
                self._by_claim[(pod.namespace, ref.claim)][pod.key] = None
        if pod.uid:
            self.uids[pod.uid] = pod.key
        node = pod.node_name
        if node and not pod.terminated:
            self.used[node] += derived.gpus
            if derived.group_id:
                self.node_groups[node][derived.group_id] += 1
                self._groups_view.touch(node)
            if derived.compute_domain:
                self.node_cds[node][derived.compute_domain] += 1
                self._cds_view.touch(node)
        if derived.group_id and derived.member is not None:
            self.members[derived.group_id][pod.key] = derived.member
            self._members_view.touch(derived.group_id)
            if not pod.terminated:
                self._live[derived.group_id] = self._live.get(derived.group_id, 0) + 1
                self.ended.discard(derived.group_id)
                if node:
                    self._placed_seen.add(derived.group_id)

    def unset(self, key: ObjectKey) -> None:
        old = self.pods.pop(key, None)
        if old is None:
            return
        _forget(self._by_namespace, old.pod.namespace, key)
        for ref in old.pod.claims:
            if ref.claim:
                _forget(self._by_claim, (old.pod.namespace, ref.claim), key)
        if old.pod.uid and self.uids.get(old.pod.uid) == key:
            del self.uids[old.pod.uid]
        node = old.pod.node_name
        if node and not old.pod.terminated:
            self.used[node] -= old.gpus
            if self.used[node] <= 0:
                del self.used[node]
            _decrement(self.node_groups, node, old.group_id)
            _decrement(self.node_cds, node, old.compute_domain)
            self._groups_view.touch(node)
            self._cds_view.touch(node)
        if old.group_id:
            self._members_view.touch(old.group_id)
            members = self.members.get(old.group_id)
            if members is not None:
                members.pop(key, None)
                if not members:
                    del self.members[old.group_id]
            if old.member is not None and not old.pod.terminated:
                live = self._live.get(old.group_id, 0) - 1
                if live > 0:
                    self._live[old.group_id] = live
                else:
                    self._live.pop(old.group_id, None)
                    if old.group_id in self._placed_seen:
                        self.ended.add(old.group_id)

    def groups_by_node(self) -> dict[str, frozenset[str]]:
        """``node_groups`` frozen, for a snapshot (the same dict until a pod changes it)."""
        return self._groups_view.view(self.node_groups)

    def compute_domains_by_node(self) -> dict[str, frozenset[str]]:
        return self._cds_view.view(self.node_cds)

    def members_by_group(self) -> dict[str, tuple[Member, ...]]:
        return self._members_view.view(self.members)

    def forget_ended(self, group_id: str) -> bool:
        """Stop tracking an ended group (its reservation is released); True if it was tracked."""
        if group_id not in self.ended:
            return False
        self.ended.discard(group_id)
        self._placed_seen.discard(group_id)
        return True
