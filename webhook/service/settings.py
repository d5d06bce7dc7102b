"""Settings for ``imex-webhook serve``: read once at start-up from the command line, then frozen."""

from __future__ import annotations

import argparse
import os
import re
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from webhook.adapters.embedded import DEFAULT_POD_TTL
from webhook.adapters.kube.watch_settings import WatchSettings
from webhook.adapters.redfish.limits import DEFAULT_MAX_RESPONSE
from webhook.domain.fabric_plan import Timeouts
from webhook.domain.limits import redact_url
from webhook.domain.policy import MIN_TTL, PERMIT_MAX_WAIT, Policy
from webhook.errors import SettingsError
from webhook.http.app import DEFAULT_MAX_BODY
from webhook.service.callers import OPERATOR_SUBJECT, SCHEDULER_SUBJECT

__all__ = ["Settings", "SettingsError", "add_arguments", "from_args"]

DEFAULT_BIND = "127.0.0.1:8443"
# kube-scheduler's default extender httpTimeout is 5 s; the bind budget (attach + binding) must stay under
# the configured httpTimeout, and gunicorn's worker timeout above both so a slow bind is never killed.
DEFAULT_BIND_BUDGET = 20.0
WORKER_TIMEOUT = 120
# Deadlines for a client to finish each part of a request (webhook.service.worker). kube-scheduler and
# kube-apiserver send a request in one go over a kept-alive connection, so these only ever cut off
# clients that stall; the body deadline leaves room for a 40 MiB NodeList on a slow link.
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_WRITE_TIMEOUT = 30.0
# Past either cap a new connection closes the oldest idle one (docs/HARDENING.md, "Connection limits").
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_MAX_CONNECTIONS_PER_SOURCE = 256
KEEPALIVE = 75.0  # kube-scheduler and kube-apiserver keep connections open between calls
# Request bytes held for requests still arriving, all connections together (None: the default below).
MIN_MAX_BUFFERED = 256 * 1024 * 1024
LOG_FORMATS = ("plain", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
# Upper bounds of the numeric flags: far above any sensible value, below those that break (a wait of 1e10 s
# overflows the clock; a 10**30-byte body limit is no limit).
MAX_THREADS = 1024
MAX_BODY_LIMIT = 1024 ** 3
MAX_SECONDS = 86400.0
# Kubernetes names (k8s.io/apimachinery validation): a DNS-1123 subdomain (scheduler profiles, DeviceClasses,
# label key prefixes) and the name part of a qualified name (label keys).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
SUBDOMAIN_RULE = ("a DNS-1123 subdomain: at most 253 lower-case letters, digits, '-' and '.', beginning and ending "
                  "with a letter or digit")
LABEL_KEY_RULE = ("a Kubernetes label key: [PREFIX/]NAME, NAME at most 63 letters, digits, '-', '_' and '.', "
                  "beginning and ending with a letter or digit, PREFIX a DNS-1123 subdomain")


def default_max_buffered(max_body: int) -> int:
    return max(4 * max_body, MIN_MAX_BUFFERED)


def default_tls_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "imex-webhook" / "tls"


@dataclass(frozen=True)
class Settings:
    bind: str = DEFAULT_BIND
    workers: int = 1
    threads: int = 8
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_dir: Path | None = None
    client_ca: Path | None = None
    # Subjects (CN or a DNS/URI SAN) of the client certificates that may call the extender verbs and read the
    # cluster map (webhook.service.callers).
    client_subjects: tuple[str, ...] = (SCHEDULER_SUBJECT,)
    inspect_subjects: tuple[str, ...] = (OPERATOR_SUBJECT,)
    service_name: str = "imex-webhook"
    namespace: str = "imex-system"
    kubeconfig: Path | None = None
    in_cluster: bool = False
    cluster_files: tuple[Path, ...] = ()
    fabric: str = "none"
    fabric_credentials: Path | None = None
    fabric_ca: Path | None = None
    fabric_refresh: float = 5.0
    fabric_max_response: int = DEFAULT_MAX_RESPONSE
    # The reconciler's own defaults (webhook/domain/fabric_plan.py), not a copy of their numbers.
    attach_timeout: float = Timeouts().attach
    orphan_grace: float = Timeouts().orphan_grace
    max_body: int = DEFAULT_MAX_BODY
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    exit_with_parent: bool = False
    max_buffered: int | None = None
    # Connections (webhook.service.conn_limits) and the probe listener (plain HTTP; "" for none).
    probe_bind: str = ""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_source: int = DEFAULT_MAX_CONNECTIONS_PER_SOURCE
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    bind_budget: float = DEFAULT_BIND_BUDGET
    housekeeping_interval: float = 30.0
    pod_ttl: float = DEFAULT_POD_TTL
    watch_stall_timeout: float = WatchSettings().stall_timeout
    log_format: str = "plain"
    log_level: str = "info"
    access_log: bool = False
    holder: str = field(default_factory=lambda: f"{socket.gethostname()}/{os.getpid()}")
    policy: Policy = field(default_factory=Policy)

    @property
    def embedded(self) -> bool:
        return self.kubeconfig is None and not self.in_cluster

    def redacted(self) -> dict[str, Any]:
        """For the start-up log line: key paths, never keys; the --fabric URL without its userinfo."""
        out = asdict(self)
        out["policy"] = asdict(self.policy)
        out["fabric"] = redact_url(self.fabric)
        return {k: str(v) if isinstance(v, Path) else v for k, v in out.items()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``serve``; every default is the one :class:`Settings` (or :class:`Policy`) holds."""
    d, policy = Settings, Policy()
    net = parser.add_argument_group("server")
    net.add_argument("--bind", default=d.bind, help="HOST:PORT to listen on (default %(default)s)")
    net.add_argument("--workers", type=int, default=d.workers,
                     help="gunicorn worker processes: 1, the only value accepted (each worker would hold its own "
                          "caches and state); scale with replicas in Kubernetes mode, --threads in one process")
    net.add_argument("--threads", type=int, default=d.threads, help="threads per worker (gthread; default %(default)s)")
    net.add_argument("--max-body", type=int, default=d.max_body,
                     help="largest request body in bytes (default %(default)s, room for a 5,000-node NodeList)")
    net.add_argument("--bind-budget", type=float, default=d.bind_budget,
                     help="seconds /bind may spend (attach + binding); keep below the extender httpTimeout")
    net.add_argument("--handshake-timeout", type=float, default=d.handshake_timeout, metavar="S",
                     help="seconds a client has for the TLS handshake (default %(default)s)")
    net.add_argument("--header-timeout", type=float, default=d.header_timeout, metavar="S",
                     help="seconds a client has to send a request head (default %(default)s)")
    net.add_argument("--body-timeout", type=float, default=d.body_timeout, metavar="S",
                     help="seconds a client has to send a request body after its head (default %(default)s)")
    net.add_argument("--max-buffered", type=int, default=d.max_buffered, metavar="BYTES",
                     help="request bytes held for requests still arriving, all connections together; beyond it "
                          "their bodies wait (default: 4 x --max-body, at least 256 MiB)")
    net.add_argument("--probe-bind", default=d.probe_bind, metavar="HOST:PORT",
                     help="also serve /healthz, /readyz and /metrics, and nothing else, over plain HTTP here, with "
                          "their own connections and threads (default: none)")
    net.add_argument("--max-connections", type=int, default=d.max_connections, metavar="N",
                     help="connections held on --bind; past it a new one closes the oldest idle one "
                          "(default %(default)s, fewer if the descriptor limit is low)")
    net.add_argument("--max-connections-per-source", type=int, default=d.max_connections_per_source, metavar="N",
                     help="connections held on --bind from one address; past it a new one closes that address's "
                          "oldest idle one (default %(default)s)")
    net.add_argument("--write-timeout", type=float, default=d.write_timeout, metavar="S",
                     help="seconds a client has to read a whole response (default %(default)s)")
    net.add_argument("--access-log", action="store_true", help="log every HTTP request")
    net.add_argument("--exit-with-parent", action="store_true",
                     help="stop when the process that started serve exits (for tools that run it as a child)")
    tls = parser.add_argument_group("TLS")
    tls.add_argument("--tls-cert", type=Path, help="serving certificate (PEM); with --tls-key")
    tls.add_argument("--tls-key", type=Path, help="serving key (PEM); with --tls-cert")
    tls.add_argument("--tls-dir", type=Path,
                     help="directory with ca.crt/tls.crt/tls.key, created if absent "
                          f"(default without --tls-cert: {default_tls_dir()})")
    tls.add_argument("--client-ca", type=Path, metavar="FILE",
                     help="CA of the clients that may call /filter, /prioritize, /bind and /preempt (the "
                          "scheduler's client certificate); without it those verbs answer any caller")
    tls.add_argument("--client-subject", action="append", metavar="NAME",
                     help="subject (CN, DNS or URI SAN) of a client certificate that may call the extender verbs; "
                          f"repeatable (default {', '.join(d.client_subjects)}, the scheduler's)")
    tls.add_argument("--inspect-subject", action="append", metavar="NAME",
                     help="subject of a client certificate that may read /inspect and /ui (loopback, as kubectl "
                          f"port-forward arrives, may too); repeatable (default {', '.join(d.inspect_subjects)})")
    tls.add_argument("--service-name", default=d.service_name, help="Service name for the certificate SANs")
    tls.add_argument("--namespace", default=d.namespace, help="namespace for the certificate SANs")
    src = parser.add_argument_group("cluster state")
    src.add_argument("--kubeconfig", type=Path, help="use the Kubernetes API from this kubeconfig")
    src.add_argument("--in-cluster", action="store_true", help="use the in-cluster service account")
    src.add_argument("--cluster", type=Path, action="append", default=[], metavar="FILE",
                     help="embedded mode: Kubernetes objects (YAML/JSON, List or multi-document); repeatable")
    src.add_argument("--fabric", default=d.fabric,
                     help="fabric manager: a Redfish service URL, 'embedded' (the built-in simulator) or 'none'")
    src.add_argument("--fabric-credentials", type=Path, metavar="FILE",
                     help="Redfish credentials: 'user:password' or YAML {username, password}")
    src.add_argument("--fabric-ca", type=Path, metavar="FILE", help="CA that signed the Redfish service's certificate")
    src.add_argument("--fabric-refresh", type=float, default=d.fabric_refresh,
                     help="seconds between fabric inventory refreshes and reconcile rounds (default %(default)s)")
    src.add_argument("--fabric-max-response", type=int, default=d.fabric_max_response, metavar="BYTES",
                     help="largest Redfish reply body read; a larger one is refused and its connection closed "
                          "(default %(default)s)")
    src.add_argument("--attach-timeout", type=float, default=d.attach_timeout,
                     help="seconds from attach start to Ready before an attach is rolled back (default %(default)s)")
    src.add_argument("--orphan-grace", type=float, default=d.orphan_grace,
                     help="seconds a composed block no attachment accounts for is left alone before it is "
                          "detached (default %(default)s)")
    src.add_argument("--watch-stall-timeout", type=float, default=d.watch_stall_timeout,
                     help="Kubernetes mode: seconds a watch may make no progress (no list, event, bookmark or "
                          "re-watch; an idle open watch is not stalled) before /readyz turns false "
                          "(default %(default)s)")
    pol = parser.add_argument_group("policy")
    pol.add_argument("--domain-label", action="append", default=[], metavar="KEY",
                     help="node label naming the domain; repeatable, first present wins "
                          f"(default {', '.join(policy.domain_labels)})")
    pol.add_argument("--channel-device-class", action="append", default=[], metavar="CLASS",
                     help="DeviceClass of IMEX channels; repeatable "
                          f"(default {', '.join(policy.channel_device_classes)})")
    pol.add_argument("--scheduler-name", default=policy.scheduler_name, help="the dedicated scheduler profile")
    pol.add_argument("--reservation-ttl", type=float, default=policy.reservation_ttl,
                     help="seconds a reservation lives with no member placed (default %(default)s; at least "
                          f"{MIN_TTL:g}: gangs wait at Permit up to {PERMIT_MAX_WAIT:g}s before they bind)")
    pol.add_argument("--housekeeping-interval", type=float, default=d.housekeeping_interval,
                     help="seconds between timed housekeeping rounds, besides the round after every cache change: "
                          "expired reservations, the grace for groups this replica never saw placed, dead "
                          "promises (default %(default)s)")
    pol.add_argument("--pod-ttl", type=float, default=d.pod_ttl,
                     help="embedded mode: seconds an unbound pod learnt from requests is kept after the last "
                          "request naming it (default %(default)s)")
    out = parser.add_argument_group("logging")
    out.add_argument("--log-format", choices=LOG_FORMATS, default=d.log_format)
    out.add_argument("--log-level", choices=LOG_LEVELS, default=d.log_level)


def _one_worker(ns: argparse.Namespace) -> str:
    if ns.kubeconfig is not None or ns.in_cluster:
        return (f"--workers {ns.workers}: Kubernetes mode runs one worker per replica, since each worker would "
                "hold its own caches, watches and choose-and-record lock; scale with Deployment replicas, "
                "which share state through the API server (more threads: --threads)")
    return (f"--workers {ns.workers}: the embedded cluster lives in one process, since each worker would hold "
            "its own copy of it, bindings and reservations; use --threads for concurrency")


def _subjects(flag: str, given: list[str] | None, default: tuple[str, ...]) -> tuple[str, ...]:
    """A certificate subject is a CN or a DNS/URI SAN: printable, no spaces, at most 253 characters."""
    if not given:
        return default
    for name in given:
        if not name or len(name) > 253 or not name.isprintable() or any(c.isspace() for c in name):
            raise SettingsError(f"{flag} {name!r}: expected a certificate subject (a CN or a DNS/URI SAN: "
                                "1-253 printable characters, no spaces)")
    return tuple(dict.fromkeys(given))


def is_dns_subdomain(name: str) -> bool:
    return len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) is not None


def is_label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    return (len(name) <= 63 and _QUALIFIED_NAME.fullmatch(name) is not None
            and (not slash or is_dns_subdomain(prefix)))


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:80] + "...")


def _count(number: int) -> str:
    digits = str(number)
    return digits if len(digits) <= 20 else digits[:20] + "..."


def _names(ns: argparse.Namespace) -> None:
    for key in ns.domain_label:
        if not is_label_key(key):
            raise SettingsError(f"--domain-label {_shown(key)}: expected {LABEL_KEY_RULE}")
    for name in ns.channel_device_class:
        if not is_dns_subdomain(name):
            raise SettingsError(f"--channel-device-class {_shown(name)}: expected {SUBDOMAIN_RULE}")
    if not is_dns_subdomain(ns.scheduler_name):
        raise SettingsError(f"--scheduler-name {_shown(ns.scheduler_name)}: expected {SUBDOMAIN_RULE}, as "
                            "kube-scheduler requires of a profile's schedulerName")


def _seconds(ns: argparse.Namespace) -> None:
    """The fabric and watch times: each flag in its range, named alone."""
    for flag, seconds, low, high in (("--fabric-refresh", ns.fabric_refresh, "(", 3600.0),
                                     ("--attach-timeout", ns.attach_timeout, "(", MAX_SECONDS),
                                     ("--orphan-grace", ns.orphan_grace, "[", MAX_SECONDS),
                                     ("--watch-stall-timeout", ns.watch_stall_timeout, "(", MAX_SECONDS)):
        if not (0 < seconds if low == "(" else 0 <= seconds) or not seconds <= high:
            raise SettingsError(f"{flag} {seconds:g}: expected seconds in {low}0, {high:g}]")
    if not 0 < ns.bind_budget < WORKER_TIMEOUT:
        raise SettingsError(f"--bind-budget {ns.bind_budget:g}: expected seconds in (0, {WORKER_TIMEOUT}), under "
                            "the worker timeout (and the extender's httpTimeout)")
    if not ns.reservation_ttl <= MAX_SECONDS:  # below MIN_TTL: Policy.ttl_problems says why
        raise SettingsError(f"--reservation-ttl {ns.reservation_ttl:g}: expected seconds in [{MIN_TTL:g}, "
                            f"{MAX_SECONDS:g}]")


def from_args(ns: argparse.Namespace) -> Settings:
    if (ns.tls_cert is None) != (ns.tls_key is None):
        raise SettingsError("--tls-cert and --tls-key go together")
    if ns.tls_cert is not None and ns.tls_dir is not None:
        raise SettingsError("give either --tls-cert/--tls-key or --tls-dir, not both")
    if ns.kubeconfig is not None and ns.in_cluster:
        raise SettingsError("give either --kubeconfig or --in-cluster, not both")
    if ns.cluster and (ns.kubeconfig is not None or ns.in_cluster):
        raise SettingsError("--cluster files are for the embedded mode; drop them or drop --kubeconfig/--in-cluster")
    if ns.workers < 1 or ns.threads < 1:
        raise SettingsError("--workers and --threads must be at least 1")
    if ns.threads > MAX_THREADS:
        raise SettingsError(f"--threads {_count(ns.threads)}: at most {MAX_THREADS} (each is an operating-system "
                            "thread)")
    if ns.workers > 1:
        raise SettingsError(_one_worker(ns))
    _, sep, port = ns.bind.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit():
        raise SettingsError(f"--bind {ns.bind!r}: expected HOST:PORT")
    if len(port.lstrip("0")) > 5 or not 1 <= int(port) <= 65535:
        shown = port if len(port) <= 12 else port[:12] + "..."
        raise SettingsError(f"--bind {ns.bind[:60]!r}: port {shown} is out of range (1-65535)")
    if not 1 <= ns.max_body <= MAX_BODY_LIMIT:
        raise SettingsError(f"--max-body {_count(ns.max_body)}: expected bytes in [1, 1 GiB]")
    if ns.max_buffered is not None and ns.max_buffered < ns.max_body:
        raise SettingsError(f"--max-buffered {ns.max_buffered}: must hold at least one body (--max-body "
                            f"{ns.max_body})")
    for flag, seconds in (("--handshake-timeout", ns.handshake_timeout), ("--header-timeout", ns.header_timeout),
                          ("--body-timeout", ns.body_timeout), ("--write-timeout", ns.write_timeout)):
        if not 0 < seconds <= 3600:
            raise SettingsError(f"{flag} {seconds:g}: expected seconds in (0, 3600]")
    if ns.max_connections < 1 or not 1 <= ns.max_connections_per_source <= ns.max_connections:
        raise SettingsError(f"--max-connections {ns.max_connections}, --max-connections-per-source "
                            f"{ns.max_connections_per_source}: expected 1 <= per source <= total")
    if ns.probe_bind:
        _, sep, port = ns.probe_bind.rpartition(":")
        if not sep or not port.isascii() or not port.isdigit() or len(port) > 5 or not 1 <= int(port) <= 65535:
            raise SettingsError(f"--probe-bind {ns.probe_bind[:60]!r}: expected HOST:PORT")
        if ns.probe_bind == ns.bind:
            raise SettingsError(f"--probe-bind {ns.probe_bind}: must differ from --bind")
    for path in ns.cluster:
        if not path.is_file():
            raise SettingsError(f"--cluster {path}: no such file")
    if ns.fabric not in ("none", "embedded") and not ns.fabric.startswith(("http://", "https://")):
        raise SettingsError(f"--fabric {ns.fabric!r}: expected a URL, 'embedded' or 'none'")
    if ns.fabric.startswith(("http://", "https://")) and ns.fabric_credentials is None:
        raise SettingsError("--fabric URL needs --fabric-credentials FILE ('user:password' or YAML)")
    if not 0 < ns.housekeeping_interval <= 3600:
        raise SettingsError(f"--housekeeping-interval {ns.housekeeping_interval:g}: expected seconds in (0, 3600]")
    if not 0 < ns.pod_ttl <= 86400:
        raise SettingsError(f"--pod-ttl {ns.pod_ttl:g}: expected seconds in (0, 86400]")
    _seconds(ns)
    if not 64 * 1024 <= ns.fabric_max_response <= 1024 ** 3:
        raise SettingsError(f"--fabric-max-response {ns.fabric_max_response}: expected bytes in [65536, 1 GiB]")
    _names(ns)
    defaults = Policy()
    policy = Policy(
        domain_labels=tuple(ns.domain_label) or defaults.domain_labels,
        channel_device_classes=tuple(ns.channel_device_class) or defaults.channel_device_classes,
        scheduler_name=ns.scheduler_name,
        reservation_ttl=ns.reservation_ttl,
    )
    if policy.ttl_problems():
        raise SettingsError(f"--reservation-ttl {ns.reservation_ttl:g}: " + "; ".join(policy.ttl_problems()))
    tls_dir = ns.tls_dir if ns.tls_dir is not None or ns.tls_cert is not None else default_tls_dir()
    return Settings(
        bind=ns.bind, workers=ns.workers, threads=ns.threads, tls_cert=ns.tls_cert, tls_key=ns.tls_key,
        tls_dir=tls_dir, client_ca=ns.client_ca, service_name=ns.service_name, namespace=ns.namespace,
        client_subjects=_subjects("--client-subject", ns.client_subject, Settings.client_subjects),
        inspect_subjects=_subjects("--inspect-subject", ns.inspect_subject, Settings.inspect_subjects),
        kubeconfig=ns.kubeconfig, in_cluster=ns.in_cluster, cluster_files=tuple(ns.cluster), fabric=ns.fabric,
        fabric_credentials=ns.fabric_credentials, fabric_ca=ns.fabric_ca, fabric_refresh=ns.fabric_refresh,
        fabric_max_response=ns.fabric_max_response,
        attach_timeout=ns.attach_timeout, orphan_grace=ns.orphan_grace,
        max_body=ns.max_body, handshake_timeout=ns.handshake_timeout, header_timeout=ns.header_timeout,
        body_timeout=ns.body_timeout, exit_with_parent=ns.exit_with_parent, max_buffered=ns.max_buffered,
        probe_bind=ns.probe_bind, max_connections=ns.max_connections,
        max_connections_per_source=ns.max_connections_per_source, write_timeout=ns.write_timeout,
        bind_budget=ns.bind_budget, log_format=ns.log_format, log_level=ns.log_level,
        access_log=ns.access_log, policy=policy, housekeeping_interval=ns.housekeeping_interval,
        pod_ttl=ns.pod_ttl,
        watch_stall_timeout=ns.watch_stall_timeout,
    )
