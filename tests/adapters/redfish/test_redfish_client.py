"""The Redfish client against the simulator over real HTTP: discovery, capacity, attach and detach by
action and by PATCH, tasks, ETags, and the failures it must survive without composing a block twice or
leaving one composed after a failed attach."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import pytest

from tests.concurrency import run_together
from tests.fabric_sims import BLOCKS, SYSTEMS, Sim, deadline, inventory
from tests.kubefake import eventually
from webhook.adapters.redfish.fabric import RedfishFabric
from webhook.adapters.redfish.payloads import BlockInfo, FabricError
from webhook.sim.fabric import inventory as inv

A0, A1, B0 = f"{SYSTEMS}/a-0", f"{SYSTEMS}/a-1", f"{SYSTEMS}/b-0"


def test_discovery_follows_links_from_the_service_root(fabric: RedfishFabric) -> None:
    found = fabric.inventory.discover()
    assert found.blocks == BLOCKS and found.systems_collection == SYSTEMS
    assert found.zones == {"pool-a": "/redfish/v1/CompositionService/ResourceZones/pool-a",
                           "pool-b": "/redfish/v1/CompositionService/ResourceZones/pool-b"}
    assert found.systems == {A0: "pool-a", A1: "pool-a", B0: "pool-b"}
    assert fabric.free_per_zone() == {"pool-a": 4, "pool-b": 2}
    gpu = fabric.inventory.free_blocks()["pool-a"][1]
    assert (gpu.id, gpu.name, gpu.zone, gpu.state, gpu.pci_address) == (f"{BLOCKS}/ga-1", "ga-1", "pool-a", "Unused",
                                                                         "0000:42:00.0")
    assert gpu.uuid == inv.gpu_uuid("pool-a/ga-1") and gpu.to_block().uuid == gpu.uuid


def test_free_blocks_are_cached_for_the_refresh_interval(sim: Sim) -> None:
    now = [0.0]
    fabric = sim.fabric(refresh_interval=5.0, clock=lambda: now[0])
    try:
        assert fabric.free_per_zone()["pool-a"] == 4
        sim.fabric().compose(A0, ["ga-0"], deadline())
        requests_before = sim.state()["stats"]["requests"]
        assert fabric.free_per_zone()["pool-a"] == 4  # cached
        assert sim.state()["stats"]["requests"] == requests_before
        now[0] = 6.0
        assert fabric.free_per_zone()["pool-a"] == 3
        sim.fabric().decompose(A0, ["ga-0"], deadline())
        fabric.inventory.invalidate()
        assert fabric.free_per_zone()["pool-a"] == 4
    finally:
        fabric.stop()


class FreeFigures:
    """The store's side of the inventory feed: every free-per-zone figure it was given."""

    def __init__(self) -> None:
        self.seen: list[dict[str, int]] = []

    def set_fabric_free(self, free: Mapping[str, int]) -> None:
        self.seen.append(dict(free))


def test_a_background_refresh_keeps_capacity_current_without_blocking_callers(sim: Sim) -> None:
    figures = FreeFigures()
    fabric = sim.fabric(refresh_interval=0.05)
    try:
        assert not fabric.ready()[0]
        fabric.feed(figures, 0.05)  # callers read the figures it stores, never the fabric
        eventually(lambda: figures.seen, what="the first inventory read")
        assert figures.seen[0] == {"pool-a": 4, "pool-b": 2} and fabric.ready()[0]
        sim.running.simulator.set_block_state("ga-0", "Unavailable")
        eventually(lambda: figures.seen[-1]["pool-a"] == 3, what="the refreshed figure")
        assert figures.seen[-1] == {"pool-a": 3, "pool-b": 2} and fabric.inventory.last_refresh_error == ""
    finally:
        fabric.stop()


def test_system_for_prefers_the_annotation_then_the_node_name(fabric: RedfishFabric) -> None:
    assert fabric.inventory.system_for("a-1") == A1
    assert fabric.inventory.system_for("other-name", "/redfish/v1/Systems/b-0") == B0
    with pytest.raises(FabricError, match=r"imex-webhook\.io/redfish-system"):
        fabric.inventory.system_for("nope")
    with pytest.raises(FabricError, match="404"):
        fabric.inventory.system_for("nope", "/redfish/v1/Systems/nope")


@pytest.mark.parametrize("actions", [True, False], ids=["by-action", "by-patch"])
@pytest.mark.parametrize("delay", [0.0, 0.15], ids=["sync", "task"])
def test_attach_and_detach_compose_and_release_the_blocks(start_sim: Callable[..., Sim], actions: bool,
                                                          delay: float) -> None:
    sim = start_sim(inventory(actions=actions, compose_delay_s=delay))
    with sim.fabric() as fabric:
        blocks = fabric.compose(A0, ["ga-0", f"{BLOCKS}/ga-1"], deadline())
        assert [b.name for b in blocks] == ["ga-0", "ga-1"] and all(b.composed_to(A0) for b in blocks)
        assert sim.composed()["a-0"] == ["ga-0", "ga-1"]
        assert [b.name for b in fabric.inventory.blocks_of(A0)] == ["ga-0", "ga-1"]
        assert fabric.free_per_zone()["pool-a"] == 2
        fabric.compose(A0, ["ga-1"], deadline())  # already there: done, nothing sent
        assert sim.state()["stats"]["compose_requested"] == 2
        fabric.decompose(A0, ["ga-0", "ga-1"], deadline())
        assert sim.composed()["a-0"] == [] and fabric.free_per_zone()["pool-a"] == 4
    assert sim.state()["stats"]["decomposed"] == 2


@pytest.mark.parametrize("no_location", [False, True], ids=["location", "no-location-header"])
def test_a_202_task_is_followed_to_its_end(start_sim: Callable[..., Sim], no_location: bool) -> None:
    sim = start_sim(inventory(compose_delay_s=0.2, no_location_header=no_location))
    with sim.fabric() as fabric:
        (block,) = fabric.compose(A1, ["ga-3"], deadline())
        assert block.state == "Composed"
        assert sim.state()["tasks"]["1"]["state"] == "Completed"


def test_retry_after_sets_the_pace_of_task_polling(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(compose_delay_s=1.0))
    with sim.fabric(backoff=0.01, max_poll_interval=0.05) as fabric:
        fabric.compose(A0, ["ga-0"], deadline())
    assert sim.state()["stats"]["monitor_polls"] <= 2  # not 1.0 / 0.05 = 20


def test_a_stale_etag_is_re_read_and_the_patch_retried_once(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(actions=False))
    with sim.fabric() as first, sim.fabric() as second:
        first.compose(A0, ["ga-0"], deadline())  # first now holds the system's ETag
        second.compose(A0, ["ga-1"], deadline())  # ... which this makes stale
        first.compose(A0, ["ga-2"], deadline())
    assert sim.state()["stats"]["precondition_failed"] == 1
    assert sim.composed()["a-0"] == ["ga-0", "ga-1", "ga-2"]  # If-Match kept first from dropping ga-1


@pytest.mark.parametrize("actions", [True, False], ids=["by-action", "by-patch"])
def test_a_required_if_match_is_learned_from_428_even_with_the_etag_only_in_the_body(
        start_sim: Callable[..., Sim], actions: bool) -> None:
    sim = start_sim(inventory(require_if_match=True, etag_header=False, actions=actions, page_size=2))
    with sim.fabric() as fabric:
        fabric.compose(A0, ["ga-0", "ga-1"], deadline())
        fabric.decompose(A0, ["ga-0"], deadline())
    assert sim.composed()["a-0"] == ["ga-1"]
    assert sim.state()["stats"]["precondition_required"] <= 1


def test_5xx_before_the_attach_is_retried_and_composes_once(sim: Sim) -> None:
    with sim.fabric() as fabric:
        fabric.inventory.discover()  # logged in: the failures below meet the action, not the session login
        sim.faults(fail_next=2, error_status=500, error_methods=["POST"])
        fabric.compose(A0, ["ga-0"], deadline())
    stats = sim.state()["stats"]
    assert (stats["injected_errors"], stats["compose_requested"]) == (2, 1)
    assert sim.composed()["a-0"] == ["ga-0"]


@pytest.mark.parametrize("delay", [0.0, 0.1], ids=["sync", "task"])
def test_compose_then_crash_does_not_attach_twice(start_sim: Callable[..., Sim], delay: float) -> None:
    sim = start_sim(inventory(compose_delay_s=delay, faults={"crash_after_compose": 1}))
    with sim.fabric() as fabric:
        (block,) = fabric.compose(A0, ["ga-0"], deadline())
    assert block.composed_to(A0)
    assert sim.state()["stats"]["compose_requested"] == 1 and sim.state()["stats"]["crashes"] == 1


def test_when_the_attach_fails_the_blocks_it_composed_are_rolled_back(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(faults={"fail_compose": ["ga-1"]}))
    with sim.fabric() as fabric, pytest.raises(FabricError) as err:
        fabric.compose(A0, ["ga-0", "ga-1"], deadline())
    assert "Base.1.22.OperationFailed" in err.value.message_ids and not err.value.leftover
    assert sim.composed()["a-0"] == []
    assert sim.state()["blocks"]["ga-1"]["state"] == "Failed"


# Seeds picked to cover: no error, errors then success, failure on the first block, and failure on the
# second block whose rollback also meets errors (the leftover is then reported, not hidden).
@pytest.mark.parametrize("seed", [0, 3, 4, 7, 18, 28])
def test_random_5xx_on_changes_end_with_every_block_composed_or_none_unreported(sim: Sim, seed: int) -> None:
    with sim.fabric(retries=2) as fabric:
        fabric.inventory.discover()  # logged in first, so the seeded draws fall on the actions as they were picked for
        sim.faults(error_rate=0.5, seed=seed, error_status=500, error_methods=["POST"])
        try:
            fabric.compose(A0, ["ga-0", "ga-1"], deadline())
            outcome = ["ga-0", "ga-1"]
        except FabricError as exc:
            assert exc.retryable, exc
            outcome = sorted(uri.rsplit("/", 1)[1] for uri in exc.leftover)  # only what the error owns up to
    sim.faults(error_rate=0)
    assert sorted(sim.composed()["a-0"]) == outcome
    stats = sim.state()["stats"]
    assert stats["compose_requested"] - stats["decomposed"] == len(outcome)


def test_a_task_that_never_finishes_times_out_in_the_task_phase_and_detach_still_works(
        start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(compose_delay_s=0.05, faults={"stuck_tasks": True}))
    with sim.fabric() as fabric:
        with pytest.raises(FabricError) as err:
            fabric.compose(A0, ["ga-0"], deadline(0.6))
        assert (err.value.phase, err.value.retryable, err.value.deadline) == ("task", True, True)
        assert "deadline passed while waiting (task /redfish/v1/TaskService/TaskMonitors/1" in str(err.value)
        assert sim.state()["blocks"]["ga-0"]["state"] == "Composing"  # in flight: left for the reconciler
        with pytest.raises(FabricError, match="deadline passed"):
            fabric.compose(A0, ["ga-0"], deadline(0.3))  # a repeated attach waits for it, sends nothing
        assert sim.state()["stats"]["compose_requested"] == 1
        fabric.decompose(A0, ["ga-0"], deadline())
    assert sim.state()["blocks"]["ga-0"]["state"] == "Unused"
    assert sim.state()["tasks"]["1"]["state"] == "Cancelled"


def test_two_clients_racing_for_the_last_free_block_one_wins(start_sim: Callable[..., Sim]) -> None:
    base = inventory()
    taken = tuple(b if b.id == "ga-3" else inv.BlockSpec(b.id, b.zone, uuid=b.uuid, state="Unavailable")
                  for b in base.blocks)
    sim = start_sim(inv.Inventory(base.zones, base.systems, taken))
    systems = (A0, A1)
    with sim.fabric() as first, sim.fabric() as second:
        fabrics = (first, second)
        for fabric in fabrics:
            fabric.inventory.discover()

        def race(i: int) -> list[BlockInfo] | FabricError:
            try:
                return fabrics[i].compose(systems[i], ["ga-3"], deadline())
            except FabricError as exc:
                return exc

        results = dict(zip(systems, run_together(2, race), strict=True))
    errors = [r for r in results.values() if isinstance(r, FabricError)]
    assert len(results) == 2 and len(errors) == 1
    assert errors[0].has("ResourceBlockInUse"), errors[0]
    winner = next(s for s, r in results.items() if not isinstance(r, FabricError))
    assert sim.composed()[winner.rsplit("/", 1)[1]] == ["ga-3"]


@pytest.mark.parametrize("actions", [True, False], ids=["by-action", "by-patch"])
@pytest.mark.parametrize(("block", "message_id", "status"), [
    ("gb-0", "Composition.1.1.IncompatibleZone", 400),
    ("nope", "Composition.1.1.ResourceBlockNotFound", 404),
], ids=["other-zone", "unknown"])
def test_a_block_the_service_refuses_is_reported_with_its_message_id(
        start_sim: Callable[..., Sim], actions: bool, block: str, message_id: str, status: int) -> None:
    sim = start_sim(inventory(actions=actions))
    with sim.fabric() as fabric, pytest.raises(FabricError) as err:
        fabric.compose(A0, ["ga-0", block], deadline())
    assert message_id in err.value.message_ids and err.value.status == status
    assert not err.value.retryable and f"{BLOCKS}/{block}" in str(err.value)
    assert sim.composed()["a-0"] == []  # ga-0, composed first by the action, was rolled back


def test_detaching_a_free_block_is_success(fabric: RedfishFabric, sim: Sim) -> None:
    fabric.decompose(A0, ["ga-0"], deadline())
    fabric.compose(A1, ["ga-1"], deadline())
    fabric.decompose(A0, ["ga-1"], deadline())  # composed elsewhere: not this system's, nothing to do
    assert sim.composed()["a-1"] == ["ga-1"]
    assert sim.state()["stats"]["decomposed"] == 0


def test_orphans_are_the_composed_blocks_nobody_knows(fabric: RedfishFabric) -> None:
    fabric.compose(A0, ["ga-0", "ga-1"], deadline())
    fabric.compose(B0, ["gb-0"], deadline())
    orphans = fabric.inventory.orphans({f"{BLOCKS}/ga-0", "gb-0"})
    assert [(system, block.name) for system, block in orphans] == [(A0, "ga-1")]


def test_wrong_credentials_fail_at_once_and_say_so(sim: Sim) -> None:
    with RedfishFabric(sim.url, "admin", "wrong", backoff=0.01) as fabric, pytest.raises(FabricError) as err:
        fabric.inventory.discover()
    assert err.value.status == 401 and "credentials" in str(err.value)
    assert sim.state()["stats"]["requests"] == 2  # the open service root, then the refused session login
    assert sim.state()["sessions"]["refused_logins"] == 1


def test_a_hung_service_fails_the_attach_in_time_with_nothing_composed(sim: Sim) -> None:
    with sim.fabric(timeout=0.3, retries=1) as fabric:
        fabric.inventory.discover()
        sim.faults(hang=True, hang_cap_s=5)
        started = time.monotonic()
        with pytest.raises(FabricError, match="no answer") as err:
            fabric.compose(A0, ["ga-0"], deadline(2.0))
        assert err.value.retryable and time.monotonic() - started < 2.0
        sim.faults(hang=False)
    assert sim.composed()["a-0"] == []


def test_error_messages_are_cut_to_256_characters(sim: Sim) -> None:
    err = FabricError("attach to x", "y", "z" * 1000, message_ids=["Base.1.22.GeneralError"])
    assert len(err.detail) == 256 and err.has("GeneralError")
