"""Fixtures of the fabric tests: simulators on 127.0.0.1 (real HTTP, own thread, free port) and the Redfish
fabric managers that talk to them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from webhook.adapters.redfish.fabric import RedfishFabric
from webhook.sim.fabric import inventory as inv
from webhook.sim.fabric import server
from webhook.sim.fabric.compose import Simulator

AUTH = ("admin", "admin")
BLOCKS = "/redfish/v1/CompositionService/ResourceBlocks"
SYSTEMS = "/redfish/v1/Systems"
SESSIONS = "/redfish/v1/SessionService/Sessions"
FABRIC_SIM = (sys.executable, "-m", "webhook.sim.fabric")  # the fabric-sim command, as a subprocess


def inventory(**options: Any) -> inv.Inventory:
    """Two zones: pool-a (nodes a-0, a-1; GPU blocks ga-0..ga-3) and pool-b (node b-0; blocks gb-0, gb-1)."""
    faults = options.pop("faults", {})
    return inv.from_dict({
        "zones": [{"id": "pool-a", "name": "Pool A"}, {"id": "pool-b"}],
        "systems": [{"id": "a-0", "zone": "pool-a", "max_blocks": 3}, {"id": "a-1", "zone": "pool-a"},
                    {"id": "b-0", "zone": "pool-b"}],
        "blocks": [*({"id": f"ga-{i}", "zone": "pool-a"} for i in range(4)),
                   *({"id": f"gb-{i}", "zone": "pool-b"} for i in range(2))],
        "options": {**options, "faults": faults},
    })


def deadline(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


class FakeClock:
    """The simulator's task clock, moved by the test: task timing without sleeping or racing."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Sim:
    """A running simulator plus plain-HTTP helpers for assertions on its state."""

    def __init__(self, running: server.RunningSim) -> None:
        self.running = running
        self.url = running.url
        self.http = requests.Session()
        self.http.trust_env = False  # else REQUESTS_CA_BUNDLE would override verify (psf/requests#3829)
        self.http.auth = AUTH
        self.http.verify = str(running.ca_cert) if running.ca_cert else True
        self.session_uri = ""
        if not running.simulator.options.basic_auth:  # a sessions-only service: the helper logs in too
            token, self.session_uri = self.login()
            self.http.auth = None
            self.http.headers["X-Auth-Token"] = token

    def login(self, user: str = AUTH[0], password: str = AUTH[1]) -> tuple[str, str]:
        """A new Redfish session: (token, session URI)."""
        resp = requests.post(self.url + SESSIONS, json={"UserName": user, "Password": password}, timeout=10,
                             verify=self.http.verify)
        assert resp.status_code == 201, resp.text
        return resp.headers["X-Auth-Token"], resp.headers["Location"]

    def state(self) -> dict[str, Any]:
        body: dict[str, Any] = self.http.get(self.url + "/admin/state", timeout=10).json()
        return body

    def composed(self) -> dict[str, list[str]]:
        """System -> blocks as the simulator holds them."""
        systems: dict[str, list[str]] = self.state()["systems"]
        return systems

    def faults(self, **faults: Any) -> None:
        self.http.post(self.url + "/admin/faults", json=faults, timeout=10).raise_for_status()

    def options(self, **options: Any) -> None:
        self.http.post(self.url + "/admin/options", json=options, timeout=10).raise_for_status()

    def fabric(self, **kwargs: Any) -> RedfishFabric:
        """A Redfish fabric manager of this simulator (its feed not started), with short test timings."""
        settings: dict[str, Any] = {"timeout": 2.0, "retries": 3, "backoff": 0.01, "max_poll_interval": 0.1}
        settings.update(kwargs)
        verify = str(self.running.ca_cert) if self.running.ca_cert else True
        return RedfishFabric(self.url, *AUTH, verify, **settings)

    def close(self) -> None:
        if self.session_uri:
            self.http.delete(self.url + self.session_uri, timeout=10)
        self.http.close()
        self.running.stop()


@pytest.fixture
def start_sim() -> Iterator[Callable[..., Sim]]:
    started: list[Sim] = []

    def start(source: inv.Inventory | Simulator | None = None, tls: server.TlsFiles | None = None) -> Sim:
        sim = Sim(server.start_in_thread(source or inventory(), tls=tls))
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.close()


@pytest.fixture
def sim(start_sim: Callable[..., Sim]) -> Sim:
    return start_sim()


@pytest.fixture
def fabric(sim: Sim) -> Iterator[RedfishFabric]:
    with sim.fabric() as f:
        yield f


@dataclass
class SimCommand:
    """The fabric-sim command running in a subprocess, and the first line it printed."""

    process: subprocess.Popen[str]
    line: str
    stderr: Path

    def explain(self) -> str:
        """For a failed assertion: the first stdout line and everything on stderr so far."""
        return self.line + self.stderr.read_text()


@contextlib.contextmanager
def fabric_sim_command(tmp_path: Path, *args: str) -> Iterator[SimCommand]:
    """``FABRIC_SIM args`` until the block ends (SIGTERM, else SIGKILL after 15 s), its stderr in tmp_path."""
    stderr = tmp_path / "stderr.log"
    with stderr.open("w") as log:
        proc = subprocess.Popen([*FABRIC_SIM, *args], stdout=subprocess.PIPE, stderr=log, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        yield SimCommand(proc, proc.stdout.readline(), stderr)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
