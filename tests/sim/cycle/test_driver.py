"""The driver: a queue in priority order, repeated cycles, assumed pods while binds are in flight, phase
changes, preempted pods, and the configuration our deployment gives kube-scheduler."""

from __future__ import annotations

import pytest

from tests.sim.cycle import objects as o
from webhook.service import deploy
from webhook.sim.cycle import PhaseChange, parse_cluster, parse_config, play
from webhook.sim.cycle.config import FitArgs

GROUP = {"group": "g"}
CLIQUES = [o.node(n, labels={o.CLIQUE: n[0].upper()}) for n in ("a1", "a2", "b1", "b2")]


def test_higher_priority_goes_first_and_the_loser_keeps_its_message() -> None:
    pods = [o.pod("low", cpu="2", priority=1), o.pod("high", cpu="2", priority=100)]
    result = play(o.config(), parse_cluster([o.node("n1", cpu="2")]), pods, o.FakeExtender())
    high, low = result.outcomes["ml/high"], result.outcomes["ml/low"]
    assert (high.node, high.cycles, low.node, low.cycles) == ("n1", 1, None, 1)
    assert low.message == ("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
                           "1 No preemption victims found for incoming pod.")
    assert result.rounds == 1


def test_a_second_pod_scheduled_before_the_first_is_bound_still_follows_it() -> None:
    pods = [o.pod(f"m{i}", labels=GROUP, spec=o.pod_affinity(o.affinity_term(GROUP))) for i in range(2)]
    fake = o.FakeExtender(scores={"b1": 10})
    result = play(o.config(), parse_cluster(CLIQUES), pods, fake, bind_lag=1)
    assert fake.verbs() == ["filter", "prioritize", "filter", "prioritize", "bind", "bind"]
    second_filter = [args for verb, args in fake.calls if verb == "filter"][1]
    assert second_filter["NodeNames"] == ["b1", "b2"]  # m0 is only assumed on b1, and counts
    assert {o_.node for o_ in result.outcomes.values()} == {"b1"}


def test_a_bind_that_always_fails_is_retried_every_round() -> None:
    fake = o.FakeExtender(bind_errors=["no"] * 10)
    result = play(o.config(), parse_cluster([o.node("n1")]), [o.pod("p")], fake, max_rounds=4)
    outcome = result.outcomes["ml/p"]
    assert (outcome.node, outcome.message, outcome.cycles, outcome.cycles_lost) == (None, "no", 4, 4)


def test_an_unschedulable_pod_waits_for_the_cluster_to_change() -> None:
    pods = [o.pod("a", cpu="2"), o.pod("b", cpu="2")]
    result = play(o.config(), parse_cluster([o.node("n1", cpu="2")]), pods, o.FakeExtender(),
                  phase_changes=[PhaseChange(round=5, pod="ml/a", phase="Succeeded")])
    assert result.outcomes["ml/b"].history == ("unschedulable", "assumed", "bound")
    assert result.outcomes["ml/b"].node == "n1" and result.rounds == 5


def test_a_pod_marked_running_stays_where_it_is() -> None:
    result = play(o.config(), parse_cluster([o.node("n1")]), [o.pod("a")], o.FakeExtender(),
                  phase_changes=[PhaseChange(round=2, pod="ml/a", phase="Running")])
    running = result.cluster.pod("ml/a")
    assert running is not None and running.raw["status"]["phase"] == "Running"


def test_a_preemptor_keeps_its_nominated_node_from_lower_priority_pods_and_its_victim_is_reported() -> None:
    pods = [o.pod("low", cpu="2", priority=1), o.pod("late", cpu="2", priority=100),
            o.pod("filler", cpu="2", priority=1)]
    result = play(o.config(), parse_cluster([o.node("n1", cpu="2")]), pods, o.FakeExtender(),
                  arrivals={"ml/late": 2, "ml/filler": 2})
    late, low, filler = (result.outcomes[f"ml/{n}"] for n in ("late", "low", "filler"))
    assert (late.node, late.history) == ("n1", ("unschedulable", "assumed", "bound"))
    assert (low.node, low.preempted_by, low.message) == (None, "ml/late", "preempted by ml/late")
    # In round 2 n1 is empty but nominated for "late": "filler" sees late's request there.
    assert (filler.node, filler.cycles) == (None, 2)


@pytest.mark.parametrize(("fabric", "fit"), [
    pytest.param(False, FitArgs("MostAllocated", (("cpu", 1), ("memory", 1), (o.GPU, 1))),
                 id="without a fabric the profile packs on cpu, memory and GPUs"),
    pytest.param(True, FitArgs("MostAllocated", (("cpu", 1), ("memory", 1)), frozenset({o.GPU})),
                 id="with a fabric the profile leaves the GPU count to the extender"),
])
def test_the_deployment_configuration_reads_as_intended(fabric: bool, fit: FitArgs) -> None:
    config = parse_config(deploy.scheduler_config(fabric=fabric))
    (extender,) = config.extenders
    assert (config.scheduler_name, config.fit, config.fit_weight) == (deploy.SCHEDULER_NAME, fit, 1)
    assert (extender.filter_verb, extender.prioritize_verb, extender.bind_verb) == ("filter", "prioritize", "bind")
    assert (extender.weight, extender.node_cache_capable, extender.ignorable) == (141, True, False)
