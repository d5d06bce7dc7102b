"""The simulation's cycle (webhook/tools/simulate/cycle.py): its pods go through the emulator's scheduling
cycle, and its incremental per-node view decides exactly as ``webhook.sim.cycle.schedule`` does on the whole
cluster."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from webhook.service import deploy
from webhook.sim import cycle
from webhook.sim.dra_objects import channel_device_class
from webhook.tools.simulate import cycle as simcycle
from webhook.tools.simulate import policies, workload
from webhook.tools.simulate.cluster import SimCluster, job_objects

PARAMS = workload.Params(cliques=2, clique_nodes=4, fabric_zones=1, fabric_nodes=2)


class Recorder:
    """Keeps every node, scores nothing, binds everything; remembers what it was sent."""

    def __init__(self, keep: set[str] | None = None) -> None:
        self.keep = keep
        self.sent: list[list[str]] = []

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        names = list(args["NodeNames"])
        self.sent.append(names)
        kept = [n for n in names if self.keep is None or n in self.keep]
        return {"Nodes": None, "NodeNames": kept, "FailedNodes": {},
                "FailedAndUnresolvableNodes": {n: "not kept" for n in names if n not in kept}, "Error": ""}

    def prioritize(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"Host": n, "Score": 0} for n in args["NodeNames"]]

    def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"Error": ""}

    def preempt(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"NodeNameToMetaVictims": {}}


def _setup(fabric: bool, keep: set[str] | None = None) -> tuple[simcycle.Cycle, Recorder, SimCluster]:
    cluster = SimCluster.build(PARAMS)
    recorder = Recorder(keep)
    configs = simcycle.profiles(deploy.scheduler_config(fabric=fabric), simcycle.DEFAULT_PROFILE)
    nodes = [cluster.node_object(n) for n in range(len(cluster.names))]
    sim = simcycle.Cycle(configs, nodes, recorder, random.Random(1), slices=cluster.channel_slices(),
                         device_classes=[channel_device_class()])
    return sim, recorder, cluster


def _pods(job: workload.Job) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    objects = job_objects(job)
    templates = [o for o in objects if o["kind"] == "ResourceClaimTemplate"]
    return [simcycle.instantiate(o, templates) for o in objects if o["kind"] == "Pod"]


def _whole(sim: simcycle.Cycle, cluster: SimCluster, extra_claims: list[dict[str, Any]]) -> cycle.ClusterState:
    """The same cluster as one ClusterState, the way ``cycle.parse_cluster`` builds it."""
    states = [sim.nodes[name].state for name in sim.order]
    return replace(
        cycle.parse_cluster([cluster.node_object(n) for n in range(len(cluster.names))],
                            claims=extra_claims, slices=cluster.channel_slices(),
                            device_classes=[channel_device_class()]),
        pods=tuple(p for s in states for p in s.pods),
        claims=(*(c for s in states for c in s.claims),
                *(cycle.parse_cluster([], claims=extra_claims).claims)))


@pytest.mark.parametrize("fabric", [True, False], ids=["fabric profile", "no-fabric profile"])
def test_the_incremental_view_filters_as_the_emulator_does_on_the_whole_cluster(fabric: bool) -> None:
    sim, recorder, cluster = _setup(fabric)
    jobs = [workload.Job(0, "job-00000", "nvlink", 3, 4, 0.0, 60.0),
            workload.Job(1, "job-00001", "nvlink", 2, 2, 0.0, 60.0),
            workload.Job(2, "job-00002", "fabric", 2, 5, 0.0, 60.0),
            workload.Job(3, "job-00003", "nvlink", 2, 4, 0.0, 60.0)]
    for job in jobs:
        for raw, claims in _pods(job):
            placed = sim.schedule_one(raw, claims).node
            assert placed is not None or (job.kind == "fabric" and not fabric)  # 5 GPUs: only with attach
    sim.release([f"job-00003/job-00003-{i}" for i in range(2)])  # its trays and channels are free again
    probes = [workload.Job(7, "job-00007", "nvlink", 1, 4, 0.0, 60.0),
              workload.Job(8, "job-00008", "fabric", 1, 5, 0.0, 60.0)]
    for probe in probes:
        raw, claims = _pods(probe)[0]
        emulator = Recorder()
        config = sim.configs[raw["spec"]["schedulerName"]]
        attempt = cycle.schedule(config, _whole(sim, cluster, claims), raw, emulator)
        recorder.sent.clear()
        mine = sim.schedule_one(raw, claims)
        assert recorder.sent == emulator.sent  # the extender is shown the same nodes, in the same order
        assert (mine.node is None) == (attempt.node is None)


def test_a_compute_domain_pod_is_shown_only_trays_with_a_free_channel() -> None:
    sim, recorder, cluster = _setup(fabric=True)
    first = workload.Job(0, "job-00000", "nvlink", 2, 2, 0.0, 60.0)
    placed = [sim.schedule_one(raw, claims).node for raw, claims in _pods(first)]
    assert None not in placed and len(set(placed)) == 2  # one channel per node: two trays
    second = workload.Job(1, "job-00001", "nvlink", 1, 2, 0.0, 60.0)
    raw, claims = _pods(second)[0]
    sim.schedule_one(raw, claims)
    assert not set(placed) & set(recorder.sent[-1])
    assert len(recorder.sent[-1]) == len(cluster.names) - 2  # fabric profile: GPUs are the extender's call


def test_without_the_fabric_profile_the_scheduler_checks_gpus_itself() -> None:
    sim, recorder, _ = _setup(fabric=False)
    busy = workload.Job(0, "job-00000", "plain", 1, 4, 0.0, 60.0)
    raw, claims = _pods(busy)[0]
    taken = sim.schedule_one(raw, claims).node
    assert taken is not None and recorder.sent == []  # plain pods: default profile, no extender
    pod = _pods(workload.Job(1, "job-00001", "nvlink", 1, 4, 0.0, 60.0))[0]
    sim.schedule_one(*pod)
    assert taken not in recorder.sent[-1]
    assert not any(name.startswith("fab-") for name in recorder.sent[-1])  # 1 local GPU < 4


def test_an_unschedulable_pod_gets_kube_schedulers_message() -> None:
    sim, _, cluster = _setup(fabric=False, keep=set())
    raw, claims = _pods(workload.Job(0, "job-00000", "nvlink", 1, 4, 0.0, 60.0))[0]
    result = sim.schedule_one(raw, claims)
    assert result.outcome == "unschedulable" and result.node is None
    emulator = cycle.schedule(sim.configs["imex-scheduler"], _whole(sim, cluster, claims), raw, Recorder(set()))
    assert result.message == emulator.message.split(" preemption:")[0].rstrip()
    assert result.message.startswith(f"0/{len(cluster.names)} nodes are available:")


def test_pods_with_inter_pod_affinity_are_refused_not_misjudged() -> None:
    sim, _, _ = _setup(fabric=True)
    raw, claims = _pods(workload.Job(0, "job-00000", "nvlink", 1, 4, 0.0, 60.0))[0]
    raw["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    with pytest.raises(ValueError, match="inter-pod"):
        sim.schedule_one(raw, claims)


def test_the_imex_policy_shows_the_engine_what_the_in_tree_filters_pass() -> None:
    cluster = SimCluster.build(PARAMS)
    placer = policies.make("imex-webhook", cluster, 1)
    assert isinstance(placer, policies.ImexPolicy)
    seen: list[list[str]] = []
    engine_filter = placer.engine.filter

    def spy(pod: Any, candidates: Any, node_view: Any = None) -> Any:
        seen.append(list(candidates))
        return engine_filter(pod, candidates, node_view)

    placer.engine.filter = spy  # type: ignore[method-assign]
    first = workload.Job(0, "job-00000", "nvlink", 2, 4, 0.0, 60.0)
    placer.submit(first, 0.0)
    nodes = [placer.place(first, i, 0.0) for i in range(first.pods)]
    assert None not in nodes
    second = workload.Job(1, "job-00001", "nvlink", 1, 4, 0.0, 60.0)
    placer.submit(second, 0.0)
    assert placer.place(second, 0, 0.0) is not None
    held = {cluster.names[n] for n in nodes if n is not None}
    assert len(seen[0]) == len(cluster.names)  # fabric profile: every node with a free channel
    assert not held & set(seen[-1]) and len(seen[-1]) == len(cluster.names) - 2
    plain = workload.Job(2, "job-00002", "plain", 1, 1, 0.0, 60.0)
    placer.submit(plain, 0.0)
    calls = len(seen)
    assert placer.place(plain, 0, 0.0) is not None
    assert len(seen) == calls  # the default scheduler places plain pods; the extender never sees them
    assert placer.store.pod(plain.name, f"{plain.name}-0").node_name  # type: ignore[union-attr]


@pytest.mark.parametrize("fabric", [True, False], ids=["fabric profile", "no-fabric profile"])
def test_every_pod_of_a_random_stream_sees_what_the_whole_cluster_emulator_shows(fabric: bool) -> None:
    sim, recorder, cluster = _setup(fabric)
    rng = random.Random(5)
    live: list[workload.Job] = []
    outcomes: set[str] = set()
    for index in range(40):
        kind = rng.choice(("nvlink", "nvlink", "plain", "fabric"))
        pods, gpus = {"nvlink": (rng.randint(1, 4), rng.choice((2, 4))), "plain": (1, rng.choice((1, 2, 4))),
                      "fabric": (rng.randint(1, 2), 5)}[kind]
        job = workload.Job(index, f"job-{index:05d}", kind, pods, gpus, 0.0, 60.0)
        for raw, claims in _pods(job):
            emulator = Recorder()
            config = sim.configs[raw["spec"]["schedulerName"]]
            attempt = cycle.schedule(config, _whole(sim, cluster, claims), raw, emulator)
            recorder.sent.clear()
            mine = sim.schedule_one(raw, claims)
            assert recorder.sent == emulator.sent, (index, raw["metadata"]["name"])
            assert (mine.node is None) == (attempt.node is None), (index, attempt.message)
            outcomes.add(mine.outcome)
            if mine.node is None:
                assert mine.message == attempt.message.split(" preemption:")[0].rstrip()
        live.append(job)
        if len(live) > 3 and rng.random() < 0.5:
            gone = live.pop(rng.randrange(len(live)))
            sim.release([f"{gone.name}/{gone.name}-{i}" for i in range(gone.pods)])
    assert outcomes == {"bound", "unschedulable"}  # the stream fills the cluster, releases make room


def test_a_pod_a_prefilter_plugin_rejects_gets_that_plugins_message() -> None:
    sim, recorder, cluster = _setup(fabric=True)
    raw, claims = _pods(workload.Job(0, "job-00000", "nvlink", 1, 4, 0.0, 60.0))[0]
    claims[0]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "missing.example.com"
    emulator = cycle.schedule(sim.configs["imex-scheduler"], _whole(sim, cluster, claims), raw, Recorder())
    result = sim.schedule_one(raw, claims)
    assert result.outcome == "unschedulable" and recorder.sent == []
    assert "device class missing.example.com does not exist" in result.message
    assert result.message == emulator.message.split(" preemption:")[0].rstrip()
