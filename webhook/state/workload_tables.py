"""The objects of Kubernetes' gang scheduling and of the workload controllers that the ``ClusterStore``
keeps for grouping (docs/GROUPS.md), one table per watched kind.

PodGroups come under two store kinds, one per API version watched (scheduling.k8s.io/v1beta1 in
Kubernetes 1.37, v1alpha2 in 1.36), so that the relist of one never empties the other; grouping sees one
table, the beta's object first. A JobSet or training job whose status alone changed parses to the same
object: nothing is derived again then, so frequent status updates cost no re-derivation of pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.domain import workload_parsing
from webhook.domain.model import ControllerObject, GangGroup, GangWorkload, ObjectKey

POD_GROUP_KINDS = ("PodGroup", "PodGroup.v1alpha2")  # first wins when both are served
CONTROLLER_KINDS = ("JobSet", "PyTorchJob", "MPIJob")
KINDS = (*POD_GROUP_KINDS, "Workload", *CONTROLLER_KINDS)

Parsed = GangGroup | GangWorkload | ControllerObject


def parse(kind: str, obj: Mapping[str, Any]) -> Parsed | None:
    """``None``: the same kind of another API group (Volcano's PodGroup), none of ours."""
    if kind in POD_GROUP_KINDS:
        return workload_parsing.pod_group(obj, kind)
    if kind == "Workload":
        return workload_parsing.gang_workload(obj)
    return workload_parsing.controller(kind, obj)


class WorkloadTables:
    """The views grouping reads, published from the store's tables of these kinds. Not thread-safe on its
    own: the store calls it under its lock."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[ObjectKey, Parsed]] = {kind: {} for kind in KINDS}  # filled by the store
        self.pod_groups: dict[ObjectKey, GangGroup] = {}
        self.gang_workloads: dict[ObjectKey, GangWorkload] = {}
        self.controllers: dict[tuple[str, str, str], ControllerObject] = {}

    def publish(self, kind: str, key: ObjectKey) -> None:
        """The object under ``key`` changed in the ``kind`` table: update the view grouping reads."""
        current = self.tables[kind].get(key)
        if kind in POD_GROUP_KINDS:
            found = next((t[key] for k in POD_GROUP_KINDS if key in (t := self.tables[k])), None)
            if isinstance(found, GangGroup):
                self.pod_groups[key] = found
            else:
                self.pod_groups.pop(key, None)
        elif kind == "Workload":
            if isinstance(current, GangWorkload):
                self.gang_workloads[key] = current
            else:
                self.gang_workloads.pop(key, None)
        elif isinstance(current, ControllerObject):
            self.controllers[(kind, *key)] = current
        else:
            self.controllers.pop((kind, *key), None)
