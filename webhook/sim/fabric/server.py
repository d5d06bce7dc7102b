"""Run the simulator: werkzeug's threaded server, plain HTTP or HTTPS, in a background thread.

Used three ways: by tests (``start_in_thread`` on port 0, ``stop()`` at the end), by ``serve
--fabric embedded`` (the same call, kept for the life of the process) and by the ``fabric-sim`` command.
werkzeug's server is enough here: the simulator stands in for a fabric manager that answers a handful
of requests per pod, and a thread per connection keeps a hanging request (fault) from blocking others.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from werkzeug.serving import LISTEN_QUEUE, BaseWSGIServer, WSGIRequestHandler, make_server

from certs import files as cert_files
from webhook.agent.http_server import listening_socket
from webhook.sim.fabric import inventory as inv
from webhook.sim.fabric.app import create_app
from webhook.sim.fabric.compose import Simulator

log = logging.getLogger(__name__)


class _AccessLogHandler(WSGIRequestHandler):
    # Idle keep-alive connections (and clients that connect and send nothing) are closed after this.
    timeout = 60


class _QuietHandler(_AccessLogHandler):
    """Access lines at DEBUG instead of werkzeug's stderr lines (tests run hundreds of requests)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log.debug('%s "%s" %s %s', self.address_string(), self.requestline, code, size)


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    ca_cert: Path | None = None  # what clients should trust, when the simulator made the certificate


@dataclass
class RunningSim:
    """A simulator serving in a background thread; ``stop()`` (or leaving the ``with`` block) ends it."""

    url: str  # e.g. "https://127.0.0.1:43121"
    simulator: Simulator
    tls: TlsFiles | None
    _server: BaseWSGIServer = field(repr=False)
    _thread: threading.Thread = field(repr=False)

    @property
    def ca_cert(self) -> Path | None:
        return self.tls.ca_cert if self.tls else None

    def stop(self) -> None:
        self.simulator.release_hung()  # hanging requests would otherwise hold their threads to the cap
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> RunningSim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def tls_from_dir(directory: str | Path, host: str) -> TlsFiles:
    """A CA and serving certificate in ``directory`` (made when absent), valid for localhost and ``host``."""
    names, ips = ["localhost"], ["127.0.0.1", "::1"]
    if host and host not in ("0.0.0.0", "::", "localhost", *ips):
        try:
            ipaddress.ip_address(host)
            ips.append(host)
        except ValueError:
            names.append(host)
    made = cert_files.ensure_tls_dir(directory, names, ips)
    return TlsFiles(made.paths.cert, made.paths.key, made.paths.ca_cert)


def ssl_context(tls: TlsFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(tls.cert), str(tls.key))
    return context


def listen(host: str, port: int) -> socket.socket:
    """A socket bound and listening on ``host:port`` (port 0: any free one). Raises ``OSError`` when it
    cannot (the port in use, an address not this machine's), where werkzeug would print and exit."""
    return listening_socket(host, port, LISTEN_QUEUE)


def start_in_thread(source: inv.Inventory | Simulator | None = None, host: str = "127.0.0.1", port: int = 0,
                    *, tls: TlsFiles | None = None, access_log: bool = False,
                    listening: socket.socket | None = None) -> RunningSim:
    """Serve ``source`` (an inventory, a ready Simulator, or the demo inventory) until ``stop()``.

    ``port=0`` takes a free port; the URL in the result names the one bound. With ``tls`` the server
    speaks HTTPS only (TLS 1.2 or newer). ``listening``: a socket from :func:`listen` to serve on instead
    of binding ``host:port`` here (closed by this call; the server keeps its own duplicate).
    """
    simulator = source if isinstance(source, Simulator) else Simulator(source or inv.demo())
    handler = _AccessLogHandler if access_log else _QuietHandler
    kwargs: dict[str, Any] = {"threaded": True, "request_handler": handler}
    if tls is not None:
        kwargs["ssl_context"] = ssl_context(tls)
    sock = listening if listening is not None else listen(host, port)
    try:
        server = make_server(host, sock.getsockname()[1], create_app(simulator), fd=sock.fileno(), **kwargs)
    finally:
        sock.close()
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    url = f"{'https' if tls else 'http'}://{shown}:{server.port}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name=f"fabric-sim:{server.port}", daemon=True)
    thread.start()
    log.info("fabric simulator serving %s (%d zones, %d systems, %d blocks)", url,
             len(simulator.zones), len(simulator.systems), len(simulator.blocks))
    return RunningSim(url, simulator, tls, server, thread)
