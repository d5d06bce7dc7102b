"""``imex-webhook demo``: its flags and its run, around the demo of :mod:`webhook.demo.run`.

Starts ``imex-webhook serve`` on the demo cluster, plays the demo scenario through its HTTPS endpoints,
prints where every job went, then serves until Ctrl-C (or stops at once with ``--exit``).
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import tempfile
from pathlib import Path

DESCRIPTION = "Play a scenario through the real endpoints of imex-webhook serve on the demo cluster."
DEFAULT_PORT = 8443


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a port in 1-65535") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port}: expected a port in 1-65535")
    return port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT,
                        help="port for the demo server (default %(default)s)")
    parser.add_argument("--workdir", type=Path, help="where certificates and the server log go (default: a "
                                                     "temporary directory, removed at the end)")
    parser.add_argument("--exit", action="store_true", help="stop the server after the table instead of "
                                                           "serving until Ctrl-C")


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run(ns: argparse.Namespace) -> int:
    if not port_free(ns.port):
        print(f"imex-webhook demo: port {ns.port} is already in use; choose another with --port",
              file=sys.stderr)
        return 2
    # SIGTERM unwinds like Ctrl-C, so the server the demo started is stopped with it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if ns.workdir is not None:
            ns.workdir.mkdir(parents=True, exist_ok=True)
            return _play(ns.workdir, ns)
        with tempfile.TemporaryDirectory(prefix="imex-webhook-demo-") as temp:
            return _play(Path(temp), ns)
    except KeyboardInterrupt:
        print("\nimex-webhook demo: interrupted; the server was stopped", file=sys.stderr)
        return 130


def _play(workdir: Path, ns: argparse.Namespace) -> int:
    import requests  # the demo's client and the scheduling-cycle emulator load only when it plays

    from webhook.demo import run as demo

    stream = sys.stderr
    try:
        with demo.served(workdir, ns.port) as (url, client, proc):
            print(f"imex-webhook serving {url} (demo cluster, simulated fabric and agents; CA {client.ca})",
                  file=stream)
            outcomes = demo.run(client, stream)
            print("\n" + demo.table(outcomes))
            print(f"\nInspect: curl --cacert {client.ca} {url}/inspect")
            print(f"Cluster map: {url}/ui (trust the CA {client.ca} in the browser, or accept its certificate)")
            if client.cert is not None and ns.workdir is not None:
                cert, key = client.cert
                print(f"Extender verbs need the scheduler's certificate: curl --cacert {client.ca} --cert {cert} "
                      f"--key {key} -H 'Content-Type: application/json' -d @ExtenderArgs.json {url}/filter")
            failed = [o for o in outcomes if not o.ok]
            if not ns.exit and not failed:
                print("Serving until Ctrl-C ...", file=stream, flush=True)
                try:
                    proc.wait()
                except KeyboardInterrupt:  # the way to stop it: not an error
                    print("", file=stream)
    except (RuntimeError, OSError, requests.RequestException) as exc:
        print(f"imex-webhook demo: {exc}", file=sys.stderr)
        return 1
    if failed:
        print(f"imex-webhook demo: {len(failed)} job(s) did not go as they must", file=sys.stderr)
        return 1
    return 0
