"""How the cluster store holds each kind: parsed how, keyed how, and which of the store's handlers derives
again what depends on it (one row per kind; the rows of the group sources' objects come from their tables,
``webhook.domain.groups.group_sources``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.domain.groups.group_sources import TABLES, Table
from webhook.domain.model import ObjectKey
from webhook.domain.placement import quotas
from webhook.domain.policy import Policy
from webhook.domain.reading import claim_parsing, parsing, slices


@dataclass(frozen=True, slots=True)
class Kind:
    parse: Callable[[Policy, Mapping[str, Any]], Any]  # raises on a malformed object; None: not one of ours
    key: Callable[[Any], ObjectKey]  # of the parsed object
    changed: str = ""  # the ClusterStore method called with (kind, key, old, new)
    table: Table | None = None  # a group source's objects: the store's workload handler, with this table
    namespaced: bool = True

    def table_key(self, key: ObjectKey) -> ObjectKey:
        """An API object's key as the parsers name it: a file's object without a namespace is in "default"."""
        return (key[0] or "default", key[1]) if self.namespaced else key


def _named(obj: Any) -> ObjectKey:
    return (obj.namespace, obj.name)


def _workload(table: Table) -> Kind:
    return Kind(lambda _, obj: table.parse(obj, table.label), _named, table=table)


ROWS: dict[str, Kind] = {
    "Node": Kind(lambda policy, obj: parsing.node(obj, policy.domain_labels, block_labels=policy.block_labels),
                 lambda n: ("", n.name), "_node_changed", namespaced=False),
    "ResourceSlice": Kind(lambda policy, obj: slices.resource_slice(obj, policy.gpu_drivers),
                          lambda s: ("", s.name), "_slice_changed", namespaced=False),
    "Pod": Kind(lambda _, obj: parsing.pod(obj, "pod"), lambda p: p.key, "_pod_changed"),
    "ResourceClaim": Kind(lambda _, obj: claim_parsing.claim_spec(obj, template=False, path="ResourceClaim"),
                          _named, "_claim_changed"),
    "ResourceClaimTemplate": Kind(
        lambda _, obj: claim_parsing.claim_spec(obj, template=True, path="ResourceClaimTemplate"),
        _named, "_catalog_changed"),
    "ComputeDomain": Kind(lambda _, obj: parsing.compute_domain(obj), _named, "_cd_changed"),
    "Job": Kind(lambda _, obj: parsing.job(obj), _named, "_catalog_changed"),
    "ResourceQuota": Kind(lambda policy, obj: quotas.resource_quota(obj, policy), _named, "_quota_changed"),
    **{table.label: _workload(table) for table in TABLES},
}


def row(kind: str) -> Kind:
    found = ROWS.get(kind)
    if found is None:
        raise ValueError(f"unknown kind {kind}")
    return found
