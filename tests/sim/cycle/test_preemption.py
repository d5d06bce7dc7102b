"""Preemption's dry run and the extender's preempt verb.

Cluster (4 CPUs per node): n1 runs v1 (priority 1, 3 CPUs, started Jan 1); n2 runs v2 (priority 5,
3 CPUs); n3 runs v3a and v3b (priority 1, 2 CPUs each; v3a started first, so it is the more important
and is reprieved first). The incoming pod wants 2 CPUs at priority 10: no node has room, every node
can make room by evicting one pod (v1, v2, v3b).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.cycle import objects as o
from webhook.sim.cycle import parse_cluster, schedule_one

NODES = [o.node(n, cpu="4") for n in ("n1", "n2", "n3")]
BOUND = [o.pod("v1", cpu="3", priority=1, on="n1", status={"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}),
         o.pod("v2", cpu="3", priority=5, on="n2", status={"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}),
         o.pod("v3a", cpu="2", priority=1, on="n3", status={"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}),
         o.pod("v3b", cpu="2", priority=1, on="n3", status={"phase": "Running", "startTime": "2026-01-02T00:00:00Z"})]
CLUSTER = parse_cluster(NODES, BOUND)
INCOMING = o.pod("p", cpu="2", priority=10)
NO_ROOM = "0/3 nodes are available: 3 Insufficient cpu. "


def meta(*uids: str) -> dict[str, Any]:
    return {"Pods": [{"UID": f"uid-ml-{u}"} for u in uids], "NumPDBViolations": 0}


def test_the_extender_gets_the_candidates_as_meta_victims_and_its_choice_wins() -> None:
    fake = o.FakeExtender(preempt_keep={"n1", "n2"})
    attempt = schedule_one(o.config(), CLUSTER, INCOMING, fake)
    (preempt_args,) = [args for verb, args in fake.calls if verb == "preempt"]
    assert preempt_args == {"Pod": INCOMING, "NodeNameToVictims": None,
                            "NodeNameToMetaVictims": {"n1": meta("v1"), "n2": meta("v2"), "n3": meta("v3b")}}
    # Of what the extender kept, n1's victim has the lower priority (1 < 5).
    assert (attempt.nominated, attempt.victims) == ("n1", ("ml/v1",))
    assert attempt.message == (NO_ROOM + "preemption: found a potential placement for pod on node n1, "
                               "preempting 1 victims")
    assert attempt.cluster.pod("ml/v1") is None


def test_without_a_node_cache_the_extender_gets_whole_victim_pods() -> None:
    fake = o.FakeExtender()
    schedule_one(o.config(cache_capable=False), CLUSTER, INCOMING, fake)
    (preempt_args,) = [args for verb, args in fake.calls if verb == "preempt"]
    assert preempt_args["NodeNameToMetaVictims"] is None
    assert preempt_args["NodeNameToVictims"]["n3"] == {"Pods": [BOUND[3]], "NumPDBViolations": 0}


@pytest.mark.parametrize(("keep", "nominated"), [
    pytest.param(None, "n3", id="n1 and n3 tie on priorities and counts; n3's victim started later"),
    pytest.param({"n2"}, "n2", id="the extender can leave only the node with the costlier victim"),
])
def test_the_node_is_chosen_among_what_the_extender_kept(keep: set[str] | None, nominated: str) -> None:
    attempt = schedule_one(o.config(), CLUSTER, INCOMING, o.FakeExtender(preempt_keep=keep))
    assert attempt.nominated == nominated


def test_without_a_preempt_verb_the_extender_is_not_asked() -> None:
    fake = o.FakeExtender()
    attempt = schedule_one(o.config(preempt=False), CLUSTER, INCOMING, fake)
    assert (attempt.nominated, fake.verbs()) == ("n3", [])


def test_an_extender_keeping_no_candidate_leaves_the_pod_without_a_nomination() -> None:
    attempt = schedule_one(o.config(), CLUSTER, INCOMING, o.FakeExtender(preempt_keep=set()))
    assert attempt.message == NO_ROOM + "preemption: no candidate node for preemption"
    assert attempt.nominated is None and attempt.cluster.pods == CLUSTER.pods


class NamesAStranger(o.FakeExtender):
    def preempt(self, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("preempt", args))
        return {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "stranger"}], "NumPDBViolations": 0}}}


def test_an_extender_naming_a_pod_that_is_not_on_the_node_is_an_error() -> None:
    attempt = schedule_one(o.config(), CLUSTER, INCOMING, NamesAStranger())
    assert attempt.message == NO_ROOM + (
        "preemption: extender: https://imex-webhook.imex-system.svc:443 claims to preempt pod (UID: &{stranger}) "
        "on node: n1, but the pod is not found on that node")


def test_the_preemptor_lands_on_its_nominated_node_next_cycle_without_prioritize() -> None:
    first = schedule_one(o.config(), CLUSTER, INCOMING, o.FakeExtender(preempt_keep={"n1"}))
    assert first.pod_raw["status"]["nominatedNodeName"] == "n1"
    fake = o.FakeExtender()
    second = schedule_one(o.config(), first.cluster, first.pod_raw, fake)
    assert (second.outcome, second.node) == ("bound", "n1")
    assert fake.verbs() == ["filter", "bind"] and fake.calls[0][1]["NodeNames"] == ["n1"]


def test_nodes_the_extender_marks_unresolvable_are_never_tried() -> None:
    fake = o.FakeExtender(unresolvable={"n1": "outside the domain", "n2": "outside the domain"})
    cluster = parse_cluster(NODES[:2], [o.pod("low", priority=0, on="n1")])
    attempt = schedule_one(o.config(), cluster, INCOMING, fake)
    assert attempt.message == ("0/2 nodes are available: 2 outside the domain. "
                               "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


def test_a_node_the_extender_fails_but_that_fits_in_tree_has_no_victims_to_offer() -> None:
    # Preemption re-runs only the in-tree filters: n1 fits without evicting anyone, so the dry run finds
    # no victim and kube-scheduler reports an error instead of a candidate.
    fake = o.FakeExtender(failed={"n1": "room only after other pods finish"})
    cluster = parse_cluster(NODES[:1], [o.pod("low", cpu="1", priority=0, on="n1")])
    attempt = schedule_one(o.config(), cluster, INCOMING, fake)
    assert attempt.message == ("0/1 nodes are available: 1 room only after other pods finish. "
                               'preemption: expected at least one victim pod on node "n1"')
