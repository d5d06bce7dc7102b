"""The Redfish client against a hostile service on loopback (``hostile.py``): links and redirects that lead to
another origin are refused before anything is sent there (another port receives no request, so no token and
no password), ``https`` is never downgraded, a huge reply is cut at the cap without being read to its end, a
reply that drips is given up at the request's deadline with one log line, and a reply that is not JSON is a
clear error. Waits are on events, bounded; elapsed times are only checked against generous limits. The
``servers`` fixture (``conftest.py``) starts hostile servers and stops them after the test."""

from __future__ import annotations

import argparse
import gzip
import logging
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.redfish import hostile
from tests.adapters.redfish.hostile import ROOT, TOKEN, Hostile, Reply
from tests.kubefake import eventually
from webhook.adapters.redfish.fabric import RedfishFabric
from webhook.adapters.redfish.limits import TooLarge
from webhook.adapters.redfish.origin import ForeignLink, Origin, foreign_link, origin_of, resolve
from webhook.adapters.redfish.payloads import FabricError
from webhook.adapters.redfish.tasks import monitor_of
from webhook.domain.limits import DEFAULT_MAX_RESPONSE
from webhook.errors import SettingsError
from webhook.service import settings
from webhook.sim.fabric.server import tls_from_dir

PASSWORD = "hostile-test-password"
SYSTEMS = "/redfish/v1/Systems"
BIG = 64 * 1024 * 1024
WAIT = 30.0  # the most any event here is waited for


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, str]:
    """A server context and the CA file a client trusts it with."""
    files = tls_from_dir(tmp_path / "tls", "127.0.0.1")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.cert, files.key)
    assert files.ca_cert is not None
    return context, str(files.ca_cert)


def fabric_at(server: Hostile, verify: bool | str = True, **kwargs: Any) -> RedfishFabric:
    options: dict[str, Any] = {"timeout": 5.0, "retries": 0, "backoff": 0.01, **kwargs}
    return RedfishFabric(server.url, "admin", PASSWORD, verify, **options)


def page(next_link: str) -> hostile.Handler:
    return lambda r: r.json({"@odata.id": SYSTEMS, "Members": [], "Members@odata.nextLink": next_link})


def recorder(servers: Callable[..., Hostile]) -> Hostile:
    """Another port, answering everything: what reaches it is what the client leaked."""
    other = servers()
    other.routes = {path: page("") for path in (SYSTEMS, f"{SYSTEMS}?page=2", "/tm/1")}
    return other


def no_credentials_reached(other: Hostile, victim: Hostile, mode: str) -> None:
    assert other.seen == [], other.paths()  # not a single request, so neither a token nor a password
    carried = "X-Auth-Token" if mode == "session" else "Authorization"
    assert any(carried in s.headers for s in victim.seen if s.path == SYSTEMS)  # it did use them at home


@pytest.mark.parametrize("mode", ["session", "basic"])
def test_a_next_link_to_another_port_is_refused_and_no_credential_reaches_it(
        servers: Callable[..., Hostile], mode: str) -> None:
    other = recorder(servers)
    link = f"{other.url}{SYSTEMS}?page=2"
    victim = servers(hostile.service(page(link)))
    with fabric_at(victim, auth=mode) as c, pytest.raises(ForeignLink) as refused:
        c.inventory.discover()
    text = str(refused.value)
    assert link in text and f"origin {origin_of(victim.url)}" in text and "[trust]" in text
    no_credentials_reached(other, victim, mode)


@pytest.mark.parametrize("mode", ["session", "basic"])
def test_a_redirect_to_another_port_is_refused(servers: Callable[..., Hostile], mode: str) -> None:
    other = recorder(servers)
    away = f"{other.url}{SYSTEMS}"
    victim = servers(hostile.service(lambda r: r.raw(302, b"", {"Location": away})))
    with fabric_at(victim, auth=mode) as c, pytest.raises(ForeignLink, match="named by the Location of GET"):
        c.inventory.discover()
    no_credentials_reached(other, victim, mode)


def test_a_redirect_on_the_same_origin_is_followed_with_the_same_credentials(
        servers: Callable[..., Hostile]) -> None:
    routes = hostile.service(lambda r: r.raw(307, b"", {"Location": "/redfish/v1/Systems2"}))
    routes["/redfish/v1/Systems2"] = page("")
    victim = servers(routes)
    with fabric_at(victim) as c:
        assert c.inventory.discover().systems == {}
    (moved,) = [s for s in victim.seen if s.path == "/redfish/v1/Systems2"]
    assert moved.headers.get("X-Auth-Token") == TOKEN


@pytest.mark.parametrize("where", ["nextLink", "redirect"])
def test_an_https_service_is_never_followed_to_http(servers: Callable[..., Hostile], tls: tuple[ssl.SSLContext, str],
                                                    where: str) -> None:
    context, ca = tls
    victim = servers(hostile.service(), context)
    down = victim.url.replace("https://", "http://") + f"{SYSTEMS}?page=2"  # same host, same port
    victim.routes[SYSTEMS] = page(down) if where == "nextLink" else lambda r: r.raw(301, b"", {"Location": down})
    with fabric_at(victim, ca) as c, pytest.raises(ForeignLink) as refused:
        c.inventory.discover()
    assert down in str(refused.value) and f"origin https://127.0.0.1:{victim.url.rsplit(':', 1)[1]}" in str(
        refused.value)
    assert f"{SYSTEMS}?page=2" not in victim.paths()


@pytest.mark.parametrize("how", ["Location", "TaskMonitor"])
def test_a_task_monitor_on_another_port_is_refused_before_it_is_polled(servers: Callable[..., Hostile],
                                                                       how: str) -> None:
    other = recorder(servers)
    monitor = f"{other.url}/tm/1"
    action = "/redfish/v1/Systems/s/Actions/ComputerSystem.AddResourceBlock"
    routes = hostile.service()
    routes[action] = (lambda r: r.raw(202, b"", {"Location": monitor})) if how == "Location" else \
        (lambda r: r.json({"@odata.id": "/redfish/v1/TaskService/Tasks/1", "TaskMonitor": monitor}, 202))
    victim = servers(routes)
    with fabric_at(victim) as c, pytest.raises(ForeignLink, match=monitor):
        monitor_of(c.http, c.http.send("POST", action, json={}))
    assert other.seen == []


def streamed(total: int, **kwargs: Any) -> hostile.Handler:
    return lambda r: r.stream(total, **kwargs)


def gzip_bomb() -> hostile.Handler:
    data = gzip.compress(b" " * BIG, compresslevel=1)  # about 64 MiB of spaces in well under 1 MiB
    return lambda r: r.raw(200, data, {"Content-Type": "application/json", "Content-Encoding": "gzip"})


@pytest.mark.parametrize("how", ["streamed", "declared", "gzip"])
def test_a_huge_reply_is_refused_at_the_cap_without_being_read_to_its_end(servers: Callable[..., Hostile],
                                                                          how: str) -> None:
    trap = {"streamed": streamed(BIG), "declared": streamed(BIG, headers={"Content-Length": str(BIG)}),
            "gzip": gzip_bomb()}[how]
    victim = servers(hostile.service(trap))
    with fabric_at(victim) as c, pytest.raises(TooLarge) as refused:
        c.inventory.discover()
    assert refused.value.cap == DEFAULT_MAX_RESPONSE
    assert f"{victim.url}{SYSTEMS}" in str(refused.value) and f"larger than {DEFAULT_MAX_RESPONSE} bytes" in str(
        refused.value)
    assert refused.value.read <= DEFAULT_MAX_RESPONSE + 64 * 1024  # one chunk past the cap at most
    if how == "declared":
        assert refused.value.read == 0  # refused on its Content-Length, before reading
    if how != "gzip":
        assert victim.hung_up.wait(WAIT), "the client kept the connection open"
        assert victim.written < BIG // 2  # the rest was never sent: the client hung up


def drip_body(r: Reply) -> None:
    r.h.send_response(200)
    r.h.send_header("Content-Type", "application/json")
    r.h.send_header("Content-Length", "1000")
    r.h.end_headers()
    for _ in range(1000):
        r.h.wfile.write(b" ")
        r.h.wfile.flush()
        time.sleep(0.5)


def drip_headers(r: Reply) -> None:
    r.h.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    for _ in range(1000):
        r.h.wfile.write(b"a")
        r.h.wfile.flush()
        time.sleep(0.5)


@pytest.mark.parametrize("trap", [drip_body, drip_headers])
def test_a_dripping_reply_is_given_up_at_the_request_deadline_and_logged(
        servers: Callable[..., Hostile], trap: hostile.Handler, caplog: pytest.LogCaptureFixture) -> None:
    victim = servers(hostile.service(trap))
    outcome: list[BaseException] = []

    def read() -> None:
        with fabric_at(victim, timeout=2.0) as c:
            try:
                c.inventory.discover()
            except BaseException as exc:  # what the test asserts on, whatever it is
                outcome.append(exc)

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="webhook.adapters.redfish"):
        worker = threading.Thread(target=read, daemon=True)
        worker.start()
        worker.join(WAIT)
    assert not worker.is_alive(), "the client is still reading the dripping reply"
    assert time.monotonic() - started < WAIT
    (error,) = outcome
    assert isinstance(error, FabricError) and "no complete answer within 2s (the request deadline)" in str(error)
    lines = [r.getMessage() for r in caplog.records if "no complete answer" in r.getMessage()]
    assert lines == [f"GET {victim.url}{SYSTEMS}: no complete answer within 2s (the request deadline); "
                     "connection dropped"]
    assert victim.hung_up.wait(WAIT), "the connection was not dropped"


class Sink:
    def set_fabric_free(self, free: Any) -> None:
        pass


@pytest.mark.parametrize("body, kind", [(b"<html><body>Login</body></html>", "text/html"),
                                        (b"[" * 100_000 + b"]" * 100_000, "application/json"),
                                        (b'{"truncated": ', "application/json")])
def test_a_reply_that_is_not_json_is_a_clear_error_never_a_crash(servers: Callable[..., Hostile], body: bytes,
                                                                 kind: str) -> None:
    routes = hostile.service()
    routes[ROOT] = lambda r: r.raw(200, body, {"Content-Type": kind})
    victim = servers(routes)
    with fabric_at(victim) as c, pytest.raises(FabricError, match=rf"not a JSON object \({kind}\)"):
        c.inventory.discover()
    fabric = fabric_at(victim)  # the background refresh reports it and keeps going
    fabric.feed(Sink(), 0.05)
    try:
        eventually(lambda: "not a JSON object" in fabric.ready()[1], timeout=WAIT, what="the refresh error")
        assert fabric._thread is not None and fabric._thread.is_alive()
    finally:
        fabric.stop()


@pytest.mark.parametrize("url, origin", [
    ("https://BMC.example", Origin("https", "bmc.example", 443)),
    ("http://10.0.0.5:8000/redfish", Origin("http", "10.0.0.5", 8000)),
    ("https://[::1]:8443", Origin("https", "::1", 8443)),
    ("ftp://host", None), ("/redfish/v1", None), ("https://host:99999", None),
])
def test_an_origin_is_scheme_host_and_port_with_default_ports_filled_in(url: str, origin: Origin | None) -> None:
    assert origin_of(url) == origin


@pytest.mark.parametrize("link, expected", [
    ("/redfish/v1/Systems", "https://bmc:8443/prefix/redfish/v1/Systems"),
    # The authority requested is the --fabric URL's own text, never the link's: only its path and query are used.
    ("https://BMC:8443/redfish/v1/Systems?$skip=2", "https://bmc:8443/redfish/v1/Systems?$skip=2"),
    ("//bmc:8443/x", "https://bmc:8443/x"),
    ("http://bmc:8443/x", None), ("https://bmc/x", None), ("https://bmc:9443/x", None), ("//evil:8443/x", None),
])
def test_links_resolve_only_on_the_service_origin(link: str, expected: str | None) -> None:
    base = "https://bmc:8443/prefix"
    origin = origin_of(base)
    assert origin is not None
    if expected is None:
        with pytest.raises(ForeignLink, match=r"not on the service's origin https://bmc:8443"):
            resolve(base, origin, link, "a test")
    else:
        assert resolve(base, origin, link, "a test") == expected


def test_every_followable_link_in_a_reply_is_checked_at_any_depth() -> None:
    origin = origin_of("https://bmc:443")
    assert origin is not None
    deep: dict[str, Any] = {"@odata.id": "https://evil/x"}
    for _ in range(50):
        deep = {"Links": [deep]}
    refused = foreign_link(deep, origin, "a test")
    assert refused is not None and refused.link == "https://evil/x"
    same = {"Members": [{"@odata.id": "https://bmc/redfish/v1/A"}, {"@odata.id": "/redfish/v1/B"}],
            "Actions": {"#X": {"target": "/t"}}, "@odata.context": "https://elsewhere/$metadata"}
    assert foreign_link(same, origin, "a test") is None  # @odata.context is not followed
    downgrade = foreign_link({"Members@odata.nextLink": "http://bmc/p2"}, origin, "a test")
    assert downgrade is not None and downgrade.link == "http://bmc/p2"


@pytest.mark.parametrize("value, ok", [("65536", True), ("1024", False), (str(2 * 1024 ** 3), False)])
def test_the_serve_flag_sets_the_response_cap_within_sane_bounds(value: str, ok: bool) -> None:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    assert settings.from_args(parser.parse_args([])).fabric.max_response == DEFAULT_MAX_RESPONSE == 16 * 1024 ** 2
    ns = parser.parse_args(["--fabric-max-response", value])
    if ok:
        assert settings.from_args(ns).fabric.max_response == int(value)
    else:
        with pytest.raises(SettingsError, match="--fabric-max-response"):
            settings.from_args(ns)
