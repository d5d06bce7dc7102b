"""A bind engine on a real Redfish client and the composition simulator, with a background inventory refresh
the test holds: the rig of ``test_bind_budget_under_refresh``.

The refresh runs as the fabric feed runs it (``RedfishFabric.feed``: a thread named ``fabric-inventory``
asking ``free_per_zone`` after the snapshot went stale). ``Held`` stands between that thread and the
transport, so a test can keep the refresh in flight, or hand it replies it read earlier, while the bind's
own requests go straight to the simulator. Slow or hanging services for everyone come from the
simulator's faults (``latency_s``, ``hang``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tests import builders
from tests.engine.fabric_fakes import node_agent
from tests.fabric_sims import Sim
from webhook.adapters import embedded
from webhook.adapters.redfish.fabric import RedfishFabric
from webhook.adapters.redfish.payloads import FabricError
from webhook.domain.model import Pod
from webhook.domain.reading import parsing
from webhook.engine.attacher import FabricAttacher
from webhook.engine.bind import BindOutcome
from webhook.engine.engine import Engine
from webhook.errors import DecisionError
from webhook.sim.fabric import inventory as inv
from webhook.sim.fabric import server
from webhook.wire import fabric_attachment as fa
from webhook.wire.fabric_attachment import Attachment

ZONE = "pool"
NODES = ("f", "g")  # fabric nodes; one local GPU each, so a pod asking 3 needs 2 fabric GPUs
BLOCKS = 6
BUDGET = 3.0
HELD = 20.0  # how long a held refresh keeps its reads; far above the budget
BOUND = 6.0  # a bind answers before this, on a busy machine too; held, it took HELD or more before
REFRESHER = "fabric-inventory"  # the feed thread's name (RedfishFabric.feed)


def sim_inventory(extra_systems: int = 30) -> inv.Inventory:
    """Zone ``pool``: systems f and g (the nodes) and ``extra_systems`` more, so that a refresh reads many."""
    return inv.from_dict({
        "zones": [{"id": ZONE}],
        "systems": [*({"id": n, "zone": ZONE, "max_blocks": 4} for n in NODES),
                    *({"id": f"x-{i:02d}", "zone": ZONE} for i in range(extra_systems))],
        "blocks": [{"id": f"gp-{i}", "zone": ZONE} for i in range(BLOCKS)],
    })


@dataclass
class Held:
    """Holds the refresh thread's reads: before each request (``after=None``), or after the read of a path
    ending ``after`` (its reply is kept and returned late); ``fail_at``: the n-th read raises a 503 error."""

    after: str | None = None
    fail_at: int = 0
    opened: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    reads: int = 0

    def wrap(self, get: Callable[..., tuple[dict[str, Any], str]]) -> Callable[..., tuple[dict[str, Any], str]]:
        def held(path: str, operation: str, deadline: float | None = None) -> tuple[dict[str, Any], str]:
            if threading.current_thread().name != REFRESHER:
                return get(path, operation, deadline)
            self.reads += 1
            if self.reads == self.fail_at:
                raise FabricError(operation, path, "HTTP 503: the service is busy", status=503, phase="read",
                                  retryable=True)
            if self.after is None:
                self.entered.set()
                self.opened.wait(HELD)
                return get(path, operation, deadline)
            reply = get(path, operation, deadline)
            if path.split("?")[0].endswith(self.after):
                self.entered.set()
                self.opened.wait(HELD)
            return reply

        return held


@dataclass
class Rig:
    sim: Sim
    fabric: RedfishFabric
    engine: Engine
    backend: embedded.EmbeddedBackend
    pods: dict[str, Pod]
    refreshes: list[threading.Thread] = field(default_factory=list)
    helds: list[Held] = field(default_factory=list)
    refresh_errors: list[Exception] = field(default_factory=list)

    def hold(self, held: Held) -> Held:
        self.fabric.http.get = held.wrap(self.fabric.http.get)  # type: ignore[method-assign]
        self.helds.append(held)
        return held

    def refresh_in_background(self, held: Held | None = None, wait: float = 10.0) -> None:
        """Start a feed-style refresh; with ``held``, return once it is held (or has made its first read)."""
        def run() -> None:
            try:
                self.fabric.free_per_zone()
            except Exception as exc:  # what a refresh that failed says is asserted by the tests
                self.refresh_errors.append(exc)

        self.fabric.inventory.invalidate()
        thread = threading.Thread(target=run, name=REFRESHER, daemon=True)
        thread.start()
        self.refreshes.append(thread)
        if held is not None:
            assert held.entered.wait(wait), "the background refresh never reached the simulator"

    def bind(self, node: str) -> tuple[float, BindOutcome | DecisionError]:
        """Bind the pod filtered onto ``node`` there: (seconds it took, its outcome or its Error)."""
        pod = self.pods[node]
        started = time.monotonic()
        try:
            result: BindOutcome | DecisionError = self.engine.bind(pod.namespace, pod.name, pod.uid, node)
        except DecisionError as exc:
            result = exc
        return time.monotonic() - started, result

    def attachment(self, node: str) -> Attachment | None:
        return self.backend.attachments.get(fa.name_for(self.pods[node].uid))

    def composed(self) -> dict[str, list[str]]:
        return {system: blocks for system, blocks in self.sim.composed().items() if blocks}


def start(budget: float = BUDGET) -> Iterator[Rig]:
    """The rig, its inventory read once (fast) and each node's pod filtered; stopped at the end."""
    sim = Sim(server.start_in_thread(sim_inventory()))
    fabric = sim.fabric(timeout=5.0, retries=3)  # the product's request timeout: the budget must cut it
    objects = [builders.node(n, 1, zone=ZONE, slots=4) for n in NODES]
    for n in NODES:
        objects += builders.cd_objects(f"job-{n}", 1)
    store = builders.store(objects, fabric_free={ZONE: BLOCKS})
    backend = embedded.EmbeddedBackend(store, [], "test")
    node_agent(backend.attachments)
    attacher = FabricAttacher(backend.attachments, fabric, poll=0.01)
    engine = builders.engine(backend, attacher=attacher, bind_budget=budget)
    pods = {}
    for n in NODES:
        pod = parsing.pod(builders.pod(f"job-{n}-0", cd=f"job-{n}", gpus=3))
        embedded.put_pod(store, pod)
        assert n in engine.filter(pod, list(NODES)).passed
        pods[n] = pod
    fabric.inventory.refresh()
    rig = Rig(sim, fabric, engine, backend, pods)
    try:
        yield rig
    finally:
        rig.sim.faults(latency_s=0, hang=False)
        for held in rig.helds:
            held.opened.set()
        for thread in rig.refreshes:
            thread.join(HELD + 10)
        fabric.stop()
        sim.close()
