"""Annotated groups end to end: a fabric zone as the only fitting domain, a group no domain can host, and a
higher-priority group that preempts inside its own domain only."""

from __future__ import annotations

from pathlib import Path

from tests import admission_support
from tests.cycle_e2e import harness as h
from tests.e2e import objects
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.admission import mutating
from webhook.service import deploy
from webhook.sim import cycle

GB200 = [h.namespace(), *objects.device_classes()]


def _group(name: str, size: int) -> dict[str, str]:
    return {keys.GROUP_ANNOTATION: name, keys.GROUP_SIZE_ANNOTATION: str(size)}


def test_a_group_whose_only_fitting_domain_is_a_fabric_zone_gets_gpus_attached_before_it_binds(
        tmp_path: Path) -> None:
    # One 4-GPU tray (room for one 3-GPU pod) and the demo's PCIe pool: 4 nodes with 1 local GPU and 4
    # fabric slots each, 8 GPU blocks in zone pcie-pool-1 (the inventory of --fabric embedded).
    catalog = [*GB200, *h.rack("a", h.clique("a"), 1), *h.fabric_pool(),
               h.labelled(objects.node("hgx-0", device_plugin_gpus=8, product="NVIDIA-H100-80GB-HBM3"))]
    with h.World(tmp_path, catalog, fabric=True) as world:
        pods = []
        for pod in (h.job_pod("fab-job", i, gpus=3, annotations=_group("fab-job", 2)) for i in range(2)):
            stored, _ = world.admit(pod)
            admission_support.assert_kept_in_domain(stored, mutating.group_label_value("ann:ml/fab-job"))
            pods.append(stored)
        # fabric=True: NodeResourcesFit ignores nvidia.com/gpu, so the 1-GPU pool nodes reach the extender.
        assert keys.GPU_RESOURCE in world.config().fit.ignored

        run = world.run(pods)

        nodes = {key: run.node(key) for key in run.pods}
        assert all(nodes.values()), {k: run.last(k).message for k in run.pods}
        assert {h.rack_of(n) for n in nodes.values()} == {"fab"} and len(set(nodes.values())) == 2
        first = world.calls_of("filter")[0].reply
        assert first["FailedAndUnresolvableNodes"] == {
            "a-0": f"node is outside domain {demo.FABRIC_ZONE}, which holds the whole group ml/fab-job"}
        assert [c.reply["Error"] for c in world.calls_of("bind")] == ["", ""]
        body = world.replicas[0].inspect()
        attached = {a["pod"]: (a["node"], a["gpus"], a["phase"], len(a["blocks"])) for a in body["attachments"]}
        assert attached == {key: (node, 2, "Ready", 2) for key, node in nodes.items()}
        (reservation,) = body["reservations"]
        assert (reservation["domain"], reservation["state"]) == (demo.FABRIC_ZONE, "reserved")
        world.assert_views_agree()


def test_a_group_no_domain_can_host_is_refused_with_our_reason_in_the_failed_scheduling_event(
        tmp_path: Path) -> None:
    catalog = [*GB200, *h.rack("a", h.clique("a"), 3), *h.rack("b", h.clique("b"), 2)]
    with h.World(tmp_path, catalog) as world:
        run = world.run(world.create(h.job_pod("giant", i, gpus=4, annotations=_group("giant", 4))
                                     for i in range(4)))

        reason = (f"no domain can host 4 pods of annotation group ml/giant (4 pods x 4 GPUs): the largest free "
                  f"capacity is 3 pods (domain {h.clique('a')}, 2 domains checked); even empty, the largest domain "
                  "holds 3 such pods")
        assert [a.outcome for a in run.attempts] == ["unschedulable"] * 4
        for attempt in run.attempts:
            assert attempt.reason == "Unschedulable" and attempt.node is None
            # Every node is unresolvable for our reason, so preemption is not even tried.
            assert attempt.message == (f"0/5 nodes are available: 5 {reason}. preemption: 0/5 nodes are available: "
                                       "5 Preemption is not helpful for scheduling.")
            assert reason in attempt.event
        assert world.calls_of("bind") == [] and world.calls_of("preempt") == []
        assert world.replicas[0].inspect()["reservations"] == []


def test_a_higher_priority_group_preempts_only_inside_the_domain_that_holds_it(tmp_path: Path) -> None:
    # Rack a (2 trays): a-0 free, a-1 runs a batch pod (priority 100). Rack b (3 trays): every tray runs a
    # low-priority pod (priority 0). Left to itself, kube-scheduler's preemption would evict in rack b,
    # whose victims have the lowest priority; our /preempt keeps the candidates of rack a, where the group
    # of 2 fits best once the victims are gone, so the group never straddles the two racks.
    catalog = [*GB200, *h.rack("a", h.clique("a"), 2), *h.rack("b", h.clique("b"), 3)]
    fillers = [h.bound_pod("batch-a-1", "a-1", gpus=4, priority_class="filler-batch"),
               *(h.bound_pod(f"low-b-{i}", f"b-{i}", gpus=4, priority_class="filler-low") for i in range(3))]
    with h.World(tmp_path, catalog, bound=fillers) as world:
        pods = world.create(h.job_pod("urgent", i, gpus=4, annotations=_group("urgent", 2),
                                      priority_class="training-urgent") for i in range(2))
        assert {p["spec"]["priority"] for p in pods} == {h.PRIORITY_CLASSES["training-urgent"]}
        first, second = (f"ml/{p['metadata']['name']}" for p in pods)
        # The first cycle with a profile that lacks preemptVerb (result discarded): kube-scheduler's own
        # preemption then evicts on a rack-b tray, outside the domain our filter keeps the group in.
        raw = deploy.scheduler_config()
        raw["extenders"][0].update(urlPrefix=world.replicas[0].url, preemptVerb="")
        without = cycle.schedule(cycle.parse_config(raw), world.state, pods[0], world.extender())
        assert (without.nominated, without.victims) == ("b-0", ("ml/low-b-0",))
        assert [c.verb for c in world.calls] == ["filter"] and world.replicas[0].inspect()["reservations"] == []
        world.calls.clear()

        run = world.run(pods)

        (preempt,) = world.calls_of("preempt")
        assert set(preempt.args["NodeNameToMetaVictims"]) == {"a-1", "b-0", "b-1", "b-2"}
        assert set(preempt.reply["NodeNameToMetaVictims"]) == {"a-1"}
        assert preempt.reply["NodeNameToMetaVictims"]["a-1"] == preempt.args["NodeNameToMetaVictims"]["a-1"]
        (preempting,) = [a for a in run.attempts if a.victims]
        assert (preempting.pod, preempting.victims, preempting.nominated) == (first, ("ml/batch-a-1",), "a-1")
        assert preempting.message.endswith("preemption: found a potential placement for pod on node a-1, "
                                           "preempting 1 victims")
        assert {run.node(first), run.node(second)} == {"a-0", "a-1"}
        still_running = sorted(p.key for p in world.state.pods if p.key.startswith("ml/low-"))
        assert still_running == ["ml/low-b-0", "ml/low-b-1", "ml/low-b-2"]
        assert [c.reply["Error"] for c in world.calls_of("bind")] == ["", ""]
        world.assert_views_agree()
