"""The simulator as a server: HTTPS from a --tls-dir, the fabric-sim command in a subprocess, and DMTF's
Redfish Service Validator run offline over the whole tree from the service root (0 failures, 0 warnings).

The validator needs the DMTF CSDL bundle: $IMEX_REDFISH_CSDL, else ../shared/redfish/csdl beside
the checkout (where CI lays shared/), else /work/shared/redfish/csdl; our OEM schema
(docs/redfish/ImexWebhook_v1.xml) is added to it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.fabric_sims import AUTH, BLOCKS, FABRIC_SIM, SYSTEMS, Sim, deadline, fabric_sim_command, inventory
from webhook.sim.fabric import server

REPO = Path(__file__).resolve().parents[2]
OEM_SCHEMA = REPO / "docs" / "redfish" / "ImexWebhook_v1.xml"


def test_https_with_a_tls_dir_serves_clients_that_trust_its_ca(start_sim: Callable[..., Sim],
                                                                tmp_path: Path) -> None:
    tls = server.tls_from_dir(tmp_path / "tls", "127.0.0.1")
    sim = start_sim(inventory(), tls=tls)
    assert sim.url.startswith("https://127.0.0.1:") and tls.ca_cert == tmp_path / "tls" / "ca.crt"
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(sim.url + "/redfish/v1/", timeout=10)
    with sim.fabric() as fabric:
        (block,) = fabric.compose(f"{SYSTEMS}/a-0", ["ga-0"], deadline())
        assert block.composed_to(f"{SYSTEMS}/a-0")
        fabric.decompose(f"{SYSTEMS}/a-0", ["ga-0"], deadline())


def test_the_fabric_sim_command_serves_until_terminated(tmp_path: Path) -> None:
    inv_file = tmp_path / "inventory.yaml"
    inv_file.write_text("zones: [{id: z}]\nsystems: [{id: n-0, zone: z}]\nblocks: [{id: g-0, zone: z}]\n"
                        "credentials: {username: ops, password: s3cret}\n")
    with fabric_sim_command(tmp_path, "--bind", "127.0.0.1:0", "--inventory", str(inv_file),
                            "--tls-dir", str(tmp_path / "tls")) as command:
        match = re.search(r"serving (https://\S+) \(trust (\S+)\)", command.line)
        assert match, command.explain()
        url, ca = match.groups()
        assert requests.get(url + "/redfish/v1/", verify=ca, timeout=10).status_code == 200
        block = requests.get(f"{url}{BLOCKS}/g-0", auth=("ops", "s3cret"), verify=ca, timeout=10)
        assert block.json()["CompositionStatus"]["CompositionState"] == "Unused"
        command.process.send_signal(signal.SIGTERM)
        assert command.process.wait(timeout=15) == 0


def test_the_fabric_sim_command_rejects_a_bad_inventory_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("zones: [{id: z}]\nblocks: [{id: g, zone: nowhere}]\n")
    done = subprocess.run([*FABRIC_SIM, "--inventory", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == f"imex-webhook fabric-sim: {bad}: blocks[0].zone: unknown zone 'nowhere'"


def _csdl() -> Path | None:
    for candidate in (os.environ.get("IMEX_REDFISH_CSDL"), str(REPO.parent / "shared" / "redfish" / "csdl"),
                      "/work/shared/redfish/csdl"):
        if candidate and (Path(candidate) / "ResourceBlock_v1.xml").is_file():
            return Path(candidate)
    return None


def _busy_simulator(start_sim: Callable[..., Sim], basic_auth: bool = True) -> Sim:
    """Every payload variant the validator should see: tasks in four states, blocks in every state, pages."""
    sim = start_sim(inventory(compose_delay_s=0.05, page_size=3, basic_auth=basic_auth,
                              faults={"fail_compose": ["ga-2"]}))
    with sim.fabric() as fabric:
        fabric.compose(f"{SYSTEMS}/a-0", ["ga-0"], deadline())  # task 1: Completed
        with pytest.raises(Exception, match="ga-2"):
            fabric.compose(f"{SYSTEMS}/a-1", ["ga-2"], deadline())  # task 2: Exception, block Failed
    sim.faults(stuck_tasks=True)
    add = f"{sim.url}{SYSTEMS}/b-0/Actions/ComputerSystem.AddResourceBlock"
    for block in ("gb-0", "gb-1"):  # tasks 3 and 4: Running for ever; the first is then cancelled
        sim.http.post(add, json={"ResourceBlock": {"@odata.id": f"{BLOCKS}/{block}"}}, timeout=10).raise_for_status()
    sim.http.delete(f"{sim.url}/redfish/v1/TaskService/TaskMonitors/3", timeout=10).raise_for_status()
    sim.http.post(f"{sim.url}/admin/blocks/ga-3", json={"state": "Unavailable"}, timeout=10).raise_for_status()
    states = {b["state"] for b in sim.state()["blocks"].values()}
    assert states == {"Unused", "Composed", "Composing", "Failed", "Unavailable"}
    return sim


@pytest.mark.parametrize("authtype", ["Basic", "Session"])
def test_the_redfish_service_validator_finds_no_failure_in_the_whole_tree(start_sim: Callable[..., Sim],
                                                                        tmp_path: Path, authtype: str) -> None:
    """With Basic, and with a session against a service that refuses Basic (the validator's own default):
    then the tree includes the Sessions collection and its members."""
    pytest.importorskip("redfish_service_validator", reason="pip install redfish-service-validator")
    csdl = _csdl()
    if csdl is None:
        # CI always has shared/ beside the clone; a missing bundle there is a broken setup, not a skip.
        pytest.fail("no DMTF CSDL bundle: set IMEX_REDFISH_CSDL to the csdl folder of DSP8010")
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    for xml in csdl.glob("*.xml"):
        (schemas / xml.name).symlink_to(xml)
    (schemas / OEM_SCHEMA.name).symlink_to(OEM_SCHEMA)
    sim = _busy_simulator(start_sim, basic_auth=authtype == "Basic")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from redfish_service_validator.console_scripts import main; "
                               "sys.argv[0] = 'rf_service_validator'; main()",
         "--rhost", sim.url, "--user", AUTH[0], "--password", AUTH[1], "--authtype", authtype,
         "--schema_directory", str(schemas), "--skipschema", "--payload", "Tree", "/redfish/v1/",
         "--logdir", str(tmp_path / "logs"), "--timeout", "10"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    output = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
    summary = re.search(r"\|\s*PASS\s*\|\s*WARN\s*\|\s*FAIL\s*\|\s*NOT TESTED\s*\|\n\+[-+]+\+\n"
                        r"\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", output)
    assert summary, output[-3000:]
    passed, warned, failed, _ = (int(n) for n in summary.groups())
    problems = "\n".join(line for line in output.splitlines() if re.search(r"\b(FAIL|WARN) - ", line))
    assert (failed, warned) == (0, 0), problems or output[-3000:]
    assert passed > 500 and done.returncode == 0
    assert "Validating /redfish/v1/TaskService/Tasks/4" in output  # the tree included every task
    if authtype == "Session":  # its own session and the test helper's, both validated
        assert len(set(re.findall(r"Validating (/redfish/v1/SessionService/Sessions/\w+)", output))) == 2, output
        assert sim.state()["sessions"]["open"] == 1  # the validator logged out; the helper has yet to
    assert time.monotonic() - started < 60
