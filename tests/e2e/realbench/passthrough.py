"""The pass-through extender: the extender wire of the shipped profile, answered with no decision at all.

filter keeps every node it is sent and gives no reasons, prioritize scores nothing, preempt accepts the
scheduler's victims as they are, and bind creates the pod's Binding as ours does (the shipped profile
delegates binding to the extender, so a pass-through that did not bind would leave every pod unbound).
Run against the same profile, it is the cost of having any extender: the scheduler's encoding, the TLS
hop, a Python HTTP server decoding the node names, and a binding made outside kube-scheduler.

Run as its own process (``python -m tests.e2e.realbench.passthrough``), as ``serve`` is, so its CPU time
is its own and not the benchmark driver's.
"""

from __future__ import annotations

import argparse
import http.server
import json
import ssl
import threading
from typing import Any

import requests


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as kube-scheduler's client expects
    # The head and the body go out as two writes: with Nagle the body waits for the client's delayed ACK.
    disable_nagle_algorithm = True
    api: _Api

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        verb = self.path.rstrip("/").rsplit("/", 1)[-1]
        reply: Any
        if verb == "filter":
            reply = {"Nodes": None, "NodeNames": body.get("NodeNames") or [], "FailedNodes": {},
                     "FailedAndUnresolvableNodes": {}, "Error": ""}
        elif verb == "prioritize":
            reply = []
        elif verb == "preempt":
            reply = {"NodeNameToMetaVictims": body.get("NodeNameToMetaVictims") or {}}
        elif verb == "bind":
            reply = {"Error": self.api.bind(body["PodNamespace"], body["PodName"], body["PodUID"], body["Node"])}
        else:
            self.send_error(404)
            return
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Api:
    """Bindings through the API server, one keep-alive session per server thread."""

    def __init__(self, server: str, ca: str, cert: str, key: str) -> None:
        self.server, self.ca, self.cert = server, ca, (cert, key)
        self._local = threading.local()

    def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.cert = self.cert
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": name, "namespace": namespace, "uid": uid},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            reply = session.post(f"{self.server}/api/v1/namespaces/{namespace}/pods/{name}/binding",
                                 json=binding, verify=self.ca, timeout=30)
        except requests.RequestException as failure:
            return f"binding {namespace}/{name}: {failure}"
        return "" if reply.status_code < 300 else f"binding {namespace}/{name}: {reply.status_code} {reply.text[:300]}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.realbench.passthrough")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    parser.add_argument("--api-server", required=True)
    parser.add_argument("--api-ca", required=True)
    parser.add_argument("--api-cert", required=True)
    parser.add_argument("--api-key", required=True)
    args = parser.parse_args(argv)
    _Handler.api = _Api(args.api_server, args.api_ca, args.api_cert, args.api_key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.tls_cert, args.tls_key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"pass-through extender on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
