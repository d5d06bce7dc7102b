"""How the cluster store holds each kind: parsed how, keyed how, and which of the store's handlers derives
again what depends on it (one row per ``webhook.wire.kinds.Kind``; the rows of the group sources' objects
come from their tables, ``webhook.domain.groups.group_sources``).

The store keys everything by ``Kind``; a label (``"Pod"``, ``"PodGroup.v1alpha2"``), as files, tests and
the metrics name a kind, becomes its ``Kind`` once, at the store's boundary (``kind_of``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from webhook.domain.groups.group_sources import TABLES, Table
from webhook.domain.model import ObjectKey
from webhook.domain.placement import quotas
from webhook.domain.policy import Policy
from webhook.domain.reading import claim_parsing, parsing, slices
from webhook.wire import kinds as wire
from webhook.wire.kinds import (
    COMPUTE_DOMAINS,
    JOBS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_QUOTAS,
    RESOURCE_SLICES,
    Kind,
    KindError,
)


class Derive(Enum):
    """What the store derives again when an object of a kind changes: one handler of the store each
    (``ClusterStore`` maps every member to a bound method of its own)."""

    NODE = auto()  # the node index
    SLICE = auto()  # a node's DRA GPUs
    POD = auto()  # the pod's derived facts
    CATALOG = auto()  # the namespace's pods
    CLAIM = auto()  # the IMEX holds, and the pods that name the claim
    COMPUTE_DOMAIN = auto()  # ComputeDomains by UID, and the namespace's pods
    QUOTA = auto()  # the namespace's GPU quotas
    WORKLOAD = auto()  # the mapping grouping reads (webhook.state.workload_tables), and the namespace's pods


@dataclass(frozen=True, slots=True)
class Row:
    kind: Kind
    parse: Callable[[Policy, Mapping[str, Any]], Any]  # raises on a malformed object; None: not one of ours
    key: Callable[[Any], ObjectKey]  # of the parsed object
    changed: Derive  # called with (kind, key, old, new)

    def table_key(self, key: ObjectKey) -> ObjectKey:
        """An API object's key as the parsers name it: a file's object without a namespace is in "default"."""
        return (key[0] or "default", key[1]) if self.kind.namespaced else key


def _named(obj: Any) -> ObjectKey:
    return (obj.namespace, obj.name)


def _workload(table: Table) -> Row:
    return Row(table.kind, lambda _, obj: table.parse(obj, table.kind.label), _named, Derive.WORKLOAD)


# In the order the store lists its kinds (rejected and raw counts, the embedded cluster's files).
ROWS: dict[Kind, Row] = {row.kind: row for row in (
    Row(NODES, lambda policy, obj: parsing.node(obj, policy.domain_labels, block_labels=policy.block_labels),
        lambda n: ("", n.name), Derive.NODE),
    Row(PODS, lambda _, obj: parsing.pod(obj, "pod"), lambda p: p.key, Derive.POD),
    Row(RESOURCE_CLAIMS, lambda _, obj: claim_parsing.claim_spec(obj, template=False, path="ResourceClaim"),
        _named, Derive.CLAIM),
    Row(RESOURCE_CLAIM_TEMPLATES,
        lambda _, obj: claim_parsing.claim_spec(obj, template=True, path="ResourceClaimTemplate"),
        _named, Derive.CATALOG),
    Row(COMPUTE_DOMAINS, lambda _, obj: parsing.compute_domain(obj), _named, Derive.COMPUTE_DOMAIN),
    Row(JOBS, lambda _, obj: parsing.job(obj), _named, Derive.CATALOG),
    Row(RESOURCE_SLICES, lambda policy, obj: slices.resource_slice(obj, policy.gpu_drivers),
        lambda s: ("", s.name), Derive.SLICE),
    Row(RESOURCE_QUOTAS, lambda policy, obj: quotas.resource_quota(obj, policy), _named, Derive.QUOTA),
    *(_workload(table) for table in TABLES),
)}
KINDS: tuple[Kind, ...] = tuple(ROWS)
BY_LABEL: dict[str, Kind] = wire.by_label(KINDS)


def kind_of(kind: Kind | str) -> Kind:
    """The store's ``Kind`` for a kind or its label; a ``KindError`` naming it when the store holds none."""
    if isinstance(kind, Kind):
        if kind not in ROWS:
            raise KindError(f"unknown kind {kind.label} ({kind}); known: {', '.join(BY_LABEL)}")
        return kind
    return wire.lookup(kind, BY_LABEL)


def row(kind: Kind | str) -> Row:
    return ROWS[kind_of(kind)]
