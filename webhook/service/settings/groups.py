"""What ``imex-webhook serve`` runs with: :class:`Settings`, one frozen group per concern, each field's
default held once, here (the flags of :mod:`.flags` show them; :mod:`.checks` builds the groups from the
command line). Read once at start-up, never changed after.

- ``server``: where it listens and with how many threads;
- ``tls``: the serving certificate and who may call (client CA, certificate subjects);
- ``limits``: how much a client may send, how long it may take, how many connections it may hold;
- ``cluster``: where the cluster state comes from, who this replica is in it, and how it is kept fresh;
- ``fabric``: the fabric manager and the reconciler's timeouts;
- ``log``: the log lines;
- ``policy``: the domain policy (:class:`webhook.domain.policy.Policy`).
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from webhook.adapters.kube.watch_settings import WatchSettings
from webhook.domain.fabric_plan import Timeouts
from webhook.domain.limits import DEFAULT_MAX_BODY, DEFAULT_MAX_RESPONSE, DEFAULT_POD_TTL
from webhook.domain.policy import Policy
from webhook.wire.redaction import redact_url

DEFAULT_BIND = "127.0.0.1:8443"
# The subjects (CN or a DNS/URI SAN) of the client certificates the shipped manifests and ``imex-webhook
# certs`` issue: kube-scheduler's (certs.files.SCHEDULER_CLIENT) and an operator's (webhook.serving.callers).
SCHEDULER_SUBJECT = "imex-scheduler"
OPERATOR_SUBJECT = "imex-operator"
# kube-scheduler's default extender httpTimeout is 5 s; the bind budget (attach + binding) must stay under
# the configured httpTimeout, and gunicorn's worker timeout above both so a slow bind is never killed.
DEFAULT_BIND_BUDGET = 20.0
WORKER_TIMEOUT = 120
# Deadlines for a client to finish each part of a request (webhook.serving.reading). kube-scheduler and
# kube-apiserver send a request in one go over a kept-alive connection, so these only ever cut off
# clients that stall; the body deadline leaves room for a 40 MiB NodeList on a slow link.
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_WRITE_TIMEOUT = 30.0
# A request of the service port that has waited this long for a thread and its answer makes /healthz fail
# (webhook.serving.stalls): above the bind budget, the longest a request legitimately takes.
DEFAULT_STALL_TIMEOUT = 60.0
# Past either cap a new connection closes the oldest idle one (docs/HARDENING.md, "Connection limits").
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_MAX_CONNECTIONS_PER_SOURCE = 256
KEEPALIVE = 75.0  # kube-scheduler and kube-apiserver keep connections open between calls
# Request bytes held for requests still arriving, all connections together (None: the default below).
MIN_MAX_BUFFERED = 256 * 1024 * 1024


def default_max_buffered(max_body: int) -> int:
    return max(4 * max_body, MIN_MAX_BUFFERED)


def default_tls_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "imex-webhook" / "tls"


def _holder() -> str:
    return f"{socket.gethostname()}/{os.getpid()}"


@dataclass(frozen=True)
class ServerSettings:
    bind: str = DEFAULT_BIND
    # The probe listener (plain HTTP: /healthz, /readyz, /metrics); "" for none.
    probe_bind: str = ""
    workers: int = 1
    threads: int = 8
    exit_with_parent: bool = False


@dataclass(frozen=True)
class TlsSettings:
    # Either cert and key, or dir (made on first use); the names below go into a certificate made there.
    cert: Path | None = None
    key: Path | None = None
    dir: Path | None = None
    service_name: str = "imex-webhook"
    namespace: str = "imex-system"
    client_ca: Path | None = None
    # Subjects (CN or a DNS/URI SAN) of the client certificates that may call the extender verbs and read the
    # cluster map (webhook.serving.callers).
    client_subjects: tuple[str, ...] = (SCHEDULER_SUBJECT,)
    inspect_subjects: tuple[str, ...] = (OPERATOR_SUBJECT,)
    # A loopback peer may read the cluster map (kubectl port-forward); not behind a mesh sidecar, through
    # which every caller arrives from loopback (--no-loopback-operators).
    loopback_operators: bool = True


@dataclass(frozen=True)
class LimitSettings:
    max_body: int = DEFAULT_MAX_BODY
    max_buffered: int | None = None
    # Connections on --bind (webhook.serving.conn_limits).
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_source: int = DEFAULT_MAX_CONNECTIONS_PER_SOURCE
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    bind_budget: float = DEFAULT_BIND_BUDGET
    stall_timeout: float = DEFAULT_STALL_TIMEOUT

    @property
    def buffered(self) -> int:
        """Request bytes held for requests still arriving: --max-buffered, or its default for --max-body."""
        return self.max_buffered or default_max_buffered(self.max_body)


@dataclass(frozen=True)
class ClusterSettings:
    kubeconfig: Path | None = None
    in_cluster: bool = False
    files: tuple[Path, ...] = ()  # the embedded mode's --cluster files
    # This replica, as the reservations it writes and the Lease it takes name it.
    holder: str = field(default_factory=_holder)
    housekeeping_interval: float = 30.0
    pod_ttl: float = DEFAULT_POD_TTL
    watch_stall_timeout: float = WatchSettings().stall_timeout

    @property
    def embedded(self) -> bool:
        return self.kubeconfig is None and not self.in_cluster


@dataclass(frozen=True)
class FabricSettings:
    manager: str = "none"  # a Redfish service URL, "embedded" (the built-in simulator) or "none"
    credentials: Path | None = None
    ca: Path | None = None
    refresh: float = 5.0
    max_response: int = DEFAULT_MAX_RESPONSE
    # The reconciler's own defaults (webhook/domain/fabric_plan.py), not a copy of their numbers.
    timeouts: Timeouts = field(default_factory=Timeouts)

    @property
    def kind(self) -> FabricKind:
        """Which fabric manager ``--fabric`` names, read in this one place."""
        return fabric_kind(self.manager)


FabricKind = Literal["none", "embedded", "redfish"]


def fabric_kind(manager: str) -> FabricKind:
    """``--fabric``'s value as a kind; "redfish" only for an http(s) URL (settings refuse anything else)."""
    if manager in ("none", "embedded"):
        return cast(FabricKind, manager)
    return "redfish"


@dataclass(frozen=True)
class LogSettings:
    format: str = "plain"
    level: str = "info"
    access: bool = False  # a line per HTTP request


@dataclass(frozen=True)
class Settings:
    server: ServerSettings = field(default_factory=ServerSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    fabric: FabricSettings = field(default_factory=FabricSettings)
    log: LogSettings = field(default_factory=LogSettings)
    policy: Policy = field(default_factory=Policy)

    def redacted(self) -> dict[str, Any]:
        """For the start-up log line: key paths, never keys; the --fabric URL without its userinfo."""
        out = asdict(self)
        out["fabric"]["manager"] = redact_url(self.fabric.manager)
        return {group: _printable(values) for group, values in out.items()}


def _printable(value: Any) -> Any:
    """``value`` with every Path in it a string, for a log line."""
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return type(value)(_printable(v) for v in value)
    return str(value) if isinstance(value, Path) else value
