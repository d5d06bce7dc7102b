"""What a namespace may reserve for pods it has not created yet (docs/SCHEDULER.md, "What a tenant can hold").

A reservation holds a domain's capacity for the whole group, and group sizes, segment sizes and spare nodes
are written by the tenant. Capacity held for members that exist is already bounded: their requests count
in the namespace's ResourceQuota, or they could not have been created. Capacity held for members that do
not exist yet (and for spare nodes, and the rest of an exclusive group's domain) is bounded here, when a
group is given a domain:

- where an unscoped ResourceQuota bounds the namespace's GPUs (``requests.nvidia.com/gpu``, or a DRA GPU
  class's ``<class>.deviceclass.resource.k8s.io/devices``), by what it still allows: hard minus used, the
  smallest of its lines;
- else by ``--max-reserved-gpus-per-namespace``: a number of GPUs, or a share of the GPUs in NVLink domains.

The namespace's live reservations count together, each with the members it still lacks; a segmented job's
segments count together. A group over the bound gets no domain, with a reason that names the bound, its
source and the figures; it is asked again as its pods appear (each existing member lowers what is held for
the ones to come) or as the namespace's other groups bind or end. Pure; the ResourceQuota parser is beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.domain import keys
from webhook.domain.model import GpuQuota, Group, Reservation, Snapshot
from webhook.domain.placement import capacity
from webhook.domain.placement.placement import members_summary
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.errors import WireError

DRA_QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"


def gpu_quota_keys(policy: Policy) -> tuple[str, ...]:
    """The ResourceQuota resources that count GPUs: the device plugin's, then each DRA GPU class's."""
    return (f"requests.{keys.GPU_RESOURCE}", *(f"{cls}{DRA_QUOTA_SUFFIX}" for cls in policy.gpu_device_classes))


def resource_quota(obj: Any, policy: Policy, path: str = "ResourceQuota") -> GpuQuota | None:
    """A ResourceQuota's GPU lines; None when it has none, or when scopes limit it to some pods only (it then
    says nothing of what every pod of the namespace may request)."""
    if not isinstance(obj, Mapping):
        raise WireError(path, "expected an object")
    meta, spec, status = (obj.get(k) or {} for k in ("metadata", "spec", "status"))
    if not all(isinstance(part, Mapping) for part in (meta, spec, status)):
        raise WireError(path, "metadata, spec and status must be objects")
    if spec.get("scopes") or spec.get("scopeSelector"):
        return None
    hard, used = spec.get("hard") or {}, status.get("used") or {}
    if not isinstance(hard, Mapping) or not isinstance(used, Mapping):
        raise WireError(f"{path}.spec.hard", "spec.hard and status.used must be objects")
    lines = tuple((key, parsing.count(hard[key], f"{path}.spec.hard[{key}]"),
                   parsing.count(used.get(key, 0), f"{path}.status.used[{key}]"))
                  for key in gpu_quota_keys(policy) if key in hard)
    if not lines:
        return None
    namespace, name = meta.get("namespace"), meta.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str) or not name:
        raise WireError(f"{path}.metadata", "a ResourceQuota needs a namespace and a name")
    return GpuQuota(namespace or "default", name, lines)


def room(namespace: str, snapshot: Snapshot, policy: Policy) -> tuple[int, str]:
    """(GPUs the namespace may hold for pods it has not created, what says so)."""
    lines = [(hard - used, quota, key, hard, used) for quota in snapshot.gpu_quotas.get(namespace, ())
             for key, hard, used in quota.lines]
    if lines:
        left, quota, key, hard, used = min(lines, key=lambda line: (line[0], line[1].name, line[2]))
        return max(0, left), f"ResourceQuota {quota.namespace}/{quota.name}: {key} hard {hard}, used {used}"
    if policy.max_reserved_gpus is not None:
        return policy.max_reserved_gpus, f"--max-reserved-gpus-per-namespace {policy.max_reserved_gpus}"
    by_domain = capacity.domain_gpus(snapshot)
    total, largest = sum(by_domain.values()), max(by_domain.values(), default=0)
    share = policy.max_reserved_share
    if largest > total * share:
        # A share of a small cluster can be less than one domain: a group that one domain holds is never
        # refused for its size alone.
        return largest, (f"--max-reserved-gpus-per-namespace {share * 100:g}% of the {total} GPUs in NVLink "
                         f"domains, raised to the largest domain's {largest}; no ResourceQuota bounds the "
                         "namespace's GPUs")
    return int(total * share), (f"--max-reserved-gpus-per-namespace {share * 100:g}% of the {total} GPUs in NVLink "
                                "domains; no ResourceQuota bounds the namespace's GPUs")


def lacking(res: Reservation, snapshot: Snapshot, present: int = 0) -> int:
    """GPUs ``res`` holds for members that do not exist (spares included); ``present``: members known to
    exist that the snapshot does not show yet (the pod being decided on, ahead of the cache)."""
    seen, _, _ = members_summary(snapshot.members.get(res.group_id, ()))
    return max(0, res.size + res.spares - seen - present) * res.gpus_per_pod


def _domain_rest(res: Reservation, snapshot: Snapshot, present: int) -> int:
    """What an exclusive group holds beyond its members: the whole domain, less the members that exist."""
    seen, _, _ = members_summary(snapshot.members.get(res.group_id, ()))
    whole = sum(snapshot.nodes[n].gpus for n in snapshot.domains.get(res.domain, ()) if n in snapshot.nodes)
    return max(0, whole - (seen + present) * res.gpus_per_pod)


def refusal(group: Group, proposals: Sequence[Reservation], pending_self: bool, snapshot: Snapshot,
            live: Mapping[str, Reservation], policy: Policy) -> str | None:
    """Why ``group`` may not be given ``proposals`` (its reservation first, then its job's other segments'),
    or None. ``pending_self``: the pod being decided on is not in the snapshot's members yet."""
    namespace = group.namespace
    mine = {p.group_id for p in proposals}
    asked = 0
    for i, proposal in enumerate(proposals):
        present = 1 if i == 0 and pending_self else 0
        held = lacking(proposal, snapshot, present)
        if group.exclusive:
            held = max(held, _domain_rest(proposal, snapshot, present))
        asked += held
    if asked == 0:
        return None
    others = sum(lacking(r, snapshot) for gid, r in live.items() if r.namespace == namespace and gid not in mine)
    allowed, source = room(namespace, snapshot, policy)
    if others + asked <= allowed:
        return None
    held_now = f"; its other groups hold {others} already" if others else ""
    name = group.segment.job_name if group.segment is not None else group.name
    return (f"namespace {namespace} may hold at most {allowed} GPUs for pods it has not created ({source}){held_now}"
            f"; group {name} would hold {asked} for members, spares or an exclusive domain not in use yet: "
            "the domain is chosen once more of its pods exist, or once the namespace's other groups bind or end")
