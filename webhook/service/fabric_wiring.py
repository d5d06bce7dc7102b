"""Wiring of the fabric mode for one ``serve`` worker: the Redfish client (or the in-process simulator),
attach before bind, the reconciler, the free-blocks feed, and in embedded mode the simulated node agents.

``--fabric none``: nothing here runs; a pod that would need fabric GPUs is refused at bind with that
reason. ``--fabric embedded``: the composition simulator serves the demo inventory in this process and
simulated node agents (the real hot-add and release code over a fake NVML and sysfs) drive attachments
to Ready and Released, as DaemonSet agents do in a cluster; both come from ``webhook.composition``
(:class:`webhook.service.embedded_parts.EmbeddedParts`). ``--fabric URL``: a real Redfish service.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from webhook.adapters.redfish.auth import AUTH_MODES, AuthMode
from webhook.adapters.redfish.fabric import RedfishFabric
from webhook.domain.fabric_plan import Timeouts
from webhook.domain.limits import DEFAULT_MAX_RESPONSE
from webhook.engine.attacher import FabricAttacher
from webhook.engine.ports import Backend, FabricManager
from webhook.engine.reconciler import Reconciler
from webhook.errors import ImexWebhookError
from webhook.http.metrics import Metrics
from webhook.service.embedded_parts import EmbeddedParts, RunningFabric, Stoppable
from webhook.service.settings.groups import fabric_kind
from webhook.state.cluster import ClusterStore

log = logging.getLogger(__name__)


class FabricConfigError(ImexWebhookError):
    pass


@dataclass
class FabricParts:
    fabric: FabricManager
    attacher: FabricAttacher
    reconciler: Reconciler
    sim: RunningFabric | None = None
    agents: Stoppable | None = None
    _stopped: threading.Event = field(default_factory=threading.Event, repr=False)

    def stop(self) -> None:
        """Once only (it also runs at exit): stops the loops and logs out of the fabric's Redfish session."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.reconciler.stop()
        self.fabric.stop()
        if self.agents is not None:
            self.agents.stop()
        if self.sim is not None:
            self.sim.stop()


@dataclass(frozen=True)
class FabricCredentials:
    username: str
    password: str = field(repr=False)
    auth: AuthMode = "auto"  # auto: a Redfish session when the service offers one, else HTTP Basic


def read_credentials(path: Path | None) -> FabricCredentials:
    """``user:password`` on one line, or YAML ``{username, password, auth}`` with ``auth`` one of ``auto``
    (the default), ``session`` or ``basic``; kept out of the command line. Errors never quote the file."""
    if path is None:
        raise FabricConfigError("--fabric URL needs --fabric-credentials FILE (user:password or YAML)")
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise FabricConfigError(f"--fabric-credentials {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    if ":" in text and "\n" not in text and not text.startswith("{"):
        user, _, password = text.partition(":")
        return FabricCredentials(user, password)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # The parser's message quotes the offending line, which may hold the password: only say where.
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise FabricConfigError(f"--fabric-credentials {path}: neither user:password nor YAML{where}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("username"), str) or not isinstance(
            doc.get("password"), str):
        raise FabricConfigError(f"--fabric-credentials {path}: expected username and password (strings)")
    unknown = sorted(str(k) for k in doc if k not in ("username", "password", "auth"))
    if unknown:
        raise FabricConfigError(f"--fabric-credentials {path}: unknown key {unknown[0][:40]!r} "
                                "(known: username, password, auth)")
    auth = doc.get("auth", "auto")
    if auth not in AUTH_MODES:
        raise FabricConfigError(f"--fabric-credentials {path}: auth must be one of {', '.join(AUTH_MODES)}")
    return FabricCredentials(doc["username"], doc["password"], auth)


@dataclass(frozen=True)
class Endpoint:
    """Where a fabric manager answers and how this worker talks to it."""

    url: str
    credentials: FabricCredentials
    verify: bool | str  # True, or the CA bundle that signs the service's certificate
    refresh: float  # seconds between inventory reads
    max_response: int  # the largest reply body in bytes


def _redfish(at: Endpoint) -> FabricManager:
    creds = at.credentials
    return RedfishFabric(at.url, creds.username, creds.password, at.verify, refresh_interval=at.refresh,
                         auth=creds.auth, max_response=at.max_response)


# How to reach each fabric manager API, by the kind ``--fabric`` names (``settings.groups.fabric_kind``). A
# second backend is its adapter package (a ``FabricManager``, ``webhook.engine.ports``) and one row here; the
# embedded simulator speaks Redfish, so it is reached through the Redfish row.
BACKENDS: Mapping[str, Callable[[Endpoint], FabricManager]] = {"redfish": _redfish}


def start(fabric: str, store: ClusterStore, backend: Backend, metrics: Metrics, *,
          credentials: Path | None = None, ca: Path | None = None, refresh: float = 5.0,
          timeouts: Timeouts | None = None, embedded: EmbeddedParts | None = None,
          node_agents: Callable[[], Stoppable] | None = None,
          max_response: int = DEFAULT_MAX_RESPONSE) -> FabricParts | None:
    """The fabric parts of ``--fabric`` started (None for ``none``); their ``attacher`` goes to the engine.
    ``embedded``: what ``--fabric embedded`` runs on (required for it); ``node_agents``: starts the simulated
    node agents of an embedded cluster (None where real agents run); ``max_response``: the largest Redfish
    reply body (``--fabric-max-response``)."""
    kind = fabric_kind(fabric)
    if kind == "none":
        return None
    sim: RunningFabric | None = None
    if kind == "embedded":
        if embedded is None:
            raise FabricConfigError("--fabric embedded: this command was started without the simulators")
        sim = embedded.start_fabric()
        at = Endpoint(sim.url, FabricCredentials(sim.username, sim.password), True, refresh, max_response)
        connect = BACKENDS["redfish"]
    else:
        at = Endpoint(fabric, read_credentials(credentials), str(ca) if ca else True, refresh, max_response)
        connect = BACKENDS[kind]
    manager = connect(at)
    attacher = FabricAttacher(backend.attachments, manager, metrics)
    reconciler = Reconciler(backend.attachments, manager, store, timeouts, leader=backend.is_leader,
                            observer=metrics)
    parts = FabricParts(manager, attacher, reconciler, sim)
    # A worker that exits (SIGTERM, a restart) logs out instead of leaving its session to time out on the
    # fabric manager, whose session slots are few.
    atexit.register(parts.stop)
    if node_agents is not None:
        parts.agents = node_agents()
    manager.feed(store, refresh)
    reconciler.start(interval=max(1.0, refresh))
    log.info("fabric mode: %s (%s)", "embedded simulator" if sim else f"{kind} service", at.url)
    return parts
