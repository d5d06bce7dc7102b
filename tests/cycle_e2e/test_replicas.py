"""Two replicas of ``imex-webhook serve`` in embedded mode on the same cluster file.

In Kubernetes mode replicas agree through the API server: the same watched pods, and one
``DomainReservation`` per group (and a ledger per domain) that the second replica reads or loses a race
for. Embedded mode has none of that: each replica holds its own memory, learns pods only from the
extender requests it serves and records only its own bindings and reservations. So the replicas here are
*expected* to disagree; what must hold regardless is that no replica places a member outside the domain
it chose, and that a replica refuses, with an ``Error`` saying why, a bind that contradicts its own choice.
"""

from __future__ import annotations

from pathlib import Path

from tests.cycle_e2e import harness as h
from tests.e2e import objects
from webhook.domain import keys
from webhook.sim import cycle

GB200 = [h.namespace(), *objects.device_classes()]
FIRST, SECOND = 0, 1


def test_replicas_taking_turns_per_pod_never_split_a_job_and_agree_once_they_know_the_same_pods(
        tmp_path: Path) -> None:
    catalog = [*GB200, *h.rack("a", h.clique("a"), 3), *h.rack("b", h.clique("b"), 4), *h.compute_domain("twin-3", 3)]
    with h.World(tmp_path, catalog, replicas=2) as world:
        jobs = [h.job_pod("twin-3", i, gpus=4, claims=[("imex-channel", "twin-3-channel")]) for i in range(3)]
        pods = [world.admit(pod, replica=i % 2)[0] for i, pod in enumerate(jobs)]
        assert len({p["metadata"]["labels"][keys.GROUP_LABEL] for p in pods}) == 1  # both replicas resolve alike
        keys_ = [f"ml/{p['metadata']['name']}" for p in pods]

        run = world.run(pods, replica_of=lambda i: i % 2)

        # The first replica placed pods 0 and 2 in rack a (best fit, 3 trays for 3 pods).
        assert {run.node(keys_[0]), run.node(keys_[2])} == {"a-0", "a-1"}
        # The second never saw pod 0 bound: for pod 1 it still counts 3 members to place, and the pod
        # affinity leaves it only the free trays of rack a. It refuses, naming rack a, and binds nothing.
        assert run.node(keys_[1]) is None
        refusals = [c.reply for c in world.calls_of("filter", SECOND)]
        assert refusals and all(r["NodeNames"] == [] for r in refusals)
        reason = refusals[-1]["FailedNodes"]["a-2"]
        assert reason.startswith("no domain can host 3 pods of compute-domain group ml/twin-3 (3 pods x 4 GPUs, one "
                                 "per node): the scheduler offered nodes in 1 of the 2 domains checked: domain "
                                 f"{h.clique('a')}: 3 nodes, 2 rejected by the scheduler's own filters, 1 < 3 needed")
        assert reason in run.last(keys_[1]).message
        assert world.calls_of("bind", SECOND) == [] and world.calls_of("preempt", SECOND) == []
        # The disagreement, as each replica shows it.
        first, second = world.replicas[FIRST].inspect(), world.replicas[SECOND].inspect()
        assert [(r["domain"], r["state"]) for r in first["reservations"]] == [(h.clique("a"), "reserved")]
        assert second["reservations"] == []
        assert world.placements(FIRST) == {keys_[0]: run.node(keys_[0]), keys_[2]: run.node(keys_[2])}
        assert world.placements(SECOND) == {keys_[1]: None}

        # What a watch would tell both replicas in Kubernetes mode: the bound pods (restart on the file).
        world.sync()
        rest = world.run([run.pods[keys_[1]]], replica_of=lambda i: SECOND)

        assert rest.node(keys_[1]) == "a-2"
        assert world.calls_of("bind", SECOND)[-1].reply == {"Error": ""}
        world.assert_views_agree(SECOND)
        assert world.placements(SECOND) == {keys_[0]: run.node(keys_[0]), keys_[1]: "a-2",
                                            keys_[2]: run.node(keys_[2])}


def test_a_bind_on_one_replica_for_a_domain_the_other_chose_is_refused_with_an_error_saying_why(
        tmp_path: Path) -> None:
    catalog = [*GB200, *h.rack("a", h.clique("a"), 2), *h.rack("b", h.clique("b"), 3), *h.compute_domain("hold-2", 2)]
    with h.World(tmp_path, catalog, replicas=2) as world:
        # ComputeDomain hold-2 (2 pods) starts on the first replica: rack a is reserved for it, one tray used.
        (first_member,) = world.create([h.job_pod("hold-2", 0, gpus=4, claims=[("imex-channel", "hold-2-channel")])])
        held = world.run([first_member], replica_of=lambda i: FIRST)
        assert held.node(f"ml/{first_member['metadata']['name']}") == "a-0"

        (solo,) = world.create([h.job_pod("solo", 0, gpus=4, annotations={
            keys.GROUP_ANNOTATION: "solo", keys.GROUP_SIZE_ANNOTATION: "1"})])
        first, second = world.extender(FIRST), world.extender(SECOND)

        # Cycle 1: filtered on the second replica, which knows nothing of hold-2 and takes a-1 (best fit);
        # the bind goes to the first replica, which never saw the pod.
        attempt = cycle.schedule(world.config(SECOND), world.state, solo, h.SplitExtender(second, first))
        assert attempt.node == "a-1"
        bound = cycle.bind(world.config(SECOND), attempt, h.SplitExtender(second, first))
        world.advance(bound.cluster)
        assert bound.outcome == "bind-error" and "not found" in bound.message

        # Cycle 2: filtered on the first replica, which keeps a-1 for hold-2 and chooses rack b; the bind
        # goes to the second replica, which reserved rack a for the group in cycle 1.
        attempt = cycle.schedule(world.config(FIRST), world.state, bound.pod_raw, h.SplitExtender(first, second))
        assert h.rack_of(attempt.node) == "b"
        assert world.calls_of("filter", FIRST)[-1].reply["FailedAndUnresolvableNodes"] == {
            "a-1": f"node is outside domain {h.clique('b')}, which holds the whole group ml/solo"}
        bound = cycle.bind(world.config(FIRST), attempt, h.SplitExtender(first, second))
        world.advance(bound.cluster)

        assert bound.outcome == "bind-error" and bound.reason == "SchedulerError"
        assert bound.message == (f"group ml/solo is reserved in domain {h.clique('a')}, node {attempt.node} is in "
                                 f"{h.clique('b')}; the scheduler retries inside the reservation")
        name = f"ml/{solo['metadata']['name']}"
        assert world.state.pod(name) is None
        reserved = [{r["name"]: r["domain"] for r in world.replicas[i].inspect()["reservations"]}["ml/solo"]
                    for i in (FIRST, SECOND)]
        assert reserved == [h.clique("b"), h.clique("a")]
        assert world.placements(FIRST)[name] is None and world.placements(SECOND)[name] is None
