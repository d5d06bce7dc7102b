"""The fabric reconciler: carries out ``fabric_plan`` on an interval, on one replica at a time.

Rolls back failed and abandoned attaches, asks node agents to release GPUs whose pod is gone, detaches
what they released, deletes finished attachments and returns orphaned blocks to the pool after a grace
period. Leadership comes in as a callable (a coordination.k8s.io Lease in Kubernetes mode; always true
in embedded mode), so two replicas never detach the same block at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from webhook.domain import fabric_plan
from webhook.domain.fabric_plan import Act, Action, Timeouts
from webhook.domain.model import Pod
from webhook.engine.ports import AttachmentStore, FabricManager, NoObserver, Observer
from webhook.errors import FabricFailure, StoreConflict
from webhook.state.cluster import ClusterStore
from webhook.wire.fabric_attachment import Attachment, Phase
from webhook.wire.timestamps import rfc3339

log = logging.getLogger(__name__)

# One fabric call inside a reconcile round may take this long; a stuck fabric must not stall the loop.
CALL_BUDGET = 30.0


class Reconciler:
    def __init__(self, store: AttachmentStore, fabric: FabricManager, cluster: ClusterStore,
                 timeouts: Timeouts | None = None, leader: Callable[[], bool] = lambda: True,
                 observer: Observer | None = None, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.fabric = fabric
        self.cluster = cluster
        self.timeouts = timeouts or Timeouts()
        self.leader = leader
        self.observer: Observer = observer or NoObserver()
        self.clock = clock  # wall time: phase times are written into objects other replicas read
        self.monotonic = monotonic  # the fabric's deadlines, which a wall-clock step must not move
        self._orphan_seen: dict[str, float] = {}
        self._stop = threading.Event()

    def run_once(self) -> list[Action]:
        if not self.leader():
            # Another replica reconciles: first-seen times kept from an earlier term would cut a block's grace
            # short when this one leads again, and /metrics would keep reporting them.
            self._orphan_seen = {}
            return []
        now = self.clock()
        atts = self.store.all()
        pods: dict[str, Pod] = {}
        for att in atts:
            pod = self.cluster.pod_by_uid(att.pod_uid)
            if pod is not None:
                pods[att.pod_uid] = pod
        nodes = set(self.cluster.snapshot().nodes)
        try:
            composed = self.fabric.composed()
        except (FabricFailure, OSError) as exc:
            log.warning("cannot list composed blocks, orphan check skipped this round: %s", exc)
            composed = {}
        unaccounted = fabric_plan.unaccounted(atts, composed)
        self._orphan_seen = {b: self._orphan_seen.get(b, now) for b in unaccounted}
        actions = fabric_plan.plan(atts, pods, nodes, composed, self._orphan_seen, now, self.timeouts)
        for action in actions:
            try:
                self._carry_out(action)
            except (FabricFailure, StoreConflict, TimeoutError, OSError) as exc:
                log.warning("reconcile %s of %s failed, retried next round: %s", action.act.value,
                            action.attachment.name if action.attachment else action.block, exc)
        return actions

    def unaccounted_blocks(self) -> int:
        """Composed blocks no attachment accounts for, as the last round found them (leaked until detached)."""
        return len(self._orphan_seen)

    def _deadline(self) -> float:
        return self.monotonic() + CALL_BUDGET

    def _carry_out(self, action: Action) -> None:
        att = action.attachment
        log.info("reconcile: %s %s (%s)", action.act.value, att.name if att else action.block, action.reason)
        if action.act is Act.DETACH_ORPHAN:
            self.fabric.detach(action.system, [action.block], self._deadline())
            self._orphan_seen.pop(action.block, None)
            self.observer.cleanup("orphan-detached")
            return
        assert att is not None
        if action.act is Act.RELEASE:
            self._write(att, Phase.RELEASING, action.reason)
            self.observer.cleanup("released" if att.phase is Phase.READY else "rolled-back")
        elif action.act is Act.DETACH:
            if att.blocks:
                self.fabric.detach(att.system, [b.id for b in att.blocks], self._deadline())
            self._write(att, Phase.DETACHED, action.reason)
            self.observer.cleanup("detached")
        elif action.act is Act.DELETE:
            self.store.delete(att)

    def _write(self, att: Attachment, phase: Phase, message: str) -> None:
        self.store.update(replace(att, phase=phase, message=message, phase_since=rfc3339(self.clock(), "ms")))

    def run_forever(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.run_once()
            except Exception:  # the loop must survive a bad round; the next one retries
                log.exception("fabric reconcile round failed")

    def start(self, interval: float) -> threading.Thread:
        thread = threading.Thread(target=self.run_forever, args=(interval,), name="fabric-reconciler", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
