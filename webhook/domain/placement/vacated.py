"""The cluster as it would be once some bound pods are gone: the GPUs they hold free, their groups and
ComputeDomains off their nodes unless another pod of theirs stays. Preemption asks it of the victims the
scheduler names; holds ask it of the running groups whose walltimes end first (``webhook.domain.jobs.holds``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from webhook.domain.groups import grouping
from webhook.domain.model import Pod, Snapshot
from webhook.domain.placement import capacity
from webhook.domain.policy import Policy


def without_victims(snapshot: Snapshot, candidates: Mapping[str, Sequence[str]], victims: Mapping[str, Pod],
                    policy: Policy) -> Snapshot:
    """The snapshot as it would be once every candidate's victims are gone: their GPUs free, their groups
    and ComputeDomains off the node unless another pod of theirs stays (the driver's ComputeDomain node
    label and the allocated channel claims too), and no longer members of their groups. Only victims we
    know, bound to that node, count."""
    gone: dict[str, list[Pod]] = {}
    for name, uids in candidates.items():
        if name not in snapshot.nodes:
            continue
        for uid in uids:
            victim = victims.get(uid)
            if victim is not None and victim.node_name == name and not victim.terminated:
                gone.setdefault(name, []).append(victim)
    if not gone:
        return snapshot
    gone_uids = {v.uid for pods in gone.values() for v in pods}
    used = dict(snapshot.used_gpus)
    evicted_groups: dict[str, set[str]] = defaultdict(set)
    evicted_cds: dict[str, set[str]] = defaultdict(set)
    for name, pods in gone.items():
        for victim in pods:
            need = capacity.demand(victim, snapshot.catalog, policy)
            used[name] = used.get(name, 0) - (snapshot.nodes[name].gpus if need.whole_node else need.gpus)
            group = grouping.resolve(victim, snapshot.catalog, policy).group
            if group is not None:
                evicted_groups[name].add(group.id)
                if group.compute_domain:
                    evicted_cds[name].add(group.compute_domain)
        if used[name] <= 0:
            del used[name]
    members = {g: tuple(m for m in ms if m.pod.uid not in gone_uids) for g, ms in snapshot.members.items()}
    staying_groups: dict[str, set[str]] = defaultdict(set)
    staying_cds: dict[str, set[str]] = defaultdict(set)
    for group_id, ms in members.items():
        for m in ms:
            if m.pod.node_name in gone and not m.pod.terminated:
                staying_groups[m.pod.node_name].add(group_id)
                group = grouping.resolve(m.pod, snapshot.catalog, policy).group
                if group is not None and group.compute_domain:
                    staying_cds[m.pod.node_name].add(group.compute_domain)
    nodes = dict(snapshot.nodes)
    node_groups = dict(snapshot.node_groups)
    node_cds = dict(snapshot.node_compute_domains)
    claims = dict(snapshot.imex_holds)
    for name in gone:
        left = evicted_groups[name] - staying_groups[name]
        node_groups[name] = frozenset(snapshot.node_groups.get(name, frozenset()) - left)
        freed = evicted_cds[name] - staying_cds[name]
        node_cds[name] = frozenset(snapshot.node_compute_domains.get(name, frozenset()) - freed)
        if nodes[name].compute_domain in freed:
            # The driver takes its label off once the ComputeDomain's last pod on the node is gone.
            nodes[name] = replace(nodes[name], compute_domain=None)
        if name in claims:
            # And the channel claims its pods were allocated go with them (a template's claims are deleted with
            # their pod); a claim no ComputeDomain is known for stays: nothing says whose it is.
            claims[name] = frozenset(claims[name] - freed)
    return replace(snapshot, nodes=nodes, used_gpus=used, node_groups=node_groups,
                   node_compute_domains=node_cds, imex_holds=claims,
                   members={g: ms for g, ms in members.items() if ms})
