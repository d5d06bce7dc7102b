"""Which pods reach the extender: ``managedResources`` empty means every pod; a list means only pods whose
containers or init containers request or limit a listed resource, so a pod that gets its GPUs from a DRA
claim is bound by the default binder without the extender ever hearing of it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.cycle import objects as o
from webhook.service import deploy
from webhook.sim.cycle import parse_cluster, parse_config, schedule_one
from webhook.sim.cycle.model import parse_pod

CLUSTER = parse_cluster([o.node("n1", gpus=4), o.node("n2", gpus=4)],
                        claims=[o.gpu_claim("train-gpus", 2)], slices=[o.gpu_slice("n1", 4), o.gpu_slice("n2", 4)],
                        device_classes=[o.gpu_class()])
DRA_ONLY = o.pod("dra", claims=[{"name": "gpus", "resourceClaimName": "train-gpus"}])
DEVICE_PLUGIN = o.pod("dp", gpus=1)
INIT_ONLY = o.pod("init", spec={"initContainers": [{"name": "i", "resources": {"limits": {o.GPU: "1"}}}]})
PLAIN = o.pod("plain")


@pytest.mark.parametrize(("managed", "pod", "verbs"), [
    pytest.param(None, DRA_ONLY, ["filter", "prioritize", "bind"],
                 id="without managedResources a DRA-only pod reaches filter, prioritize and bind"),
    pytest.param(None, PLAIN, ["filter", "prioritize", "bind"],
                 id="without managedResources even a pod requesting nothing special reaches the extender"),
    pytest.param([o.GPU], DRA_ONLY, [], id="with managedResources [nvidia.com/gpu] a DRA-only pod is skipped"),
    pytest.param([o.GPU], PLAIN, [], id="with managedResources a pod requesting none of them is skipped"),
    pytest.param([o.GPU], DEVICE_PLUGIN, ["filter", "prioritize", "bind"],
                 id="with managedResources a pod limiting nvidia.com/gpu reaches the extender"),
    pytest.param([o.GPU], INIT_ONLY, ["filter", "prioritize", "bind"],
                 id="an init container limiting a managed resource is enough"),
])
def test_extender_interest(managed: list[str] | None, pod: dict[str, Any], verbs: list[str]) -> None:
    fake = o.FakeExtender()
    attempt = schedule_one(o.config(managed=managed), CLUSTER, pod, fake)
    assert attempt.outcome == "bound"
    assert fake.verbs() == verbs


def test_the_dra_only_pod_skipped_by_the_extender_still_gets_its_devices_from_the_default_binder() -> None:
    attempt = schedule_one(o.config(managed=[o.GPU]), CLUSTER, DRA_ONLY, o.FakeExtender())
    claim = attempt.cluster.claim("ml", "train-gpus")
    assert claim is not None and claim.allocated_devices is not None
    assert len(claim.allocated_devices) == 2 and claim.reserved_for == ("uid-ml-dra",)


@pytest.mark.parametrize("fabric", [False, True])
def test_the_dedicated_profile_has_no_managed_resources_so_dra_only_pods_reach_the_extender(fabric: bool) -> None:
    config = parse_config(deploy.scheduler_config(fabric=fabric))
    (extender,) = config.extenders
    assert extender.managed_resources == frozenset()
    assert extender.is_interested(parse_pod(DRA_ONLY))
