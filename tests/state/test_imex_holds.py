"""The store keeps which ComputeDomains hold which nodes through allocated claims, and which nodes publish an
IMEX channel, incrementally from watch events: an allocation holds its node, deallocation, deletion and a
relist without the claim release it, a malformed claim is skipped alone, and racing writers leave the table
exactly as the events say."""

from __future__ import annotations

import copy

from tests import builders
from tests.concurrency import run_together
from webhook.domain.policy import Policy
from webhook.sim.dra_objects import channel_slice
from webhook.state.cluster import ClusterStore


def test_an_allocated_claim_holds_its_node_until_it_is_deallocated_or_deleted() -> None:
    store = builders.store(builders.rack("n", "r.1", 3))
    claim = builders.allocated_claim("c", "n-00", "cd-1")
    store.apply("ResourceClaim", "ADDED", claim)
    assert store.snapshot().imex_holds == {"n-00": frozenset({"cd-1"})}
    released = copy.deepcopy(claim)
    released["status"] = {}
    store.apply("ResourceClaim", "MODIFIED", released)
    assert store.snapshot().imex_holds == {}
    store.apply("ResourceClaim", "MODIFIED", claim)
    store.apply("ResourceClaim", "DELETED", claim)
    assert store.snapshot().imex_holds == {}


def test_two_claims_of_one_compute_domain_on_a_node_release_it_only_together() -> None:
    store = builders.store([])
    store.apply("ResourceClaim", "ADDED", builders.allocated_claim("workload", "n-00", "cd-1"))
    store.apply("ResourceClaim", "ADDED", builders.allocated_claim("daemon", "n-00", "cd-1", target="Daemon"))
    store.apply("ResourceClaim", "DELETED", builders.allocated_claim("workload", "n-00", "cd-1"))
    assert store.snapshot().imex_holds == {"n-00": frozenset({"cd-1"})}
    store.replace("ResourceClaim", [])  # a relist without it
    assert store.snapshot().imex_holds == {}


def test_a_malformed_claim_is_skipped_and_holds_nothing() -> None:
    store = builders.store([])
    bad = builders.allocated_claim("bad", "n-00", "cd-1")
    bad["status"]["allocation"]["devices"]["results"][0]["pool"] = ["n-00"]
    store.apply("ResourceClaim", "ADDED", bad)
    store.apply("ResourceClaim", "ADDED", builders.allocated_claim("good", "n-01", "cd-2"))
    assert store.snapshot().imex_holds == {"n-01": frozenset({"cd-2"})}
    assert store.rejected_counts()["ResourceClaim"] == 1


def test_channel_nodes_follow_the_compute_domain_plugins_slices() -> None:
    store = builders.store(builders.rack("n", "r.1", 3))
    assert store.snapshot().channel_nodes is None  # published nowhere: not checked
    store.apply("ResourceSlice", "ADDED", channel_slice("n-00"))
    store.apply("ResourceSlice", "ADDED", channel_slice("n-01"))
    assert store.snapshot().channel_nodes == frozenset({"n-00", "n-01"})
    store.apply("ResourceSlice", "DELETED", channel_slice("n-00"))
    store.apply("ResourceSlice", "DELETED", channel_slice("n-01"))
    assert store.snapshot().channel_nodes is None


def test_racing_watch_events_leave_exactly_the_holds_they_describe() -> None:
    store = ClusterStore(Policy())
    writers, claims = 6, 40

    def write(i: int) -> None:
        for k in range(claims):
            claim = builders.allocated_claim(f"c-{i}-{k}", f"n-{k % 10:02d}", f"cd-{i}")
            store.apply("ResourceClaim", "ADDED", claim)
            if k % 2:
                store.apply("ResourceClaim", "DELETED", claim)
            store.snapshot()

    run_together(writers, write)
    held = store.snapshot().imex_holds
    # Even k stay: nodes n-00, n-02, ... n-08 held by every writer's ComputeDomain.
    assert held == {f"n-{k:02d}": frozenset(f"cd-{i}" for i in range(writers)) for k in range(0, 10, 2)}
