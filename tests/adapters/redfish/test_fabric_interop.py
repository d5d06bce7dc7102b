"""Clients we did not write, against the simulator over HTTPS with HTTP Basic switched off: DMTF's Python
library ``redfish`` (a session login, ResourceBlocks listed, a free GPU block composed into a system
through the action the system advertises, its task monitor followed, the block removed again, logout) and
DMTF's ``redfishtool`` (Systems and ResourceBlocks listed with a session, which it then deletes).

Both come from the package registry through the ``test`` extra; without them the tests skip, except in
CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.fabric_sims import AUTH, BLOCKS, SYSTEMS, Sim, inventory
from webhook.sim.fabric import server

ADD = "#ComputerSystem.AddResourceBlock"
REMOVE = "#ComputerSystem.RemoveResourceBlock"


def _needed(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is missing: pip install -e '.[test]'")
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")


@pytest.fixture
def secure_sim(start_sim: Callable[..., Sim], tmp_path: Path) -> Sim:
    """HTTPS, Basic refused, 0.3 s tasks: a fabric manager as such clients meet one."""
    return start_sim(inventory(basic_auth=False, compose_delay_s=0.3),
                     tls=server.tls_from_dir(tmp_path / "tls", "127.0.0.1"))


def _finish(client: Any, resp: Any) -> Any:
    """Follow a 202's task monitor with the library's own ``monitor`` until the final answer."""
    for _ in range(100):
        if resp.status != 202:
            return resp
        time.sleep(min(resp.retry_after or 0.1, 1.0))
        resp = resp.monitor(client)
    raise AssertionError("the task monitor still answered 202 after 100 polls")


def test_dmtf_redfish_library_composes_and_removes_a_gpu_block_with_a_session(secure_sim: Sim) -> None:
    redfish = _needed("redfish")

    def connect() -> Any:
        return redfish.redfish_client(base_url=secure_sim.url, username=AUTH[0], password=AUTH[1],
                                      cafile=str(secure_sim.running.ca_cert), timeout=10, max_retry=1)

    refused = connect()
    with pytest.raises(redfish.rest.v1.InvalidCredentialsError):
        refused.login(auth="basic")  # the service refuses Basic ...
    refused.logout()  # (no session: only closes its connections)
    client = connect()
    client.login(auth="session")  # ... and takes the library's default, a session
    try:
        assert client.get_session_key() and client.get_session_location().startswith(
            "/redfish/v1/SessionService/Sessions/")
        listing = client.get(BLOCKS)
        assert listing.status == 200
        blocks = [client.get(m["@odata.id"]).dict for m in listing.dict["Members"]]
        free = next(b for b in blocks if b["ResourceBlockType"] == ["Processor"]
                    and b["CompositionStatus"]["CompositionState"] == "Unused")
        system = client.get(f"{SYSTEMS}/a-0").dict
        added = _finish(client, client.post(system["Actions"][ADD]["target"],
                                            body={"ResourceBlock": {"@odata.id": free["@odata.id"]}}))
        assert added.status == 200, added.text
        block = client.get(free["@odata.id"]).dict
        assert block["CompositionStatus"]["CompositionState"] == "Composed"
        assert block["Links"]["ComputerSystems"] == [{"@odata.id": f"{SYSTEMS}/a-0"}]
        linked = client.get(f"{SYSTEMS}/a-0").dict["Links"]["ResourceBlocks"]
        assert {"@odata.id": free["@odata.id"]} in linked
        removed = _finish(client, client.post(system["Actions"][REMOVE]["target"],
                                              body={"ResourceBlock": {"@odata.id": free["@odata.id"]}}))
        assert removed.status == 200, removed.text
        assert client.get(free["@odata.id"]).dict["CompositionStatus"]["CompositionState"] == "Unused"
        assert [t["state"] for t in secure_sim.state()["tasks"].values()] == ["Completed", "Completed"]
    finally:
        client.logout()
    stats = secure_sim.state()["sessions"]
    assert (stats["logins"], stats["logouts"], stats["open"]) == (2, 1, 1)  # the library's, and the helper's


def _redfishtool() -> list[str]:
    _needed("redfishtoollib")
    script = Path(sys.executable).with_name("redfishtool")
    found = str(script) if script.is_file() else shutil.which("redfishtool")
    if found is None:
        pytest.fail("redfishtoollib is installed but its redfishtool script is not on PATH")
    return [sys.executable, found]


def test_redfishtool_lists_systems_and_resource_blocks_with_a_session(secure_sim: Sim) -> None:
    host = secure_sim.url.removeprefix("https://")
    base = [*_redfishtool(), "-r", host, "-u", AUTH[0], "-p", AUTH[1], "-S", "Always", "-T", "10"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], capture_output=True, text=True, timeout=60)

    systems = run("-A", "Session", "Systems", "list")
    assert systems.returncode == 0, systems.stderr
    assert [m["Id"] for m in json.loads(systems.stdout)["Members"]] == ["a-0", "a-1", "b-0"]
    blocks = run("-A", "Session", "raw", "GET", BLOCKS)
    assert blocks.returncode == 0, blocks.stderr
    listed = json.loads(blocks.stdout)
    assert listed["Members@odata.count"] == 9 and {"@odata.id": f"{BLOCKS}/ga-0"} in listed["Members"]
    basic = run("-A", "Basic", "Systems", "list")
    assert basic.returncode != 0 and "401" in basic.stderr
    stats = secure_sim.state()["sessions"]
    assert (stats["logins"], stats["logouts"]) == (3, 2)  # two redfishtool sessions, each deleted; the helper's
