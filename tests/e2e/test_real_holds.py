"""Holds and backfill through the real kube-scheduler (docs/SCHEDULER.md, "Holds and backfill"): two replicas
run with ``--max-holds 1``. Racks a (4 nodes) and b (3) take device-plugin pods; a job of two segments of 3
waits behind the one-rack jobs that fill them, each stating a walltime. After ``--hold-after`` one replica
holds both racks for it at the end of the longest walltime, as one DomainReservation per segment with
``spec.expectedStart`` (the other replica sees the same objects and makes none); a job that states no
walltime is kept out of a held rack that has room and told so (a NoBackfill Event), one whose
``activeDeadlineSeconds`` ends before the hold starts backfills into it; a restarted replica reads the holds
back; when the racks drain the held job binds into them, one segment per rack; and deleting a held job
releases its racks without waiting for a grace or the hold's timeout. With ``--hold-yield-after``, the holds
give way while a job that needs one rack has waited that long, and come back once it is gone
(docs/SCHEDULER.md, "Holds that give way").
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import scenario
from tests.e2e.conftest import RACKS, RETRY_SECONDS, RealCluster, rack_of
from tests.e2e.kubeapi import eventually
from webhook.domain import keys

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(1800)]

REPLICAS = ("imex-webhook", "imex-webhook-2")
HOLD_AFTER = 30  # seconds: the grace a deleted group's reservation waits otherwise; a hold needs none
FLAGS = ("--max-holds", "1", "--hold-after", str(HOLD_AFTER), "--housekeeping-interval", "1")
BOUND = 90.0  # seconds for the held job to bind once the racks drain; kube-scheduler alone retries after 300


YIELD_AFTER = 40  # seconds a one-rack job waits before the holds give way to it


def _replicas(cluster: RealCluster, *flags: str) -> Iterator[RealCluster]:
    """Two replicas with holds on, instead of the session's one; the session's replica back afterwards."""
    cluster.stop_extender()
    try:
        for name in REPLICAS:
            cluster.start_extender(name, *flags)
        yield cluster
    finally:
        for name in list(cluster.extenders):
            cluster.stop_extender(name)
        cluster.start_extender()


@pytest.fixture
def holding(real_cluster: RealCluster) -> Iterator[RealCluster]:
    yield from _replicas(real_cluster, *FLAGS)


@pytest.fixture
def yielding(real_cluster: RealCluster) -> Iterator[RealCluster]:
    yield from _replicas(real_cluster, *FLAGS, "--hold-yield-after", str(YIELD_AFTER))


def _run(cluster: RealCluster, ns: str, name: str, pods: int, walltime: str | None) -> list[str]:
    names = scenario.indexed_job(cluster, ns, name, pods, {keys.MAX_RUNTIME_ANNOTATION: walltime} if walltime else {})
    return names


def _holds(cluster: RealCluster, ns: str, job: str) -> list[dict[str, Any]]:
    return [r["spec"] for r in cluster.reservations(ns)
            if r["spec"].get("segment", {}).get("jobName") == job and "expectedStart" in r["spec"]]


def _held_gpus(cluster: RealCluster, replica: str) -> dict[str, float]:
    text = cluster.extenders[replica].get("/metrics").text
    return {m.group(1): float(m.group(2)) for m in re.finditer(r'^imex_webhook_held_gpus\{domain="([^"]+)"\} (\S+)$',
                                                              text, re.M) if float(m.group(2))}


def _sees(cluster: RealCluster, replica: str, wanted: dict[str, float]) -> None:
    eventually(lambda: _held_gpus(cluster, replica) == wanted, 30, what=f"{replica} shows the holds {wanted}")


def _clique(rack: str) -> str:
    return RACKS[rack][0]


def _hold_racks_for_big(cluster: RealCluster, ns: str) -> tuple[list[str], list[str], list[str]]:
    """Rack a runs a 4-pod job of 20 minutes, rack b a 3-pod job of 40; 'big' (2 segments of 3) waits and
    is held: returns the three jobs' pods."""
    short = _run(cluster, ns, "short", 4, "20m")
    assert scenario.domains_of(cluster.wait_bound(ns, short)) == {"a"}
    long = _run(cluster, ns, "long", 3, "40m")
    assert scenario.domains_of(cluster.wait_bound(ns, long)) == {"b"}
    big = scenario.indexed_job(cluster, ns, "big", 6, {keys.SEGMENT_SIZE_ANNOTATION: "3"})
    try:
        eventually(lambda: len(_holds(cluster, ns, "big")) == 2, HOLD_AFTER + 90, interval=0.5,
                   what="both racks held for job big")
    except AssertionError as failure:
        inspect = cluster.extenders[REPLICAS[0]].get("/inspect").json()
        seen = {k: inspect.get(k) for k in ("groups", "reservations")}
        raise AssertionError(f"{failure}\n{cluster.explain(ns)}\n--- /inspect:\n{seen}") from None
    return short, long, big


def test_a_two_rack_job_gets_its_racks_held_backfill_fits_beside_and_it_binds_when_they_drain(
        holding: RealCluster) -> None:
    cluster = holding
    ns = cluster.namespace("holds")
    try:
        short, long, big = _hold_racks_for_big(cluster, ns)
        held = _holds(cluster, ns, "big")
        assert {h["domain"] for h in held} == {_clique("a"), _clique("b")}
        assert len({h["expectedStart"] for h in held}) == 1, held  # one start for the whole job
        assert not [p for p in cluster.api.list("Pod", ns) if p["metadata"]["name"].startswith("big-")
                    and p["spec"].get("nodeName")]
        ledgers = {r["spec"]["domain"]: r["spec"]["promises"] for r in cluster.api.list("DomainReservation")
                   if "promises" in r["spec"]}
        for h in held:  # the ledger's promise carries the hold too, and no other hold is in the domain
            assert [p["expectedStart"] for p in ledgers[h["domain"]] if "expectedStart" in p] == [h["expectedStart"]]
        eventually(lambda: cluster.events_for(ns, "big-0", "DomainHeld"), 60, what="the DomainHeld Event on big-0")

        # Both replicas read the same holds (the objects are the record; the first one made them).
        wanted = {_clique("a"): 12.0, _clique("b"): 12.0}
        for replica in REPLICAS:
            _sees(cluster, replica, wanted)

        # Rack a's job ends early: the room is there, but rack a stays held for big, whose start is rack b's.
        for pod in short:
            cluster.api.delete("Pod", ns, pod)
        eventually(lambda: not [r for r in cluster.reservations(ns) if r["spec"]["groupName"] == "short"], 60,
                   what="rack a's job released")
        idle = _run(cluster, ns, "idle", 2, None)
        try:
            told = eventually(lambda: cluster.events_for(ns, "idle-0", "NoBackfill"), 60, what="idle told why")
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{cluster.explain(ns)}") from None
        assert f"is held for {ns}/big" in told[0]["note"] and "states no walltime" in told[0]["note"], told
        quick = scenario.indexed_job(cluster, ns, "quick", 2, active_deadline=600)
        assert scenario.domains_of(cluster.wait_bound(ns, quick)) == {"a"}  # 10 minutes end before the hold starts
        assert not [p for p in cluster.api.list("Pod", ns) if p["metadata"]["name"].startswith("idle-")
                    and p["spec"].get("nodeName")], "a job with no walltime never backfills into a held rack"
        assert len(_holds(cluster, ns, "big")) == 2

        # A replica restarts: it reads the holds back from the API server and keeps them.
        before = {h["groupId"]: h["expectedStart"] for h in _holds(cluster, ns, "big")}
        cluster.stop_extender(REPLICAS[1])
        cluster.start_extender(REPLICAS[1], *FLAGS)
        _sees(cluster, REPLICAS[1], wanted)
        assert {h["groupId"]: h["expectedStart"] for h in _holds(cluster, ns, "big")} == before

        # Racks a and b drain: big binds into them, one segment per rack, as soon as the room is there.
        for pod in [*long, *quick, *idle]:
            cluster.api.delete("Pod", ns, pod)
        drained = time.monotonic()
        placed = cluster.wait_bound(ns, big, timeout=BOUND)
        RETRY_SECONDS["held job bound after its racks drained"] = time.monotonic() - drained
        segments = [{rack_of(placed[f"big-{r}"]) for r in range(s * 3, s * 3 + 3)} for s in range(2)]
        assert sorted(map(sorted, segments)) == [["a"], ["b"]], placed
        stored = [r["spec"] for r in cluster.reservations(ns) if r["spec"].get("segment", {}).get("jobName") == "big"]
        assert len(stored) == 2 and all("placedAt" in s for s in stored)  # the holds are now its reservations
    finally:
        cluster.cleanup(ns)


def test_deleting_a_held_job_releases_its_racks_at_once(holding: RealCluster) -> None:
    cluster = holding
    ns = cluster.namespace("holds-deleted")
    try:
        _, _, big = _hold_racks_for_big(cluster, ns)
        for pod in big:
            cluster.api.delete("Pod", ns, pod)
        deleted = time.monotonic()
        # Not the hold's timeout (4 h) nor the reservation TTL: released on the deletes' watch events.
        eventually(lambda: not _holds(cluster, ns, "big"), 60, interval=0.2, what="the holds released")
        RETRY_SECONDS["held job deleted -> racks released"] = time.monotonic() - deleted
        eventually(lambda: all(not _held_gpus(cluster, r) for r in REPLICAS), 30, what="no replica holds a rack")
    finally:
        cluster.cleanup(ns)


def test_the_holds_give_way_while_a_one_rack_job_waits_long_and_come_back_once_it_is_gone(
        yielding: RealCluster) -> None:
    cluster = yielding
    ns = cluster.namespace("holds-yield")
    try:
        _hold_racks_for_big(cluster, ns)
        solo = _run(cluster, ns, "solo", 3, None)  # one rack's worth; racks a and b are full, it waits
        created = time.monotonic()
        assert len(_holds(cluster, ns, "big")) == 2, "solo has not waited --hold-yield-after: the holds stay"
        eventually(lambda: not _holds(cluster, ns, "big"), YIELD_AFTER + 60, interval=0.5,
                   what="the holds given way to solo")
        waited = time.monotonic() - created
        assert waited >= YIELD_AFTER - 5, f"given way after {waited:.0f} s, before solo had waited {YIELD_AFTER} s"
        RETRY_SECONDS["one-rack job waited -> holds given way"] = waited
        eventually(lambda: all(not _held_gpus(cluster, r) for r in REPLICAS), 30, what="no replica holds a rack")
        assert not [p for p in cluster.api.list("Pod", ns) if p["metadata"]["name"].startswith(("big-", "solo-"))
                    and p["spec"].get("nodeName")], "nothing had room: nobody was placed"
        for pod in solo:
            cluster.api.delete("Pod", ns, pod)
        eventually(lambda: len(_holds(cluster, ns, "big")) == 2, 60, interval=0.5,
                   what="both racks held for big again once solo is gone")
    finally:
        cluster.cleanup(ns)
