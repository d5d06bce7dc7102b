"""A hostile Redfish service on loopback for the client's trust tests: each path answers as the test says
(redirects elsewhere, links to another port, huge or dripping bodies, HTML), and every request is recorded
with its headers, so a test can assert what another port received (credentials must never arrive there).

Threaded (``http.server``), HTTP or HTTPS, on a free port; handlers run in the server's threads and report
what they managed to write through ``written`` and the ``done`` event, so tests wait for events, not time.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Handler = Callable[["Reply"], None]
TOKEN = "hostile-test-token"
ROOT = "/redfish/v1/"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


class Reply:
    """What a route handler writes with: the request, and helpers for the usual answers."""

    def __init__(self, handler: BaseHTTPRequestHandler, server: Hostile) -> None:
        self.h = handler
        self.server = server

    def json(self, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.raw(status, data, {"Content-Type": "application/json", **(headers or {})})

    def raw(self, status: int, data: bytes, headers: dict[str, str]) -> None:
        self.h.send_response(status)
        for key, value in headers.items():
            self.h.send_header(key, value)
        if "Content-Length" not in headers:
            self.h.send_header("Content-Length", str(len(data)))
        self.h.end_headers()
        self.h.wfile.write(data)

    def stream(self, total: int, chunk: int = 64 * 1024, delay: float = 0.0,
               headers: dict[str, str] | None = None) -> None:
        """``total`` bytes of JSON-ish filler, ``chunk`` at a time (``delay`` s apart), connection-delimited:
        counts in ``server.written`` what the peer accepted before it hung up."""
        self.h.send_response(200)
        for key, value in {"Content-Type": "application/json", "Connection": "close", **(headers or {})}.items():
            self.h.send_header(key, value)
        self.h.end_headers()
        self.h.close_connection = True
        piece = b" " * chunk
        try:
            while self.server.written < total:
                self.h.wfile.write(piece[: min(chunk, total - self.server.written)])
                self.h.wfile.flush()
                self.server.written += min(chunk, total - self.server.written)
                if delay:
                    time.sleep(delay)
        except OSError:
            self.server.hung_up.set()


@dataclass
class Hostile:
    """The server; ``routes`` map a path (query included when the test routes on it) to a handler."""

    routes: dict[str, Handler] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    written: int = 0
    hung_up: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)  # a handler returned
    url: str = ""
    _httpd: ThreadingHTTPServer | None = None

    def paths(self) -> list[str]:
        return [s.path for s in self.seen]

    def credentials_seen(self) -> list[str]:
        """Every credential header any request to this server carried."""
        return [f"{s.path}: {k}" for s in self.seen for k in s.headers if k.lower() in ("authorization",
                                                                                          "x-auth-token")]

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


def start(routes: dict[str, Handler] | None = None, tls: ssl.SSLContext | None = None) -> Hostile:
    hostile = Hostile(routes=dict(routes or {}))

    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            hostile.seen.append(Seen(self.command, self.path, dict(self.headers.items())))
            route = hostile.routes.get(self.path) or hostile.routes.get(self.path.split("?", 1)[0])
            try:
                if route is None:
                    Reply(self, hostile).json({"error": {"message": "no such resource"}}, 404)
                else:
                    route(Reply(self, hostile))
            except OSError:
                hostile.hung_up.set()
            finally:
                hostile.done.set()

        do_GET = do_POST = do_PATCH = do_DELETE = _any

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    hostile._httpd = httpd
    hostile.url = f"{'https' if tls else 'http'}://127.0.0.1:{httpd.server_address[1]}"
    threading.Thread(target=httpd.serve_forever, name="hostile-redfish", daemon=True).start()
    return hostile


def service(systems: Handler | None = None) -> dict[str, Handler]:
    """The routes of a minimal composition service (root, a session login, a CompositionService with an
    empty block collection); ``systems`` answers the Systems collection, where the tests put their traps."""
    def root(r: Reply) -> None:
        r.json({"@odata.id": ROOT, "Id": "RootService", "CompositionService": {"@odata.id": "/redfish/v1/Comp"},
                "Systems": {"@odata.id": "/redfish/v1/Systems"},
                "Links": {"Sessions": {"@odata.id": "/redfish/v1/Sessions"}}})

    def login(r: Reply) -> None:
        r.json({"@odata.id": "/redfish/v1/Sessions/1"}, 201,
               {"X-Auth-Token": TOKEN, "Location": "/redfish/v1/Sessions/1"})

    def empty(r: Reply) -> None:
        r.json({"@odata.id": r.h.path, "Members": [], "Members@odata.count": 0})

    return {ROOT: root, "/redfish/v1/Sessions": login, "/redfish/v1/Sessions/1": empty,
            "/redfish/v1/Comp": lambda r: r.json({"@odata.id": "/redfish/v1/Comp",
                                                  "ResourceBlocks": {"@odata.id": "/redfish/v1/Blocks"}}),
            "/redfish/v1/Blocks": empty, "/redfish/v1/Systems": systems or empty}
