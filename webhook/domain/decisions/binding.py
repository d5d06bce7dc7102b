"""The /bind decision, before any I/O: is this bind a no-op, a conflict, or work to do (and which)?"""

from __future__ import annotations

from dataclasses import dataclass, replace

from webhook.domain.groups import grouping
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Demand, Group, Pod, Reservation
from webhook.domain.placement import capacity, placement
from webhook.errors import DecisionError
from webhook.wire.fabric_attachment import Attachment, Phase


@dataclass(frozen=True, slots=True)
class BindPlan:
    already_bound: bool  # "already bound to this node" is success (the scheduler may retry a timed-out bind)
    reservation: Reservation | None  # to store before binding (group pods), domain = the node's domain
    attach_gpus: int  # fabric GPUs to attach before binding (the fabric seam)
    group: Group | None = None  # the pod's group as resolved for this plan (None: no group)
    demand: Demand | None = None  # what one member needs (with a group)
    attachment: Attachment | None = None  # the pod's live attachment on this node, if one is under way

    @property
    def group_name(self) -> str | None:
        return self.group.name if self.group is not None else None

    @property
    def needs_fabric(self) -> bool:
        """Attach now, or finish an attachment a previous bind started (it is not Ready yet)."""
        return self.attach_gpus > 0 or (self.attachment is not None and self.attachment.phase is not Phase.READY)


def plan(pod: Pod | None, uid: str, node_name: str, inputs: DecisionInputs) -> BindPlan:
    """Raise ``DecisionError`` with a reason a human can act on when the bind must not happen."""
    snapshot, policy, now, holder = inputs.snapshot, inputs.policy, inputs.now, inputs.holder
    if pod is None:
        raise DecisionError("pod not found: it was deleted before it could be bound")
    if uid and pod.uid and pod.uid != uid:
        raise DecisionError(f"pod {pod.ref} was recreated (uid {pod.uid}, scheduler asked for {uid}); "
                            "the scheduler retries with the new pod")
    if pod.node_name == node_name:
        return BindPlan(True, None, 0)
    if pod.node_name:
        raise DecisionError(f"pod {pod.ref} is already bound to node {pod.node_name}, not {node_name}")
    node = snapshot.nodes.get(node_name)
    resolution = grouping.resolve(pod, snapshot.catalog, policy)
    group = resolution.group
    if resolution.problems:
        raise DecisionError("; ".join(resolution.problems))
    if group is None:
        return BindPlan(False, None, 0)
    if node is None:
        raise DecisionError(f"node {node_name} is not in imex-webhook's cache; the scheduler retries")
    if node.domain is None:
        raise DecisionError(f"node {node_name} has no NVLink or fabric domain label; group "
                            f"{group.namespace}/{group.name} runs only inside one domain")
    need = capacity.demand(pod, snapshot.catalog, policy)
    existing = inputs.reservation(group.id)
    if existing is not None and existing.version and existing.domain != node.domain:
        raise DecisionError(f"group {group.namespace}/{group.name} is reserved in domain {existing.domain}, "
                            f"node {node_name} is in {node.domain}; the scheduler retries inside the reservation")
    if existing is not None:
        reservation = existing
    else:
        # No choice on record (the filter ran on another replica, or long ago): record the node's domain,
        # which the filter allowed; the store arbitrates if another replica recorded a different one.
        seen, placed, _ = placement.members_summary(snapshot.members.get(group.id, ()))
        reservation = Reservation(
            group_id=group.id, group_name=group.name, namespace=group.namespace, domain=node.domain,
            size=max(resolution.size or 0, seen, placed + 1), gpus_per_pod=need.gpus,
            one_pod_per_node=group.one_pod_per_node, created_at=now, holder=holder, segment=group.segment,
        )
    if reservation.domain != node.domain:
        # A proposal this replica made for another domain: the filter since allowed this node's domain.
        reservation = replace(reservation, domain=node.domain, created_at=now, placed_at=None, holder=holder,
                              version="")
    own = capacity.own_attachment(pod.uid, snapshot)
    if own is not None and own.node != node_name:
        raise DecisionError(f"fabric GPUs are being attached to node {own.node} for pod {pod.ref} (attachment "
                            f"{own.name}, phase {own.phase.value}); the scheduler retries there")
    fit = capacity.node_fit(node, need, snapshot, pod.uid)
    if fit.verdict is not capacity.Verdict.FITS:
        raise DecisionError(f"node {node_name} no longer fits pod {pod.ref}: {fit.reason}")
    return BindPlan(False, reservation, fit.attach, group, need, own)
