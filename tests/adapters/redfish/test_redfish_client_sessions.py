"""The Redfish client's authentication against the simulator over real HTTP: a session when the service
offers one (also when it refuses Basic), Basic when it offers none or when told to, one re-login after a
401 (mid-attach, after a timeout, with many threads at once: one login, not one per thread), logout on
close, and no token or password in any log line."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from tests.concurrency import run_together
from tests.fabric_sims import BLOCKS, SYSTEMS, FakeClock, Sim, deadline, inventory
from webhook.adapters.redfish import auth as redfish_auth
from webhook.adapters.redfish.auth import Credentials
from webhook.adapters.redfish.fabric import RedfishFabric
from webhook.adapters.redfish.payloads import FabricError
from webhook.sim.fabric import inventory as inv
from webhook.sim.fabric.compose import Simulator

A0 = f"{SYSTEMS}/a-0"


def sessions(sim: Sim) -> dict[str, int]:
    stats: dict[str, int] = sim.state()["sessions"]
    return stats


def token_of(fabric: RedfishFabric) -> str:
    creds = fabric.http.auth.credentials(lambda: pytest.fail("no session to read"))
    assert isinstance(creds, Credentials)
    return creds.token


def test_a_session_is_used_when_offered_and_closed_with_the_client(sim: Sim) -> None:
    with sim.fabric() as fabric:
        fabric.compose(A0, ["ga-0"], deadline())
        assert fabric.http.auth.mode == "session" and sessions(sim)["open"] == 1
        fabric.decompose(A0, ["ga-0"], deadline())
    stats = sessions(sim)
    assert (stats["logins"], stats["logouts"], stats["open"], stats["refused_tokens"]) == (1, 1, 0, 0)


@pytest.mark.parametrize("actions", [True, False], ids=["by-action", "by-patch"])
def test_a_service_that_refuses_basic_is_served_through_the_session(start_sim: Callable[..., Sim],
                                                                     actions: bool) -> None:
    sim = start_sim(inventory(basic_auth=False, actions=actions, compose_delay_s=0.1))
    with sim.fabric() as fabric:
        blocks = fabric.compose(A0, ["ga-0", "ga-1"], deadline())
        assert all(b.composed_to(A0) for b in blocks) and fabric.free_per_zone()["pool-a"] == 2
        fabric.decompose(A0, ["ga-0", "ga-1"], deadline())
    assert sim.composed()["a-0"] == [] and sessions(sim)["logins"] == 2  # the client's and the test helper's


def test_a_service_without_sessions_gets_basic_and_is_not_asked_again(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(sessions=False))
    with sim.fabric() as fabric:
        fabric.compose(A0, ["ga-0"], deadline())
        requests_before = sim.state()["stats"]["requests"]
        fabric.decompose(A0, ["ga-0"], deadline())
        assert fabric.http.auth.mode == "basic" and fabric.http.auth.logins == 0
        assert sim.state()["stats"]["requests"] - requests_before <= 4  # no login attempt among them
    assert sessions(sim)["logins"] == 0 and sim.composed()["a-0"] == []


def test_auth_basic_never_logs_in_even_where_sessions_are_offered(sim: Sim) -> None:
    with sim.fabric(auth="basic") as fabric:
        fabric.compose(A0, ["ga-0"], deadline())
    assert sessions(sim)["logins"] == 0 and sim.composed()["a-0"] == ["ga-0"]


def test_auth_session_against_a_service_without_sessions_says_what_to_change(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(sessions=False))
    with sim.fabric(auth="session") as fabric, pytest.raises(FabricError) as err:
        fabric.inventory.discover()
    assert err.value.status == 405 and err.value.phase == "login"
    assert "ServiceDisabled" in str(err.value) and "auth: basic" in str(err.value)


def test_a_wrong_password_is_refused_once_and_named_as_the_session_login(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(basic_auth=False))
    with RedfishFabric(sim.url, "admin", "wrong", backoff=0.01) as fabric, pytest.raises(FabricError) as err:
        fabric.compose(A0, ["ga-0"], deadline())
    assert err.value.status == 401 and not err.value.retryable
    assert "session login refused" in str(err.value) and "check the fabric credentials" in str(err.value)
    assert sessions(sim)["refused_logins"] == 1 and sim.composed()["a-0"] == []


def test_a_session_dropped_mid_attach_is_renewed_once_and_the_attach_goes_on(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(inventory(basic_auth=False, compose_delay_s=0.4))
    result: list[object] = []
    with sim.fabric() as fabric:
        fabric.inventory.discover()
        worker = threading.Thread(target=lambda: result.append(fabric.compose(A0, ["ga-0"], deadline())))
        worker.start()
        waited = 0.0
        while sim.state()["blocks"]["ga-0"]["state"] != "Composing" and waited < 5:
            time.sleep(0.02)
            waited += 0.02
        assert sim.http.delete(sim.url + "/admin/sessions", timeout=10).json()["dropped"] == 2  # like a restart
        sim.http.headers["X-Auth-Token"] = sim.login()[0]  # the helper's session went too
        worker.join(timeout=15)
        assert fabric.http.auth.logins == 2
    assert result and not isinstance(result[0], Exception)
    assert sim.composed()["a-0"] == ["ga-0"] and sim.state()["stats"]["compose_requested"] == 1
    assert sessions(sim)["refused_tokens"] >= 1


def test_a_token_that_times_out_between_operations_is_renewed(start_sim: Callable[..., Sim]) -> None:
    clock = FakeClock()
    sim = start_sim(Simulator(inventory(basic_auth=False, session_timeout_s=30), clock))
    with sim.fabric() as fabric:
        fabric.compose(A0, ["ga-0"], deadline())
        first = token_of(fabric)
        clock.advance(31)  # the client's session and the helper's expire
        sim.http.headers["X-Auth-Token"] = sim.login()[0]
        fabric.decompose(A0, ["ga-0"], deadline())
        assert token_of(fabric) != first
    stats = sessions(sim)
    assert stats["expired"] == 2 and stats["logins"] == 4  # helper twice, client twice
    assert sim.composed()["a-0"] == []


@pytest.mark.parametrize("fresh", [True, False], ids=["first-login", "re-login"])
def test_threads_that_need_a_session_together_log_in_once(sim: Sim, fresh: bool) -> None:
    threads = 12
    with sim.fabric() as fabric:
        if not fresh:
            fabric.inventory.discover()
            sim.http.delete(sim.url + "/admin/sessions", timeout=10).raise_for_status()
        logins_before = sessions(sim)["logins"]
        run_together(threads, lambda i: fabric.inventory.read_block(f"{BLOCKS}/ga-{i % 4}"))
        assert sessions(sim)["logins"] - logins_before == 1 and sessions(sim)["open"] == 1


def test_a_login_that_meets_a_5xx_is_retried_like_a_read(sim: Sim) -> None:
    sim.faults(fail_next=2, error_status=500, error_methods=["POST"])
    with sim.fabric() as fabric:
        fabric.compose(A0, ["ga-0"], deadline())
    stats = sim.state()["stats"]
    assert stats["injected_errors"] == 2 and stats["compose_requested"] == 1
    assert sessions(sim)["logins"] == 1


def test_a_closed_client_does_not_log_in_again(sim: Sim) -> None:
    fabric = sim.fabric(retries=0)
    fabric.inventory.discover()
    fabric.stop()
    with pytest.raises(FabricError, match="the client is closed"):
        fabric.inventory.read_block(f"{BLOCKS}/ga-0")
    assert sessions(sim)["logins"] == 1 and sessions(sim)["open"] == 0


def test_logout_of_a_session_already_gone_or_a_service_not_answering_is_quiet(
        sim: Sim, caplog: pytest.LogCaptureFixture) -> None:
    with sim.fabric() as fabric:
        fabric.inventory.discover()
        sim.http.delete(sim.url + "/admin/sessions", timeout=10).raise_for_status()
    assert "log out" not in caplog.text and "logging out" not in caplog.text  # 401: gone already, nothing to say
    with sim.fabric(timeout=0.3) as fabric:
        fabric.inventory.discover()
        sim.faults(hang=True, hang_cap_s=2)
    sim.faults(hang=False)
    assert "could not log out of" in caplog.text  # a warning, not an exception


def test_no_token_and_no_password_reach_the_log(start_sim: Callable[..., Sim],
                                                caplog: pytest.LogCaptureFixture) -> None:
    password = "pw-9f1c2e7a-never-logged"
    spec = inv.to_dict(inventory(compose_delay_s=0.05))
    spec["credentials"] = {"username": "ops", "password": password}
    sim = start_sim(inv.from_dict(spec))
    caplog.set_level(logging.DEBUG)  # urllib3's and requests' debug lines too
    with RedfishFabric(sim.url, "admin", "admin", backoff=0.01) as wrong, pytest.raises(FabricError):
        wrong.inventory.discover()
    tokens = []
    with RedfishFabric(sim.url, "ops", password, backoff=0.01, max_poll_interval=0.05) as fabric:
        fabric.compose(A0, ["ga-0"], deadline())
        tokens.append(token_of(fabric))
        sim.http.delete(sim.url + "/admin/sessions", auth=("ops", password), timeout=10).raise_for_status()
        fabric.decompose(A0, ["ga-0"], deadline())
        tokens.append(token_of(fabric))
    assert len(set(tokens)) == 2 and "logged in to" in caplog.text
    for secret in (*tokens, password):
        assert secret not in caplog.text
    assert password not in repr(fabric.http.auth) and tokens[-1] not in repr(fabric.http.auth)


@pytest.mark.parametrize(("root", "uri"), [
    ({"Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}},
     "/redfish/v1/SessionService/Sessions"),
    ({"Links": {"Sessions": {"@odata.id": "https://elsewhere/x"}}}, ""),
    ({"Links": {"Sessions": "/redfish/v1/SessionService/Sessions"}}, ""),
    ({"Links": None}, ""), ({}, ""), ([], ""), (None, ""),
])
def test_the_sessions_uri_comes_only_from_a_well_formed_root_link(root: object, uri: str) -> None:
    assert redfish_auth.sessions_uri(root) == uri


@pytest.mark.parametrize(("status", "ids", "offered"), [
    (404, (), False), (405, (), False), (501, (), False), (400, ("Base.1.22.ServiceDisabled",), False),
    (401, (), True), (400, ("Base.1.22.PropertyMissing",), True), (503, (), True),
])
def test_which_login_answers_mean_the_service_has_no_sessions(status: int, ids: tuple[str, ...],
                                                              offered: bool) -> None:
    assert redfish_auth.offers_no_sessions(status, ids) is not offered


def test_an_unknown_auth_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, session, basic"):
        redfish_auth.SessionAuth("kerberos")  # type: ignore[arg-type]
