"""The FailedScheduling text, character for character as kube-scheduler formats it, and our extender's
reasons inside it."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tests.sim.cycle import objects as o
from webhook.sim.cycle import parse_cluster, schedule_one
from webhook.sim.cycle.status import UNSCHEDULABLE, Diagnosis, Status, event_text, fit_error_message

NO_DOMAIN = "no domain can host 20 pods of compute-domain group ml/train-20"
OTHER_DOMAIN = "outside the group's domain"
TAINT = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}


def test_our_extender_reasons_reach_the_failed_scheduling_text_counted_and_sorted() -> None:
    nodes = [o.node("t1", taints=[TAINT]), o.node("c1", cpu="2"), o.node("e1"), o.node("e2"), o.node("u1"),
             o.node("d1")]
    cluster = parse_cluster(nodes, [o.pod("busy", cpu="1500m", on="c1")])
    fake = o.FakeExtender(failed={"e1": NO_DOMAIN, "e2": NO_DOMAIN}, unresolvable={"u1": OTHER_DOMAIN},
                          dropped={"d1"})
    attempt = schedule_one(o.config(), cluster, o.pod("p", cpu="1"), fake)
    # t1: taint; c1: 1 CPU of 0.5 free; e1, e2: our FailedNodes; u1: our FailedAndUnresolvableNodes; d1:
    # dropped without a reason, so it vanishes. Preemption: c1, e1, e2 are Unschedulable but hold no pod
    # of lower priority; the other 3 are not worth trying.
    assert attempt.message == (
        "0/6 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint(s), "
        f"1 {OTHER_DOMAIN}, 2 {NO_DOMAIN}. "
        "preemption: 0/6 nodes are available: 3 No preemption victims found for incoming pod, "
        "3 Preemption is not helpful for scheduling.")
    assert (attempt.outcome, attempt.reason, attempt.event) == ("unschedulable", "Unschedulable", attempt.message)
    assert fake.verbs() == ["filter"]  # no candidate for preemption, so no preempt call


def test_the_pod_condition_carries_the_text() -> None:
    attempt = schedule_one(o.config(), parse_cluster([o.node("n1")]), o.pod("p"),
                           o.FakeExtender(unresolvable={"n1": OTHER_DOMAIN}))
    (condition,) = attempt.pod_raw["status"]["conditions"]
    assert condition == {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                         "message": attempt.message}


@pytest.mark.parametrize(("fake", "message"), [
    pytest.param(o.FakeExtender(filter_error="reservation store unavailable"), "reservation store unavailable",
                 id="a filter Error is the whole message, verbatim"),
    pytest.param(o.FakeExtender(bind_errors=["ml/train-8 is reserved in domain A.1, not B.1"]),
                 "ml/train-8 is reserved in domain A.1, not B.1", id="a bind Error is the whole message, verbatim"),
])
def test_extender_errors_become_the_message_with_reason_scheduler_error(fake: o.FakeExtender, message: str) -> None:
    attempt = schedule_one(o.config(), parse_cluster([o.node("n1")]), o.pod("p"), fake)
    assert (attempt.message, attempt.reason) == (message, "SchedulerError")
    assert "preempt" not in fake.verbs()


NAMED = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}


def _required(*terms: Mapping[str, object]) -> dict[str, object]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                          {"nodeSelectorTerms": list(terms)}}}}


@pytest.mark.parametrize(("spec", "message"), [
    pytest.param(_required(NAMED),
                 "0/3 nodes are available: 1 node(s) had untolerated taint(s), "
                 "2 node(s) didn't satisfy plugin(s) [NodeAffinity]. "
                 "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
                 id="nodes a metadata.name affinity leaves out are counted under the PreFilter's reason"),
    pytest.param(_required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]},
                                            {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}),
                 "0/3 nodes are available: pod affinity terms conflict. not found",
                 id="a PreFilter rejection replaces the reasons; DRA's PostFilter then fails with 'not found'"),
    pytest.param({"preemptionPolicy": "Never", "nodeSelector": {"rack": "z"}},
                 "0/3 nodes are available: 1 node(s) had untolerated taint(s), "
                 "2 node(s) didn't match Pod's node affinity/selector. "
                 "preemption: not eligible due to preemptionPolicy=Never.",
                 id="a pod that may not preempt says so (and the taint, checked first, names n1)"),
])
def test_prefilter_and_preemption_parts_of_the_text(spec: dict[str, object], message: str) -> None:
    cluster = parse_cluster([o.node("n1", taints=[TAINT]), o.node("n2"), o.node("n3")])
    attempt = schedule_one(o.config(), cluster, o.pod("p", spec=spec), o.FakeExtender())
    assert attempt.message == message


def test_no_nodes_at_all() -> None:
    attempt = schedule_one(o.config(), parse_cluster([]), o.pod("p"), o.FakeExtender())
    assert (attempt.message, attempt.reason) == ("no nodes available to schedule pods", "Unschedulable")


def test_reasons_sort_as_strings_so_ten_comes_before_two() -> None:
    statuses = {f"n{i}": Status(UNSCHEDULABLE, ("x",)) for i in range(10)}
    statuses.update({"m1": Status(UNSCHEDULABLE, ("y",)), "m2": Status(UNSCHEDULABLE, ("y",))})
    assert fit_error_message(12, Diagnosis(statuses)) == "0/12 nodes are available: 10 x, 2 y."


def test_the_event_is_cut_at_1024_bytes_but_the_condition_keeps_everything() -> None:
    reason = "r" * 2000
    attempt = schedule_one(o.config(), parse_cluster([o.node("n1")]), o.pod("p"),
                           o.FakeExtender(unresolvable={"n1": reason}))
    assert reason in attempt.message
    assert len(attempt.event) == 1024 and attempt.event.endswith(" ...")
    assert attempt.event == event_text(attempt.message) == attempt.message[:1020] + " ..."
