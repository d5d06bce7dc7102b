"""One IMEX domain per NVLink domain, when asked (docs/SCHEDULER.md, "Exclusive domains").

Two ComputeDomains in one clique break CUDA fabric memory on some driver versions, and platform teams ask
for one ComputeDomain per NVLink domain. A ComputeDomain annotated ``imex-webhook.io/exclusive-domain:
"true"`` (on the object or on its pods), or every one with ``serve --exclusive-domains``, makes its group
*exclusive*:

- it only gets a domain that no other ComputeDomain uses: none of its nodes runs or is held by another
  ComputeDomain, and no other ComputeDomain's group has a live reservation there;
- while it holds a domain (its reservation lives), no other ComputeDomain's group gets that domain; the
  reason names the holder.

Groups without a ComputeDomain (plain GPU pods, annotated groups without one) are not affected either way:
they use no IMEX daemon. A holder's exclusivity is read from its ComputeDomain (or the cluster-wide flag)
while no member is known, and from its pods as well once one is.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.domain.groups import grouping
from webhook.domain.model import Group, GroupKind, Reservation, Snapshot
from webhook.domain.placement.node_constraints import holder_name, holders
from webhook.domain.policy import Policy

_CD_GROUP = "cd:"


def _holder(group_id: str, snapshot: Snapshot, policy: Policy) -> Group | None:
    """The group behind another reservation, as far as the caches tell: resolved from a member when one is
    known, else from the ComputeDomain its id names."""
    members = snapshot.members.get(group_id, ())
    if members:
        return grouping.resolve(members[0].pod, snapshot.catalog, policy).group
    if group_id.startswith(_CD_GROUP):
        cd = snapshot.catalog.compute_domains.get(group_id[len(_CD_GROUP):])
        if cd is not None:
            return Group(group_id, GroupKind.COMPUTE_DOMAIN, cd.namespace, cd.name, cd.uid, True,
                         exclusive=policy.exclusive_domains or grouping.exclusive_requested(cd.exclusive)[0])
    return None


def conflict(domain: str, group: Group, snapshot: Snapshot, others: Mapping[str, Reservation],
             policy: Policy) -> str | None:
    """Why ``group`` may not have ``domain`` because of exclusivity, or None."""
    if group.compute_domain is None:
        return None
    for group_id, res in sorted(others.items()):
        if group_id == group.id or res.domain != domain:
            continue
        holder = _holder(group_id, snapshot, policy)
        if holder is None or holder.compute_domain is None or holder.compute_domain == group.compute_domain:
            continue
        if holder.exclusive:
            return (f"domain {domain} is held exclusively by ComputeDomain {holder.namespace}/{holder.name} "
                    "(imex-webhook.io/exclusive-domain)")
        if group.exclusive:
            return (f"domain {domain} is used by ComputeDomain {holder.namespace}/{holder.name}, and this group "
                    "asks for an NVLink domain of its own (imex-webhook.io/exclusive-domain)")
    if group.exclusive:
        for name in snapshot.domains.get(domain, ()):
            node = snapshot.nodes.get(name)
            used = (holders(node, snapshot) if node is not None else set()) - {group.compute_domain}
            if used:
                return (f"domain {domain} is used by {holder_name(min(used), snapshot)} (node {name}), and this "
                        "group asks for an NVLink domain of its own (imex-webhook.io/exclusive-domain)")
    return None
