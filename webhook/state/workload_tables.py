"""The objects of Kubernetes' gang scheduling and of the workload controllers that the ``ClusterStore``
keeps for grouping (docs/GROUPS.md), one table per API group, version and kind a group source reads
(``webhook.domain.groups.group_sources.TABLES``).

PodGroups come under two tables, one per API version watched (scheduling.k8s.io/v1beta1 in Kubernetes
1.37, v1alpha2 in 1.36), so that the relist of one never empties the other; grouping sees one mapping, the
beta's object first. A JobSet or training job whose status alone changed parses to the same object:
nothing is derived again then, so frequent status updates cost no re-derivation of pods.
"""

from __future__ import annotations

from typing import Any

from webhook.domain.groups.group_sources import TABLES, Parsed, Table
from webhook.domain.model import ObjectKey
from webhook.wire.kinds import Kind

# The store's names for the tables (their kinds' labels, as files, metrics and tests name them), in the
# order of the sources.
KINDS: tuple[str, ...] = tuple(t.kind.label for t in TABLES)
BY_KIND: dict[Kind, Table] = {t.kind: t for t in TABLES}


class WorkloadTables:
    """The mappings grouping reads (``Catalog`` fields, by name), published from the store's tables. Not
    thread-safe on its own: the store calls it under its lock."""

    def __init__(self) -> None:
        self.tables: dict[Kind, dict[ObjectKey, Parsed]] = {t.kind: {} for t in TABLES}  # filled by the store
        # Typed by the Catalog's fields, which these become (webhook.state.cluster).
        self.views: dict[str, dict[Any, Any]] = {t.view.field: {} for t in TABLES}

    def publish(self, kind: Kind, key: ObjectKey) -> None:
        """The object under ``key`` changed in the table of ``kind``: update the mapping grouping reads. Of
        the tables that feed one entry of a mapping, the first that holds an object wins."""
        table = BY_KIND[kind]
        entry = table.view_key(key)
        found = next((held for t in TABLES
                      if t.view == table.view and t.view_key(key) == entry
                      and (held := self.tables[t.kind].get(key)) is not None), None)
        view = self.views[table.view.field]
        if found is None:
            view.pop(entry, None)
        else:
            view[entry] = found
