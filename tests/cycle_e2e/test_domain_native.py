"""What only a ComputeDomain-aware extender does, through the emulated scheduling cycle and the served
extender (docs/SCHEDULER.md): fabric health in the domain choice, spare nodes held for a group, one IMEX
domain per clique. Each scenario first shows where plain best fit would put the pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cycle_e2e import harness as h
from tests.e2e import objects
from webhook.domain import keys

GB200 = [h.namespace(), *objects.device_classes()]


def _pods(job: str, size: int) -> list[dict[str, Any]]:
    return [h.job_pod(job, i, gpus=4, claims=[("imex-channel", f"{job}-channel")]) for i in range(size)]


def _racks(nodes_a: int, nodes_b: int, **labels_of: dict[str, str]) -> list[dict[str, Any]]:
    out = [*h.rack("a", h.clique("a"), nodes_a), *h.rack("b", h.clique("b"), nodes_b)]
    for obj in out:
        if obj["kind"] == "Node":
            obj["metadata"]["labels"].update(labels_of.get(obj["metadata"]["name"].replace("-", "_"), {}))
    return out


def _annotated(cd: list[dict[str, Any]], annotations: dict[str, str]) -> list[dict[str, Any]]:
    cd[0]["metadata"]["annotations"] = annotations
    return cd


def _racks_of(world: h.World, pods: list[dict[str, Any]]) -> set[str | None]:
    run = world.run(pods)
    nodes = {key: run.node(key) for key in run.pods}
    assert all(nodes.values()), {k: run.last(k).message for k in run.pods}
    return {h.rack_of(n) for n in nodes.values()}


def test_a_group_avoids_the_best_fitting_clique_when_its_fabric_is_degraded(tmp_path: Path) -> None:
    # Rack a (3 trays) fits 3 pods exactly, but one tray reports degraded NVLink fabric.
    catalog = [*GB200, *_racks(3, 4, a_1={keys.HEALTH_LABEL: "degraded"}), *h.compute_domain("train", 3)]
    with h.World(tmp_path, catalog) as world:
        assert _racks_of(world, world.create(_pods("train", 3))) == {"b"}
        (domain,) = [d for d in world.replicas[0].inspect()["domains"] if d["domain"] == h.clique("a")]
        assert domain["freeGpus"] == 12  # left whole, for a group only it can take


def test_an_unhealthy_tray_takes_no_member_and_its_reason_says_why(tmp_path: Path) -> None:
    # Rack a is too small; rack b's first tray reports unhealthy fabric: the group gets b's two others.
    catalog = [*GB200, *_racks(1, 3, b_0={keys.HEALTH_LABEL: "unhealthy"}), *h.compute_domain("train", 2)]
    with h.World(tmp_path, catalog) as world:
        run = world.run(world.create(_pods("train", 2)))
        assert {run.node(k) for k in run.pods} == {"b-1", "b-2"}
        reasons = world.calls_of("filter")[0].reply["FailedAndUnresolvableNodes"]
        assert "NVLink fabric unhealthy" in reasons["b-0"], reasons


def test_spare_nodes_keep_another_group_off_the_room_they_hold(tmp_path: Path) -> None:
    catalog = [*GB200, *_racks(3, 4), *_annotated(h.compute_domain("train", 3), {keys.SPARE_NODES_ANNOTATION: "1"}),
               *h.compute_domain("guest", 1)]
    with h.World(tmp_path, catalog) as world:
        # 3 members and a spare need 4 nodes: rack b, though rack a fits the members exactly.
        assert _racks_of(world, world.create(_pods("train", 3))) == {"b"}
        (reservation,) = world.replicas[0].inspect()["reservations"]
        assert reservation["name"] == "ml/train"
        # Best fit for one pod is rack b's last node; it is the spare, so the guest goes to rack a.
        assert _racks_of(world, world.create(_pods("guest", 1))) == {"a"}


def test_an_exclusive_compute_domain_keeps_its_clique_to_itself(tmp_path: Path) -> None:
    catalog = [*GB200, *_racks(3, 4), *_annotated(h.compute_domain("solo", 2), {keys.EXCLUSIVE_ANNOTATION: "true"}),
               *h.compute_domain("guest", 1)]
    with h.World(tmp_path, catalog) as world:
        assert _racks_of(world, world.create(_pods("solo", 2))) == {"a"}  # best fit
        # Rack a's free tray would be the best fit for one pod; it belongs to solo's clique.
        assert _racks_of(world, world.create(_pods("guest", 1))) == {"b"}


def test_a_job_larger_than_any_clique_lands_in_whole_segments_neighbouring_ranks_together(tmp_path: Path) -> None:
    catalog = [*GB200, *_racks(3, 3), *_annotated(h.compute_domain("big", 6), {keys.SEGMENT_SIZE_ANNOTATION: "3"})]
    with h.World(tmp_path, catalog) as world:
        pods = world.create(_pods("big", 6))
        labels = [p["metadata"]["labels"][keys.GROUP_LABEL] for p in pods]
        assert labels[0] == labels[2] != labels[3] == labels[5]  # ranks 0-2 and 3-5: one segment each
        run = world.run(pods)
        racks = [h.rack_of(run.node(f"{h.NS}/{p['metadata']['name']}")) for p in pods]
        assert racks[:3] in (["a"] * 3, ["b"] * 3) and set(racks[3:]) == {"a", "b"} - set(racks[:3])
        assert sorted(r["name"] for r in world.replicas[0].inspect()["reservations"]) == ["ml/big#s0", "ml/big#s1"]
