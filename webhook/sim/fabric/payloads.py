"""Redfish JSON for every resource the simulator serves, shaped on DMTF's ``public-composability`` mockup.

Where the identity of a fabric GPU lives (the contract with ``webhook.adapters.redfish``): the block's
Processor ``.../ResourceBlocks/<id>/Processors/GPU0`` has ``ProcessorType: GPU``, ``Model``,
``Manufacturer``, ``UUID`` (the bare UUID, because Resource.UUID has a pattern that "GPU-..." fails), and
``Oem.ImexWebhook`` ``{"GpuUuid": "GPU-<uuid>" as NVML prints it, "PciAddress": "dddd:bb:dd.f" the node
sees}``. A system's zone is told the DMTF way: the system is registered as a ComputerSystem-type
ResourceBlock (``host-<node>``) that lists the system and sits in the zone, and the system's
``Links.ResourceBlocks`` starts with it (as ``SystemAfterAddResourceAction`` in the mockup does).

Callers hold the model's lock.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from webhook.sim.fabric.inventory import system_block_id
from webhook.sim.fabric.messages import RedfishError, message, not_found
from webhook.sim.fabric.state import BlockRec, Model, TaskRec

ROOT = "/redfish/v1"
SYSTEMS = f"{ROOT}/Systems"
COMPOSITION = f"{ROOT}/CompositionService"
BLOCKS = f"{COMPOSITION}/ResourceBlocks"
ZONES = f"{COMPOSITION}/ResourceZones"
TASKS = f"{ROOT}/TaskService/Tasks"
MONITORS = f"{ROOT}/TaskService/TaskMonitors"
SESSIONS = f"{ROOT}/SessionService/Sessions"
GPU = "GPU0"
ADD = "ComputerSystem.AddResourceBlock"
REMOVE = "ComputerSystem.RemoveResourceBlock"
_EXPAND_MEMBERS = {".", ".($levels=1)", "*", "*($levels=1)"}
_OK = {"State": "Enabled", "Health": "OK"}


def link(uri: str) -> dict[str, str]:
    return {"@odata.id": uri}


def _stable_uuid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "imex-webhook-fabric-sim/" + "/".join(parts)))


def root(m: Model) -> dict[str, Any]:
    return {
        "@odata.type": "#ServiceRoot.v1_20_0.ServiceRoot",
        "@odata.id": f"{ROOT}/",
        "Id": "RootService",
        "Name": "imex-webhook fabric simulator",
        "RedfishVersion": "1.22.0",
        "UUID": _stable_uuid("root"),
        "Product": "imex-webhook fabric-sim",
        "Vendor": "imex-webhook",
        "ProtocolFeaturesSupported": {
            "ExpandQuery": {"ExpandAll": False, "Levels": True, "MaxLevels": 1, "Links": False, "NoLinks": True},
            "SelectQuery": False, "FilterQuery": False, "OnlyMemberQuery": False, "ExcerptQuery": False,
        },
        "Systems": link(SYSTEMS),
        "CompositionService": link(COMPOSITION),
        "Tasks": link(f"{ROOT}/TaskService"),
        "SessionService": link(f"{ROOT}/SessionService"),
        "Links": {"Sessions": link(SESSIONS)},
    }


def collection(m: Model, odata_type: str, name: str, uri: str, members: list[str], query: Mapping[str, str],
               expand: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """Members, paged when the inventory sets page_size, expanded one level for ``$expand=.``."""
    skip = query.get("$skip", "0")
    # str.isdigit() also takes "²", which int() refuses, and int() refuses more than 4300 digits.
    if not (skip.isascii() and skip.isdigit()) or len(skip) > 18:
        raise RedfishError(400, message("QueryNotSupported"))
    start = int(skip)
    page = m.options.page_size or len(members) or 1
    shown = members[start: start + page]
    mode = query.get("$expand")
    if mode is not None and mode not in _EXPAND_MEMBERS:
        raise RedfishError(400, message("QueryNotSupported"))
    out: dict[str, Any] = {
        "@odata.type": f"#{odata_type}.{odata_type}",
        "@odata.id": uri,
        "Name": name,
        "Members@odata.count": len(members),
        "Members": [expand(u) if mode else link(u) for u in shown],
    }
    if start + page < len(members):
        keep = f"&$expand={mode}" if mode else ""
        out["Members@odata.nextLink"] = f"{uri}?$skip={start + page}{keep}"
    return out


def system_uri(system_id: str) -> str:
    return f"{SYSTEMS}/{system_id}"


def system(m: Model, system_id: str) -> dict[str, Any]:
    rec = m.system(system_id)
    uri = system_uri(system_id)
    blocks = [link(f"{BLOCKS}/{system_block_id(system_id)}"), *(link(f"{BLOCKS}/{b}") for b in rec.blocks)]
    actions = {
        f"#{name}": {"target": f"{uri}/Actions/{name}", "@Redfish.ActionInfo": f"{uri}/{name.split('.')[1]}ActionInfo"}
        for name in (ADD, REMOVE) if m.options.actions
    }
    return {
        "@odata.type": "#ComputerSystem.v1_27_0.ComputerSystem",
        "@odata.id": uri,
        "@odata.etag": m.etag(rec),
        "Id": system_id,
        "Name": f"Node {system_id}",
        "HostName": system_id,
        "SystemType": "Physical",
        "Composition": {"UseCases": ["ExpandableSystem"]},
        "UUID": _stable_uuid("system", system_id),
        "PowerState": "On",
        "Status": dict(_OK),
        "Links": {"ResourceBlocks": blocks, "ResourceBlocks@odata.count": len(blocks)},
        **({"Actions": actions} if actions else {}),
    }


def action_info(m: Model, system_id: str, name: str) -> dict[str, Any]:
    m.system(system_id)
    return {
        "@odata.type": "#ActionInfo.v1_5_0.ActionInfo",
        "@odata.id": f"{system_uri(system_id)}/{name}ActionInfo",
        "Id": f"{name}ActionInfo",
        "Name": f"{name} action info",
        "Parameters": [
            {"Name": "ResourceBlock", "Required": True, "DataType": "Object",
             "ObjectDataType": "#ResourceBlock.ResourceBlock"},
            {"Name": "ResourceBlockETag", "Required": False, "DataType": "String"},
            {"Name": "ComputerSystemETag", "Required": False, "DataType": "String"},
        ],
    }


def composition_service(m: Model) -> dict[str, Any]:
    return {
        "@odata.type": "#CompositionService.v1_2_3.CompositionService",
        "@odata.id": COMPOSITION,
        "Id": "CompositionService",
        "Name": "Composition Service",
        "Status": dict(_OK),
        "ServiceEnabled": True,
        "AllowOverprovisioning": False,
        "AllowZoneAffinity": False,
        "ResourceBlocks": link(BLOCKS),
        "ResourceZones": link(ZONES),
    }


def _pool(state: str) -> str:
    return {"Unused": "Free", "Composing": "Active", "Composed": "Active"}.get(state, "Unassigned")


def _composition(state: str, reserved: bool) -> dict[str, Any]:
    return {"Reserved": reserved, "CompositionState": state, "SharingCapable": False, "MaxCompositions": 1,
            "NumberOfCompositions": 1 if state in ("Composing", "Composed") else 0}


def gpu_block(m: Model, rec: BlockRec) -> dict[str, Any]:
    uri = f"{BLOCKS}/{rec.spec.id}"
    systems = [link(system_uri(rec.system))] if rec.system else []
    status = {"Failed": {"State": "Enabled", "Health": "Critical"},
              "Unavailable": {"State": "UnavailableOffline", "Health": "OK"}}.get(rec.state, _OK)
    return {
        "@odata.type": "#ResourceBlock.v1_4_3.ResourceBlock",
        "@odata.id": uri,
        "@odata.etag": m.etag(rec),
        "Id": rec.spec.id,
        "Name": f"GPU block {rec.spec.id}",
        "Description": f"Fabric-attachable GPU: {rec.spec.model}",
        "ResourceBlockType": ["Processor"],
        "Status": dict(status),
        "Pool": _pool(rec.state),
        "CompositionStatus": _composition(rec.state, rec.reserved),
        "Processors": [link(f"{uri}/Processors/{GPU}")],
        "Processors@odata.count": 1,
        "Links": {"ComputerSystems": systems, "ComputerSystems@odata.count": len(systems),
                  "Zones": [link(f"{ZONES}/{rec.spec.zone}")], "Zones@odata.count": 1},
    }


def host_block(m: Model, system_id: str) -> dict[str, Any]:
    rec = m.system(system_id)
    block_id = system_block_id(system_id)
    return {
        "@odata.type": "#ResourceBlock.v1_4_3.ResourceBlock",
        "@odata.id": f"{BLOCKS}/{block_id}",
        "Id": block_id,
        "Name": f"ComputerSystem block of {system_id}",
        "ResourceBlockType": ["ComputerSystem"],
        "Status": dict(_OK),
        "Pool": "Active",
        "CompositionStatus": _composition("Composed", False),
        "ComputerSystems": [link(system_uri(system_id))],
        "ComputerSystems@odata.count": 1,
        "Links": {"ComputerSystems": [link(system_uri(system_id))], "ComputerSystems@odata.count": 1,
                  "Zones": [link(f"{ZONES}/{rec.spec.zone}")], "Zones@odata.count": 1},
    }


def block(m: Model, block_id: str) -> dict[str, Any]:
    rec = m.blocks.get(block_id)
    if rec is not None:
        return gpu_block(m, rec)
    host = next((s for s in m.systems if system_block_id(s) == block_id), None)
    if host is None:
        raise not_found("ResourceBlock", block_id)
    return host_block(m, host)


def all_block_ids(m: Model) -> list[str]:
    return [system_block_id(s) for s in m.systems] + list(m.blocks)


def processor(m: Model, block_id: str, proc_id: str) -> dict[str, Any]:
    rec = m.blocks.get(block_id)
    if rec is None or proc_id != GPU:
        raise not_found("Processor", f"{block_id}/{proc_id}")
    return {
        "@odata.type": "#Processor.v1_22_0.Processor",
        "@odata.id": f"{BLOCKS}/{block_id}/Processors/{GPU}",
        "Id": GPU,
        "Name": f"{rec.spec.model} in {block_id}",
        "ProcessorType": "GPU",
        "Manufacturer": rec.spec.manufacturer,
        "Model": rec.spec.model,
        "UUID": rec.spec.uuid.removeprefix("GPU-"),
        "SerialNumber": rec.spec.uuid,
        "Status": dict(_OK) if rec.state != "Failed" else {"State": "Enabled", "Health": "Critical"},
        "Oem": {"ImexWebhook": {"@odata.type": "#ImexWebhook.v1_0_0.Processor", "GpuUuid": rec.spec.uuid,
                                "PciAddress": rec.spec.pci_address}},
    }


def zone(m: Model, zone_id: str) -> dict[str, Any]:
    spec = m.zones.get(zone_id)
    if spec is None:
        raise not_found("Zone", zone_id)
    members = [system_block_id(s) for s, r in m.systems.items() if r.spec.zone == zone_id]
    members += [b for b, r in m.blocks.items() if r.spec.zone == zone_id]
    return {
        "@odata.type": "#Zone.v1_6_3.Zone",
        "@odata.id": f"{ZONES}/{zone_id}",
        "Id": zone_id,
        "Name": spec.name or zone_id,
        "Status": dict(_OK),
        "ZoneType": "ZoneOfResourceBlocks",
        "Links": {"ResourceBlocks": [link(f"{BLOCKS}/{b}") for b in members],
                  "ResourceBlocks@odata.count": len(members)},
        # Expandable systems only (DSP0266 15.1, style 3): no POST-to-collection use case is offered.
        "@Redfish.CollectionCapabilities": {"@odata.type": "#CollectionCapabilities.v1_4_1.CollectionCapabilities",
                                            "Capabilities": []},
    }


def task(m: Model, rec: TaskRec) -> dict[str, Any]:
    health = {"Exception": "Critical", "Cancelled": "Warning"}.get(rec.state, "OK")
    out: dict[str, Any] = {
        "@odata.type": "#Task.v1_7_4.Task",
        "@odata.id": f"{TASKS}/{rec.id}",
        "@odata.etag": m.etag(rec),
        "Id": rec.id,
        "Name": f"{rec.method} {rec.target}",
        "TaskState": rec.state,
        "TaskStatus": health,
        "StartTime": rec.started_at,
        "PercentComplete": m.percent(rec),
        "TaskMonitor": f"{MONITORS}/{rec.id}",
        "Payload": {"HttpOperation": rec.method, "TargetUri": rec.target, "JsonBody": json.dumps(rec.body),
                    "HttpHeaders": []},
        "Messages": list(rec.messages),
    }
    if rec.ended_at:
        out["EndTime"] = rec.ended_at
    return out


def task_service(m: Model) -> dict[str, Any]:
    return {
        "@odata.type": "#TaskService.v1_3_0.TaskService",
        "@odata.id": f"{ROOT}/TaskService",
        "Id": "TaskService",
        "Name": "Task Service",
        "ServiceEnabled": True,
        "CompletedTaskOverWritePolicy": "Oldest",
        "LifeCycleEventOnTaskStateChange": False,
        "Status": dict(_OK),
        "Tasks": link(TASKS),
    }


def render(m: Model, parts: list[str], query: Mapping[str, str]) -> dict[str, Any]:
    """GET of ``/redfish/v1/<parts>`` (the SessionService is ``sessions``'); raises RedfishError 404 otherwise."""
    match parts:
        case []:
            return root(m)
        case ["Systems"]:
            return collection(m, "ComputerSystemCollection", "Computer Systems", SYSTEMS,
                              [system_uri(s) for s in m.systems], query, lambda u: system(m, u.rsplit("/", 1)[1]))
        case ["Systems", system_id]:
            return system(m, system_id)
        case ["Systems", system_id, ("AddResourceBlockActionInfo" | "RemoveResourceBlockActionInfo") as info]:
            return action_info(m, system_id, info.removesuffix("ActionInfo"))
        case ["CompositionService"]:
            return composition_service(m)
        case ["CompositionService", "ResourceBlocks"]:
            return collection(m, "ResourceBlockCollection", "Resource Blocks", BLOCKS,
                              [f"{BLOCKS}/{b}" for b in all_block_ids(m)], query,
                              lambda u: block(m, u.rsplit("/", 1)[1]))
        case ["CompositionService", "ResourceBlocks", block_id]:
            return block(m, block_id)
        case ["CompositionService", "ResourceBlocks", block_id, "Processors", proc_id]:
            return processor(m, block_id, proc_id)
        case ["CompositionService", "ResourceZones"]:
            return collection(m, "ZoneCollection", "Resource Zones", ZONES, [f"{ZONES}/{z}" for z in m.zones],
                              query, lambda u: zone(m, u.rsplit("/", 1)[1]))
        case ["CompositionService", "ResourceZones", zone_id]:
            return zone(m, zone_id)
        case ["TaskService"]:
            return task_service(m)
        case ["TaskService", "Tasks"]:
            return collection(m, "TaskCollection", "Tasks", TASKS, [f"{TASKS}/{t}" for t in m.tasks], query,
                              lambda u: task(m, m.tasks[u.rsplit("/", 1)[1]]))
        case ["TaskService", "Tasks", task_id] if task_id in m.tasks:
            return task(m, m.tasks[task_id])
    raise not_found("Resource", "/".join([ROOT, *parts]))
