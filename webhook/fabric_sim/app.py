"""Flask views: HTTP to and from the simulator model, plus authentication and request-level faults.

``/redfish``, the service root, ``/redfish/v1/odata`` and ``/redfish/v1/$metadata`` answer without
credentials (DSP0266 section 13.3.3); everything else, including the ``/admin`` test endpoints, needs
HTTP Basic with the inventory's credentials. Request-level faults (hang, latency, injected errors) act
before authentication and before the model is touched, like a struggling front end would.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import socket
import time
from typing import Any

from flask import Flask, Response, request

from webhook.fabric_sim import inventory as inv
from webhook.fabric_sim.compose import Simulator
from webhook.fabric_sim.messages import RedfishError, Reply, error_body, message

MAX_BODY = 1 << 20
_OPEN = {"/redfish", "/redfish/", "/redfish/v1", "/redfish/v1/", "/redfish/v1/odata", "/redfish/v1/$metadata"}
_METHODS = ["GET", "HEAD", "POST", "PATCH", "PUT", "DELETE"]
_METADATA = """<?xml version="1.0" encoding="UTF-8"?>
<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">
  {refs}
  <edmx:DataServices>
    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">
      <EntityContainer Name="Service" Extends="ServiceRoot.v1_20_0.ServiceContainer"/>
    </Schema>
  </edmx:DataServices>
</edmx:Edmx>
"""
_SCHEMAS = ("ServiceRoot", "ComputerSystemCollection", "ComputerSystem", "CompositionService",
            "ResourceBlockCollection", "ResourceBlock", "ZoneCollection", "Zone", "Processor", "TaskService",
            "TaskCollection", "Task", "SessionService", "SessionCollection", "ActionInfo", "Message")


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    resp = Response(json.dumps(body, indent=1) if body is not None else b"", status=status,
                    mimetype="application/json" if body is not None else None)
    resp.headers["OData-Version"] = "4.0"
    for key, value in (headers or {}).items():
        resp.headers[key] = value
    return resp


def create_app(sim: Simulator) -> Flask:
    app = Flask("imex_webhook_fabric_sim")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY

    def respond(reply: Reply) -> Response:
        headers = dict(reply.headers)
        if not sim.options.etag_header:  # quirk: some services put the ETag in the body only
            headers.pop("ETag", None)
        return _json(reply.status, reply.body, headers)

    def authorized() -> bool:
        auth = request.authorization
        creds = sim.inventory.credentials
        if auth is None or auth.type != "basic":
            return False
        # compare_digest on both, so a wrong user name takes as long as a wrong password.
        user_ok = hmac.compare_digest((auth.username or "").encode(), creds.username.encode())
        return hmac.compare_digest((auth.password or "").encode(), creds.password.encode()) and user_ok

    def unauthorized() -> Response:
        return _json(401, error_body([message("AccessUnauthorized")]),
                     {"WWW-Authenticate": 'Basic realm="fabric-sim"'})

    def drop_connection() -> Response:
        # The "service stops answering" fault: the client sees its connection closed with no reply.
        sock = request.environ.get("werkzeug.socket")
        if isinstance(sock, socket.socket):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return Response(status=500)

    @app.before_request
    def gate() -> Response | None:
        path = request.path
        if path.startswith("/admin"):
            return None if authorized() else unauthorized()
        if not path.startswith("/redfish"):
            return _json(404, error_body([message("ResourceNotFound", "Resource", path)]))
        if not sim.wait_if_hung():
            return drop_connection()
        latency = sim.options.faults.latency_s
        if latency > 0:
            time.sleep(latency)
        injected = sim.injected_error(request.method)
        if injected is not None:
            return respond(injected)
        if path not in _OPEN and not authorized():
            return unauthorized()
        return None

    @app.errorhandler(RedfishError)
    def redfish_error(exc: RedfishError) -> Response:
        return respond(exc.reply())

    @app.errorhandler(413)
    def too_large(_: Exception) -> Response:
        return _json(413, error_body([message("GeneralError")]))

    def body() -> Any:
        raw = request.get_data()
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise RedfishError(400, message("MalformedJSON")) from exc

    @app.route("/redfish", methods=["GET"])
    @app.route("/redfish/", methods=["GET"])
    def versions() -> Response:
        return _json(200, {"v1": "/redfish/v1/"})

    @app.route("/redfish/v1/$metadata", methods=["GET"])
    def metadata() -> Response:
        refs = "\n  ".join(
            f'<edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/{name}_v1.xml">'
            f'<edmx:Include Namespace="{name}"/></edmx:Reference>' for name in _SCHEMAS)
        return Response(_METADATA.format(refs=refs), mimetype="application/xml", headers={"OData-Version": "4.0"})

    @app.route("/redfish/v1", methods=_METHODS)
    @app.route("/redfish/v1/", methods=_METHODS)
    @app.route("/redfish/v1/<path:sub>", methods=_METHODS)
    def redfish(sub: str = "") -> Response:
        parts = [p for p in sub.split("/") if p]
        method = request.method
        monitor = len(parts) == 3 and parts[:2] == ["TaskService", "TaskMonitors"]
        if method in ("GET", "HEAD"):
            if parts == ["odata"]:
                return _json(200, {"@odata.context": "/redfish/v1/$metadata", "value": [
                    {"name": n, "kind": "Singleton", "url": f"/redfish/v1/{n}"}
                    for n in ("Systems", "CompositionService", "TaskService", "SessionService")]})
            if monitor:
                return respond(sim.monitor(parts[2]))
            resource, etag = sim.get(parts, dict(request.args))
            return respond(Reply(200, resource, {"ETag": etag}))
        if_match = request.headers.get("If-Match")
        if method == "POST" and len(parts) == 4 and parts[0] == "Systems" and parts[2] == "Actions":
            return respond(sim.action(parts[1], parts[3], body(), if_match))
        if method == "PATCH" and len(parts) == 2 and parts[0] == "Systems":
            return respond(sim.patch_system(parts[1], body(), if_match))
        if method == "DELETE" and monitor:
            return respond(sim.monitor(parts[2], delete=True))
        sim.get(parts, {})  # 404 for an unknown resource, before a 405 for a known one
        allow = "GET, HEAD, PATCH" if len(parts) == 2 and parts[0] == "Systems" else "GET, HEAD"
        return _json(405, error_body([message("OperationNotAllowed")]), {"Allow": allow})

    _admin(app, sim)
    return app


def _admin(app: Flask, sim: Simulator) -> None:
    """Test endpoints (outside /redfish): inspect state, change faults and options, reset."""

    def bad(exc: Exception) -> Response:
        return _json(400, {"error": str(exc)})

    @app.get("/admin/state")
    def state() -> Response:
        return _json(200, sim.snapshot())

    @app.post("/admin/faults")
    def faults() -> Response:
        try:
            new = inv.faults_from(request.get_json(force=True, silent=True) or {}, sim.options.faults, "faults")
        except inv.InventoryError as exc:
            return bad(exc)
        sim.set_options(dataclasses.replace(sim.options, faults=new))
        return _json(200, dataclasses.asdict(new))

    @app.post("/admin/options")
    def options() -> Response:
        try:
            new = inv.options_from(request.get_json(force=True, silent=True) or {}, sim.options)
        except inv.InventoryError as exc:
            return bad(exc)
        sim.set_options(new)
        return _json(200, sim.snapshot()["options"])

    @app.post("/admin/reset")
    def reset() -> Response:
        sim.reset()
        return _json(200, sim.snapshot())

    @app.post("/admin/blocks/<block_id>")
    def block_state(block_id: str) -> Response:
        data = request.get_json(force=True, silent=True) or {}
        try:
            sim.set_block_state(block_id, str(data.get("state", "")))
        except ValueError as exc:
            return bad(exc)
        return _json(200, sim.snapshot()["blocks"][block_id])
