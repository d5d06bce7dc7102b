"""ComputeDomain jobs end to end: admission over TLS, the emulated scheduling cycle, the served extender.

Each pod is created as the job controller creates it, admitted through ``/mutate`` (patch applied with
``jsonpatch``), given its claims by the ResourceClaim controller, and scheduled by the emulator with the
shipped scheduler configuration, whose extender is ``imex-webhook serve`` in embedded mode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests import admission_support
from tests.cycle_e2e import harness as h
from tests.e2e import objects
from webhook.domain import keys
from webhook.domain.admission import mutating
from webhook.service import deploy
from webhook.sim import cycle

GB200 = [h.namespace(), *objects.device_classes()]


def _channel_pods(job: str, size: int, gpus: int) -> list[dict[str, Any]]:
    """The Job's pods, each with the ComputeDomain's channel claim and ``gpus`` device-plugin GPUs."""
    return [h.job_pod(job, i, gpus=gpus, claims=[("imex-channel", f"{job}-channel")]) for i in range(size)]


def test_a_compute_domain_job_with_device_plugin_gpus_lands_whole_in_the_best_fitting_clique(tmp_path: Path) -> None:
    catalog = [*GB200, *h.rack("a", h.clique("a"), 4), *h.rack("b", h.clique("b"), 3), *h.rack("c", h.clique("c"), 6),
               h.labelled(objects.node("hgx-0", device_plugin_gpus=8, product="NVIDIA-H100-80GB-HBM3")),
               *h.compute_domain("train-3", 3)]
    with h.World(tmp_path, catalog) as world:
        pods = []
        for pod in _channel_pods("train-3", 3, gpus=4):
            stored, response = world.admit(pod)
            label = mutating.group_label_value(stored["metadata"]["annotations"][keys.GROUP_ID_ANNOTATION])
            admission_support.assert_kept_in_domain(stored, label)
            assert stored["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION] == "3"
            assert not response.get("warnings")
            pods.append(stored)
        # The scheduler without its extender (a pure dry run, nothing served is called) starts in rack a.
        alone = cycle.parse_config({**deploy.scheduler_config(), "extenders": []})
        first = world.claim_controller(pods[0])
        assert cycle.schedule(alone, world.state, first, world.extender()).node == "a-0"

        run = world.run(pods)

        nodes = {key: run.node(key) for key in run.pods}
        assert all(nodes.values()), {k: run.last(k).message for k in run.pods}
        # Rack b, 3 trays for 3 pods, is the best fit: the larger racks stay whole.
        assert {h.rack_of(n) for n in nodes.values()} == {"b"} and len(set(nodes.values())) == 3
        assert [c.reply["Error"] for c in world.calls_of("bind")] == ["", "", ""]
        reply = world.calls_of("filter")[0].reply
        assert reply["NodeNames"] == ["b-0", "b-1", "b-2"]
        assert set(reply["FailedAndUnresolvableNodes"]) == {f"a-{i}" for i in range(4)} | {f"c-{i}" for i in range(6)}
        assert all("outside domain" in why for why in reply["FailedAndUnresolvableNodes"].values())
        # The emulator's DRA plugin gave each pod the channel of its own node.
        channels = {c.name.split("-imex-channel-")[0]: c.allocated_devices for c in world.state.claims}
        assert {f"ml/{pod}": devices for pod, devices in channels.items()} == {
            key: (("compute-domain.nvidia.com", nodes[key], "channel-0"),) for key in nodes}
        (reservation,) = world.replicas[0].inspect()["reservations"]
        assert (reservation["name"], reservation["domain"], reservation["state"]) == ("ml/train-3", h.clique("b"),
                                                                                     "reserved")
        world.assert_views_agree()


def test_a_compute_domain_job_with_dra_gpu_claims_and_no_device_plugin_lands_on_dra_nodes_of_one_clique(
        tmp_path: Path) -> None:
    gpus = objects.gpu_template(h.NS, "four-gpus", 4)
    gpus["metadata"]["uid"] = h.uid("rct", "four-gpus")
    catalog = [*GB200, *h.rack("a", h.clique("a"), 2), *h.rack("c", h.clique("c"), 3, dra_gpus=4),
               *h.rack("d", h.clique("d"), 4, dra_gpus=4), *h.compute_domain("dra-2", 2), gpus]
    with h.World(tmp_path, catalog) as world:
        pods = world.create(h.job_pod("dra-2", i, claims=[("imex-channel", "dra-2-channel"), ("gpus", "four-gpus")])
                            for i in range(2))
        assert not any(keys.GPU_RESOURCE in str(p["spec"]["containers"]) for p in pods)

        run = world.run(pods)

        nodes = {key: run.node(key) for key in run.pods}
        assert all(nodes.values()), {k: run.last(k).message for k in run.pods}
        # Rack a has device-plugin GPUs only (the DRA plugin cannot allocate there); of the DRA racks, c fits
        # best. The pods request no extended resource, yet the extender filtered and bound them.
        assert {h.rack_of(n) for n in nodes.values()} == {"c"} and len(set(nodes.values())) == 2
        assert len(world.calls_of("bind")) == 2 and all(c.reply["Error"] == "" for c in world.calls_of("bind"))
        allocated = {c.name: c.allocated_devices or () for c in world.state.claims}
        for key, node in nodes.items():
            name = key.split("/")[1]
            (gpu_claim,) = [devices for claim, devices in allocated.items() if claim.startswith(f"{name}-gpus-")]
            assert sorted(d for _, n, d in gpu_claim if n == node) == [f"gpu-{i}" for i in range(4)]
        (reservation,) = world.replicas[0].inspect()["reservations"]
        assert (reservation["domain"], reservation["gpusPerPod"], reservation["onePodPerNode"]) == (
            h.clique("c"), 4, True)
        world.assert_views_agree()


def test_pods_created_before_their_claim_template_wait_and_then_place_in_one_domain(tmp_path: Path) -> None:
    catalog = [*GB200, *h.rack("a", h.clique("a"), 3), *h.rack("b", h.clique("b"), 2),
               *h.compute_domain("late-2", 2, with_template=False)]
    with h.World(tmp_path, catalog) as world:
        pods = []
        for pod in _channel_pods("late-2", 2, gpus=4):
            stored, response = world.admit(pod)
            # Fails closed: sent to the dedicated scheduler, group left to scheduling time.
            assert stored["spec"]["schedulerName"] == admission_support.SCHEDULER
            assert stored["metadata"]["annotations"][keys.MUTATED_ANNOTATION]
            assert "affinity" not in stored["spec"] and keys.GROUP_LABEL not in stored["metadata"]["labels"]
            assert any("late-2-channel" in w and "not known yet" in w for w in response["warnings"])
            pods.append(stored)

        waiting = world.run(pods)

        assert [a.outcome for a in waiting.attempts] == ["gated", "gated"]
        assert all("ResourceClaim not created yet" in a.message for a in waiting.attempts)
        assert world.calls == [] and world.state.claims == ()

        # The driver's controller creates the template. Embedded mode loads --cluster once (no watch), so
        # the replica learns it the only way it can: restarted on the file written with it.
        world.add(h.channel_template("late-2"))
        world.sync()
        run = world.run(list(waiting.pods.values()))

        nodes = {key: run.node(key) for key in run.pods}
        assert all(nodes.values()), {k: run.last(k).message for k in run.pods}
        # No pod affinity (admission could not resolve the group): the extender alone keeps it together.
        assert {h.rack_of(n) for n in nodes.values()} == {"b"} and len(set(nodes.values())) == 2
        first = world.calls_of("filter")[0]
        assert set(first.args["NodeNames"]) == {"a-0", "a-1", "a-2", "b-0", "b-1"}
        assert set(first.reply["FailedAndUnresolvableNodes"]) == {"a-0", "a-1", "a-2"}
        assert len(world.state.claims) == 2
        world.assert_views_agree()
