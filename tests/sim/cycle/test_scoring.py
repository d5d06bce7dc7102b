"""Score arithmetic: NodeResourcesFit's MostAllocated/LeastAllocated with integer division and the
scheduler's default requests, the extender's ``Score x weight x 10``, and why our weight is 141: one
point from the extender (1,410) outweighs everything the in-tree plugins can add (14 x 100 = 1,400)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.cycle import objects as o
from webhook.service import deploy
from webhook.sim.cycle import parse_cluster, parse_config, schedule_one
from webhook.sim.cycle.cluster import node_infos
from webhook.sim.cycle.config import FitArgs
from webhook.sim.cycle.model import parse_pod
from webhook.sim.cycle.scoring import extender_points, fit_score, select_host

MOST = FitArgs("MostAllocated", (("cpu", 1), ("memory", 1)))
LEAST = FitArgs("LeastAllocated", (("cpu", 1), ("memory", 1)))
MOST_WITH_GPU = FitArgs("MostAllocated", (("cpu", 1), ("memory", 1), (o.GPU, 1)))


def score(fit: FitArgs, incoming: dict[str, Any], node: dict[str, Any], *bound: dict[str, Any]) -> int:
    (info,) = node_infos(parse_cluster([node], list(bound)))
    return fit_score(fit, parse_pod(incoming), info)


@pytest.mark.parametrize(("fit", "incoming", "node", "bound", "expected"), [
    pytest.param(MOST, o.pod("p", cpu="2", memory="8Gi"), o.node("n"), [o.pod("b", cpu="2", memory="8Gi", on="n")],
                 50, id="MostAllocated: cpu 4/8 = 50, memory 16/32 = 50, mean 50"),
    pytest.param(MOST, o.pod("p", cpu="2", memory="8Gi"), o.node("n"), [o.pod("b", cpu="6", memory="8Gi", on="n")],
                 75, id="MostAllocated: cpu 8/8 = 100, memory 16/32 = 50, mean 75"),
    pytest.param(LEAST, o.pod("p", cpu="2", memory="8Gi"), o.node("n"), [o.pod("b", cpu="6", memory="8Gi", on="n")],
                 25, id="LeastAllocated: cpu (8-8)/8 = 0, memory (32-16)/32 = 50, mean 25"),
    pytest.param(MOST, o.pod("p", cpu="1", memory=None), o.node("n", cpu="3", memory="1000Gi"), [],
                 16, id="integer division: cpu 1000*100/3000 = 33; memory 200Mi of 1000Gi = 0; 33/2 = 16"),
    pytest.param(MOST, o.pod("p", cpu=None, memory=None), o.node("n", cpu="1", memory="1Gi"), [],
                 14, id="no requests count as 100m and 200Mi: cpu 10, memory 19, mean 14"),
    pytest.param(MOST, o.pod("p", cpu="4", memory="8Gi"), o.node("n", cpu="2"), [],
                 62, id="MostAllocated caps an over-request at 100: cpu 100, memory 25, mean 62"),
    pytest.param(MOST_WITH_GPU, o.pod("p", cpu="2", memory="8Gi"), o.node("n", gpus=8),
                 [o.pod("b", cpu="2", memory="8Gi", on="n")],
                 50, id="an extended resource the pod does not request is left out of the mean"),
    pytest.param(MOST_WITH_GPU, o.pod("p", cpu="2", memory="8Gi", gpus=4), o.node("n", gpus=8),
                 [o.pod("b", cpu="6", memory="8Gi", on="n")],
                 66, id="a requested GPU joins the mean: cpu 100, memory 50, gpu 4/8 = 50, 200/3 = 66"),
])
def test_node_resources_fit_scores(fit: FitArgs, incoming: dict[str, Any], node: dict[str, Any],
                                   bound: list[dict[str, Any]], expected: int) -> None:
    assert score(fit, incoming, node, *bound) == expected


def test_our_weight_makes_one_extender_point_outweigh_every_in_tree_plugin() -> None:
    (extender,) = parse_config(deploy.scheduler_config()).extenders
    assert extender.weight == deploy.EXTENDER_WEIGHT == 141
    assert extender_points(1, extender.weight) == 1410 > deploy.IN_TREE_SCORE_SPAN == 1400
    assert extender_points(1, extender.weight - 1) == deploy.IN_TREE_SCORE_SPAN


# "a-full" scores 100 in-tree (the pod fills it); "b-empty" scores 0 in-tree. With NodeResourcesFit
# weighted 14 it alone spans the whole in-tree maximum of 1,400.
SCORE_NODES = [o.node("a-full", cpu="2", memory="2Gi"), o.node("b-empty", cpu="1000", memory="1000Gi")]
SCORE_BOUND = [o.pod("b", cpu="1", memory="1Gi", on="a-full")]


@pytest.mark.parametrize(("weight", "winner"), [
    pytest.param(141, "b-empty", id="weight 141: extender 1 point (1410) beats in-tree 100 x 14 (1400)"),
    pytest.param(140, "a-full", id="weight 140: 1400 ties 1400 and the in-tree favourite can win"),
])
def test_one_extender_point_against_the_in_tree_maximum(weight: int, winner: str) -> None:
    fake = o.FakeExtender(scores={"b-empty": 1})
    attempt = schedule_one(o.config(weight=weight, fit_weight=14), parse_cluster(SCORE_NODES, SCORE_BOUND),
                           o.pod("p", cpu="1", memory="1Gi"), fake)
    assert attempt.node == winner


def test_a_single_feasible_node_is_taken_without_asking_the_extender_to_prioritize() -> None:
    fake = o.FakeExtender(failed={"b-empty": "not in the group's domain"})
    attempt = schedule_one(o.config(), parse_cluster(SCORE_NODES), o.pod("p"), fake)
    assert (attempt.node, fake.verbs()) == ("a-full", ["filter", "bind"])


def test_extender_scores_are_not_clamped_to_ten() -> None:
    # Weight 10: a Score of 10 gives 1,000 < 1,400; the out-of-range 15 gives 1,500 and wins.
    fake = o.FakeExtender(scores={"b-empty": 15})
    attempt = schedule_one(o.config(weight=10, fit_weight=14), parse_cluster(SCORE_NODES, SCORE_BOUND),
                           o.pod("p", cpu="1", memory="1Gi"), fake)
    assert attempt.node == "b-empty"


def test_ties_go_to_the_smallest_name_where_kube_scheduler_picks_at_random() -> None:
    assert select_host({"n3": 7, "n1": 7, "n2": 3}) == "n1"


IDLE_AND_BUSY = [o.node("a-idle"), o.node("b-busy")]
BUSY = [o.pod("b", cpu="6", memory="8Gi", on="b-busy")]


@pytest.mark.parametrize(("cache_capable", "winner"), [
    pytest.param(True, "b-busy", id="with NodeNames MostAllocated packs onto the busy node"),
    pytest.param(False, "a-idle", id="with a NodeList reply the returned nodes carry no pods: scores tie"),
])
def test_the_filter_reply_mode_changes_what_in_tree_scoring_sees(cache_capable: bool, winner: str) -> None:
    attempt = schedule_one(o.config(cache_capable=cache_capable), parse_cluster(IDLE_AND_BUSY, BUSY),
                           o.pod("p"), o.FakeExtender())
    assert attempt.node == winner
