"""What the service needs from wherever cluster state comes from (embedded files or a Kubernetes API)."""

from __future__ import annotations

from typing import Protocol

from webhook.domain.model import Pod
from webhook.engine.bind import Binder
from webhook.state.cluster import ClusterStore
from webhook.state.attachments import AttachmentStore
from webhook.engine.requeue import Nudger
from webhook.state.reservations import ReservationStore


class Backend(Protocol):
    # Read-only in the protocol so implementations may narrow the types (a plain attribute satisfies it).
    @property
    def store(self) -> ClusterStore: ...

    @property
    def reservations(self) -> ReservationStore: ...

    @property
    def binder(self) -> Binder: ...

    @property
    def embedded(self) -> bool: ...

    @property
    def attachments(self) -> AttachmentStore: ...

    @property
    def nudger(self) -> Nudger | None:
        """How to make the scheduler retry a pod we refused (None: the caller retries on its own)."""
        ...

    def start(self) -> None:
        """Begin filling ``store`` (start watches); returns at once."""
        ...

    def stop(self) -> None:
        ...

    def ready(self) -> tuple[bool, str]:
        """(ready, why not): caches synced and the source reachable."""
        ...

    def note_pod(self, pod: Pod) -> None:
        """A pod the scheduler asked about; the embedded cluster records it, a watch-fed one ignores it."""
        ...

    def is_leader(self) -> bool:
        """Whether this replica runs the cluster-wide reconcilers now."""
        ...
