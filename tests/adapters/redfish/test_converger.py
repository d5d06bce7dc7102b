"""The converger on its own: in-memory reads (``BlockReads``) and a scripted transport, so each kind of failed
reply can be set against the block's state, and the count of requests shows that a block is never composed
twice: whatever a reply said, the re-read of the block decides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from webhook.adapters.redfish.converger import Converger
from webhook.adapters.redfish.http import HttpTransport, NoReply
from webhook.adapters.redfish.payloads import BlockInfo, FabricError, SystemView

SYSTEM, OTHER = "/redfish/v1/Systems/n-0", "/redfish/v1/Systems/n-1"
BLOCK = "/redfish/v1/CompositionService/ResourceBlocks/g-0"
ADD = f"{SYSTEM}/Actions/ComputerSystem.AddResourceBlock"
REMOVE = f"{SYSTEM}/Actions/ComputerSystem.RemoveResourceBlock"


@dataclass
class Service:
    """One system with the composition actions and one block. Each request takes the next scripted reply:
    ``lost`` (done, no reply), ``500-after`` (done, then a 500), ``500`` (not done), ``ok`` (done, 204)."""

    replies: list[str]
    state: str = "Unused"
    systems: tuple[str, ...] = ()
    sent: list[tuple[str, str]] = field(default_factory=list)

    def read_block(self, uri: str, operation: str = "read", deadline: float | None = None) -> BlockInfo:
        return BlockInfo(uri, uri.rsplit("/", 1)[-1], "z", self.state, self.systems)

    def read_system(self, uri: str, operation: str, deadline: float | None = None) -> SystemView:
        return SystemView(uri, "n-0", "n-0", '"1"', [BLOCK] if SYSTEM in self.systems else [], ADD, REMOVE)

    def system_view(self, uri: str, operation: str, deadline: float | None) -> SystemView:
        return self.read_system(uri, operation, deadline)

    def store_system(self, view: SystemView) -> None:
        pass

    def send(self, method: str, path: str, *, json: Any = None, headers: dict[str, str] | None = None,
             deadline: float | None = None) -> requests.Response:
        self.sent.append((method, path))
        reply = self.replies.pop(0) if self.replies else "ok"
        if reply != "500":
            self.state, self.systems = ("Composed", (SYSTEM,)) if path == ADD else ("Unused", ())
        if reply == "lost":
            raise NoReply("connection reset by peer")
        resp = requests.Response()
        resp.status_code, resp._content = (204, b"") if reply == "ok" else (500, b"{}")
        return resp


def converger(service: Service, monkeypatch: pytest.MonkeyPatch, retries: int = 3) -> Converger:
    http = HttpTransport("http://fabric.invalid", "user", "password", True, 1.0, retries, 0.0, lambda: 0.0,
                         lambda _: None)
    monkeypatch.setattr(http, "send", service.send)
    return Converger(http, service)


@pytest.mark.parametrize(("replies", "requests_sent"), [
    pytest.param(["lost"], 1, id="a reply lost after the block composed is not followed by a second request"),
    pytest.param(["500-after"], 1, id="a 500 sent after the composition was done is not followed by a second"),
    pytest.param(["500", "ok"], 2, id="a 500 that changed nothing is tried again"),
    pytest.param(["500", "lost"], 2, id="a retry whose reply is lost counts as done once the block says so"),
])
def test_an_attach_ends_composed_and_asks_only_while_the_block_is_free(
        replies: list[str], requests_sent: int, monkeypatch: pytest.MonkeyPatch) -> None:
    service = Service(list(replies))
    (info,) = converger(service, monkeypatch).attach(SYSTEM, [BLOCK], deadline=100.0)
    assert info.composed_to(SYSTEM) and service.sent == [("POST", ADD)] * requests_sent


def test_a_block_composed_to_another_system_is_refused_without_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    service = Service([], state="Composed", systems=(OTHER,))
    with pytest.raises(FabricError) as err:
        converger(service, monkeypatch).attach(SYSTEM, [BLOCK], deadline=100.0)
    assert err.value.has("ResourceBlockInUse") and err.value.status == 409 and service.sent == []


def test_retries_used_up_on_500s_roll_back_and_name_the_last_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    service = Service(["500"] * 3, state="Unused")
    with pytest.raises(FabricError, match="HTTP 500") as err:
        converger(service, monkeypatch, retries=2).attach(SYSTEM, [BLOCK], deadline=100.0)
    assert service.sent == [("POST", ADD)] * 3 and err.value.retryable  # the block stayed free: no detach sent


def test_detaching_a_block_that_is_already_free_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    service = Service([])
    converger(service, monkeypatch).detach(SYSTEM, [BLOCK], deadline=100.0)
    assert service.sent == []


def test_an_attach_past_its_deadline_sends_nothing_and_rolls_nothing_back(monkeypatch: pytest.MonkeyPatch) -> None:
    service = Service([])
    with pytest.raises(FabricError, match="deadline passed") as err:
        converger(service, monkeypatch).attach(SYSTEM, [BLOCK], deadline=0.0)
    assert err.value.deadline and service.sent == []
