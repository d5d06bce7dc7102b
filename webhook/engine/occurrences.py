"""What happened to a pod or a ComputeDomain, as plain data: the reasons an Event can give, the object it is
about, and one ``Occurrence``. The engine produces them (``webhook.engine.events``); an ``EventSink``
(``webhook.engine.ports``) takes them: Kubernetes Events in Kubernetes mode (``webhook.adapters.kube.events``),
the decision log in embedded mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.domain.model import ComputeDomain, Pod

NORMAL, WARNING = "Normal", "Warning"


@dataclass(frozen=True, slots=True)
class Reason:
    name: str  # the Event's reason: what `kubectl describe` shows in its Reason column
    type: str  # Normal | Warning
    action: str  # what was done or tried (machine-readable; part of the aggregation key)


DOMAIN_RESERVED = Reason("DomainReserved", NORMAL, "ReserveDomain")
NO_DOMAIN_FITS = Reason("NoDomainFits", WARNING, "ReserveDomain")
RESERVATION_EXPIRED = Reason("ReservationExpired", WARNING, "ReleaseReservation")
RESERVATION_RELEASED = Reason("ReservationReleased", NORMAL, "ReleaseReservation")
FABRIC_ATTACH_STARTED = Reason("FabricAttachStarted", NORMAL, "AttachFabricGPUs")
FABRIC_ATTACHED = Reason("FabricAttached", NORMAL, "AttachFabricGPUs")
FABRIC_ATTACH_FAILED = Reason("FabricAttachFailed", WARNING, "AttachFabricGPUs")
# The domain of a running group changed health (webhook.engine.health_watch): it cannot be moved, so the
# operator must know.
DOMAIN_DEGRADED = Reason("DomainDegraded", WARNING, "WatchDomainHealth")
DOMAIN_UNHEALTHY = Reason("DomainUnhealthy", WARNING, "WatchDomainHealth")
DOMAIN_RECOVERED = Reason("DomainRecovered", NORMAL, "WatchDomainHealth")
# A replacement of a running group's member waits in the group's domain (webhook.domain.placement.repair).
REPLACEMENT_WAITING = Reason("ReplacementWaiting", WARNING, "RepairInDomain")
# Domains held for a group that waited longest, until its room is expected (webhook.domain.jobs.holds).
DOMAIN_HELD = Reason("DomainHeld", NORMAL, "HoldDomain")
# A group refused because a domain it would fit is held for another, and its walltime (none, or one too long)
# does not let it backfill there (webhook.domain.jobs.held_out): what its owner can change.
NO_BACKFILL = Reason("NoBackfill", WARNING, "ReserveDomain")
REASONS = (DOMAIN_RESERVED, NO_DOMAIN_FITS, RESERVATION_EXPIRED, RESERVATION_RELEASED, FABRIC_ATTACH_STARTED,
           FABRIC_ATTACHED, FABRIC_ATTACH_FAILED, DOMAIN_DEGRADED, DOMAIN_UNHEALTHY, DOMAIN_RECOVERED,
           REPLACEMENT_WAITING, DOMAIN_HELD, NO_BACKFILL)

# Why an occurrence never became an Event (label values of imex_webhook_events_dropped_total).
DROP_REASONS = ("queue-full", "rate-limited", "rejected", "unavailable")


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about (an ObjectReference without resourceVersion and fieldPath)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def pod_ref(pod: Pod) -> ObjectRef:
    return ObjectRef("v1", "Pod", pod.namespace, pod.name, pod.uid)


def domain_ref(cd: ComputeDomain) -> ObjectRef:
    return ObjectRef("resource.nvidia.com/v1beta1", "ComputeDomain", cd.namespace, cd.name, cd.uid)


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One thing that happened to one object."""

    reason: Reason
    note: str
    regarding: ObjectRef
    related: ObjectRef | None = None
