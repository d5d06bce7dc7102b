"""Test endpoints outside ``/redfish``: inspect the state, change faults and options, force block states,
drop every session, reset. Bodies go through the same strict JSON reader as the Redfish endpoints, and
every refusal is ``400 {"error": "<what is wrong>"}``, never an HTML page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request

from webhook.sim.fabric import inventory as inv
from webhook.sim.fabric.compose import Simulator
from webhook.sim.fabric.messages import RedfishError, parse_body
from webhook.wire.text import clip

JsonResponse = Callable[[int, Any], Response]


def _bad(json_response: JsonResponse, text: str) -> Response:
    return json_response(400, {"error": clip(text, 300)})


def _object(json_response: JsonResponse) -> dict[str, Any] | Response:
    """The body as a JSON object ({} when empty), or the 400 that says why it is not one."""
    try:
        data = parse_body(request.get_data())
    except RedfishError as exc:
        return _bad(json_response, f"the body is not acceptable JSON: {exc}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        return _bad(json_response, f"expected a JSON object, got {type(data).__name__}")
    return data


def register(app: Flask, sim: Simulator, json_response: JsonResponse) -> None:
    @app.get("/admin/state")
    def state() -> Response:
        return json_response(200, sim.snapshot())

    @app.post("/admin/faults")
    def faults() -> Response:
        data = _object(json_response)
        if isinstance(data, Response):
            return data
        try:
            new = inv.faults_from(data, sim.options.faults, "faults")
        except inv.InventoryError as exc:
            return _bad(json_response, str(exc))
        sim.set_options(dataclasses.replace(sim.options, faults=new))
        return json_response(200, dataclasses.asdict(new))

    @app.post("/admin/options")
    def options() -> Response:
        data = _object(json_response)
        if isinstance(data, Response):
            return data
        try:
            new = inv.options_from(data, sim.options)
        except inv.InventoryError as exc:
            return _bad(json_response, str(exc))
        sim.set_options(new)
        return json_response(200, sim.snapshot()["options"])

    @app.post("/admin/reset")
    def reset() -> Response:
        sim.reset()
        return json_response(200, sim.snapshot())

    @app.delete("/admin/sessions")
    def drop_sessions() -> Response:
        return json_response(200, {"dropped": sim.sessions.drop_all()})

    @app.post("/admin/blocks/<block_id>")
    def block_state(block_id: str) -> Response:
        data = _object(json_response)
        if isinstance(data, Response):
            return data
        wanted = data.get("state")
        if not isinstance(wanted, str):
            return _bad(json_response, "expected {\"state\": \"Unused\" | \"Failed\" | \"Unavailable\"}")
        try:
            sim.set_block_state(block_id, wanted)
        except ValueError as exc:
            return _bad(json_response, str(exc))
        return json_response(200, sim.snapshot()["blocks"][block_id])
