"""Start servers as real gunicorn subprocesses over TLS, and read their CPU time and memory.

Shared by ``bench`` (the service and the baseline) and ``soak`` (the service). Each runs with one
gunicorn worker (with two, the kept-alive connections spread unevenly over the workers and throughput
swings 2x between runs) and a certificate made for the run. CPU time is read from ``/proc/<pid>/stat``
(utime + stime) of the gunicorn master and its worker, so the figure "CPU seconds per request" stays
meaningful when other processes share the two cores, where wall-clock throughput does not.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from certs import files as cert_files

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Tls:
    cert: Path
    key: Path
    ca: Path

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


def make_tls(directory: Path) -> Tls:
    """One CA and serving certificate for localhost, shared by every server of a run."""
    made = cert_files.ensure_tls_dir(directory, ["localhost"], ["127.0.0.1"])
    return Tls(made.paths.cert, made.paths.key, made.paths.ca_cert)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    name: str
    host: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pids(self) -> list[int]:
        """The gunicorn master and its workers (the children gunicorn forked)."""
        master = self.process.pid
        try:
            children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        except OSError:
            children = []
        return [master, *(int(c) for c in children)]

    def cpu_seconds(self) -> float:
        """utime + stime of the master and its workers, in seconds (0 where /proc is unavailable)."""
        total = 0
        for pid in self.pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
        return total / _TICKS

    def worker_rss(self) -> int:
        """Resident memory of the gunicorn worker(s), in bytes (VmRSS from /proc; 0 where unavailable)."""
        total = 0
        for pid in self.pids[1:]:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024  # kB
        return total

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _ready(server: Server, tls: Tls) -> bool:
    conn = http.client.HTTPSConnection(server.host, server.port, context=tls.client_context(), timeout=5)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def spawn(name: str, command: list[str], port: int, log: Path) -> Server:
    """Start a server without waiting: several load their clusters in parallel."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    return Server(name, "localhost", port, process, log)


def wait_ready(server: Server, tls: Tls, ready_timeout: float) -> Server:
    """Poll ``/readyz`` over TLS until it answers 200 (the embedded cluster is loaded)."""
    deadline = time.monotonic() + ready_timeout
    while not _ready(server, tls):
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.process.returncode}:\n{server.output()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name} not ready after {ready_timeout:.0f}s:\n{server.output()}")
        time.sleep(0.2)
    return server


def start(name: str, command: list[str], port: int, tls: Tls, log: Path, ready_timeout: float) -> Server:
    server = spawn(name, command, port, log)
    try:
        return wait_ready(server, tls, ready_timeout)
    except RuntimeError:
        stop(server)
        raise


def stop(server: Server) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


def tls_flags(tls: Tls) -> list[str]:
    return ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key)]


@contextlib.contextmanager
def running(servers: list[Server]) -> Iterator[list[Server]]:
    """Stop every server on the way out, whatever happened in between."""
    try:
        yield servers
    finally:
        for server in servers:
            stop(server)
