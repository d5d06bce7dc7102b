"""What the engine tells Kubernetes Events about, as plain data (docs/OPERATING.md, "Events").

The engine reports what happened to a pod and to its ComputeDomain as ``Occurrence``s through an
``EventSink``: a group got its domain, no domain can host it (or only one held for another group, where it
cannot backfill), a fabric attach started, succeeded or failed, a reservation expired or was released. In
Kubernetes mode the recorder of ``webhook.adapters.kube.events`` turns them into events.k8s.io/v1 Events
(aggregated into series, rate-limited, written by a background thread); embedded mode writes them to the
decision log.

A sink never blocks and never raises, and ``Reporter`` catches whatever building an occurrence might
raise: an Event is a courtesy to the operator, never a reason for the extender to answer late or fail.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from webhook.domain.groups import grouping
from webhook.domain.health import DomainHealth
from webhook.domain.jobs.held_out import HeldOut
from webhook.domain.jobs.resolution import Context
from webhook.domain.model import Catalog, ComputeDomain, Group, Pod, Reservation, Snapshot
from webhook.domain.placement.placement import members_summary
from webhook.domain.policy import Policy
from webhook.engine.occurrences import (
    DOMAIN_DEGRADED,
    DOMAIN_HELD,
    DOMAIN_RECOVERED,
    DOMAIN_RESERVED,
    DOMAIN_UNHEALTHY,
    FABRIC_ATTACH_FAILED,
    FABRIC_ATTACH_STARTED,
    FABRIC_ATTACHED,
    NO_BACKFILL,
    NO_DOMAIN_FITS,
    REPLACEMENT_WAITING,
    RESERVATION_EXPIRED,
    RESERVATION_RELEASED,
    Occurrence,
    Reason,
    domain_ref,
    pod_ref,
)
from webhook.engine.ports import EventSink
from webhook.wire.fabric_attachment import Phase

log = logging.getLogger("imex_webhook.decisions.events")

class LogEvents:
    """Embedded mode: each occurrence is one line of the decision log."""

    def record(self, occurrence: Occurrence) -> None:
        if log.isEnabledFor(logging.INFO):
            related = occurrence.related.ref if occurrence.related else None
            log.info("event", extra={"decision": {
                "verb": "event", "object": occurrence.regarding.ref, "reason": occurrence.reason.name,
                "type": occurrence.reason.type, "related": related, "note": occurrence.note}})

    def dropped(self) -> Mapping[str, int]:
        return {}


def _group_text(res: Reservation) -> str:
    return f"{res.namespace}/{res.group_name}"


class Reporter:
    """Turns what the engine did into occurrences on the pod and on the group's ComputeDomain."""

    def __init__(self, sink: EventSink, policy: Policy) -> None:
        self.sink = sink
        self.policy = policy

    def _emit(self, reason: Reason, note: str, pod: Pod | None, cd: ComputeDomain | None,
              also: Iterable[Pod] = ()) -> None:
        on_domain = domain_ref(cd) if cd is not None else None
        pods = ([pod] if pod is not None else []) + list(also)
        for each in pods:
            self.sink.record(Occurrence(reason, note, pod_ref(each), on_domain))
        if on_domain is not None:
            self.sink.record(Occurrence(reason, note, on_domain))

    def _domain_of(self, pod: Pod, catalog: Catalog, group: Group | None = None) -> ComputeDomain | None:
        if group is None:
            group = grouping.resolve(pod, catalog, self.policy).group
        uid = group.compute_domain if group is not None else None
        return catalog.compute_domains.get(uid) if uid else None

    def reserved(self, pod: Pod, group: Group | None, res: Reservation, catalog: Catalog) -> None:
        try:
            note = (f"NVLink domain {res.domain} is reserved for group {_group_text(res)} ({res.size} pods, "
                    f"{res.gpus_per_pod} GPUs each): every member is placed there; chosen while filtering "
                    f"pod {pod.namespace}/{pod.name}")
            self._emit(DOMAIN_RESERVED, note, pod, self._domain_of(pod, catalog, group))
        except Exception:
            log.exception("could not report the reservation of group %s", res.group_id)

    def held(self, pod: Pod, group: Group, holds: Sequence[Reservation], start: float, now: float,
             catalog: Catalog) -> None:
        """Domains were held for ``group``, which waited longest, until its room is expected at ``start``."""
        try:
            where = ", ".join(sorted({r.domain for r in holds}))
            minutes = max(round((start - now) / 60), 1)
            note = (f"NVLink domain{'s' if len(holds) > 1 else ''} {where} held for group {group.namespace}/"
                    f"{group.name}, which has waited longest: expected start in about {minutes} minutes, when the "
                    "running groups' walltimes end; only groups that end before then, or fit beside it, start "
                    "there meanwhile")
            self._emit(DOMAIN_HELD, note, pod, self._domain_of(pod, catalog, group))
        except Exception:
            log.exception("could not report the hold for group %s", group.id)

    def no_domain(self, pod: Pod, ctx: Context, catalog: Catalog) -> None:
        """``ctx.reason`` is the very text the extender puts in the filter's FailedNodes."""
        try:
            self._emit(NO_DOMAIN_FITS, ctx.reason, pod, self._domain_of(pod, catalog, ctx.group))
        except Exception:
            log.exception("could not report that no domain fits pod %s", pod.ref)

    def no_backfill(self, pod: Pod, group: Group, found: Sequence[HeldOut], catalog: Catalog) -> None:
        """``group`` was refused because of the holds ``found``, where its walltime lets it not backfill."""
        try:
            if found:
                note = "; ".join(h.note for h in found)
                self._emit(NO_BACKFILL, note, pod, self._domain_of(pod, catalog, group))
        except Exception:
            log.exception("could not report the held domains that kept pod %s out", pod.ref)

    def replacement_waiting(self, pod: Pod, group: Group, note: str, catalog: Catalog) -> None:
        """A replacement of a running group's member waits in the group's domain (``repair.waiting``)."""
        try:
            self._emit(REPLACEMENT_WAITING, note, pod, self._domain_of(pod, catalog, group))
        except Exception:
            log.exception("could not report that pod %s waits in its group's domain", pod.ref)

    def released(self, res: Reservation, why: str, snapshot: Snapshot, now: float) -> None:
        """Housekeeping released ``res``: expired with no member placed, or its group ended."""
        try:
            members = snapshot.members.get(res.group_id, ())
            waiting = [m.pod for m in members if not m.pod.node_name and not m.pod.terminated and not m.pod.deleting]
            cd = None
            if members:
                cd = self._domain_of(members[0].pod, snapshot.catalog)
            elif res.group_id.startswith("cd:"):
                cd = snapshot.catalog.compute_domains.get(res.group_id[3:])
            # Released while expired is exactly housekeeping's "no member placed within the TTL" case.
            expired = not self.policy.live(res, now, stored=True) and members_summary(members)[1] == 0
            if expired:
                note = (f"the reservation of NVLink domain {res.domain} for group {_group_text(res)} expired and "
                        f"was released ({why}); the group's next pod to be scheduled chooses a domain again")
                self._emit(RESERVATION_EXPIRED, note, None, cd, waiting)
            else:
                note = (f"the reservation of NVLink domain {res.domain} for group {_group_text(res)} was "
                        f"released ({why})")
                self._emit(RESERVATION_RELEASED, note, None, cd, waiting)
        except Exception:
            log.exception("could not report the release of %s", res.group_id)

    def attach_started(self, pod: Pod, node: str, gpus: int, snapshot: Snapshot) -> None:
        """Only a new attach (or one started over after a failure that left nothing composed): a bind
        that continues an attachment in progress is the same attach."""
        try:
            current = snapshot.attachments.get(pod.uid)
            if current is not None and not (current.phase is Phase.FAILED and not current.blocks):
                return
            note = f"attaching {gpus} fabric GPUs to node {node} for pod {pod.namespace}/{pod.name} before it binds"
            self._emit(FABRIC_ATTACH_STARTED, note, pod, self._domain_of(pod, snapshot.catalog))
        except Exception:
            log.exception("could not report the fabric attach of pod %s", pod.ref)

    def attach_done(self, pod: Pod, node: str, gpus: int, catalog: Catalog, failure: str | None = None) -> None:
        try:
            if failure is None:
                note = f"{gpus} fabric GPUs are attached to node {node} and Ready; pod {pod.namespace}/{pod.name} " \
                       "binds there"
                self._emit(FABRIC_ATTACHED, note, pod, self._domain_of(pod, catalog))
            else:
                note = f"attaching {gpus} fabric GPUs to node {node} failed: {failure}"
                self._emit(FABRIC_ATTACH_FAILED, note, pod, self._domain_of(pod, catalog))
        except Exception:
            log.exception("could not report the fabric attach of pod %s", pod.ref)

    def domain_health(self, res: Reservation, judged: DomainHealth, was: str, snapshot: Snapshot) -> None:
        """The domain of running group ``res`` turned ``judged.health`` (from ``was``)."""
        try:
            members = snapshot.members.get(res.group_id, ())
            cd = self._domain_of(members[0].pod, snapshot.catalog) if members else None
            running = [m.pod for m in members if m.pod.node_name and not m.pod.terminated]
            if judged.health == "healthy":
                reason = DOMAIN_RECOVERED
                note = (f"NVLink domain {res.domain} of group {_group_text(res)} is healthy again (it was {was})")
            else:
                reason = DOMAIN_UNHEALTHY if judged.health == "unhealthy" else DOMAIN_DEGRADED
                note = (f"NVLink domain {res.domain}, where group {_group_text(res)} runs {len(running)} pods, is "
                        f"{judged.health}: {judged.describe()}; a running group is not moved: its jobs may fail "
                        "or slow down; replacements are placed in the same domain")
            self._emit(reason, note, None, cd, running[:1])
        except Exception:
            log.exception("could not report the health of the domain of %s", res.group_id)
