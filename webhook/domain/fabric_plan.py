"""What the fabric reconciler should do next, decided from plain data: nothing leaks (docs/FABRIC.md).

- A pod that is gone, deleted or bound to another node gives up its attachment: Releasing.
- An attachment that did not become Ready within the attach timeout, and whose pod is not bound, is
  rolled back: Releasing.
- A Failed attachment with blocks still composed: Releasing (the node agent removes whatever it may have
  prepared, then says Released).
- Releasing and Released: detach the blocks from the fabric, then Detached. If the node is gone, nobody can
  say Released: after the release timeout the blocks are detached anyway (the node cannot use them).
- Detached, or Failed with nothing composed: delete the object (the finalizer is removed).
- A block composed to a system that no live attachment names (for example after a crash between the
  compose and the status write) is an orphan: detached after a grace period.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Set
from dataclasses import dataclass

from webhook.domain.model import Pod
from webhook.errors import WireError
from webhook.wire.fabric_attachment import Attachment, Phase
from webhook.wire.timestamps import parse_rfc3339


class Act(enum.StrEnum):
    RELEASE = "release"  # -> Releasing
    DETACH = "detach"  # fabric detach of the attachment's blocks -> Detached
    DELETE = "delete"  # drop the finalizer and the object
    DETACH_ORPHAN = "detach-orphan"  # a composed block no attachment accounts for


@dataclass(frozen=True, slots=True)
class Action:
    act: Act
    reason: str
    attachment: Attachment | None = None
    system: str = ""
    block: str = ""


@dataclass(frozen=True, slots=True)
class Timeouts:
    attach: float = 120.0  # seconds from Pending to Ready before the attach is rolled back
    release: float = 300.0  # seconds a Releasing attachment waits for its node's agent if the node is gone
    orphan_grace: float = 60.0  # seconds a composed, unaccounted block is left alone (a bind may own it)


def since(att: Attachment, now: float) -> float:
    """Seconds the attachment has been in its phase (0 when the time is unknown or malformed)."""
    if not att.phase_since:
        return 0.0
    try:
        started = parse_rfc3339(att.phase_since)
    except WireError:
        return 0.0
    return max(0.0, now - started)


def _release_reason(att: Attachment, pod: Pod | None, now: float, t: Timeouts) -> str | None:
    if att.deleting:
        return "the attachment is being deleted"
    if pod is None:
        return f"pod {att.pod_namespace}/{att.pod_name} is gone"
    if pod.deleting or pod.terminated:
        return f"pod {pod.ref} is finishing"
    if pod.node_name and pod.node_name != att.node:
        return f"pod {pod.ref} was bound to node {pod.node_name}, not {att.node}"
    if att.phase is Phase.FAILED and att.blocks:
        return f"the attach failed ({att.message or 'no reason given'}); releasing its blocks"
    if att.phase in (Phase.PENDING, Phase.COMPOSING, Phase.ATTACHED) and not pod.node_name:
        waited = since(att, now)
        if waited > t.attach:
            return f"phase {att.phase.value} for {waited:.0f}s, past the {t.attach:.0f}s attach timeout"
    return None


def plan(attachments: list[Attachment], pods: Mapping[str, Pod], nodes: Set[str],
         composed: Mapping[str, Set[str]], orphan_seen: Mapping[str, float], now: float,
         timeouts: Timeouts) -> list[Action]:
    """``pods`` by UID, ``nodes`` the node names that exist, ``composed`` system -> composed block ids,
    ``orphan_seen`` block id -> when it was first seen unaccounted for."""
    actions: list[Action] = []
    for att in sorted(attachments, key=lambda a: a.name):
        pod = pods.get(att.pod_uid)
        if att.phase is Phase.DETACHED or (att.phase is Phase.FAILED and not att.blocks):
            if pod is None or att.deleting or pod.terminated or pod.deleting or att.phase is Phase.DETACHED:
                actions.append(Action(Act.DELETE, "nothing left composed", att))
            continue
        if att.phase is Phase.RELEASING:
            if att.released:
                actions.append(Action(Act.DETACH, "the node agent released the GPUs", att))
            elif att.node not in nodes and since(att, now) > timeouts.release:
                actions.append(Action(Act.DETACH, f"node {att.node} is gone; no agent can release", att))
            continue
        reason = _release_reason(att, pod, now, timeouts)
        if reason is not None:
            actions.append(Action(Act.RELEASE, reason, att))
    orphans = unaccounted(attachments, composed)
    for system, blocks in sorted(composed.items()):
        for block in sorted(blocks & orphans):
            first = orphan_seen.get(block, now)
            if now - first >= timeouts.orphan_grace:
                actions.append(Action(Act.DETACH_ORPHAN,
                                      f"block composed to {system} for {now - first:.0f}s with no attachment",
                                      system=system, block=block))
    return actions


def unaccounted(attachments: list[Attachment], composed: Mapping[str, Set[str]]) -> set[str]:
    """Composed blocks no live attachment names; the reconciler tracks when it first saw each."""
    accounted = {b.id for a in attachments if a.phase is not Phase.DETACHED for b in a.blocks}
    return {b for blocks in composed.values() for b in blocks} - accounted
