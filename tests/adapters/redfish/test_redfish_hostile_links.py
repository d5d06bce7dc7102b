"""The Redfish client against a hostile service whose links are written so that two URL parsers read them
differently: ``http://OTHER:P\\@FABRIC:P/x`` is the fabric to ``urllib.parse`` and ``OTHER`` to urllib3, which
``requests`` sends with. Wherever such a link appears (a ``Members@odata.nextLink``, a redirect, a task
monitor, a session's ``Location``, a member's ``@odata.id``), it is refused with an error that says why,
logged once, and the other host, a second server that records every request, receives nothing: no session
token, no Basic password. The ``servers`` fixture is in ``conftest.py``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from tests.adapters.redfish import hostile
from tests.adapters.redfish.hostile import Hostile
from tests.kubefake import eventually
from webhook.adapters.redfish import urls
from webhook.adapters.redfish.fabric import RedfishFabric
from webhook.adapters.redfish.origin import ForeignLink, Origin, RefusalLog
from webhook.adapters.redfish.tasks import monitor_of

PASSWORD = "hostile-test-password"
SYSTEMS = "/redfish/v1/Systems"
ACTION = "/redfish/v1/Systems/s/Actions/ComputerSystem.AddResourceBlock"
ORIGIN_LOG = "webhook.adapters.redfish.origin"
WAIT = 30.0


def fabric_at(server: Hostile, **kwargs: Any) -> RedfishFabric:
    options: dict[str, Any] = {"timeout": 5.0, "retries": 0, "backoff": 0.01, **kwargs}
    return RedfishFabric(server.url, "admin", PASSWORD, True, **options)


def page(next_link: str) -> hostile.Handler:
    return lambda r: r.json({"@odata.id": SYSTEMS, "Members": [], "Members@odata.nextLink": next_link})


def recorder(servers: Callable[..., Hostile]) -> Hostile:
    """The other host: answers everything like the service would, and records what reaches it."""
    other = servers()
    other.routes = {path: page("") for path in (SYSTEMS, f"{SYSTEMS}?page=2", "/tm/1", "/redfish/v1/Sessions/1")}
    return other


def split_reading(other: Hostile, victim: Hostile, path: str, form: str = "\\") -> str:
    """A link urllib.parse reads as ``victim`` (user ``127.0.0.1:<other port>\\``) and urllib3 as ``other``."""
    return f"http://127.0.0.1:{other.url.rsplit(':', 1)[1]}{form}@127.0.0.1:{victim.url.rsplit(':', 1)[1]}{path}"


class Late:
    """A service whose links need its own port, known only once it is started."""

    def __init__(self, servers: Callable[..., Hostile], routes: Callable[[Hostile, Hostile], dict[str, Any]]) -> None:
        self.other = recorder(servers)
        self.victim = servers(hostile.service())
        self.victim.routes.update(routes(self.other, self.victim))


def attempt(call: Callable[[], object]) -> BaseException | None:
    """What ``call`` raised: asserted on after what the other host received, so that a leak is what fails."""
    try:
        call()
    except Exception as exc:  # any outcome is examined by the test
        return exc
    return None


def refused_once(caplog: pytest.LogCaptureFixture, refused: BaseException | None, problem: str) -> None:
    assert isinstance(refused, ForeignLink), refused
    assert refused.problem == problem and problem in str(refused) and "[trust]" in str(refused)
    lines = [r.getMessage() for r in caplog.records if r.name == ORIGIN_LOG]
    assert len(lines) == 1 and problem in lines[0] and "nothing was sent there" in lines[0], lines


@pytest.mark.parametrize("mode", ["session", "basic"])
@pytest.mark.parametrize("form", ["\\", "\\\\", "\\/"])
def test_a_next_link_that_urllib3_reads_as_another_host_is_refused_and_that_host_receives_nothing(
        servers: Callable[..., Hostile], caplog: pytest.LogCaptureFixture, mode: str, form: str) -> None:
    late = Late(servers, lambda other, victim: {SYSTEMS: page(split_reading(other, victim, f"{SYSTEMS}?page=2", form))})
    with caplog.at_level(logging.WARNING), fabric_at(late.victim, auth=mode) as c:
        refused = attempt(c.inventory.discover)
    assert late.other.seen == [], late.other.credentials_seen()
    refused_once(caplog, refused, urls.BACKSLASH)
    carried = "X-Auth-Token" if mode == "session" else "Authorization"
    assert any(carried in s.headers for s in late.victim.seen if s.path == SYSTEMS)  # it did use them at home


@pytest.mark.parametrize("mode", ["session", "basic"])
@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_that_urllib3_reads_as_another_host_is_refused_and_that_host_receives_nothing(
        servers: Callable[..., Hostile], caplog: pytest.LogCaptureFixture, mode: str, status: int) -> None:
    def away(other: Hostile, victim: Hostile) -> dict[str, Any]:
        location = split_reading(other, victim, SYSTEMS)
        return {SYSTEMS: lambda r: r.raw(status, b"", {"Location": location})}

    late = Late(servers, away)
    with caplog.at_level(logging.WARNING), fabric_at(late.victim, auth=mode) as c:
        refused = attempt(c.inventory.discover)
    assert late.other.seen == [], late.other.credentials_seen()
    refused_once(caplog, refused, urls.BACKSLASH)
    assert "named by the Location of GET" in str(refused)


@pytest.mark.parametrize("how", ["Location", "TaskMonitor", "@odata.id"])
def test_a_task_monitor_that_urllib3_reads_as_another_host_is_refused_before_it_is_polled(
        servers: Callable[..., Hostile], caplog: pytest.LogCaptureFixture, how: str) -> None:
    def task(other: Hostile, victim: Hostile) -> dict[str, Any]:
        monitor = split_reading(other, victim, "/tm/1")
        if how == "Location":
            return {ACTION: lambda r: r.raw(202, b"", {"Location": monitor})}
        return {ACTION: lambda r: r.json({"@odata.id": monitor} if how == "@odata.id" else
                                         {"@odata.id": "/redfish/v1/TaskService/Tasks/1", "TaskMonitor": monitor}, 202)}

    late = Late(servers, task)
    with caplog.at_level(logging.WARNING), fabric_at(late.victim) as c:
        refused = attempt(lambda: monitor_of(c.http, c.http.send("POST", ACTION, json={})))
    assert late.other.seen == [] and "/tm/1" not in late.victim.paths()
    refused_once(caplog, refused, urls.BACKSLASH)


def test_a_session_location_that_urllib3_reads_as_another_host_is_refused_and_no_logout_goes_there(
        servers: Callable[..., Hostile], caplog: pytest.LogCaptureFixture) -> None:
    def login(other: Hostile, victim: Hostile) -> dict[str, Any]:
        session = split_reading(other, victim, "/redfish/v1/Sessions/1")
        return {"/redfish/v1/Sessions": lambda r: r.json({"@odata.id": "/redfish/v1/Sessions/1"}, 201,
                                                         {"X-Auth-Token": hostile.TOKEN, "Location": session})}

    late = Late(servers, login)
    with caplog.at_level(logging.WARNING), fabric_at(late.victim, auth="session") as c:
        refused = attempt(c.inventory.discover)
    assert late.other.seen == []  # neither the session's requests nor the DELETE that logs out
    assert not any("X-Auth-Token" in s.headers for s in late.victim.seen)  # the token was never used
    refused_once(caplog, refused, urls.BACKSLASH)
    assert "named by the Location of POST" in str(refused)


@pytest.mark.parametrize("link", [
    "{split}", "/\\127.0.0.1:{other}/redfish/v1/Systems/1", "\\\\127.0.0.1:{other}/redfish/v1/Systems/1",
    "http:/127.0.0.1:{other}/redfish/v1/Systems/1", "http://127.0.0.1:{other}@127.0.0.1:{victim}/redfish/v1/Systems/1",
    "http://127.0.0.1:{victim}/redfish/v1/Systems/1\t", "http:///127.0.0.1:{other}/redfish/v1/Systems/1",
])
def test_a_member_link_in_any_ambiguous_form_refuses_the_whole_reply(
        servers: Callable[..., Hostile], caplog: pytest.LogCaptureFixture, link: str) -> None:
    def members(other: Hostile, victim: Hostile) -> dict[str, Any]:
        named = link.format(split=split_reading(other, victim, "/redfish/v1/Systems/1"),
                            other=other.url.rsplit(":", 1)[1], victim=victim.url.rsplit(":", 1)[1])
        return {SYSTEMS: lambda r: r.json({"@odata.id": SYSTEMS, "Members": [{"@odata.id": named}]})}

    late = Late(servers, members)
    with caplog.at_level(logging.WARNING), fabric_at(late.victim) as c:
        refused = attempt(c.inventory.discover)
    assert late.other.seen == [] and "/redfish/v1/Systems/1" not in late.victim.paths()
    assert isinstance(refused, ForeignLink) and refused.problem, refused  # a rule named, not "another origin"
    assert "named by the reply to GET /redfish/v1/Systems" in str(refused)
    refused_once(caplog, refused, refused.problem)


class Sink:
    def set_fabric_free(self, free: Any) -> None:
        pass


def test_the_background_refresh_meets_the_same_link_every_time_and_logs_the_refusal_once(
        servers: Callable[..., Hostile], caplog: pytest.LogCaptureFixture) -> None:
    late = Late(servers, lambda other, victim: {SYSTEMS: page(split_reading(other, victim, f"{SYSTEMS}?page=2"))})
    fabric = fabric_at(late.victim, refresh_interval=0.0)
    with caplog.at_level(logging.WARNING):
        fabric.feed(Sink(), 0.02)
        try:
            eventually(lambda: sum(s.path == SYSTEMS for s in late.victim.seen) >= 10, timeout=WAIT,
                       what="ten refreshes")
            assert "backslash" in fabric.ready()[1]
        finally:
            fabric.stop()
    assert late.other.seen == []
    lines = [r.getMessage() for r in caplog.records if r.name == ORIGIN_LOG]
    assert len(lines) == 1 and "nothing was sent there" in lines[0]


def test_the_refusal_log_holds_back_a_flood_and_counts_what_it_held_back(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    log = RefusalLog(lambda: now[0])
    origin = Origin("http", "fabric", 8000)
    with caplog.at_level(logging.WARNING, logger=ORIGIN_LOG):
        for i in range(20):
            log.note(ForeignLink(f"http://other-{i}\\@fabric:8000/", origin, "a test", urls.BACKSLASH))
        log.note(ForeignLink("http://other-0\\@fabric:8000/", origin, "a test", urls.BACKSLASH))  # logged already
        now[0] += RefusalLog.PERIOD
        log.note(ForeignLink("http://late\\@fabric:8000/", origin, "a test", urls.BACKSLASH))
    lines = [r.getMessage() for r in caplog.records if r.name == ORIGIN_LOG]
    assert len(lines) == RefusalLog.BURST + 1
    assert lines[-1].endswith(f"({20 - RefusalLog.BURST} more refused links not logged)")


def test_a_reply_link_with_control_characters_cannot_forge_a_log_line(
        servers: Callable[..., Hostile], caplog: pytest.LogCaptureFixture) -> None:
    forged = "/x\r\n2024-01-01 WARNING all is well\x1b[2K"
    victim = servers(hostile.service(lambda r: r.json({"@odata.id": SYSTEMS, "Members": [{"@odata.id": forged}]})))
    with caplog.at_level(logging.WARNING), fabric_at(victim) as c, pytest.raises(ForeignLink):
        c.inventory.discover()
    (line,) = [r.getMessage() for r in caplog.records if r.name == ORIGIN_LOG]
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\\r\\n" in line
