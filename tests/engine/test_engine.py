"""The engine on the embedded store: the first filter of a group stores its choice as the reservation,
later members follow it, a reservation another replica stored first is followed, housekeeping releases
stale reservations, and a pod that needs fabric GPUs without a fabric manager is refused with a reason.
Concurrent first pods and replicas: ``test_reservation_races``."""

from __future__ import annotations

import pytest

from tests import builders
from webhook.adapters import embedded
from webhook.demo import cluster as demo
from webhook.domain.model import Reservation
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.engine.engine import Engine
from webhook.errors import DecisionError
from webhook.state.cluster import ClusterStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(clock: Clock) -> Engine:
    store = ClusterStore(Policy())
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    backend.start()
    return builders.engine(backend, holder="test", clock=clock)


def _submit(engine: Engine, name: str, cd: str, gpus: int = 4) -> tuple[str, ...]:
    pod = parsing.pod(demo.pod(name, cd, gpus))
    embedded.put_pod(engine.store, pod)
    return engine.filter(pod, sorted(engine.store.snapshot().nodes)).passed


def test_the_whole_job_lands_in_the_domain_the_first_filter_chose(engine: Engine) -> None:
    placed = []
    for i in range(8):
        passed = _submit(engine, f"train-8-{i}", "train-8")
        assert passed, f"member {i} found no node"
        (stored,) = engine.reservations.all().values()  # stored by the first filter, before any bind
        assert stored.domain == demo.clique_value("gb200-c") and stored.placed_at == (None if i == 0 else 1000.0)
        engine.bind("ml", f"train-8-{i}", demo.uid("pod", "ml", f"train-8-{i}"), passed[0])
        placed.append(passed[0])
    snap = engine.snapshot()
    assert len({snap.nodes[n].domain for n in placed}) == 1 and len(set(placed)) == 8
    (res,) = snap.reservations.values()
    assert res.domain == demo.clique_value("gb200-c") and res.size == 8 and res.placed_at == 1000.0


def test_binds_within_seconds_of_each_other_write_the_placement_time_once(engine: Engine, clock: Clock) -> None:
    versions = []
    for i, at in enumerate((1000.0, 1001.0, 1004.9, 1005.0, 1006.0)):
        clock.now = at
        passed = _submit(engine, f"train-8-{i}", "train-8")
        engine.bind("ml", f"train-8-{i}", demo.uid("pod", "ml", f"train-8-{i}"), passed[0])
        (stored,) = engine.reservations.all().values()
        versions.append((stored.version, stored.placed_at))
    # The first bind records 1000; the next two are within PLACEMENT_REFRESH of it and write nothing; the
    # bind at 1005 records again, the one at 1006 does not.
    assert [v[1] for v in versions] == [1000.0, 1000.0, 1000.0, 1005.0, 1005.0]
    assert versions[0][0] == versions[1][0] == versions[2][0] != versions[3][0] == versions[4][0]


def test_a_second_job_does_not_take_the_first_jobs_promised_capacity(engine: Engine) -> None:
    first = _submit(engine, "train-8-0", "train-8")
    second = _submit(engine, "train-4-0", "train-4")
    snap = engine.snapshot()
    assert {snap.nodes[n].domain for n in first} == {demo.clique_value("gb200-c")}
    # gb200-c keeps 1 spare node after train-8's promise: too small for train-4, so it goes elsewhere.
    assert demo.clique_value("gb200-c") not in {snap.nodes[n].domain for n in second}


def test_a_reservation_made_by_another_replica_wins(engine: Engine) -> None:
    gid = f"cd:{demo.uid('cd', 'ml', 'train-8')}"
    other = demo.clique_value("gb200-b")
    engine.reservations.reserve(Reservation(gid, "train-8", "ml", other, 8, 4, True, engine.clock(),
                                            holder="replica-2"))

    passed = _submit(engine, "train-8-0", "train-8")
    snap = engine.snapshot()
    assert passed and {snap.nodes[n].domain for n in passed} == {other}  # followed, not chosen again
    with pytest.raises(DecisionError, match="is reserved in domain"):
        engine.bind("ml", "train-8-0", demo.uid("pod", "ml", "train-8-0"), "gb200-c-00")
    assert engine.reservations.all()[gid].holder == "replica-2"


def test_housekeeping_releases_a_reservation_whose_members_never_came(engine: Engine, clock: Clock) -> None:
    passed = _submit(engine, "train-4-0", "train-4")
    engine.bind("ml", "train-4-0", demo.uid("pod", "ml", "train-4-0"), passed[0])
    assert engine.housekeep() == []
    engine.store.apply("Pod", "DELETED", demo.pod("train-4-0", "train-4", 4))
    clock.now += 31
    released = engine.housekeep()
    assert [g for g, _ in released] == [f"cd:{demo.uid('cd', 'ml', 'train-4')}"]
    assert engine.reservations.all() == {}


def test_a_pod_needing_fabric_gpus_without_a_fabric_manager_is_refused_with_the_reason() -> None:
    store = builders.store([builders.node("f", 1, zone="pool", slots=4), *builders.cd_objects("job", 1)],
                           fabric_free={"pool": 4})
    backend = embedded.EmbeddedBackend(store, [], "test")
    engine = builders.engine(backend)
    pod = parsing.pod(builders.pod("job-0", cd="job", gpus=3))
    embedded.put_pod(store, pod)
    assert engine.filter(pod, ["f"]).passed == ("f",)
    with pytest.raises(DecisionError, match="needs 2 fabric GPUs attached to node f, but no fabric manager"):
        engine.bind("ml", "job-0", pod.uid, "f")
    assert store.pod("ml", "job-0").node_name is None  # type: ignore[union-attr]
