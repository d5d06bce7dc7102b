"""The fabric fixtures (``tests.fabric_sims``): Redfish simulators on 127.0.0.1 and the fabric managers that
talk to them; and ``servers``, which starts hostile Redfish services (``hostile.py``) and stops them after the
test."""

import ssl
from collections.abc import Callable, Iterator

import pytest

from tests.adapters.redfish import hostile
from tests.adapters.redfish.hostile import Hostile
from tests.fabric_sims import fabric, sim, start_sim

__all__ = ["fabric", "servers", "sim", "start_sim"]


@pytest.fixture
def servers() -> Iterator[Callable[..., Hostile]]:
    started: list[Hostile] = []

    def start(routes: dict[str, hostile.Handler] | None = None, tls: ssl.SSLContext | None = None) -> Hostile:
        server = hostile.start(routes, tls)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
