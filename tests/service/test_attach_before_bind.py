"""Attach before bind, end to end over TLS: ``imex-webhook serve`` (embedded demo cluster, simulated node
agents) attaches fabric GPUs from a composition simulator it reaches over HTTP, as it would reach a
real Redfish service. Covered: a pod needing 2 fabric GPUs binds once its attachment is Ready; a failed
compose leaves the pod unbound and nothing composed; a task that never finishes is reported by phase and
rolled back by the reconciler; a block composed behind our back (a crash between compose and the status
write) is found and released; two pods racing for the last free block: one binds, the other is told
why; and at the end no block is left composed without an attachment (the leak count is 0)."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests import serving
from tests.kubefake import eventually
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.sim.fabric import inventory
from webhook.sim.fabric.server import RunningSim, start_in_thread

FAB_NODES = [f"fab-{i:02d}" for i in range(demo.FABRIC_NODES)]
AUTH = ("admin", "admin")


@pytest.fixture
def sim() -> Iterator[RunningSim]:
    with start_in_thread(inventory.demo()) as running:
        yield running


@pytest.fixture
def served(sim: RunningSim, tmp_path: Path) -> Iterator[serving.Served]:
    creds = tmp_path / "fabric-credentials"
    creds.write_text("admin:admin\n")
    with serving.serve(tmp_path / "serve", "--fabric", sim.url, "--fabric-credentials", str(creds),
                       "--fabric-refresh", "0.2", "--attach-timeout", "2", "--orphan-grace", "1",
                       "--bind-budget", "3") as s:
        yield s


def admin(sim: RunningSim, path: str, body: Any = None) -> Any:
    if body is None:
        return requests.get(sim.url + path, auth=AUTH, timeout=10).json()
    reply = requests.post(sim.url + path, json=body, auth=AUTH, timeout=10)
    assert reply.status_code in (200, 204), reply.text
    return reply.json() if reply.content else None


def composed(sim: RunningSim) -> dict[str, str]:
    """block id -> system, for every block composed (or composing) to a system right now."""
    state = admin(sim, "/admin/state")
    return {block: info["system"] for block, info in state["blocks"].items() if info.get("system")}


def pod_body(name: str, gpus: int = 3) -> dict[str, Any]:
    pod = demo.pod(name, None, gpus, annotations={keys.GROUP_ANNOTATION: name, keys.GROUP_SIZE_ANNOTATION: "1"})
    return {"Pod": pod, "Nodes": None, "NodeNames": FAB_NODES}


def schedule(served: serving.Served, body: dict[str, Any], node: str | None = None) -> tuple[str, dict[str, Any]]:
    """filter, then bind to ``node`` (or the first passing node); returns (node, bind reply)."""
    result = served.post("/filter", body).json()
    assert result["Error"] == "" and result["NodeNames"], result
    target = node or result["NodeNames"][0]
    meta = body["Pod"]["metadata"]
    reply = served.post("/bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                  "PodUID": meta["uid"], "Node": target}).json()
    return target, reply


def attachments(served: serving.Served) -> list[dict[str, Any]]:
    return served.get("/inspect").json()["attachments"]  # type: ignore[no-any-return]


def test_a_pod_needing_two_fabric_gpus_binds_once_its_attachment_is_ready(served: serving.Served,
                                                                          sim: RunningSim) -> None:
    started = time.monotonic()
    node, reply = schedule(served, pod_body("needs-two"))
    assert reply == {"Error": ""}, reply
    elapsed = time.monotonic() - started
    (att,) = attachments(served)
    assert att["phase"] == "Ready" and att["node"] == node and att["gpus"] == 2
    assert all(b["uuid"].startswith("GPU-") and b["pciAddress"] for b in att["blocks"])
    assert sorted(composed(sim).values()) == [node] * 2
    assert elapsed < 30
    metrics = served.get("/metrics").text
    assert 'imex_webhook_fabric_attach_duration_seconds_count{outcome="ready"} 1.0' in metrics


def test_a_failed_compose_leaves_the_pod_unbound_and_nothing_composed(served: serving.Served,
                                                                     sim: RunningSim) -> None:
    blocks = list(admin(sim, "/admin/state")["blocks"])
    admin(sim, "/admin/faults", {"fail_compose": blocks})
    _, reply = schedule(served, pod_body("doomed"))
    assert "fabric attach of 2 GPUs to node" in reply["Error"] and "failed" in reply["Error"]
    assert served.get("/inspect").json()["groups"][0]["placed"] == 0
    (att,) = attachments(served)
    assert att["phase"] == "Failed" and att["blocks"] == [] and "failed" in att["message"].lower()
    assert composed(sim) == {}
    # The scheduler retries the same pod once the fabric is healthy again; the attachment starts over.
    admin(sim, "/admin/faults", {"fail_compose": []})
    for block in blocks:
        admin(sim, f"/admin/blocks/{block}", {"state": "Unused"})
    _, reply = schedule(served, pod_body("doomed"))
    assert reply == {"Error": ""}
    assert len(composed(sim)) == 2


def test_a_task_that_never_finishes_is_reported_and_rolled_back(served: serving.Served, sim: RunningSim) -> None:
    admin(sim, "/admin/options", {"compose_delay_s": 0.5})
    admin(sim, "/admin/faults", {"stuck_tasks": True})
    _, reply = schedule(served, pod_body("stuck"))
    assert "phase Composing" in reply["Error"] and "the scheduler retries" in reply["Error"]
    admin(sim, "/admin/faults", {"stuck_tasks": False})
    eventually(lambda: attachments(served) == [] and composed(sim) == {},
               what="the stuck attach rolled back past the attach timeout")
    assert 'action="rolled-back"' in served.get("/metrics").text


def test_a_block_composed_without_an_attachment_is_recovered(served: serving.Served, sim: RunningSim) -> None:
    # What a crash between the compose and the status write leaves behind: composed, recorded nowhere.
    block = next(iter(admin(sim, "/admin/state")["blocks"]))
    target = {"ResourceBlock": {"@odata.id": f"/redfish/v1/CompositionService/ResourceBlocks/{block}"}}
    reply = requests.post(sim.url + "/redfish/v1/Systems/fab-02/Actions/ComputerSystem.AddResourceBlock",
                          json=target, auth=AUTH, timeout=10)
    assert reply.status_code in (200, 202, 204), reply.text
    eventually(lambda: composed(sim) != {})
    eventually(lambda: composed(sim) == {}, what="the orphan released after its grace period")
    # Counted once the reconciler's detach call returns, a moment after the simulator let the block go.
    eventually(lambda: 'action="orphan-detached"' in served.get("/metrics").text,
               what="the recovery counted")


def test_two_pods_racing_for_the_last_free_block_one_binds_the_other_is_told_why(served: serving.Served,
                                                                                  sim: RunningSim) -> None:
    blocks = list(admin(sim, "/admin/state")["blocks"])
    for block in blocks[2:]:
        admin(sim, f"/admin/blocks/{block}", {"state": "Unavailable"})
    eventually(lambda: served.get("/inspect").json()["fabricFree"].get("pcie-pool-1") == 2)
    bodies = [pod_body(f"racer-{i}", gpus=2) for i in range(2)]
    for body in bodies:  # two free blocks: each pod's filter finds room for its one attached GPU
        assert served.post("/filter", body).json()["NodeNames"]
    # Between filter and bind, another consumer of the fabric takes one of the two blocks.
    admin(sim, f"/admin/blocks/{blocks[1]}", {"state": "Unavailable"})

    def bind(i: int) -> dict[str, Any]:
        meta = bodies[i]["Pod"]["metadata"]
        return served.post("/bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                     "PodUID": meta["uid"], "Node": FAB_NODES[i]}).json()  # type: ignore[no-any-return]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(bind, range(2)))
    errors = sorted(r["Error"] for r in replies)
    assert errors[0] == "" and errors[1], replies
    assert any(word in errors[1] for word in ("free GPU blocks", "ResourceBlockInUse", "in use")), errors[1]
    eventually(lambda: len(composed(sim)) == 1, what="exactly one block composed, nothing leaked")


def test_no_block_is_left_composed_without_an_attachment(served: serving.Served, sim: RunningSim) -> None:
    schedule(served, pod_body("keeper"))
    admin(sim, "/admin/faults", {"error_rate": 0.5, "seed": 3, "error_methods": ["POST", "PATCH"]})
    for i in range(3):
        schedule(served, pod_body(f"flaky-{i}", gpus=2), FAB_NODES[1 + i])
    admin(sim, "/admin/faults", {"error_rate": 0.0})

    def leaks() -> int:
        owned = {b["id"].rsplit("/", 1)[-1] for a in attachments(served) for b in a["blocks"]}
        return len([b for b in composed(sim) if b not in owned])

    eventually(lambda: leaks() == 0, what="no leaked block")


def test_a_fabric_manager_that_refuses_basic_is_served_through_one_session_logged_out_at_exit(
        tmp_path: Path) -> None:
    spec = inventory.to_dict(inventory.demo())
    spec["options"]["basic_auth"] = False
    creds = tmp_path / "fabric-credentials"
    creds.write_text("username: admin\npassword: admin\nauth: session\n")
    with start_in_thread(inventory.from_dict(spec)) as sim:
        with serving.serve(tmp_path / "serve", "--fabric", sim.url, "--fabric-credentials", str(creds),
                           "--fabric-refresh", "0.2") as served:
            node, reply = schedule(served, pod_body("behind-sessions"))
            assert reply == {"Error": ""}, reply
            assert sorted(composed(sim).values()) == [node] * 2
            during = admin(sim, "/admin/state")["sessions"]
            assert (during["open"], during["logins"], during["refused_tokens"]) == (1, 1, 0)
            sim.simulator.sessions.drop_all()  # the fabric manager restarts: every token is void at once
            eventually(lambda: admin(sim, "/admin/state")["sessions"]["logins"] == 2,
                       what="one new login after the restart")
            _, reply = schedule(served, pod_body("after-restart"))
            assert reply == {"Error": ""}, reply
        after = admin(sim, "/admin/state")["sessions"]
        assert (after["open"], after["logins"], after["logouts"]) == (0, 2, 1)  # logged out on shutdown
