"""Flask views: HTTP to and from the simulator model, plus authentication and request-level faults.

``/redfish``, the service root, ``/redfish/v1/odata`` and ``/redfish/v1/$metadata`` answer without
credentials (DSP0266 section 13.3.3), and so does the POST that creates a session; everything else
needs a session's ``X-Auth-Token`` or, unless ``basic_auth`` is off, HTTP Basic with the inventory's
credentials. Request-level faults (hang, latency, injected errors) act before authentication and before
the model is touched, like a struggling front end would. Every answer is JSON (``$metadata`` is XML, as
the standard wants), errors in the Redfish error shape: never an HTML page, never a 500 for bad input.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from webhook.sim.fabric import admin, sessions
from webhook.sim.fabric.compose import Simulator
from webhook.sim.fabric.messages import RedfishError, Reply, error_body, message, parse_body

log = logging.getLogger(__name__)
MAX_BODY = 1 << 20
_OPEN = {"/redfish", "/redfish/", "/redfish/v1", "/redfish/v1/", "/redfish/v1/odata", "/redfish/v1/$metadata"}
_LOGIN = {sessions.SESSIONS, f"{sessions.SESSIONS}/Members"}  # DSP0266: a POST to either creates a session
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
            "TaskCollection", "Task", "SessionService", "SessionCollection", "Session", "ActionInfo", "Message")


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    resp = Response(json.dumps(body, indent=1) if body is not None else b"", status=status,
                    mimetype="application/json" if body is not None else None)
    resp.headers["OData-Version"] = "4.0"
    for key, value in (headers or {}).items():
        resp.headers[key] = value
    return resp


def _allow(parts: list[str]) -> str:
    """The methods a resource takes, for the Allow header of a 405."""
    if (len(parts) == 2 and parts[0] == "Systems") or parts == ["SessionService"]:
        return "GET, HEAD, PATCH"
    if parts == ["SessionService", "Sessions"]:
        return "GET, HEAD, POST"
    if len(parts) == 3 and parts[:2] in (["SessionService", "Sessions"], ["TaskService", "TaskMonitors"]):
        return "GET, HEAD, DELETE"
    return "GET, HEAD"


def create_app(sim: Simulator) -> Flask:
    app = Flask("imex_webhook_fabric_sim", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False  # Flask's own OPTIONS reply is an empty text/html page

    def respond(reply: Reply) -> Response:
        headers = dict(reply.headers)
        if not sim.options.etag_header:  # quirk: some services put the ETag in the body only
            headers.pop("ETag", None)
        return json_response(reply.status, reply.body, headers)

    def basic_ok() -> bool:
        auth = request.authorization
        return auth is not None and auth.type == "basic" and sim.basic_ok(auth.username or "", auth.password or "")

    def unauthorized(key: str = "AccessUnauthorized") -> Response:
        # Advertise Basic only where it is accepted; a sessions-only service has no scheme to offer.
        challenge = {"WWW-Authenticate": 'Basic realm="fabric-sim"'} if sim.options.basic_auth else {}
        return json_response(401, error_body([message(key)]), challenge)

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
        token = request.headers.get("X-Auth-Token")
        if path.startswith("/admin"):
            # Test endpoints keep Basic even when the service refuses it, so a test can always steer.
            return None if basic_ok() or (token is not None and sim.authenticate(token)) else unauthorized()
        if not path.startswith("/redfish"):
            return json_response(404, error_body([message("ResourceNotFound", "Resource", path)]))
        if not sim.wait_if_hung():
            return drop_connection()
        latency = sim.options.faults.latency_s
        if latency > 0:
            time.sleep(latency)
        injected = sim.injected_error(request.method)
        if injected is not None:
            return respond(injected)
        if path in _OPEN or (request.method == "POST" and path.rstrip("/") in _LOGIN):
            return None
        if token is not None:  # a token decides alone: a stale one is refused even beside valid Basic
            return None if sim.authenticate(token) else unauthorized("NoValidSession")
        return None if sim.options.basic_auth and basic_ok() else unauthorized()

    @app.errorhandler(RedfishError)
    def redfish_error(exc: RedfishError) -> Response:
        return respond(exc.reply())

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        # werkzeug's own refusals (413, 405 outside /redfish/v1, 404 under /admin) as Redfish errors.
        status = exc.code or 500
        key = {404: "ResourceNotFound", 405: "OperationNotAllowed"}.get(status, "GeneralError")
        args = ("Resource", request.path) if key == "ResourceNotFound" else ()
        allowed = getattr(exc, "valid_methods", None)
        headers = {"Allow": ", ".join(allowed)} if status == 405 and allowed else {}
        return json_response(status, error_body([message(key, *args)]), headers)

    @app.errorhandler(Exception)
    def internal_error(exc: Exception) -> Response:
        log.exception("fabric simulator: unexpected error on %s %s", request.method, request.path)
        return json_response(500, error_body([message("InternalError")]))

    def body() -> Any:
        return parse_body(request.get_data())

    @app.route("/redfish", methods=["GET"])
    @app.route("/redfish/", methods=["GET"])
    def versions() -> Response:
        return json_response(200, {"v1": "/redfish/v1/"})

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
                return json_response(200, {"@odata.context": "/redfish/v1/$metadata", "value": [
                    {"name": n, "kind": "Singleton", "url": f"/redfish/v1/{n}"}
                    for n in ("Systems", "CompositionService", "TaskService", "SessionService")]})
            if monitor:
                return respond(sim.monitor(parts[2]))
            resource, etag = sim.get(parts, dict(request.args))
            return respond(Reply(200, resource, {"ETag": etag}))
        if_match = request.headers.get("If-Match")
        if method == "POST" and parts in (["SessionService", "Sessions"], ["SessionService", "Sessions", "Members"]):
            return respond(sim.login(body(), request.remote_addr or ""))
        if method == "POST" and len(parts) == 4 and parts[0] == "Systems" and parts[2] == "Actions":
            return respond(sim.action(parts[1], parts[3], body(), if_match))
        if method == "PATCH" and len(parts) == 2 and parts[0] == "Systems":
            return respond(sim.patch_system(parts[1], body(), if_match))
        if method == "PATCH" and parts == ["SessionService"]:
            return respond(sim.patch_session_service(body()))
        if method == "DELETE" and len(parts) == 3 and parts[:2] == ["SessionService", "Sessions"]:
            return respond(sim.logout(parts[2]))
        if method == "DELETE" and monitor:
            return respond(sim.monitor(parts[2], delete=True))
        sim.get(parts, {})  # 404 for an unknown resource, before a 405 for a known one
        return json_response(405, error_body([message("OperationNotAllowed")]), {"Allow": _allow(parts)})

    admin.register(app, sim, json_response)
    return app
