"""Which pods to hand back to kube-scheduler when capacity returns (docs/SCHEDULER.md, "Retrying the
groups we refused").

kube-scheduler parks a pod that no node fits in its unschedulable queue and tries it again only on a
cluster event it watches (a Pod, Node, claim... change), or after five minutes. A change to our own state
(a reservation released, a promise dropped) is no such event, so the groups we refused would sit out the
five minutes. ``webhook.engine.requeue`` remembers each refusal; these functions say which members to
retry and what to tell the user on the pod.
"""

from __future__ import annotations

from webhook.domain.model import Pod, Snapshot

# The pod condition the retry writes: updating the pod is the event kube-scheduler's queue reacts to.
CONDITION = "imex-webhook.io/CapacityReturned"
REASON = "CapacityReturned"


def pending_members(snapshot: Snapshot, group_id: str) -> tuple[Pod, ...]:
    """The group's members still waiting for a node, in name order (the order the scheduler retries them)."""
    members = snapshot.members.get(group_id, ())
    return tuple(sorted((m.pod for m in members if _pending(m.pod)), key=lambda p: p.key))


def waiting_groups(snapshot: Snapshot, scheduler_name: str) -> list[str]:
    """Groups with a member waiting in ``scheduler_name``'s queue: after a restart the refusals made before it
    are unknown, so each of these counts as refused once."""
    return sorted(group_id for group_id, members in snapshot.members.items()
                  if any(_pending(m.pod) and m.pod.scheduler_name == scheduler_name for m in members))


def message(group: str, domain: str | None, when: str) -> str:
    where = f"domain {domain}" if domain else "a domain"
    return (f"{where} can host group {group} now (capacity returned at {when}); "
            "kube-scheduler retries this pod")


def _pending(pod: Pod) -> bool:
    return pod.node_name is None and not pod.terminated and not pod.deleting
