"""Spare nodes a group asks to keep in its domain (docs/SCHEDULER.md, "Repair inside the domain").

A long job whose member dies is restarted by its controller with a replacement pod, which must land in the
group's own NVLink domain (its peers are there). A group may ask its reservation to hold ``k`` more nodes
of the domain than it runs on: ``imex-webhook.io/spare-nodes: "k"`` on the ComputeDomain or on the pods (the
pods' value wins). Other groups are kept off the spares as off any promised capacity; the group's own
replacements use them; they are released with the reservation when the group ends. When no domain has room
for the group and its spares, the group is still placed without them, and the reason says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from webhook.domain import keys
from webhook.domain.model import ComputeDomain
from webhook.wire.domain_reservation import MAX_SPARE_NODES as MAX_SPARES
from webhook.wire.text import shown

_DIGITS = re.compile(r"[0-9]{1,3}")


def parse(raw: str) -> int | None:
    """The annotation's value as a number of nodes, 0..MAX_SPARES; None when it is not one."""
    text = raw.strip()
    if not _DIGITS.fullmatch(text):  # ASCII digits only
        return None
    value = int(text)
    return value if value <= MAX_SPARES else None


def requested(annotations: Mapping[str, str], cd: ComputeDomain | None) -> tuple[int, str | None]:
    """(spare nodes the group asks for, why the request is unusable or None)."""
    raw = annotations.get(keys.SPARE_NODES_ANNOTATION)
    where = "the pod's"
    if raw is None and cd is not None and cd.spare_nodes is not None:
        raw, where = cd.spare_nodes, f"ComputeDomain {cd.namespace}/{cd.name}'s"
    if raw is None:
        return 0, None
    value = parse(raw)
    if value is None:
        return 0, (f"{where} annotation {keys.SPARE_NODES_ANNOTATION}={shown(raw)} is not a number of spare nodes: "
                   f"write a whole number from 0 to {MAX_SPARES} in digits (e.g. '2'), or remove it")
    return value, None
