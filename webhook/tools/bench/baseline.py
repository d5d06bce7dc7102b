"""The benchmark's baseline: a trivial Flask view behind exactly the gunicorn/TLS setup of ``serve``.

The view only decodes the JSON body and encodes it again with orjson, which is the least any JSON
webhook must do with the same payload. ``/canned/<name>`` decodes the body and answers bytes stored with
``PUT /canned/<name>`` (the service's own reply to that request), for the serial cycle's same-bytes
baseline. The worker admits bodies over 64 KiB only on the extender's routes (``webhook.domain.limits``),
so replies and requests of thousands of names are stored and answered as ``/filter?canned=<name>`` (or
``/prioritize``; ``canned_path``) instead, under the body limit the service's /filter has. It runs through
``webhook.service.server._Server`` itself, so the worker class, threads, keep-alive, timeouts and the SSL
context are the service's own, not a copy that could drift: whatever the benchmark measures beyond this
baseline is the service's work.

Run as ``python -m webhook.tools.bench.baseline --bind HOST:PORT --tls-cert C --tls-key K [--threads N]``
(``command`` builds that line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson
from flask import Flask, Response, request

from webhook.domain.limits import DEFAULT_MAX_BODY
from webhook.service.server import _Server
from webhook.service.settings import LimitSettings, LogSettings, ServerSettings, Settings, TlsSettings
from webhook.tools.servers import Tls, tls_flags

ECHO_PATHS = ("/filter", "/prioritize", "/bind", "/mutate", "/echo")


def create_app() -> Flask:
    """The same Flask machinery (routing, request object, Response) the service's views go through."""
    app = Flask("imex_webhook_baseline")
    canned: dict[str, bytes] = {}

    def echo() -> Response:
        name = request.args.get("canned")
        if name is not None:
            return store(name) if request.method == "PUT" else reply(name)
        body = orjson.loads(request.get_data(cache=False))
        return Response(orjson.dumps(body), status=200, mimetype="application/json")

    def store(name: str) -> Response:
        canned[name] = request.get_data(cache=False)
        return Response(b'{"stored":true}', status=200, mimetype="application/json")

    def reply(name: str) -> Response:
        # Decode the request as the service must, then answer the bytes the service answered it: what the
        # service spends beyond this is its own work, not the size of its reply.
        orjson.loads(request.get_data(cache=False))
        if name not in canned:
            return Response(b'{"error":"nothing stored"}', status=404, mimetype="application/json")
        return Response(canned[name], status=200, mimetype="application/json")

    app.add_url_rule("/canned/<name>", endpoint="store", view_func=store, methods=["PUT"])
    app.add_url_rule("/canned/<name>", endpoint="reply", view_func=reply, methods=["POST"])

    def ready() -> Response:
        return Response(b'{"ready":true}', status=200, mimetype="application/json")

    for path in ECHO_PATHS:
        app.add_url_rule(path, endpoint=path.strip("/"), view_func=echo, methods=["POST", "PUT"])
    for path in ("/readyz", "/healthz"):
        app.add_url_rule(path, endpoint=path.strip("/"), view_func=ready, methods=["GET"])
    return app


def canned_path(verb: str, name: str) -> str:
    """Where the baseline stores (PUT) and answers (POST) the reply ``name`` on the route of ``verb``
    (``filter`` or ``prioritize``), which admits bodies as large as the service's."""
    return f"/{verb}?canned={name}"


class BaselineServer(_Server):
    """``serve``'s gunicorn application with the trivial app loaded instead of the service."""

    def load(self) -> Flask:
        return create_app()


def command(port: int, tls: Tls, threads: int, max_body: int = DEFAULT_MAX_BODY) -> list[str]:
    """``max_body``: the service's --max-body, so that both admit the same bodies (full NodeLists)."""
    return [sys.executable, "-m", "webhook.tools.bench.baseline", "--bind", f"127.0.0.1:{port}", *tls_flags(tls),
            "--threads", str(threads), "--max-body", str(max_body)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webhook.tools.bench.baseline",
                                     description="Echo JSON over gunicorn gthread + TLS, configured as serve.")
    parser.add_argument("--bind", required=True, help="HOST:PORT")
    parser.add_argument("--tls-cert", type=Path, required=True)
    parser.add_argument("--tls-key", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=ServerSettings.threads)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY)
    ns = parser.parse_args(argv)
    settings = Settings(server=ServerSettings(bind=ns.bind, threads=ns.threads),
                        tls=TlsSettings(cert=ns.tls_cert, key=ns.tls_key), log=LogSettings(level=ns.log_level),
                        limits=LimitSettings(max_body=ns.max_body))
    BaselineServer(settings, ns.tls_cert, ns.tls_key).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
