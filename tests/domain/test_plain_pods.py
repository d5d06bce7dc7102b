"""GPU pods outside any group (webhook.domain.placement.plain_pods). At filter a node without room for their
device-plugin GPUs fails, with why (in fabric mode the dedicated profile leaves ``nvidia.com/gpu`` to the extender, so
nothing else would check). At prioritize they are packed: used racks first (those one group holds most of
last among them), fullest tray first; whole free racks, racks held for a group and composable nodes last."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders
from webhook.domain.decisions import filtering, scoring
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Reservation
from webhook.domain.placement import plain_pods
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing

POLICY = Policy()
A = "aaaa-1111.7"


def _filter(objects: list[dict[str, Any]], pod: dict[str, Any], candidates: list[str] | None = None,
            ) -> filtering.FilterOutcome:
    snap = builders.snapshot(objects)
    return filtering.filter_nodes(parsing.pod(pod), candidates or sorted(snap.nodes),
                                  DecisionInputs(snap, POLICY, 1000.0))


def _busy(node: str, gpus: int, name: str) -> dict[str, Any]:
    return builders.pod(name, gpus=gpus, node=node, phase="Running", namespace="other")


@pytest.mark.parametrize(("used", "asked", "passes"), [
    (0, 4, True), (2, 2, True), (3, 1, True), (3, 2, False), (4, 1, False), (0, 5, False),
], ids=["empty-node-whole-tray", "exactly-the-rest", "last-gpu", "one-short", "full", "more-than-the-node-has"])
def test_a_gpu_pod_outside_any_group_passes_only_nodes_with_room_for_its_gpus(used: int, asked: int,
                                                                             passes: bool) -> None:
    objects = [*builders.rack("a", A, 1), *([_busy("a-00", used, "busy")] if used else [])]
    out = _filter(objects, builders.pod("plain", gpus=asked))
    assert out.passed == (("a-00",) if passes else ())
    if not passes:
        assert out.failed == {"a-00": f"pod needs {asked} nvidia.com/gpu; node has {4 - used} free"}
        assert not out.unresolvable  # room may come: preemption and retries still apply
        assert (out.outcome, out.reason_class) == ("no-fit", "no-fit")


def test_the_nodes_with_room_pass_and_the_full_ones_say_why() -> None:
    objects = [*builders.rack("a", A, 3), builders.node("hgx", 8), _busy("a-01", 4, "full"), _busy("hgx", 7, "big")]
    out = _filter(objects, builders.pod("plain", gpus=2))
    assert out.passed == ("a-00", "a-02")
    assert out.failed == {"a-01": "pod needs 2 nvidia.com/gpu; node has 0 free",
                          "hgx": "pod needs 2 nvidia.com/gpu; node has 1 free"}
    assert out.outcome == "pass-through" and out.context is None


def test_a_node_whose_gpus_are_only_dra_devices_never_takes_a_device_plugin_pod() -> None:
    """In fabric mode kube-scheduler does not count nvidia.com/gpu: without this the pod lands on a DRA-only
    node and the kubelet refuses it (found by tests/e2e/test_real_plain_pods.py)."""
    objects = [builders.node("dra", 0, A), builders.gpu_slice("dra-gpus", "dra", 4), *builders.rack("a", A, 1)]
    out = _filter(objects, builders.pod("plain", gpus=1))
    assert out.passed == ("a-00",) and not out.failed
    assert out.unresolvable == {"dra": "pod requests 1 nvidia.com/gpu from the device plugin; node publishes its "
                                       "GPUs only as DRA devices"}
    alone = _filter(objects, builders.pod("plain", gpus=1), ["dra"])
    assert alone.passed == () and set(alone.unresolvable) == {"dra"} and alone.outcome == "no-fit"


@pytest.mark.parametrize(("asked", "passes"), [(2, True), (3, False)])
def test_a_node_with_both_kinds_offers_a_plain_pod_only_its_device_plugin_gpus(asked: int, passes: bool) -> None:
    objects = [builders.node("mixed", 2, A), builders.gpu_slice("mixed-gpus", "mixed", 2)]
    out = _filter(objects, builders.pod("plain", gpus=asked))
    assert out.passed == (("mixed",) if passes else ())
    assert out.failed == ({} if passes else {"mixed": "pod needs 3 nvidia.com/gpu; node has 2 free"})


def test_a_pod_without_gpus_passes_every_node_even_a_full_one() -> None:
    objects = [*builders.rack("a", A, 2), _busy("a-00", 4, "full")]
    out = _filter(objects, builders.pod("cpu-only", gpus=0))
    assert out.passed == ("a-00", "a-01") and not out.failed


def test_a_node_the_cache_does_not_know_yet_is_left_to_the_scheduler() -> None:
    out = _filter(builders.rack("a", A, 1), builders.pod("plain", gpus=1), ["a-00", "new-node"])
    assert out.passed == ("a-00", "new-node")


def test_finished_pods_hold_no_gpus() -> None:
    done = builders.pod("done", gpus=4, node="a-00", phase="Succeeded", namespace="other")
    out = _filter([*builders.rack("a", A, 1), done], builders.pod("plain", gpus=4))
    assert out.passed == ("a-00",)


def test_an_absurd_gpu_count_fails_every_node_with_the_count_it_asked() -> None:
    out = _filter(builders.rack("a", A, 2), builders.pod("greedy", gpus=10**18))
    assert out.passed == ()
    assert set(out.failed.values()) == {f"pod needs {10**18} nvidia.com/gpu; node has 4 free"}


def _scores(objects: list[dict[str, Any]], pod: dict[str, Any], reservations: dict[str, Any] | None = None,
            ) -> dict[str, int]:
    snap = builders.snapshot(objects, reservations)
    return dict(scoring.prioritize(parsing.pod(pod), sorted(snap.nodes), DecisionInputs(snap, POLICY, 1000.0)))


B, C = "bbbb-2222.7", "cccc-3333.7"


def test_a_plain_gpu_pod_scores_a_used_rack_above_a_node_in_no_rack_above_a_whole_free_rack() -> None:
    objects = [*builders.rack("used", A, 2), *builders.rack("free", B, 2), builders.node("hgx", 8),
               _busy("used-00", 4, "whole-tray")]
    scores = _scores(objects, builders.pod("plain", gpus=1))
    assert scores["used-00"] == 0  # no room
    assert scores["used-01"] > scores["hgx"] > scores["free-00"] == scores["free-01"] >= 2
    assert all(0 <= s <= 10 for s in scores.values())


@pytest.mark.parametrize(("used_on_tray", "expected_rank"), [(3, 0), (2, 1), (0, 2)])
def test_inside_a_used_rack_the_fullest_tray_that_fits_wins(used_on_tray: int, expected_rank: int) -> None:
    objects = [*builders.rack("r", A, 4), _busy("r-00", 4, "group"), _busy("r-01", 3, "three"),
               _busy("r-02", 2, "two")]
    scores = _scores(objects, builders.pod("plain", gpus=1))
    ranked = sorted(("r-01", "r-02", "r-03"), key=lambda n: -scores[n])
    assert ranked.index({3: "r-01", 2: "r-02", 0: "r-03"}[used_on_tray]) == expected_rank


def test_of_two_used_racks_the_one_no_single_group_holds_most_of_wins() -> None:
    # Rack "job" is mostly one running ComputeDomain: it comes back whole when the job ends, unless a plain pod
    # sits beside it. Rack "mixed" is as busy, with pods of no group: the plain pod goes there.
    job = [builders.pod(f"job-{i}", cd="job", node=f"job-{i:02d}", phase="Running") for i in range(3)]
    objects = [*builders.rack("job", A, 4), *builders.rack("mixed", B, 4), *builders.cd_objects("job", 0), *job,
               *(_busy(f"mixed-{i:02d}", 4, f"other-{i}") for i in range(3))]
    scores = _scores(objects, builders.pod("plain", gpus=4))
    assert scores["mixed-03"] > scores["job-03"] >= plain_pods.USED_BASE
    snap = builders.snapshot(objects)
    uses = plain_pods.domain_uses([A, B], snap)
    assert uses[A] == plain_pods.DomainUse(used_gpus=12, gpus=16, largest_group_gpus=12)
    assert (uses[B].used_gpus, uses[B].largest_group_gpus, uses[B].spread) == (12, 0, 1.0)


def test_a_composable_node_and_a_rack_held_for_a_group_score_lowest_but_not_zero() -> None:
    objects = [*builders.rack("held", A, 2), *builders.rack("used", B, 2), _busy("used-00", 2, "x"),
               _busy("held-00", 1, "y"), builders.node("fab", 1, zone="pool", slots=4)]
    held = {"cd:x": Reservation("cd:x", "ml/x", "ml", A, 2, 4, True, 900.0, version="1")}
    scores = _scores(objects, builders.pod("plain", gpus=1), held)
    assert scores["held-01"] == scores["fab"] == plain_pods.PROTECTED
    assert scores["used-01"] > plain_pods.PROTECTED


def test_a_pod_without_gpus_gets_a_neutral_score_everywhere() -> None:
    scores = _scores(builders.rack("a", A, 2), builders.pod("cpu", gpus=0))
    assert set(scores.values()) == {0}


def test_scores_are_computed_for_the_candidates_sent_not_the_whole_cluster() -> None:
    snap = builders.snapshot([*builders.rack("a", A, 3), *builders.rack("b", B, 3), _busy("a-00", 2, "x")])
    got = plain_pods.weigh(parsing.pod(builders.pod("plain", gpus=1)), ["a-01", "b-00", "unknown"], snap, {})
    assert set(got) == {"a-01", "b-00"}
