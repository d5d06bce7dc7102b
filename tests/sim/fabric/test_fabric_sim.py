"""The Redfish composition simulator over real HTTP: payloads, the block state machine, refusals with
registry MessageIds, ETags, tasks, quirks and fault injection (the client tests rely on each of these)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import requests

from tests.fabric_sims import BLOCKS, SYSTEMS, FakeClock, Sim, inventory
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.sim.fabric import inventory as inv
from webhook.sim.fabric.compose import Simulator

ADD = "Actions/ComputerSystem.AddResourceBlock"
REMOVE = "Actions/ComputerSystem.RemoveResourceBlock"


def block_ref(block_id: str) -> dict[str, Any]:
    return {"ResourceBlock": {"@odata.id": f"{BLOCKS}/{block_id}"}}


def add(sim: Sim, system: str, block_id: str, **headers: str) -> requests.Response:
    return sim.http.post(f"{sim.url}{SYSTEMS}/{system}/{ADD}", json=block_ref(block_id), headers=headers, timeout=10)


def remove(sim: Sim, system: str, block_id: str) -> requests.Response:
    return sim.http.post(f"{sim.url}{SYSTEMS}/{system}/{REMOVE}", json=block_ref(block_id), timeout=10)


def get(sim: Sim, path: str) -> requests.Response:
    return sim.http.get(sim.url + path, timeout=10)


def ids(resp: requests.Response) -> list[str]:
    return [m["MessageId"] for m in resp.json()["error"]["@Message.ExtendedInfo"]]


def test_the_service_root_answers_without_credentials_and_everything_else_needs_them(sim: Sim) -> None:
    root = requests.get(sim.url + "/redfish/v1/", timeout=10)
    assert root.status_code == 200 and root.headers["OData-Version"] == "4.0"
    assert root.json()["CompositionService"] == {"@odata.id": "/redfish/v1/CompositionService"}
    assert requests.get(sim.url + "/redfish", timeout=10).json() == {"v1": "/redfish/v1/"}
    assert "ResourceBlock_v1.xml" in requests.get(sim.url + "/redfish/v1/$metadata", timeout=10).text
    assert requests.get(sim.url + "/redfish/v1/odata", timeout=10).json()["value"][0]["url"] == SYSTEMS
    for path in ("/redfish/v1/Systems", f"{BLOCKS}/ga-0", "/admin/state"):
        resp = requests.get(sim.url + path, timeout=10)
        assert resp.status_code == 401 and resp.headers["WWW-Authenticate"].startswith("Basic")
        assert ids(resp) == ["Base.1.22.AccessUnauthorized"]
    assert requests.get(sim.url + "/redfish/v1/Systems", auth=("admin", "nope"), timeout=10).status_code == 401
    assert get(sim, "/redfish/v1/Systems").json()["Members@odata.count"] == 3


def test_the_demo_inventory_matches_the_demo_cluster(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inv.demo())
    nodes = [n for n in demo.nodes() if keys.FABRIC_ZONE_LABEL in n["metadata"]["labels"]]
    for node in nodes:
        system = get(sim, node["metadata"]["annotations"][keys.REDFISH_SYSTEM_ANNOTATION])
        assert system.status_code == 200 and system.json()["HostName"] == node["metadata"]["name"]
        assert sim.running.simulator.systems[node["metadata"]["name"]].spec.max_blocks == demo.FABRIC_SLOTS
    zone = get(sim, f"/redfish/v1/CompositionService/ResourceZones/{demo.FABRIC_ZONE}").json()
    assert zone["Id"] == demo.FABRIC_ZONE and zone["ZoneType"] == "ZoneOfResourceBlocks"
    assert zone["Links"]["ResourceBlocks@odata.count"] == len(nodes) + inv.DEMO_BLOCKS


def test_a_gpu_block_carries_its_identity_on_its_processor(sim: Sim) -> None:
    block = get(sim, f"{BLOCKS}/ga-1").json()
    assert block["ResourceBlockType"] == ["Processor"]
    assert block["CompositionStatus"] == {"Reserved": False, "CompositionState": "Unused", "SharingCapable": False,
                                          "MaxCompositions": 1, "NumberOfCompositions": 0}
    proc = get(sim, block["Processors"][0]["@odata.id"]).json()
    assert proc["ProcessorType"] == "GPU"
    gpu = proc["Oem"]["ImexWebhook"]
    assert gpu["GpuUuid"] == "GPU-" + proc["UUID"] and gpu["PciAddress"] == "0000:42:00.0"
    host = get(sim, f"{BLOCKS}/host-a-0").json()
    assert host["ResourceBlockType"] == ["ComputerSystem"]
    assert host["ComputerSystems"] == [{"@odata.id": f"{SYSTEMS}/a-0"}]


def test_attach_moves_the_block_to_composed_and_links_both_ways(sim: Sim) -> None:
    resp = add(sim, "a-0", "ga-0")
    assert resp.status_code == 200 and resp.headers["ETag"] == get(sim, f"{SYSTEMS}/a-0").headers["ETag"]
    block = get(sim, f"{BLOCKS}/ga-0").json()
    assert block["CompositionStatus"]["CompositionState"] == "Composed"
    assert block["Links"]["ComputerSystems"] == [{"@odata.id": f"{SYSTEMS}/a-0"}]
    system = get(sim, f"{SYSTEMS}/a-0").json()
    assert [b["@odata.id"] for b in system["Links"]["ResourceBlocks"]] == [f"{BLOCKS}/host-a-0", f"{BLOCKS}/ga-0"]
    assert remove(sim, "a-0", "ga-0").status_code == 200
    assert sim.composed()["a-0"] == []


@pytest.mark.parametrize(("system", "block", "status", "message_id"), [
    ("a-0", "nope", 404, "Composition.1.1.ResourceBlockNotFound"),
    ("a-0", "gb-0", 400, "Composition.1.1.IncompatibleZone"),
    ("a-1", "ga-0", 409, "Composition.1.1.ResourceBlockInUse"),
    ("a-0", "ga-0", 409, "Composition.1.1.ResourceBlockInUse"),
    ("a-0", "host-a-1", 409, "Composition.1.1.ResourceBlockInUse"),
    ("zz", "ga-1", 404, "Base.1.22.ResourceNotFound"),
])
def test_attach_is_refused_with_the_registry_message_and_status(sim: Sim, system: str, block: str, status: int,
                                                                message_id: str) -> None:
    assert add(sim, "a-0", "ga-0").status_code == 200
    before = sim.state()["blocks"]
    resp = add(sim, system, block)
    assert resp.status_code == status
    assert ids(resp) == [message_id]
    assert resp.json()["error"]["code"] == "Base.1.22.GeneralError"
    assert sim.state()["blocks"] == before


def test_a_system_takes_no_more_blocks_than_its_slots(sim: Sim) -> None:
    for block in ("ga-0", "ga-1", "ga-2"):
        assert add(sim, "a-0", block).status_code == 200
    resp = add(sim, "a-0", "ga-3")
    assert resp.status_code == 409 and ids(resp) == ["Base.1.22.ResourceExhaustion"]


def test_every_state_change_changes_the_etag_and_a_stale_if_match_gets_412(sim: Sim) -> None:
    first = get(sim, f"{SYSTEMS}/a-0")
    assert first.headers["ETag"] == first.json()["@odata.etag"]
    assert add(sim, "a-0", "ga-0", **{"If-Match": first.headers["ETag"]}).status_code == 200
    second = get(sim, f"{SYSTEMS}/a-0").headers["ETag"]
    assert second != first.headers["ETag"]
    stale = add(sim, "a-0", "ga-1", **{"If-Match": first.headers["ETag"]})
    assert stale.status_code == 412 and ids(stale) == ["Base.1.22.PreconditionFailed"]
    assert remove(sim, "a-0", "ga-0").status_code == 200
    assert get(sim, f"{SYSTEMS}/a-0").headers["ETag"] not in (first.headers["ETag"], second)


def test_required_if_match_answers_428_to_changes_without_it(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(require_if_match=True))
    resp = add(sim, "a-0", "ga-0")
    assert resp.status_code == 428 and ids(resp) == ["Base.1.22.PreconditionRequired"]
    patch = sim.http.patch(f"{sim.url}{SYSTEMS}/a-0", json={"Links": {"ResourceBlocks": []}}, timeout=10)
    assert patch.status_code == 428
    etag = get(sim, f"{SYSTEMS}/a-0").headers["ETag"]
    assert add(sim, "a-0", "ga-0", **{"If-Match": etag}).status_code == 200
    stale_param = sim.http.post(f"{sim.url}{SYSTEMS}/a-0/{ADD}", json={**block_ref("ga-1"), "ComputerSystemETag": etag},
                                timeout=10)
    assert stale_param.status_code == 428  # the schema's rule for a stale ComputerSystemETag parameter
    etag = get(sim, f"{SYSTEMS}/a-0").headers["ETag"]
    stale_block = sim.http.post(f"{sim.url}{SYSTEMS}/a-0/{ADD}", headers={"If-Match": etag},
                                json={**block_ref("ga-1"), "ResourceBlockETag": '"1"'}, timeout=10)
    assert stale_block.status_code == 428
    block_etag = get(sim, f"{BLOCKS}/ga-1").headers["ETag"]
    fresh = sim.http.post(f"{sim.url}{SYSTEMS}/a-0/{ADD}", headers={"If-Match": etag},
                          json={**block_ref("ga-1"), "ResourceBlockETag": block_etag}, timeout=10)
    assert fresh.status_code == 200


def test_patch_of_links_resource_blocks_attaches_and_detaches_the_difference(sim: Sim) -> None:
    def patch(*items: Any, **headers: str) -> requests.Response:
        body = {"Links": {"ResourceBlocks": list(items)}}
        return sim.http.patch(f"{sim.url}{SYSTEMS}/a-0", json=body, headers=headers, timeout=10)

    host, ga0, ga1 = ({"@odata.id": f"{BLOCKS}/{b}"} for b in ("host-a-0", "ga-0", "ga-1"))
    assert patch(host, ga0, ga1).status_code == 200
    assert sim.composed()["a-0"] == ["ga-0", "ga-1"]
    assert patch({}, None, {}).status_code == 200  # keep the host, drop ga-0, keep ga-1
    assert sim.composed()["a-0"] == ["ga-1"]
    assert sim.state()["blocks"]["ga-0"]["state"] == "Unused"
    assert ids(patch(ga1)) == ["Composition.1.1.ResourceBlockInvalid"]  # the system's own block stays
    assert ids(patch(host, {"@odata.id": f"{BLOCKS}/gb-0"})) == ["Composition.1.1.IncompatibleZone"]
    assert sim.composed()["a-0"] == ["ga-1"]
    bad = sim.http.patch(f"{sim.url}{SYSTEMS}/a-0", json={"Name": "x"}, timeout=10)
    assert bad.status_code == 400 and ids(bad) == ["Base.1.22.PropertyNotWritable"]
    assert patch(host).status_code == 200 and sim.composed()["a-0"] == []


def test_a_compose_delay_answers_202_with_a_task_monitor_until_done(start_sim: Callable[..., Sim]) -> None:
    clock = FakeClock()
    sim = start_sim(Simulator(inventory(compose_delay_s=3), clock))
    resp = add(sim, "a-0", "ga-0")
    assert resp.status_code == 202 and resp.json()["TaskState"] == "Running"
    assert (resp.headers["Retry-After"], resp.json()["PercentComplete"]) == ("3", 0)
    monitor = resp.headers["Location"]
    assert get(sim, f"{BLOCKS}/ga-0").json()["CompositionStatus"]["CompositionState"] == "Composing"
    clock.advance(1.5)
    running = get(sim, monitor)
    assert running.status_code == 202 and running.json()["PercentComplete"] == 50
    assert running.headers["Retry-After"] == "2"
    clock.advance(1.5)
    done = get(sim, monitor)
    assert done.status_code == 200 and done.json()["@Message.ExtendedInfo"][0]["MessageId"] == "Base.1.22.Success"
    task = get(sim, resp.json()["@odata.id"]).json()
    assert (task["TaskState"], task["PercentComplete"]) == ("Completed", 100)
    assert [m["MessageId"] for m in task["Messages"]] == ["TaskEvent.1.0.TaskStarted", "TaskEvent.1.0.TaskCompletedOK"]
    assert get(sim, f"{BLOCKS}/ga-0").json()["CompositionStatus"]["CompositionState"] == "Composed"


def test_without_the_location_header_the_task_body_names_the_monitor(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(compose_delay_s=0.1, no_location_header=True))
    resp = add(sim, "a-0", "ga-0")
    assert resp.status_code == 202 and "Location" not in resp.headers
    assert resp.json()["TaskMonitor"] == "/redfish/v1/TaskService/TaskMonitors/1"
    assert resp.json()["@odata.id"] == "/redfish/v1/TaskService/Tasks/1"


def test_a_block_that_fails_to_compose_ends_failed_and_its_task_in_exception(start_sim: Callable[..., Sim]) -> None:
    clock = FakeClock()
    sim = start_sim(Simulator(inventory(compose_delay_s=1, faults={"fail_compose": ["ga-2"]}), clock))
    monitor = add(sim, "a-0", "ga-2").headers["Location"]
    clock.advance(1)
    result = get(sim, monitor)
    assert result.status_code == 500
    assert ids(result) == ["Base.1.22.OperationFailed", "Composition.1.1.ResourceBlockCompositionStateChanged"]
    assert get(sim, "/redfish/v1/TaskService/Tasks/1").json()["TaskState"] == "Exception"
    assert sim.state()["blocks"]["ga-2"] == {"state": "Failed", "system": None, "task": None, "zone": "pool-a"}


def test_a_stuck_task_never_finishes_and_detach_cancels_it(start_sim: Callable[..., Sim]) -> None:
    clock = FakeClock()
    sim = start_sim(Simulator(inventory(compose_delay_s=1, faults={"stuck_tasks": True}), clock))
    monitor = add(sim, "a-0", "ga-0").headers["Location"]
    clock.advance(3600)
    assert get(sim, monitor).status_code == 202
    assert remove(sim, "a-0", "ga-0").status_code == 200
    assert sim.state()["blocks"]["ga-0"]["state"] == "Unused"
    assert get(sim, "/redfish/v1/TaskService/Tasks/1").json()["TaskState"] == "Cancelled"
    assert get(sim, monitor).status_code == 409


def test_injected_errors_repeat_for_a_seed_and_change_nothing(sim: Sim) -> None:
    def run() -> list[int]:
        sim.faults(error_rate=0.5, seed=7, error_methods=["POST"])
        return [add(sim, "a-0", "ga-0").status_code for _ in range(6)]

    first = run()
    assert 503 in first and 200 in first
    sim.http.post(sim.url + "/admin/reset", timeout=10)
    assert run() == first
    sim.faults(error_rate=0, fail_next=1, error_status=500)
    assert get(sim, f"{SYSTEMS}/a-0").status_code == 200  # GET is not in error_methods
    assert add(sim, "a-0", "ga-3").status_code == 500
    assert sim.state()["blocks"]["ga-3"]["state"] == "Unused"


def test_compose_then_crash_changes_the_state_but_answers_500(sim: Sim) -> None:
    sim.faults(crash_after_compose=1)
    resp = add(sim, "a-0", "ga-0")
    assert resp.status_code == 500 and ids(resp) == ["Base.1.22.InternalError"]
    assert sim.composed()["a-0"] == ["ga-0"]
    assert add(sim, "a-0", "ga-0").status_code == 409  # a blind retry is refused, not ignored


def test_a_hung_service_drops_the_connection_at_the_cap_and_recovers(sim: Sim) -> None:
    sim.faults(hang=True, hang_cap_s=0.3)
    started = time.monotonic()
    with pytest.raises(requests.ConnectionError):
        requests.get(sim.url + "/redfish/v1/", timeout=5)
    assert 0.25 < time.monotonic() - started < 3
    sim.faults(hang=False)
    assert requests.get(sim.url + "/redfish/v1/", timeout=5).status_code == 200
    assert sim.state()["stats"]["dropped_connections"] == 1


def test_latency_is_added_to_every_request(sim: Sim) -> None:
    sim.faults(latency_s=0.2)
    started = time.monotonic()
    assert requests.get(sim.url + "/redfish/v1/", timeout=5).status_code == 200
    assert time.monotonic() - started >= 0.2


def test_collections_are_paged_and_expanded_on_request(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(page_size=4))
    first = get(sim, BLOCKS).json()
    assert first["Members@odata.count"] == 9 and len(first["Members"]) == 4
    second = get(sim, first["Members@odata.nextLink"]).json()
    assert second["Members"][0] == {"@odata.id": f"{BLOCKS}/ga-1"}
    expanded = get(sim, BLOCKS + "?$expand=.($levels=1)").json()
    assert expanded["Members"][0]["Id"] == "host-a-0"
    assert "$expand" in expanded["Members@odata.nextLink"]


def test_reset_restores_the_inventory(sim: Sim) -> None:
    add(sim, "a-0", "ga-0")
    sim.http.post(sim.url + "/admin/blocks/ga-1", json={"state": "Unavailable"}, timeout=10).raise_for_status()
    assert get(sim, f"{BLOCKS}/ga-1").json()["Status"]["State"] == "UnavailableOffline"
    state = sim.http.post(sim.url + "/admin/reset", timeout=10).json()
    assert state["systems"]["a-0"] == [] and state["blocks"]["ga-1"]["state"] == "Unused"


def test_inventory_files_are_checked_and_round_trip(tmp_path: Any) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("zones: [{id: z}]\nsystems: [{id: n-0, zone: z, max_blocks: 2}]\n"
                    "blocks: [{id: g, zone: z, state: Composed, system: n-0}]\n"
                    "options: {compose_delay_s: 0.5, faults: {fail_compose: [g]}}\ncredentials: {password: s3}\n")
    loaded = inv.load(path)
    assert loaded.blocks[0].uuid.startswith("GPU-") and loaded.options.faults.fail_compose == ("g",)
    assert inv.from_dict(inv.to_dict(loaded)) == loaded
    for text, problem in [("zones: [{id: z}]\nblocks: [{id: g, zone: y}]", "unknown zone"),
                          ("options: {faults: {eror_rate: 1}}", "eror_rate: unknown key"),
                          ("blocks: [{id: g, zone: z, state: Composed}]\nzones: [{id: z}]", "names its system"),
                          ("zones: [{id: 'a b'}]", "not a valid Id")]:
        path.write_text(text)
        with pytest.raises(inv.InventoryError, match=problem):
            inv.load(path)
