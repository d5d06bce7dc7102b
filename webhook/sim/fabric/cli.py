"""``imex-webhook fabric-sim``: run the Redfish composition simulator standalone.

``add_arguments`` / ``run`` are the subcommand (hosted by ``webhook.cli`` through ``webhook.composition``);
``main(argv)`` is ``python -m webhook.sim.fabric``. The first line on stdout names the URL (and the CA to
trust), so a script that binds port 0 can read where the simulator listens.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import yaml

from certs.issue import CertError
from webhook.sim.fabric import inventory as inv
from webhook.sim.fabric import server

DESCRIPTION = ("A stateful DMTF Redfish composition service (ResourceBlocks, zones, expandable systems, tasks, "
               "ETags, fault injection).")

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bind", default="127.0.0.1:8443", metavar="HOST:PORT",
                   help="address to listen on (port 0: any free port); default %(default)s")
    p.add_argument("--inventory", metavar="FILE", help="YAML or JSON inventory (docs/FABRIC.md); default: the "
                                                       "demo pool pcie-pool-1 with nodes fab-00..fab-03")
    p.add_argument("--tls-dir", metavar="DIR", help="serve HTTPS with the CA and certificate in DIR (created if "
                                                    "absent); without any --tls-* option the simulator speaks HTTP")
    p.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (with --tls-key)")
    p.add_argument("--tls-key", metavar="FILE")
    p.add_argument("--no-basic-auth", action="store_true",
                   help="refuse HTTP Basic: clients must log in with a Redfish session (X-Auth-Token)")
    p.add_argument("--session-timeout", type=int, metavar="SECONDS",
                   help="SessionTimeout: close sessions unused this long (30..86400); default from the inventory, "
                        "else 1800")
    p.add_argument("--print-inventory", action="store_true", help="print the inventory as YAML and exit")
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def _split_bind(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    if not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"--bind {bind!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def _bind_problem(bind: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (f"--bind {bind}: port {port} is already in use (another process listens there); choose another "
                "port with --bind HOST:PORT (port 0: any free one)")
    return f"--bind {bind}: cannot listen there: {' '.join(str(exc.strerror or exc).split())}"


def _with_auth(inventory: inv.Inventory, ns: argparse.Namespace) -> inv.Inventory:
    """The inventory with the command line's authentication flags applied (checked like the file's)."""
    changes: dict[str, object] = {}
    if ns.no_basic_auth:
        changes["basic_auth"] = False
    if ns.session_timeout is not None:
        changes["session_timeout_s"] = ns.session_timeout
    if not changes:
        return inventory
    return dataclasses.replace(inventory, options=inv.options_from(changes, inventory.options, "command line"))


def run(ns: argparse.Namespace) -> int:
    logging.basicConfig(level=ns.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        inventory = inv.load(ns.inventory) if ns.inventory else inv.demo()
        inventory = _with_auth(inventory, ns)
        host, port = _split_bind(ns.bind)
        if bool(ns.tls_cert) != bool(ns.tls_key):
            raise ValueError("--tls-cert and --tls-key go together")
        tls = None
        if ns.tls_cert:
            tls = server.TlsFiles(Path(ns.tls_cert), Path(ns.tls_key))
        elif ns.tls_dir:
            tls = server.tls_from_dir(ns.tls_dir, host)
    except (inv.InventoryError, ValueError, CertError, OSError) as exc:
        print(f"imex-webhook fabric-sim: {exc}", file=sys.stderr)
        return 2
    if ns.print_inventory:
        yaml.safe_dump(inv.to_dict(inventory), sys.stdout, sort_keys=False)
        return 0
    try:
        listening = server.listen(host, port)
    except OSError as exc:
        print(f"imex-webhook fabric-sim: {_bind_problem(ns.bind, port, exc)}", file=sys.stderr)
        return 2
    try:
        running = server.start_in_thread(inventory, host, port, tls=tls, access_log=ns.access_log,
                                         listening=listening)
    except (OSError, ValueError) as exc:
        print(f"imex-webhook fabric-sim: cannot start: {exc}", file=sys.stderr)
        return 1
    ca = f" (trust {running.ca_cert})" if running.ca_cert else ""
    opts = inventory.options
    ways = " and ".join(w for w, on in (("Redfish sessions", opts.sessions), ("HTTP Basic", opts.basic_auth)) if on)
    print(f"fabric-sim serving {running.url}{ca}; user {inventory.credentials.username}; {ways}", flush=True)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    while not stop.wait(1.0):
        pass
    running.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="imex-webhook fabric-sim", description=DESCRIPTION)
    add_arguments(p)
    return run(p.parse_args(list(sys.argv[1:] if argv is None else argv)))
