"""The server's listening sockets, bound before anything says "serving", and how many connections a
worker may hold given the process's descriptor limit.

A port that cannot be bound is one line naming the flag and what to do (:class:`SettingsError`, exit
status 2), never gunicorn's retry loop: the composition root binds here first and hands gunicorn's arbiter
the listeners made.
"""

from __future__ import annotations

import errno
import resource
import socket
from typing import Any

from gunicorn import sock as gunicorn_sock
from gunicorn import util as gunicorn_util

from webhook.errors import SettingsError


def worker_connections(wanted: int, reserved: int) -> int:
    """Connections one worker may hold on --bind: ``wanted``, fewer if the descriptor limit is low.
    ``reserved``: the descriptors the probe port's connections may take.

    Slow and idle clients wait in the poller and cost one descriptor each, so the soft limit is raised to
    the hard one first; a worker at its limit stops accepting instead of failing accept() in a loop.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    # The rest for the probe port, the API server, fabric and log files.
    return min(wanted, max(64, soft - 128 - reserved))


def bind_problem(bind: str, exc: OSError) -> str:
    """One line for a --bind address that could not be bound, saying what to do."""
    host, _, port = bind.rpartition(":")
    if isinstance(exc, socket.gaierror):
        return f"--bind {bind}: cannot resolve {host!r}: {exc.strerror or exc}"
    if exc.errno == errno.EADDRINUSE:
        return (f"--bind {bind}: port {port} is already in use (another process listens there); "
                "choose another port with --bind HOST:PORT")
    if exc.errno == errno.EACCES:
        return f"--bind {bind}: permission denied (ports below 1024 need privileges); choose another port with --bind"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"--bind {bind}: {host} is not an address of this machine"
    return f"--bind {bind}: cannot listen: {exc.strerror or exc}"


def listen(address: tuple[str, int], cfg: Any, log: Any, flag: str, given: str) -> Any:
    """gunicorn's listener on ``address``, bound now (``cfg``: gunicorn's configuration, ``log``: its
    arbiter's logger). A refusal is a :class:`SettingsError` naming ``flag`` and the address ``given``."""
    family = socket.AF_INET6 if gunicorn_util.is_ipv6(address[0]) else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise SettingsError(bind_problem(given, exc).replace("--bind", flag)) from None
    # gunicorn's listener on the bound socket: it listens, and the workers inherit it.
    return gunicorn_sock._sock_type(address)(address, cfg, log, fd=sock.detach())
