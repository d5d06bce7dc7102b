"""Start ``imex-webhook serve`` as a real subprocess over TLS and talk to it as kube-scheduler would."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

FIXTURES = Path(__file__).parent / "fixtures"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


@dataclass
class Served:
    url: str
    ca: Path
    process: subprocess.Popen[str]
    log: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def session(self) -> requests.Session:
        s = requests.Session()
        # verify goes with each request (post): REQUESTS_CA_BUNDLE would override a session-level verify.
        return s

    def post(self, path: str, body: Any = None, data: bytes | None = None,
             session: requests.Session | None = None) -> requests.Response:
        payload = data if data is not None else json.dumps(body).encode()
        sender = session or requests
        return sender.post(self.url + path, data=payload, headers={"Content-Type": "application/json"},
                           verify=str(self.ca), timeout=30)

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, verify=str(self.ca), timeout=30)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def serve(tmp: Path, *args: str, ready_timeout: float = 30.0, ca: Path | None = None,
          client_cert: tuple[Path, Path] | None = None) -> Iterator[Served]:
    """``ca``: the CA of certificates given in ``args`` (--tls-cert/--tls-key or --tls-dir); else a
    --tls-dir is made. ``client_cert``: (cert, key) presented while waiting for readiness (servers started
    with --client-ca)."""
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    tls = tmp / "tls"
    log = tmp / "serve.log"
    tls_args = [] if ca is not None else ["--tls-dir", str(tls)]
    cmd = [sys.executable, "-m", "webhook", "serve", "--bind", f"127.0.0.1:{port}", *tls_args, *args]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    served = Served(f"https://localhost:{port}", ca or tls / "ca.crt", proc, log)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}:\n{served.output()}")
            try:
                if served.ca.exists() and requests.get(served.url + "/readyz", verify=str(served.ca), timeout=30,
                                                       cert=client_cert).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"serve not ready after {ready_timeout}s:\n{served.output()}")
            time.sleep(0.1)
        yield served
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class Pki:
    """A serving CA in ``ca.parent`` (a --tls-dir) and the scheduler's client certificate and key from it."""

    ca: Path
    scheduler: tuple[Path, Path]


def scheduler_pki(directory: Path) -> Pki:
    from certs import files, issue
    from webhook.service import deploy

    names = ["localhost", *issue.service_dns_names(deploy.SERVICE_NAME, deploy.NAMESPACE)]
    made = files.ensure_tls_dir(directory / "tls", names, ["127.0.0.1", "::1"])
    return Pki(made.paths.ca_cert, files.issue_client(directory / "tls"))


@contextlib.contextmanager
def serve_with_client_ca(pki: Pki, *args: str) -> Iterator[Served]:
    """``serve`` on ``pki``'s --tls-dir with ``--client-ca``, as in a cluster."""
    with serve(pki.ca.parent.parent, "--client-ca", str(pki.ca), *args) as served:
        yield served
