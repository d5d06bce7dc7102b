"""FabricAttacher on in-memory fakes (webhook.engine.attacher): attach before bind, its failures,
and what a retried or racing bind finds."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

import pytest

from tests import builders
from tests.engine.fabric_fakes import EPOCH, Clock, FakeFabric, Observed, blocks, node_agent
from webhook.adapters.memory import MemoryAttachmentStore
from webhook.domain.model import Node, Pod
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.engine.attacher import FabricAttacher
from webhook.errors import DecisionError
from webhook.state.cluster import ClusterStore
from webhook.wire import fabric_attachment as fa
from webhook.wire.fabric_attachment import Attachment, Phase

ZONE = "zone-a"
NODE = Node("a-00", "dom-a", None, 4, ZONE, 4, None)
POD: Pod = parsing.pod(builders.pod("p", gpus=2))
SYSTEM = "/redfish/v1/Systems/a-00"


@dataclass
class Rig:
    store: MemoryAttachmentStore
    fabric: FakeFabric
    clock: Clock
    observed: Observed = field(default_factory=Observed)

    def attacher(self) -> FabricAttacher:
        return FabricAttacher(self.store, self.fabric, self.observed, clock=self.clock, sleep=self.clock.sleep,
                              monotonic=self.clock)

    def attach(self, gpus: int = 2, budget: float = 10.0) -> None:
        self.attacher().attach(POD, NODE, gpus, self.clock() + budget)

    def attachment(self) -> Attachment:
        att = self.store.get(fa.name_for(POD.uid))
        assert att is not None
        return att


def rig(free: int = 4, agent: Phase | None = Phase.READY) -> Rig:
    store = MemoryAttachmentStore(ClusterStore(Policy()))
    if agent is not None:
        node_agent(store, agent)
    return Rig(store, FakeFabric(free={ZONE: blocks(ZONE, free)}), Clock())


def test_an_attach_composes_the_blocks_once_and_returns_when_the_node_agent_reports_them_ready() -> None:
    r = rig()
    r.attach(gpus=2)
    att = r.attachment()
    assert att.phase is Phase.READY and len(att.blocks) == 2
    assert r.fabric.calls == [("attach", SYSTEM, tuple(b.id for b in att.blocks))]
    assert r.fabric.composed() == {SYSTEM: {b.id for b in att.blocks}}
    assert r.observed.attaches == ["ready"]


def test_a_node_annotated_with_its_redfish_system_gets_the_gpus_composed_to_that_system() -> None:
    obj = builders.node("a-00", 4, "dom-a", zone=ZONE, slots=4)
    obj["metadata"]["annotations"]["imex-webhook.io/redfish-system"] = "/redfish/v1/Systems/tray-17"
    node = parsing.node(obj, Policy().domain_labels)
    assert node.fabric_system == "/redfish/v1/Systems/tray-17"
    r = rig()
    r.attacher().attach(POD, node, 2, r.clock() + 10.0)
    att = r.attachment()
    assert att.system == "/redfish/v1/Systems/tray-17"
    assert r.fabric.calls == [("attach", "/redfish/v1/Systems/tray-17", tuple(b.id for b in att.blocks))]


def test_the_attachment_is_mirrored_into_the_cluster_store_the_decisions_read() -> None:
    cluster = ClusterStore(Policy())
    store = MemoryAttachmentStore(cluster)
    node_agent(store)
    r = Rig(store, FakeFabric(free={ZONE: blocks(ZONE, 2)}), Clock())
    r.attach(gpus=2)
    assert cluster.attachments()[POD.uid].phase is Phase.READY


@pytest.mark.parametrize(("what", "prepare", "phase", "blocks_left", "reason"), [
    ("the fabric refuses the compose", lambda r: setattr(r.fabric, "fail", "HTTP 500 from the fabric manager"),
     Phase.FAILED, 0, "fabric attach of 2 GPUs to node a-00 failed: HTTP 500"),
    ("the zone has too few free blocks", lambda r: r.fabric.free.update({ZONE: blocks(ZONE, 1)}),
     Phase.FAILED, 0, "fabric zone zone-a has 1 free GPU blocks"),
    ("the fabric manager does not answer in time", lambda r: setattr(r.fabric, "hang", True),
     Phase.COMPOSING, 2, "waiting for the fabric manager to finish composing"),
])
def test_a_failed_attach_raises_a_decision_error_and_leaves_a_record_the_reconciler_can_act_on(
        what: str, prepare: object, phase: Phase, blocks_left: int, reason: str) -> None:
    r = rig()
    prepare(r)  # type: ignore[operator]
    with pytest.raises(DecisionError, match=reason):
        r.attach(gpus=2)
    att = r.attachment()
    assert att.phase is phase and len(att.blocks) == blocks_left, what
    assert r.observed.attaches == ["error"]


def test_a_bind_retried_after_a_fabric_failure_starts_over_and_succeeds() -> None:
    r = rig()
    r.fabric.fail = "HTTP 503"
    with pytest.raises(DecisionError):
        r.attach(gpus=2)
    r.fabric.fail = ""
    r.attach(gpus=2)
    assert r.attachment().phase is Phase.READY and r.observed.attaches == ["error", "ready"]


def test_an_agent_that_never_reports_times_the_bind_out_and_the_retry_continues_without_composing_again() -> None:
    r = rig(agent=None)
    with pytest.raises(DecisionError, match="waiting for the node agent on a-00 to report the GPUs Ready"):
        r.attach(gpus=2, budget=5.0)
    att = r.attachment()
    assert att.phase is Phase.ATTACHED and r.clock() >= EPOCH + 5.0
    r.store.update(replace(att, phase=Phase.READY))  # the agent catches up
    r.attach(gpus=2)
    assert [c[0] for c in r.fabric.calls] == ["attach"]


def test_an_agent_that_fails_the_gpus_fails_the_bind() -> None:
    r = rig(agent=Phase.FAILED)
    with pytest.raises(DecisionError, match="could not prepare the attached GPUs: no GPU found"):
        r.attach(gpus=2)
    assert r.observed.attaches == ["error"]


@pytest.mark.parametrize(("phase", "reason"), [
    (Phase.RELEASING, "ended Releasing"),
    (Phase.DETACHED, "ended Detached"),
    (Phase.FAILED, "ended Failed"),
])
def test_a_bind_refuses_an_attachment_being_cleaned_up(phase: Phase, reason: str) -> None:
    r = rig()
    r.attach(gpus=2)
    r.store.update(replace(r.attachment(), phase=phase))
    with pytest.raises(DecisionError, match=reason):
        r.attach(gpus=2)


def test_a_bind_to_another_node_than_the_attachments_is_sent_back_there() -> None:
    r = rig()
    r.attach(gpus=2)
    with pytest.raises(DecisionError, match="are being attached to node a-00"):
        r.attacher().attach(POD, replace(NODE, name="a-01"), 2, r.clock() + 10)


def test_a_node_in_no_fabric_zone_cannot_take_fabric_gpus() -> None:
    r = rig()
    with pytest.raises(DecisionError, match="which is in no fabric zone"):
        r.attacher().attach(POD, replace(NODE, fabric_zone=None), 2, r.clock() + 10)


class _Interleaved(MemoryAttachmentStore):
    """The loser's store: just before its first ``op``, the winner's whole attach runs."""

    def __init__(self, shared: MemoryAttachmentStore, op: str, winner: FabricAttacher) -> None:
        self.__dict__.update(shared.__dict__)  # the same items, lock and mirror as the winner's
        self._op, self._winner, self._ran = op, winner, False

    def _first(self, op: str) -> None:
        if op == self._op and not self._ran:
            self._ran = True
            self._winner.attach(POD, NODE, 2, self._winner.clock() + 10)

    def create(self, att: Attachment) -> Attachment:
        self._first("create")
        return super().create(att)

    def update(self, att: Attachment) -> Attachment:
        self._first("update")
        return super().update(att)


def test_the_loser_of_a_create_race_continues_the_winners_attachment_and_composes_nothing() -> None:
    r = rig()
    loser = FabricAttacher(_Interleaved(r.store, "create", r.attacher()), r.fabric, clock=r.clock,
                           sleep=r.clock.sleep, monotonic=r.clock)
    loser.attach(POD, NODE, 2, r.clock() + 10)
    assert r.attachment().phase is Phase.READY and [c[0] for c in r.fabric.calls] == ["attach"]


def test_an_attacher_whose_write_loses_to_another_gets_a_decision_error_and_the_winners_attach_stands() -> None:
    r = rig()
    pending = r.store.create(Attachment(fa.name_for(POD.uid), NODE.name, POD.namespace, POD.name, POD.uid, ZONE, 2,
                                      SYSTEM))
    assert pending.phase is Phase.PENDING
    loser = FabricAttacher(_Interleaved(r.store, "update", r.attacher()), r.fabric, clock=r.clock,
                           sleep=r.clock.sleep, monotonic=r.clock)
    with pytest.raises(DecisionError, match="changed under us"):
        loser.attach(POD, NODE, 2, r.clock() + 10)
    assert r.attachment().phase is Phase.READY and len(r.fabric.composed()[SYSTEM]) == 2


def test_concurrent_binds_of_one_pod_end_with_one_ready_attachment_and_its_blocks_composed_once() -> None:
    r = rig()
    outcomes: list[str] = []
    lock = threading.Lock()

    def bind() -> None:
        try:
            r.attach(gpus=2, budget=30.0)
            result = "ready"
        except DecisionError:
            result = "retry"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=bind) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(outcomes) == 8 and "ready" in outcomes
    att = r.attachment()
    assert att.phase is Phase.READY and r.fabric.composed() == {SYSTEM: {b.id for b in att.blocks}}
    assert len(att.blocks) == 2 and len(r.store.all()) == 1
