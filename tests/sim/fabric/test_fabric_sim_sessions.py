"""The simulator's SessionService over real HTTP: login (201, X-Auth-Token, Location, the Session as body),
the Sessions collection, logout, the inactivity timeout, Basic switched off, the service disabled, the
session limit, hostile login bodies, and many clients logging in at once."""

from __future__ import annotations

import concurrent.futures
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.fabric_sims import AUTH, FABRIC_SIM, SESSIONS, SYSTEMS, FakeClock, Sim, fabric_sim_command, inventory
from webhook.sim.fabric.compose import Simulator

SERVICE = "/redfish/v1/SessionService"


def login(sim: Sim, body: Any = None, path: str = SESSIONS) -> requests.Response:
    return requests.post(sim.url + path, json={"UserName": AUTH[0], "Password": AUTH[1]} if body is None else body,
                         timeout=10)


def with_token(sim: Sim, token: str, path: str, method: str = "GET", **kwargs: Any) -> requests.Response:
    return requests.request(method, sim.url + path, headers={"X-Auth-Token": token}, timeout=10, **kwargs)


def ids(resp: requests.Response) -> list[str]:
    return [m["MessageId"] for m in resp.json()["error"]["@Message.ExtendedInfo"]]


def test_a_login_answers_201_with_the_token_the_location_and_the_session(sim: Sim) -> None:
    resp = login(sim)
    assert resp.status_code == 201 and resp.headers["Content-Type"] == "application/json"
    token, location = resp.headers["X-Auth-Token"], resp.headers["Location"]
    assert len(token) >= 32 and re.fullmatch(rf"{SESSIONS}/[0-9a-f]{{16}}", location)
    body = resp.json()
    assert body["@odata.id"] == location and body["@odata.type"] == "#Session.v1_8_0.Session"
    assert (body["UserName"], body["Password"], body["SessionType"]) == ("admin", None, "Redfish")
    assert body["ClientOriginIPAddress"] == "127.0.0.1"
    read = with_token(sim, token, location).json()
    assert {k: v for k, v in read.items() if k != "@odata.etag"} == body
    assert with_token(sim, token, SESSIONS).json()["Members"] == [{"@odata.id": location}]
    root = requests.get(sim.url + "/redfish/v1/", timeout=10).json()
    service = with_token(sim, token, SERVICE).json()
    assert root["Links"]["Sessions"] == service["Sessions"] == {"@odata.id": SESSIONS}  # DSP0266: the same URI
    assert (service["ServiceEnabled"], service["SessionTimeout"]) == (True, 1800)


def test_the_token_opens_everything_until_logout_then_gets_401_no_valid_session(sim: Sim) -> None:
    resp = login(sim, path=f"{SESSIONS}/Members")  # the Members form creates a session too
    token, location = resp.headers["X-Auth-Token"], resp.headers["Location"]
    assert with_token(sim, token, f"{SYSTEMS}/a-0").status_code == 200
    assert with_token(sim, token, "/admin/state").status_code == 200
    assert with_token(sim, token, location, "DELETE").status_code == 204
    refused = with_token(sim, token, f"{SYSTEMS}/a-0")
    assert refused.status_code == 401 and ids(refused) == ["Base.1.22.NoValidSession"]
    assert with_token(sim, token, location, "DELETE").status_code == 401
    stats = sim.state()["sessions"]
    assert (stats["open"], stats["logins"], stats["logouts"], stats["refused_tokens"]) == (0, 1, 1, 2)


def test_an_unknown_token_is_refused_even_beside_valid_basic_credentials(sim: Sim) -> None:
    resp = requests.get(sim.url + f"{SYSTEMS}/a-0", auth=AUTH, headers={"X-Auth-Token": "forged"}, timeout=10)
    assert resp.status_code == 401 and ids(resp) == ["Base.1.22.NoValidSession"]


def test_a_session_unused_for_the_session_timeout_is_closed(start_sim: Callable[..., Sim]) -> None:
    clock = FakeClock()
    sim = start_sim(Simulator(inventory(session_timeout_s=60), clock))
    token = login(sim).headers["X-Auth-Token"]
    clock.advance(59)
    assert with_token(sim, token, SYSTEMS).status_code == 200  # used: the 60 s start again
    clock.advance(59)
    assert with_token(sim, token, SYSTEMS).status_code == 200
    clock.advance(61)
    assert with_token(sim, token, SYSTEMS).status_code == 401
    assert sim.state()["sessions"]["expired"] == 1


def test_patch_of_the_session_service_changes_the_timeout_within_the_schema_range(sim: Sim) -> None:
    def patch(body: Any) -> requests.Response:
        return sim.http.patch(sim.url + SERVICE, json=body, timeout=10)

    done = patch({"SessionTimeout": 45})
    assert done.status_code == 200 and done.json()["SessionTimeout"] == 45
    for body, message_id in [({"SessionTimeout": 29}, "PropertyValueOutOfRange"),
                             ({"SessionTimeout": 10**30}, "PropertyValueOutOfRange"),
                             ({"SessionTimeout": "60"}, "PropertyValueTypeError"),
                             ({"SessionTimeout": True}, "PropertyValueTypeError"),
                             ({"ServiceEnabled": False}, "PropertyNotWritable"),
                             ({"Colour": 1}, "PropertyUnknown"), ([1], "PropertyValueTypeError")]:
        resp = patch(body)
        assert resp.status_code == 400 and ids(resp) == [f"Base.1.22.{message_id}"], body
    assert sim.http.get(sim.url + SERVICE, timeout=10).json()["SessionTimeout"] == 45


@pytest.mark.parametrize(("body", "message_id"), [
    (None, "PropertyMissing"),  # an empty body
    ({"UserName": "admin"}, "PropertyMissing"),
    ({"Password": "admin"}, "PropertyMissing"),
    ({"UserName": ["admin"], "Password": "admin"}, "PropertyValueTypeError"),
    ({"UserName": "admin", "Password": None}, "PropertyValueTypeError"),
    ({"UserName": "admin", "Password": 12345678901234567890123456789}, "PropertyValueTypeError"),
    ({"UserName": "admin", "Password": "admin", "Context": {"a": 1}}, "PropertyValueTypeError"),
    ({"UserName": "admin", "Password": "admin", "Roles": ["Administrator"]}, "PropertyNotWritable"),
    ({"UserName": "admin", "Password": "admin", "Expires": 1}, "PropertyUnknown"),
    ("admin:admin", "PropertyValueTypeError"),
    ([{"UserName": "admin"}], "PropertyValueTypeError"),
])
def test_a_malformed_login_body_gets_400_naming_the_property(sim: Sim, body: Any, message_id: str) -> None:
    resp = requests.post(sim.url + SESSIONS, data=b"" if body is None else None,
                         json=body if body is not None else None, timeout=10)
    assert resp.status_code == 400 and ids(resp) == [f"Base.1.22.{message_id}"]
    password = body.get("Password") if isinstance(body, dict) else None
    if password is not None and not isinstance(password, str):
        assert str(password) not in resp.text  # a password is never echoed, not even a malformed one
    assert sim.state()["sessions"]["open"] == 0


@pytest.mark.parametrize("raw", [b"[" * 100_000, b'{"UserName": ' * 40 + b'"x"' + b"}" * 40, b'{"a": NaN}',
                                 b'{"UserName": "admin", "Password": 1e999}', b"\xff\xfe", b"{" + b" " * 10])
def test_hostile_raw_login_bodies_get_400_malformed_json(sim: Sim, raw: bytes) -> None:
    resp = requests.post(sim.url + SESSIONS, data=raw, headers={"Content-Type": "application/json"}, timeout=10)
    assert resp.status_code == 400 and ids(resp) == ["Base.1.22.MalformedJSON"]


def test_huge_and_odd_credentials_are_refused_as_credentials(sim: Sim) -> None:
    for user, password in [("admin", "x" * 500_000), ("\ud800", "admin"), ("admin\x00", "admin"), ("ADMIN", "admin")]:
        resp = login(sim, {"UserName": user, "Password": password})
        assert resp.status_code == 401 and ids(resp) == ["Base.1.22.AccessUnauthorized"], user[:8]
        assert "X-Auth-Token" not in resp.headers and len(resp.content) < 2000
    assert sim.state()["sessions"]["refused_logins"] == 4


def test_with_basic_switched_off_only_a_session_gets_in(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(basic_auth=False))
    refused = requests.get(sim.url + SYSTEMS, auth=AUTH, timeout=10)
    assert refused.status_code == 401 and "WWW-Authenticate" not in refused.headers  # no scheme to offer
    assert requests.get(sim.url + "/redfish/v1/", timeout=10).status_code == 200  # the root stays open
    token = login(sim).headers["X-Auth-Token"]
    assert with_token(sim, token, SYSTEMS).status_code == 200
    assert requests.get(sim.url + "/admin/state", auth=AUTH, timeout=10).status_code == 200  # tests still steer


def test_a_disabled_session_service_refuses_logins_but_keeps_open_sessions(sim: Sim) -> None:
    token = login(sim).headers["X-Auth-Token"]
    sim.options(sessions=False)
    refused = login(sim)
    assert refused.status_code == 405 and ids(refused) == ["Base.1.22.ServiceDisabled"]
    assert with_token(sim, token, SYSTEMS).status_code == 200
    assert sim.http.get(sim.url + SERVICE, timeout=10).json()["ServiceEnabled"] is False
    bad = sim.http.post(sim.url + "/admin/options", json={"basic_auth": False}, timeout=10)
    assert bad.status_code == 400 and "cannot both be off" in bad.json()["error"]


def test_the_session_limit_answers_503_session_limit_exceeded(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(max_sessions=3))
    tokens = [login(sim).headers["X-Auth-Token"] for _ in range(3)]
    full = login(sim)
    assert full.status_code == 503 and ids(full) == ["Base.1.22.SessionLimitExceeded"]
    dropped = sim.http.delete(sim.url + "/admin/sessions", timeout=10).json()
    assert dropped == {"dropped": 3} and all(with_token(sim, t, SYSTEMS).status_code == 401 for t in tokens)
    assert login(sim).status_code == 201


def test_many_clients_logging_in_at_once_each_get_their_own_session(sim: Sim) -> None:
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(lambda _: login(sim), range(48)))
    assert [r.status_code for r in replies] == [201] * 48
    tokens = {r.headers["X-Auth-Token"] for r in replies}
    assert len(tokens) == 48 and len({r.headers["Location"] for r in replies}) == 48
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        assert set(pool.map(lambda t: with_token(sim, t, SYSTEMS).status_code, tokens)) == {200}
    assert sim.state()["sessions"]["open"] == 48


def test_methods_a_session_resource_does_not_take_get_405_with_allow(sim: Sim) -> None:
    location = login(sim).headers["Location"]
    for method, path, allow in [("PATCH", location, "GET, HEAD, DELETE"), ("PUT", SESSIONS, "GET, HEAD, POST"),
                                ("DELETE", SERVICE, "GET, HEAD, PATCH")]:
        resp = sim.http.request(method, sim.url + path, json={}, timeout=10)
        assert resp.status_code == 405 and resp.headers["Allow"] == allow and ids(resp) == [
            "Base.1.22.OperationNotAllowed"]
    assert sim.http.delete(sim.url + f"{SESSIONS}/nope", timeout=10).status_code == 404


def test_the_fabric_sim_command_can_refuse_basic_and_set_the_timeout(tmp_path: Path) -> None:
    args = ("--bind", "127.0.0.1:0", "--no-basic-auth", "--session-timeout")
    with fabric_sim_command(tmp_path, *args, "90") as command:
        url = re.search(r"serving (http://\S+);", command.line)
        assert url and command.line.rstrip().endswith("; Redfish sessions"), command.explain()
        assert requests.get(url[1] + SYSTEMS, auth=AUTH, timeout=10).status_code == 401
        token = requests.post(url[1] + SESSIONS, json={"UserName": "admin", "Password": "admin"},
                              timeout=10).headers["X-Auth-Token"]
        service = requests.get(url[1] + SERVICE, headers={"X-Auth-Token": token}, timeout=10).json()
        assert service["SessionTimeout"] == 90
    bad = subprocess.run([*FABRIC_SIM, *args, "5"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "session_timeout_s: expected 30..86400 seconds, got 5" in bad.stderr
