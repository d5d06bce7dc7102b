"""The engine's ports: everything it needs from the world, in one place.

Each port is a Protocol an adapter implements (Kubernetes mode: ``webhook.adapters.kube``; the fabric
manager: ``webhook.adapters.redfish``; embedded mode: ``webhook.adapters.embedded`` and the in-memory
stores of ``webhook.state``). A capability that one mode lacks is part of the port all the same, answered
with an explicit "nothing" (``None``, an empty mapping, a null object next to the port), never found out
with ``getattr``: a second fabric manager, or another cluster source, is one adapter package that
implements these and one line of wiring.

- ``Backend``: where cluster state comes from, and the stores and sinks that go with it; ``EmbeddedCluster``
  what only the embedded mode adds (the scheduler's pods recorded).
- ``ReservationStore`` (with the ``Arbiter`` it consults) and ``AttachmentStore``: the two records the
  engine writes.
- ``Binder``: creates bindings. ``Attacher``: attach-before-bind (``webhook.engine.attacher`` implements it
  over a ``FabricManager``). ``Nudger``: makes kube-scheduler retry a pod. ``EventSink``: Events.
- ``Observer``: who counts fabric attaches and clean-ups (``/metrics``); ``WaitObserver``: who counts how
  long groups waited to run whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from webhook.domain.model import Node, Pod, Reservation
from webhook.engine.occurrences import Occurrence
from webhook.errors import DecisionError
from webhook.state.cluster import ClusterStore
from webhook.wire.fabric_attachment import Attachment, Block

# -- the records the engine writes ----------------------------------------------------------------------


class Arbiter(Protocol):
    """The engine's judgement, handed to the store for the moment it records a promise
    (``webhook.engine.choices`` explains the protocol)."""

    def live(self, promise: Reservation) -> bool:
        """Whether a recorded promise still holds capacity."""
        ...

    def fits(self, promises: Mapping[str, Reservation]) -> bool:
        """Whether the domain still hosts the group next to these live promises of other groups."""
        ...


class ReservationStore(Protocol):
    @property
    def synced(self) -> bool:
        """Whether the store's initial list has arrived (always true in memory)."""
        ...

    def all(self) -> Mapping[str, Reservation]:
        """Every stored reservation by group id, from the cache (no API call)."""
        ...

    def promises(self) -> Mapping[str, Mapping[str, Reservation]]:
        """Every domain's ledger: promises by group id, live or not, from the cache (no API call)."""
        ...

    def reserve(self, proposal: Reservation, arbiter: Arbiter | None = None) -> Reservation:
        """Promise ``proposal.domain`` to the group, then store the reservation; return the one that holds.

        A group that already has a reservation keeps it (it is returned, whatever its domain). Two replicas
        racing for one group agree: exactly one create succeeds and the loser gets the winner's
        reservation back. Raises ``DomainFull`` when ``arbiter`` finds no room next to the domain's latest
        promises, ``DecisionError`` (a reason for the scheduler's events) when the store cannot be written.
        """
        ...

    def placed(self, group_id: str, when: float) -> None:
        """Record that a member was bound (keeps the reservation from expiring)."""
        ...

    def release(self, group_id: str) -> None:
        ...

    def prune(self, live: Callable[[Reservation], bool]) -> int:
        """Drop the dead promises of every ledger; returns how many were dropped."""
        ...

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change of the reservations from now on (it must not block)."""
        ...


class AttachmentStore(Protocol):
    def all(self) -> list[Attachment]: ...

    def get(self, name: str) -> Attachment | None: ...

    def create(self, att: Attachment) -> Attachment:
        """Raise StoreConflict when it exists already."""
        ...

    def update(self, att: Attachment) -> Attachment:
        """Write spec and status guarded by ``att.version``; raise StoreConflict when it changed."""
        ...

    def delete(self, att: Attachment) -> None:
        """Remove the finalizer and the object."""
        ...


# -- what the engine asks others to do -------------------------------------------------------------------


class Binder(Protocol):
    def read_pod(self, namespace: str, name: str) -> Pod | None:
        """A fresh read for a pod the cache does not have (the bind path may call the API)."""
        ...

    def bind(self, pod: Pod, node: str) -> None:
        """Create the binding (UID precondition); raise DecisionError with the reason on failure."""
        ...

    def label_segment(self, pod: Pod, index: int) -> None:
        """Write ``imex-webhook.io/segment: "<index>"`` on the pod (UID precondition); raise DecisionError with
        the reason on failure (``webhook.engine.segment_labels``)."""
        ...


class Attacher(Protocol):
    """Attach ``gpus`` fabric GPUs to ``node`` for ``pod`` before it binds (``deadline``: wall time)."""

    def attach(self, pod: Pod, node: Node, gpus: int, deadline: float) -> None:
        ...


class NoFabric:
    """The ``Attacher`` when no fabric manager is configured: a pod that needs attached GPUs cannot bind."""

    def attach(self, pod: Pod, node: Node, gpus: int, deadline: float) -> None:
        raise DecisionError(
            f"pod {pod.ref} needs {gpus} fabric GPUs attached to node {node.name}, but no fabric manager "
            "is configured (serve --fabric)"
        )


class FreeSink(Protocol):
    """Where a fabric manager's free GPU blocks per zone go: the cluster store, which every filter reads."""

    def set_fabric_free(self, free: Mapping[str, int]) -> None: ...


class FabricManager(Protocol):
    """A fabric manager that composes GPU blocks to systems (Redfish: ``webhook.adapters.redfish``).

    Failures raise ``FabricFailure``; a deadline that ran out while an operation may still be running
    raises ``TimeoutError`` (the attacher then reports "still composing" and the next bind continues).
    ``deadline`` values are ``time.monotonic()`` readings."""

    def ready(self) -> tuple[bool, str]:
        """For /readyz: whether the inventory was read at least once, and from where."""
        ...

    def free_per_zone(self) -> dict[str, int]: ...

    def free_blocks(self, zone: str, deadline: float | None = None) -> list[Block]:
        """The zone's free blocks, read fresh; ``deadline`` bounds the reads (TimeoutError)."""
        ...

    def system_for(self, node: str, annotation: str | None, deadline: float | None = None) -> str:
        """The fabric's system for ``node``: the node's ``imex-webhook.io/redfish-system`` annotation when
        it has one, else found by name."""
        ...

    def attach(self, system: str, block_ids: list[str], deadline: float) -> list[Block]:
        """Compose the blocks (never twice); on failure nothing from this call stays composed."""
        ...

    def detach(self, system: str, block_ids: list[str], deadline: float) -> None: ...

    def composed(self) -> dict[str, set[str]]:
        """System -> ids of the blocks composed to it."""
        ...

    def feed(self, sink: FreeSink, interval: float) -> None:
        """Keep ``sink``'s free blocks per zone current (a background thread until ``stop``)."""
        ...

    def stop(self) -> None: ...


class Nudger(Protocol):
    """Makes kube-scheduler try a pod again (Kubernetes mode: ``webhook.adapters.kube.nudges``)."""

    def nudge(self, pod: Pod, message: str, now: float) -> None:
        """Raises an ``ImexWebhookError`` naming the pod when it cannot; a pod that is gone is no error."""
        ...


class EventSink(Protocol):
    def record(self, occurrence: Occurrence) -> None:
        """Take the occurrence, or drop it and count why; return at once, never raise."""
        ...

    def dropped(self) -> Mapping[str, int]:
        """Occurrences dropped so far, by one of ``occurrences.DROP_REASONS``."""
        ...


class Observer(Protocol):
    """Counts what the fabric attacher and reconciler did (``/metrics``)."""

    def attach_done(self, outcome: str, seconds: float) -> None: ...

    def cleanup(self, what: str) -> None: ...


class NoObserver:
    def attach_done(self, outcome: str, seconds: float) -> None:
        pass

    def cleanup(self, what: str) -> None:
        pass


class WaitObserver(Protocol):
    """Counts how long each group waited before it ran whole (``webhook.engine.waits``; ``/metrics``)."""

    def group_waited(self, size_class: str, seconds: float) -> None: ...


class NoWaitObserver:
    def group_waited(self, size_class: str, seconds: float) -> None:
        pass


# -- where cluster state comes from ----------------------------------------------------------------------


class Backend(Protocol):
    # Read-only in the protocol so implementations may narrow the types (a plain attribute satisfies it).
    @property
    def store(self) -> ClusterStore: ...

    @property
    def reservations(self) -> ReservationStore: ...

    @property
    def binder(self) -> Binder: ...

    @property
    def attachments(self) -> AttachmentStore: ...

    @property
    def nudger(self) -> Nudger | None:
        """How to make the scheduler retry a pod we refused (None: the caller retries on its own)."""
        ...

    @property
    def events(self) -> EventSink | None:
        """Where Events go (None: the decision log, as in embedded mode)."""
        ...

    def start(self) -> None:
        """Begin filling ``store`` (start watches); returns at once."""
        ...

    def stop(self) -> None:
        ...

    def ready(self) -> tuple[bool, str]:
        """(ready, why not): caches synced and the source reachable."""
        ...

    def is_leader(self) -> bool:
        """Whether this replica runs the cluster-wide reconcilers now."""
        ...

    def watch_health(self) -> Mapping[str, tuple[float, bool]]:
        """Per watched kind: seconds since its last progress, and whether it is stalled (empty: no watches)."""
        ...

    def collectors(self) -> Sequence[object]:
        """Prometheus collectors the backend's own parts export (registered on /metrics)."""
        ...


class EmbeddedCluster(Protocol):
    """Only the embedded mode (``webhook.adapters.embedded``): a cluster with no API server, which learns its
    pods from the scheduler's requests. Where pods come from watches there is none (the views get None)."""

    def note_pod(self, pod: Pod) -> None:
        """A pod the scheduler asked about: recorded until it is bound or no longer named."""
        ...
