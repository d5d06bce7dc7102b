"""Fuzz of the simulator's endpoints over real HTTP (hypothesis): whatever a client sends, the answer is
JSON (``$metadata`` excepted, which is XML by the standard), errors in the Redfish error shape (the test
endpoints: ``{"error": "..."}``), never an HTML page and never a 500 (a 503 only as the session limit).

Inputs: the bodies each endpoint takes, in their valid shapes with hostile leaves (wrong types, huge and
odd strings, numbers past 64 bits, nesting past the limit, lone surrogates); raw junk bodies (invalid
UTF-8, NaN, 1e999, numbers of 5000 digits, thousands of brackets); and odd paths, methods, queries and
headers (a forged X-Auth-Token, a junk If-Match). One request per example, then the simulator is reset,
so a fault an example switches on (hang, latency, errors) never meets the next example.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fabric_sims import AUTH, BLOCKS, SESSIONS, SYSTEMS, inventory
from webhook.sim.fabric import inventory as inv
from webhook.sim.fabric import server

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Target:
    """The running simulator, a Basic-authenticated HTTP session and a valid token for the examples."""

    def __init__(self) -> None:
        self.running = server.start_in_thread(inventory(compose_delay_s=0.05, max_sessions=16))
        self.url = self.running.url
        self.http = requests.Session()
        self.http.trust_env = False
        self.http.auth = AUTH
        self.token = ""
        self.login()

    def login(self) -> None:
        self.http.delete(self.url + "/admin/sessions", timeout=10).raise_for_status()
        resp = self.http.post(self.url + SESSIONS, json={"UserName": AUTH[0], "Password": AUTH[1]}, timeout=10)
        self.token = resp.headers["X-Auth-Token"]

    def send(self, method: str, path: str, *, data: bytes | None = None, auth: str = "basic",
             headers: dict[str, str] | None = None) -> requests.Response:
        extra = dict(headers or {})
        if auth == "token":
            extra["X-Auth-Token"] = self.token
        elif auth == "forged":
            extra["X-Auth-Token"] = "forged-" + "0" * 40
        if data is not None:
            extra.setdefault("Content-Type", "application/json")
        resp = requests.request(method, self.url + path, data=data, headers=extra, timeout=20,
                                auth=AUTH if auth == "basic" else None)
        self.after()
        return resp

    def after(self) -> None:
        self.http.post(self.url + "/admin/reset", timeout=10).raise_for_status()
        if self.http.get(self.url + "/admin/state", timeout=10).json()["sessions"]["open"] > 8:
            self.login()  # fuzzed logins that guessed the credentials pile up; start over before the limit

    def close(self) -> None:
        self.http.close()
        self.running.stop()


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.close()


def check(resp: requests.Response, path: str, method: str) -> None:
    status, kind = resp.status_code, resp.headers.get("Content-Type", "")
    assert "html" not in kind and b"<html" not in resp.content.lower(), (status, resp.text[:300])
    if status == 503:
        assert "SessionLimitExceeded" in resp.text, resp.text[:300]
    else:
        assert status < 500, (status, resp.text[:300])
    if not resp.content or method == "HEAD":
        assert status < 400 or method == "HEAD", status  # every refusal says why
        return
    if path.startswith("/redfish/v1/$metadata") and status == 200:
        assert kind.startswith("application/xml")
        return
    assert kind.startswith("application/json"), (status, kind)
    body = resp.json()
    if status >= 400:
        error = body["error"]
        assert isinstance(error, str) or error["@Message.ExtendedInfo"][0]["MessageId"], body


def nested(depth: int) -> Any:
    value: Any = "x"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


leaf = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30),
    st.sampled_from(["", "admin", "\ud800", "\x00", "x" * 70_000, "../../etc", "*", 'W/"1"', "GPU-0" * 50,
                     f"{BLOCKS}/ga-0", f"{BLOCKS}/host-a-0", f"{BLOCKS}/../ga-1", "Unused", "Failed", "POST"]),
    st.sampled_from([10**4000, -(2**63), 2**64, 1e308, -0.0, nested(20), nested(40), [], {}]),
    st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
block_ref = st.one_of(leaf, st.fixed_dictionaries({"@odata.id": leaf}),
                      st.sampled_from([{"@odata.id": f"{BLOCKS}/ga-{i}"} for i in range(4)]))


def shaped(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with some of ``keys`` (and sometimes an unknown one), each a hostile leaf."""
    return st.dictionaries(st.sampled_from([*keys, "Unknown", "@odata.etag"]), leaf, max_size=len(keys) + 1)


faults = [f.name for f in dataclasses.fields(inv.Faults)]
options = [f.name for f in dataclasses.fields(inv.Options) if f.name != "faults"]
ACTION = f"{SYSTEMS}/a-0/Actions/ComputerSystem.AddResourceBlock"
bodies = st.one_of(
    st.tuples(st.just(("POST", ACTION)), st.fixed_dictionaries(
        {"ResourceBlock": block_ref}, optional={"ResourceBlockETag": leaf, "ComputerSystemETag": leaf, "X": leaf})),
    st.tuples(st.just(("POST", ACTION.replace("Add", "Remove"))), st.fixed_dictionaries({"ResourceBlock": block_ref})),
    st.tuples(st.just(("PATCH", f"{SYSTEMS}/a-1")), st.one_of(
        st.fixed_dictionaries({"Links": st.fixed_dictionaries({"ResourceBlocks": st.lists(
            st.one_of(st.none(), st.just({}), block_ref), max_size=6)})}),
        st.fixed_dictionaries({"Links": leaf}), shaped(["Links", "Name"]))),
    st.tuples(st.just(("POST", SESSIONS)), shaped(["UserName", "Password", "Context"])),
    st.tuples(st.just(("POST", SESSIONS)), st.fixed_dictionaries(
        {"UserName": st.sampled_from(["admin", "root"]), "Password": st.sampled_from(["admin", "x"])},
        optional={"Context": leaf})),
    st.tuples(st.just(("PATCH", "/redfish/v1/SessionService")), shaped(["SessionTimeout", "ServiceEnabled"])),
    st.tuples(st.just(("POST", "/admin/faults")), shaped(faults)),
    st.tuples(st.just(("POST", "/admin/options")), st.one_of(shaped(options), st.fixed_dictionaries(
        {"faults": st.one_of(leaf, shaped(faults))}))),
    st.tuples(st.just(("POST", "/admin/blocks/ga-2")), st.one_of(shaped(["state"]), leaf)),
)
BODY_ENDPOINTS = [("POST", ACTION), ("PATCH", f"{SYSTEMS}/a-0"), ("POST", SESSIONS), ("POST", f"{SESSIONS}/Members"),
                  ("PATCH", "/redfish/v1/SessionService"), ("POST", "/admin/faults"), ("POST", "/admin/options"),
                  ("POST", "/admin/blocks/ga-0"), ("DELETE", "/redfish/v1/TaskService/TaskMonitors/1")]
junk = st.one_of(st.binary(max_size=300), st.sampled_from([
    b"[" * 50_000, b'{"a":' * 40 + b"1" + b"}" * 40, b"1", b"null", b'"x"', b"NaN", b'{"x": Infinity}', b"1e999",
    b"9" * 5000, b"\xff\xfe\xfd", b'{"UserName": "\xff"}', b"{" * 3, b'{"a": 1,}', b"\x00" * 64, b"[]" * 1000,
]))


@SETTINGS
@given(bodies, st.sampled_from(["basic", "token"]))
def test_valid_shapes_with_hostile_leaves_never_get_a_500_or_html(target: Target, case: tuple[tuple[str, str], Any],
                                                                  auth: str) -> None:
    (method, path), body = case
    data = json.dumps(body).encode()
    check(target.send(method, path, data=data, auth=auth), path, method)


@SETTINGS
@given(st.sampled_from(BODY_ENDPOINTS), junk, st.sampled_from(["basic", "token", "forged", "none"]))
def test_raw_junk_bodies_never_get_a_500_or_html(target: Target, endpoint: tuple[str, str], data: bytes,
                                                 auth: str) -> None:
    method, path = endpoint
    check(target.send(method, path, data=data, auth=auth), path, method)


segment = st.one_of(st.sampled_from(["Systems", "a-0", "CompositionService", "ResourceBlocks", "ga-1", "Processors",
                                     "GPU0", "ResourceZones", "pool-a", "TaskService", "Tasks", "TaskMonitors", "1",
                                     "SessionService", "Sessions", "Members", "Actions", "odata", "$metadata",
                                     "ComputerSystem.AddResourceBlock", "AddResourceBlockActionInfo", "..", "%00",
                                     "%ff", "x" * 3000]),
                    st.text(alphabet="abcXYZ019-_.~%$()*", min_size=1, max_size=12))
COLLECTIONS = [SYSTEMS, BLOCKS, "/redfish/v1/CompositionService/ResourceZones", "/redfish/v1/TaskService/Tasks",
               SESSIONS]
paths = st.one_of(
    st.sampled_from(COLLECTIONS),  # where the query options act
    st.lists(segment, max_size=5).map(lambda parts: "/redfish/v1/" + "/".join(parts)),
    st.sampled_from(["/", "/redfish", "/redfish/", "/admin", "/admin/state", "/admin/nope", "/admin/blocks/zz",
                     "/admin/reset", "/static/x", "/redfish/v2"]),
)
odd_queries = st.sampled_from(["?$skip=", "?$skip=-1", "?$skip=99999999999999999999", "?$skip=²",
                               "?$skip=" + "9" * 5000, "?$expand=*", "?$expand=.($levels=9)", "?$expand=.",
                               "?$top=1", "?$filter=x", "?$skip=1&$skip=2", "?$skip=2&$expand=.", "?a=%ff"])
queries = st.one_of(st.just(""), odd_queries,
                    st.text(alphabet="$skipexandtop=&.*()1-²٣", max_size=20).map(lambda q: "?" + q))


@SETTINGS
@given(st.sampled_from(["GET", "GET", "GET", "HEAD", "POST", "PATCH", "PUT", "DELETE", "OPTIONS", "TRACE", "FROB"]),
       paths,
       queries, st.sampled_from(["basic", "token", "forged", "none"]),
       st.fixed_dictionaries({}, optional={"If-Match": st.sampled_from(['"1"', "*", "W/", "x" * 5000, ""]),
                                           "Accept": st.sampled_from(["text/html", "*/*", "application/xml"])}))
def test_odd_paths_methods_queries_and_headers_never_get_a_500_or_html(
        target: Target, method: str, path: str, query: str, auth: str, headers: dict[str, str]) -> None:
    check(target.send(method, path + query, data=b"{}" if method in ("POST", "PATCH", "PUT") else None,
                      auth=auth, headers=headers), path, method)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.sampled_from(COLLECTIONS), st.one_of(odd_queries, queries), st.sampled_from(["GET", "HEAD"]))
def test_query_options_on_every_collection_never_get_a_500(target: Target, path: str, query: str,
                                                           method: str) -> None:
    check(target.send(method, path + query, auth="token"), path, method)
