"""The fabric Reconciler on in-memory fakes (webhook.engine.reconciler): what it does with attachments left
in every phase, orphaned blocks, a failing fabric, and leadership."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from tests import builders
from tests.engine.fabric_fakes import Clock, FakeFabric, Observed, blocks
from webhook.adapters.memory import MemoryAttachmentStore
from webhook.domain.fabric_plan import Act, Timeouts
from webhook.domain.model import Node, Pod
from webhook.domain.reading import parsing
from webhook.engine.attacher import FabricAttacher
from webhook.engine.reconciler import Reconciler
from webhook.state.cluster import ClusterStore
from webhook.wire import fabric_attachment as fa
from webhook.wire.fabric_attachment import Attachment, Condition, Phase
from webhook.wire.timestamps import rfc3339

ZONE = "zone-a"
SYSTEM = "/redfish/v1/Systems/a-00"
TIMEOUTS = Timeouts(attach=120.0, release=300.0, orphan_grace=60.0)
BLOCKS = blocks(ZONE, 4)


@dataclass
class Rig:
    cluster: ClusterStore
    store: MemoryAttachmentStore
    fabric: FakeFabric
    clock: Clock
    leading: list[bool] = field(default_factory=lambda: [True])
    observed: Observed = field(default_factory=Observed)

    def reconciler(self) -> Reconciler:
        return Reconciler(self.store, self.fabric, self.cluster, TIMEOUTS, leader=lambda: self.leading[0],
                          observer=self.observed, clock=self.clock)

    def pod(self, **kwargs: Any) -> Pod:
        obj = builders.pod("p", gpus=2, **kwargs)
        self.cluster.apply("Pod", "ADDED", obj)
        return parsing.pod(obj)

    def left(self, phase: Phase, pod: Pod, composed: int = 2, age: float = 0.0, **changes: Any) -> Attachment:
        """An attachment as a process killed in ``phase`` leaves it, ``age`` seconds ago."""
        chosen = tuple(BLOCKS[:composed])
        self.fabric.systems[SYSTEM] = {b.id for b in chosen}
        att = Attachment(fa.name_for(pod.uid), "a-00", pod.namespace, pod.name, pod.uid, ZONE, 2, SYSTEM,
                         phase=phase, blocks=chosen, phase_since=rfc3339(self.clock() - age, "ms"))
        return self.store.create(replace(att, **changes))

    def acts(self) -> list[Act]:
        return [a.act for a in self.reconciler().run_once()]

    def phase(self, pod: Pod) -> Phase | None:
        att = self.store.get(fa.name_for(pod.uid))
        return att.phase if att else None


def rig() -> Rig:
    cluster = builders.store([builders.node("a-00", domain="dom-a", zone=ZONE, slots=4)])
    return Rig(cluster, MemoryAttachmentStore(cluster), FakeFabric(free={ZONE: list(BLOCKS)}), Clock())


def release(r: Rig, pod: Pod) -> None:
    """The node agent: stops using the GPUs and says so."""
    att = r.store.get(fa.name_for(pod.uid))
    assert att is not None and att.phase is Phase.RELEASING
    r.store.update(replace(att, conditions=(Condition(fa.RELEASED_CONDITION, "True"),)))


@pytest.mark.parametrize("phase", [Phase.PENDING, Phase.COMPOSING, Phase.ATTACHED])
def test_an_attach_a_killed_process_left_midway_is_rolled_back_once_past_the_attach_timeout(phase: Phase) -> None:
    r = rig()
    pod = r.pod()
    r.left(phase, pod, composed=0 if phase is Phase.PENDING else 2, age=TIMEOUTS.attach - 1)
    assert r.acts() == [] and r.phase(pod) is phase  # a bind may still be carrying it on
    r.clock.sleep(2)
    assert r.acts() == [Act.RELEASE] and r.phase(pod) is Phase.RELEASING
    release(r, pod)
    assert r.acts() == [Act.DETACH] and r.phase(pod) is Phase.DETACHED and r.fabric.composed() == {}
    assert r.acts() == [Act.DELETE] and r.phase(pod) is None
    assert r.observed.cleanups == ["rolled-back", "detached"]


def test_a_process_killed_between_the_compose_and_its_record_leaves_blocks_the_reconciler_recovers() -> None:
    r = rig()
    pod = r.pod()

    class Killed(BaseException):
        """The process dies: nothing after the fabric call runs."""

    class DyingFabric(FakeFabric):
        def attach(self, system: str, block_ids: list[str], deadline: float) -> list[Any]:
            super().attach(system, block_ids, deadline)
            raise Killed

    r.fabric = DyingFabric(free=r.fabric.free)
    attacher = FabricAttacher(r.store, r.fabric, clock=r.clock, sleep=r.clock.sleep, monotonic=r.clock)
    node = Node("a-00", "dom-a", None, 4, ZONE, 4, None)
    with pytest.raises(Killed):
        attacher.attach(pod, node, 2, r.clock() + 10)
    assert r.phase(pod) is Phase.COMPOSING and len(r.fabric.composed()[SYSTEM]) == 2  # intent was on record
    r.clock.sleep(TIMEOUTS.attach + 1)
    assert r.acts() == [Act.RELEASE]
    release(r, pod)
    assert r.acts() == [Act.DETACH] and r.fabric.composed() == {}
    assert r.acts() == [Act.DELETE] and r.store.all() == []


@pytest.mark.parametrize(("what", "pod_changes", "phase", "expected"), [
    ("the pod is gone", None, Phase.READY, [Act.RELEASE]),
    ("the pod finished", {"node": "a-00", "phase": "Succeeded"}, Phase.READY, [Act.RELEASE]),
    ("the pod was bound elsewhere", {"node": "a-01", "phase": "Running"}, Phase.READY, [Act.RELEASE]),
    ("the pod runs on the node", {"node": "a-00", "phase": "Running"}, Phase.READY, []),
    ("the attach failed with blocks composed", {}, Phase.FAILED, [Act.RELEASE]),
    ("the attach failed with nothing composed and the pod is gone", None, Phase.FAILED, [Act.DELETE]),
    ("the attach failed with nothing composed and the pod waits for its retry", {}, Phase.FAILED, []),
])
def test_what_the_reconciler_does_with_an_attachment(what: str, pod_changes: dict[str, str] | None, phase: Phase,
                                                      expected: list[Act]) -> None:
    r = rig()
    pod = r.pod(**(pod_changes or {}))
    if pod_changes is None:
        r.cluster.apply("Pod", "DELETED", builders.pod("p"))
    composed = 0 if what.startswith("the attach failed with nothing") else 2
    r.left(phase, pod, composed=composed)
    assert r.acts() == expected, what


def test_a_releasing_attachment_on_a_vanished_node_is_detached_after_the_release_timeout() -> None:
    r = rig()
    pod = r.pod()
    r.left(Phase.RELEASING, pod, node="gone-00")
    assert r.acts() == []
    r.clock.sleep(TIMEOUTS.release + 1)
    assert r.acts() == [Act.DETACH] and r.fabric.composed() == {}


def test_an_orphaned_block_is_detached_only_after_its_grace_period() -> None:
    r = rig()
    r.fabric.systems[SYSTEM] = {BLOCKS[3].id}
    reconciler = r.reconciler()
    assert reconciler.run_once() == [] and reconciler.unaccounted_blocks() == 1
    r.clock.sleep(TIMEOUTS.orphan_grace)
    assert [a.act for a in reconciler.run_once()] == [Act.DETACH_ORPHAN]
    assert r.fabric.composed() == {} and reconciler.unaccounted_blocks() == 0
    assert r.observed.cleanups == ["orphan-detached"]


def test_a_failing_fabric_leaves_the_attachment_as_it_was_for_the_next_round() -> None:
    r = rig()
    pod = r.pod()
    r.left(Phase.RELEASING, pod, conditions=(Condition(fa.RELEASED_CONDITION, "True"),))
    r.fabric.fail = "HTTP 503"
    assert r.acts() == [Act.DETACH]  # tried, failed, logged
    assert r.phase(pod) is Phase.RELEASING
    r.fabric.fail = ""
    assert r.acts() == [Act.DETACH] and r.phase(pod) is Phase.DETACHED


def test_an_unreachable_fabric_skips_the_orphan_check_but_not_the_attachments() -> None:
    r = rig()
    pod = r.pod()
    r.left(Phase.READY, pod)
    r.cluster.apply("Pod", "DELETED", builders.pod("p"))
    r.fabric.fail_listing = True
    reconciler = r.reconciler()
    assert [a.act for a in reconciler.run_once()] == [Act.RELEASE] and reconciler.unaccounted_blocks() == 0


def test_a_replica_that_does_not_lead_does_nothing_and_forgets_what_it_saw_while_leading() -> None:
    r = rig()
    pod = r.pod()
    r.left(Phase.COMPOSING, pod, age=TIMEOUTS.attach + 1)
    r.fabric.systems[SYSTEM] |= {BLOCKS[3].id}  # an orphan besides
    r.leading[0] = False
    reconciler = r.reconciler()
    assert reconciler.run_once() == [] and r.phase(pod) is Phase.COMPOSING and r.fabric.calls == []
    r.leading[0] = True
    assert [a.act for a in reconciler.run_once()] == [Act.RELEASE] and reconciler.unaccounted_blocks() == 1
    r.leading[0] = False
    r.clock.sleep(TIMEOUTS.orphan_grace)
    assert reconciler.run_once() == [] and reconciler.unaccounted_blocks() == 0
    r.leading[0] = True
    assert Act.DETACH_ORPHAN not in [a.act for a in reconciler.run_once()]  # the grace starts again
