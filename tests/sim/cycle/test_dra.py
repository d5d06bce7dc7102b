"""DynamicResources at the level that matters: devices of the class on the node, allocations that outlive
a failed bind (Unreserve keeps them), the later PostFilter that frees them, and the cycles that costs.

Cluster: ``a1`` (clique A) and ``b1`` (clique B), four ``gpu.nvidia.com`` GPUs each, published in
ResourceSlices; the pod ``p`` uses the claim ``p-gpus`` for four of them.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.cycle import objects as o
from webhook.sim.cycle import PhaseChange, parse_cluster, play, schedule_one
from webhook.sim.cycle.selectors import node_name_selector

NODES = [o.node("a1", labels={o.CLIQUE: "A"}), o.node("b1", labels={o.CLIQUE: "B"})]
SLICES = [o.gpu_slice("a1", 4), o.gpu_slice("b1", 4)]
CLAIM_REF = [{"name": "gpus", "resourceClaimName": "p-gpus"}]
REDIRECT = "ml/p is reserved for clique B by another replica"
NOT_B = "reserved for clique B"


def cluster(*claims: dict[str, Any], bound: tuple[dict[str, Any], ...] = ()) -> Any:
    return parse_cluster(NODES, list(bound), claims=list(claims) or [o.gpu_claim("p-gpus", 4)], slices=SLICES,
                         device_classes=[o.gpu_class()])


def redirecting_extender(keep_rejecting: bool = True) -> o.FakeExtender:
    """Prefers a1, refuses the first bind there, and (optionally) rejects a1 from then on."""

    def refuse(fake: o.FakeExtender, args: dict[str, Any]) -> None:
        if keep_rejecting and args["Node"] == "a1":
            fake.unresolvable["a1"] = NOT_B

    return o.FakeExtender(scores={"a1": 10}, bind_errors=[REDIRECT], on_bind=refuse)


def test_the_allocation_written_before_a_failed_bind_stays_on_that_node() -> None:
    attempt = schedule_one(o.config(), cluster(), o.pod("p", claims=CLAIM_REF), redirecting_extender())
    assert (attempt.outcome, attempt.message) == ("bind-error", REDIRECT)
    claim = attempt.cluster.claim("ml", "p-gpus")
    assert claim is not None and claim.reserved_for == ()
    assert claim.allocated_devices == tuple(("gpu.nvidia.com", "a1", f"gpu-{i}") for i in range(4))
    assert claim.raw["status"]["allocation"]["nodeSelector"] == node_name_selector("a1")


def test_a_redirect_at_bind_costs_two_extra_cycles() -> None:
    result = play(o.config(), cluster(), [o.pod("p", claims=CLAIM_REF)], redirecting_extender())
    outcome = result.outcomes["ml/p"]
    assert (outcome.node, outcome.cycles, outcome.cycles_lost) == ("b1", 3, 2)
    assert outcome.history == ("assumed", "bind-error", "unschedulable", "assumed", "bound")
    second = next(a for a in result.attempts if a.outcome == "unschedulable")
    # Cycle 2: the claim pins the pod to a1, which the extender now refuses; PostFilter frees the claim.
    assert second.message == (
        f"0/2 nodes are available: 1 {NOT_B}, 1 resourceclaim not available on the node. "
        "deallocation of ResourceClaim completed, "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
    claim = result.cluster.claim("ml", "p-gpus")
    assert claim is not None and claim.available_on is not None and claim.available_on.matches("b1", {})
    assert claim.reserved_for == ("uid-ml-p",)


def test_after_a_failed_bind_the_next_cycle_offers_the_extender_only_the_allocated_node() -> None:
    fake = redirecting_extender(keep_rejecting=False)
    result = play(o.config(), cluster(), [o.pod("p", claims=CLAIM_REF)], fake)
    outcome = result.outcomes["ml/p"]
    assert (outcome.node, outcome.cycles_lost) == ("a1", 1)
    filters = [args["NodeNames"] for verb, args in fake.calls if verb == "filter"]
    assert filters == [["a1", "b1"], ["a1"]]


@pytest.mark.parametrize(("claim", "message"), [
    pytest.param(o.gpu_claim("p-gpus", 8),
                 "0/2 nodes are available: 2 cannot allocate all claims. "
                 "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
                 id="a claim for more devices than any node publishes fits nowhere"),
    pytest.param({**o.gpu_claim("p-gpus", 1), "spec": {"devices": {"requests": [
        {"name": "gpus", "exactly": {"deviceClassName": "missing.example.com", "count": 1}}]}}},
                 "0/2 nodes are available: request gpus: device class missing.example.com does not exist. "
                 "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
                 id="a claim naming a device class that does not exist is rejected before any node"),
])
def test_claims_that_cannot_be_allocated(claim: dict[str, Any], message: str) -> None:
    attempt = schedule_one(o.config(), cluster(claim), o.pod("p", claims=CLAIM_REF), o.FakeExtender())
    assert attempt.message == message


def test_devices_allocated_to_another_claim_are_not_free() -> None:
    claims = (o.gpu_claim("p-gpus", 4), o.gpu_claim("q-gpus", 4))
    first = schedule_one(o.config(), cluster(*claims), o.pod("p", claims=CLAIM_REF),
                         o.FakeExtender(scores={"a1": 10}))
    second = schedule_one(o.config(), first.cluster, o.pod("q", claims=[{"name": "g", "resourceClaimName": "q-gpus"}]),
                          o.FakeExtender(scores={"a1": 10}))
    assert (first.node, second.node) == ("a1", "b1")


def test_first_available_takes_the_first_subrequest_that_fits() -> None:
    claim = {**o.gpu_claim("p-gpus", 1), "spec": {"devices": {"requests": [{"name": "gpus", "firstAvailable": [
        {"name": "big", "deviceClassName": o.GPU_CLASS, "count": 8},
        {"name": "small", "deviceClassName": o.GPU_CLASS, "count": 2}]}]}}}
    attempt = schedule_one(o.config(), cluster(claim), o.pod("p", claims=CLAIM_REF), o.FakeExtender())
    allocated = attempt.cluster.claim("ml", "p-gpus")
    assert allocated is not None
    results = allocated.raw["status"]["allocation"]["devices"]["results"]
    assert [r["request"] for r in results] == ["gpus/small", "gpus/small"]


def test_a_pod_whose_template_claim_does_not_exist_yet_is_not_tried() -> None:
    template_ref = [{"name": "gpus", "resourceClaimTemplateName": "gpus-4"}]
    fake = o.FakeExtender()
    attempt = schedule_one(o.config(), cluster(), o.pod("t", claims=template_ref), fake)
    assert (attempt.outcome, attempt.message, fake.verbs()) == (
        "gated", 'pod "ml/t": ResourceClaim not created yet', [])


def test_the_driver_creates_template_claims_as_the_claim_controller_does() -> None:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "gpus-4", "namespace": "ml"},
                "spec": {"spec": o.gpu_claim("x", 4)["spec"]}}
    pod = o.pod("t", claims=[{"name": "gpus", "resourceClaimTemplateName": "gpus-4"}])
    result = play(o.config(), cluster(), [pod], o.FakeExtender(), templates=[template])
    assert result.outcomes["ml/t"].node is not None
    claim = result.cluster.claim("ml", "t-gpus")
    assert claim is not None and claim.reserved_for == ("uid-ml-t",)


def test_a_finished_pod_gives_its_devices_back() -> None:
    claims = (o.gpu_claim("p-gpus", 4), o.gpu_claim("q-gpus", 4), o.gpu_claim("r-gpus", 4))
    pods = [o.pod(n, claims=[{"name": "g", "resourceClaimName": f"{n}-gpus"}]) for n in ("p", "q", "r")]
    result = play(o.config(), cluster(*claims), pods, o.FakeExtender(),
                  phase_changes=[PhaseChange(round=3, pod="ml/p", phase="Succeeded")])
    nodes = {k: v.node for k, v in result.outcomes.items()}
    assert nodes["ml/r"] == nodes["ml/p"] and result.outcomes["ml/r"].cycles == 2
    freed = result.cluster.claim("ml", "p-gpus")
    assert freed is not None and freed.allocated_devices is None
