"""The flags of ``imex-webhook serve``: every default is the one :class:`.groups.Settings` holds (or
:class:`webhook.domain.policy.Policy`), shown in ``serve --help``."""

from __future__ import annotations

import argparse
from pathlib import Path

from webhook.domain.health import HEALTH_POLICIES
from webhook.domain.policy import MIN_TTL, PERMIT_MAX_WAIT
from webhook.service.settings.groups import Settings, default_tls_dir

LOG_FORMATS = ("plain", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag of ``serve``, one argument group at a time, with the defaults of one ``Settings()``."""
    d = Settings()
    _server(parser.add_argument_group("server"), d)
    _tls(parser.add_argument_group("TLS"), d)
    _cluster_state(parser.add_argument_group("cluster state"), d)
    _policy(parser.add_argument_group("policy"), d)
    _logging(parser.add_argument_group("logging"), d)


def _server(net: argparse._ArgumentGroup, d: Settings) -> None:
    server, limits = d.server, d.limits
    net.add_argument("--bind", default=server.bind, help="HOST:PORT to listen on (default %(default)s)")
    net.add_argument("--workers", type=int, default=server.workers,
                     help="gunicorn worker processes: 1, the only value accepted (each worker would hold its own "
                          "caches and state); scale with replicas in Kubernetes mode, --threads in one process")
    net.add_argument("--threads", type=int, default=server.threads,
                     help="threads per worker (gthread; default %(default)s)")
    net.add_argument("--max-body", type=int, default=limits.max_body,
                     help="largest request body in bytes (default %(default)s, room for a 5,000-node NodeList)")
    net.add_argument("--bind-budget", type=float, default=limits.bind_budget,
                     help="seconds /bind may spend (attach + binding); keep below the extender httpTimeout")
    net.add_argument("--handshake-timeout", type=float, default=limits.handshake_timeout, metavar="S",
                     help="seconds a client has for the TLS handshake (default %(default)s)")
    net.add_argument("--header-timeout", type=float, default=limits.header_timeout, metavar="S",
                     help="seconds a client has to send a request head (default %(default)s)")
    net.add_argument("--body-timeout", type=float, default=limits.body_timeout, metavar="S",
                     help="seconds a client has to send a request body after its head (default %(default)s)")
    net.add_argument("--max-buffered", type=int, default=limits.max_buffered, metavar="BYTES",
                     help="request bytes held for requests still arriving, all connections together; beyond it "
                          "their bodies wait (default: 4 x --max-body, at least 256 MiB)")
    net.add_argument("--probe-bind", default=server.probe_bind, metavar="HOST:PORT",
                     help="also serve /healthz, /readyz and /metrics, and nothing else, over plain HTTP here, with "
                          "their own connections and threads (default: none)")
    net.add_argument("--max-connections", type=int, default=limits.max_connections, metavar="N",
                     help="connections held on --bind; past it a new one closes the oldest idle one "
                          "(default %(default)s, fewer if the descriptor limit is low)")
    net.add_argument("--max-connections-per-source", type=int, default=limits.max_connections_per_source,
                     metavar="N",
                     help="connections held on --bind from one address; past it a new one closes that address's "
                          "oldest idle one (default %(default)s)")
    net.add_argument("--write-timeout", type=float, default=limits.write_timeout, metavar="S",
                     help="seconds a client has to read a whole response (default %(default)s)")
    net.add_argument("--stall-timeout", type=float, default=None, metavar="S",
                     help="seconds a request on --bind may wait for a thread and its answer before /healthz fails, "
                          "so that the kubelet restarts a replica whose service port no longer answers; above "
                          f"--bind-budget (default {limits.stall_timeout:g}, or twice --bind-budget if that is more)")
    net.add_argument("--access-log", action="store_true", help="log every HTTP request")
    net.add_argument("--exit-with-parent", action="store_true",
                     help="stop when the process that started serve exits (for tools that run it as a child)")


def _tls(tls_flags: argparse._ArgumentGroup, d: Settings) -> None:
    tls = d.tls
    tls_flags.add_argument("--tls-cert", type=Path, help="serving certificate (PEM); with --tls-key")
    tls_flags.add_argument("--tls-key", type=Path, help="serving key (PEM); with --tls-cert")
    tls_flags.add_argument("--tls-dir", type=Path,
                           help="directory with ca.crt/tls.crt/tls.key, created if absent "
                                f"(default without --tls-cert: {default_tls_dir()})")
    tls_flags.add_argument("--client-ca", type=Path, metavar="FILE",
                           help="CA of the clients that may call /filter, /prioritize, /bind and /preempt (the "
                                "scheduler's client certificate); without it those verbs answer any caller")
    tls_flags.add_argument("--client-subject", action="append", metavar="NAME",
                           help="subject (CN, DNS or URI SAN) of a client certificate that may call the extender "
                                f"verbs; repeatable (default {', '.join(tls.client_subjects)}, the scheduler's)")
    tls_flags.add_argument("--inspect-subject", action="append", metavar="NAME",
                           help="subject of a client certificate that may read /inspect and /ui (loopback, as "
                                "kubectl port-forward arrives, may too); repeatable (default "
                                f"{', '.join(tls.inspect_subjects)})")
    tls_flags.add_argument("--no-loopback-operators", dest="loopback_operators", action="store_false",
                           default=tls.loopback_operators,
                           help="do not let loopback peers read /inspect and /ui without an operator's certificate: "
                                "needed behind a service-mesh sidecar, through which every caller arrives from "
                                "loopback (kubectl port-forward then needs the certificate too)")
    tls_flags.add_argument("--service-name", default=tls.service_name, help="Service name for the certificate SANs")
    tls_flags.add_argument("--namespace", default=tls.namespace, help="namespace for the certificate SANs")


def _cluster_state(src: argparse._ArgumentGroup, d: Settings) -> None:
    cluster, fabric = d.cluster, d.fabric
    src.add_argument("--kubeconfig", type=Path, help="use the Kubernetes API from this kubeconfig")
    src.add_argument("--in-cluster", action="store_true", help="use the in-cluster service account")
    src.add_argument("--cluster", type=Path, action="append", default=[], metavar="FILE",
                     help="embedded mode: Kubernetes objects (YAML/JSON, List or multi-document); repeatable")
    src.add_argument("--fabric", default=fabric.manager,
                     help="fabric manager: a Redfish service URL, 'embedded' (the built-in simulator) or 'none'")
    src.add_argument("--fabric-credentials", type=Path, metavar="FILE",
                     help="Redfish credentials: 'user:password' or YAML {username, password}")
    src.add_argument("--fabric-ca", type=Path, metavar="FILE", help="CA that signed the Redfish service's certificate")
    src.add_argument("--fabric-refresh", type=float, default=fabric.refresh,
                     help="seconds between fabric inventory refreshes and reconcile rounds (default %(default)s)")
    src.add_argument("--fabric-max-response", type=int, default=fabric.max_response, metavar="BYTES",
                     help="largest Redfish reply body read; a larger one is refused and its connection closed "
                          "(default %(default)s)")
    src.add_argument("--attach-timeout", type=float, default=fabric.timeouts.attach,
                     help="seconds from attach start to Ready before an attach is rolled back (default %(default)s)")
    src.add_argument("--orphan-grace", type=float, default=fabric.timeouts.orphan_grace,
                     help="seconds a composed block no attachment accounts for is left alone before it is "
                          "detached (default %(default)s)")
    src.add_argument("--watch-stall-timeout", type=float, default=cluster.watch_stall_timeout,
                     help="Kubernetes mode: seconds a watch may make no progress (no list, event, bookmark or "
                          "re-watch; an idle open watch is not stalled) before /readyz turns false "
                          "(default %(default)s)")


def _policy(pol: argparse._ArgumentGroup, d: Settings) -> None:
    cluster, policy = d.cluster, d.policy
    pol.add_argument("--domain-label", action="append", default=[], metavar="KEY",
                     help="node label naming the domain; repeatable, first present wins "
                          f"(default {', '.join(policy.domain_labels)})")
    pol.add_argument("--channel-device-class", action="append", default=[], metavar="CLASS",
                     help="DeviceClass of IMEX channels; repeatable "
                          f"(default {', '.join(policy.channel_device_classes)})")
    pol.add_argument("--scheduler-name", default=policy.scheduler_name, help="the dedicated scheduler profile")
    pol.add_argument("--fabric-health-policy", choices=HEALTH_POLICIES, default=policy.fabric_health,
                     help="a domain whose NVLink fabric the node agents report degraded is chosen for a new "
                          "group: avoid (only when no healthy domain fits), allow (like any other) or refuse "
                          "(never); nodes reported unhealthy, not Ready or tainted for their conditions take no "
                          "group member whatever this says (default %(default)s)")
    pol.add_argument("--exclusive-domains", action="store_true", default=policy.exclusive_domains,
                     help="give every ComputeDomain an NVLink domain no other ComputeDomain uses, as the "
                          "annotation imex-webhook.io/exclusive-domain=true does for one")
    pol.add_argument("--pack-plain-gpu-pods", action="store_true", default=policy.pack_plain_gpu_pods,
                     help="admission sends GPU pods in no group to the dedicated profile, whose extender packs them "
                          "into NVLink domains already in use and keeps them off whole free domains and composable "
                          "nodes; the webhook must see them: add the kustomize component "
                          "manifests/components/pack-plain-gpu-pods")
    pol.add_argument("--max-reserved-gpus-per-namespace", metavar="GPUS|PERCENT",
                     default=f"{policy.max_reserved_share * 100:g}%",
                     help="GPUs a namespace's groups may hold for pods not created yet (members to come, spare "
                          "nodes, the rest of an exclusive domain), as a number or a share of the GPUs in NVLink "
                          "domains; where an unscoped ResourceQuota bounds the namespace's GPUs, what it still "
                          "allows counts instead (default %(default)s)")
    pol.add_argument("--block-label", action="append", default=[], metavar="KEY",
                     help="node label of the network block above the NVLink domains (a spine, a switch block); "
                          "repeatable, lowest level first: all segments of a segmented job land under one value "
                          "of the lowest level that fits, else of the next (default: none)")
    pol.add_argument("--max-holds", type=int, default=policy.max_holds, metavar="N",
                     help="how many of the groups that wait longest (pod priority, then age) may hold NVLink domains "
                          "at their earliest start, computed from the running groups' walltimes, so small jobs stop "
                          "taking the room a large one waits for; a held domain still takes groups that end before "
                          "the hold starts (backfill); 0 turns holds off (default %(default)s)")
    pol.add_argument("--hold-after", type=float, default=policy.hold_after, metavar="SECONDS",
                     help="seconds a group waits before a domain is held for it (default %(default)s)")
    pol.add_argument("--hold-timeout", type=float, default=policy.hold_timeout, metavar="SECONDS",
                     help="seconds a hold lives unless its group starts (default %(default)s)")
    pol.add_argument("--hold-yield-after", type=float, default=policy.hold_yield_after, metavar="SECONDS",
                     help="while a group that needs one NVLink domain has waited this long, no hold is made and the "
                          "holds made are let go, so large jobs are held for in the lulls rather than with the room "
                          "the single-domain groups wait for; 0: holds never give way (default %(default)s)")
    pol.add_argument("--hold-yield-until", type=float, default=policy.hold_yield_until, metavar="SECONDS",
                     help="a job that has waited this long holds on whatever else waits, so it never starves "
                          "(default %(default)s)")
    pol.add_argument("--backfill-walltimes", choices=("any", "enforced"),
                     default="enforced" if policy.backfill_enforced_only else "any",
                     help="which walltimes let a group backfill into a held domain: any stated one, or only those "
                          "Kubernetes enforces (activeDeadlineSeconds, Kueue's maximum execution time), not the "
                          "advisory annotation imex-webhook.io/max-runtime a tenant may understate "
                          "(default %(default)s)")
    pol.add_argument("--reservation-ttl", type=float, default=policy.reservation_ttl,
                     help="seconds a reservation lives with no member placed (default %(default)s; at least "
                          f"{MIN_TTL:g}: gangs wait at Permit up to {PERMIT_MAX_WAIT:g}s before they bind)")
    pol.add_argument("--housekeeping-interval", type=float, default=cluster.housekeeping_interval,
                     help="seconds between timed housekeeping rounds, besides the round after every cache change: "
                          "expired reservations, the grace for groups this replica never saw placed, dead "
                          "promises (default %(default)s)")
    pol.add_argument("--pod-ttl", type=float, default=cluster.pod_ttl,
                     help="embedded mode: seconds an unbound pod learnt from requests is kept after the last "
                          "request naming it (default %(default)s)")


def _logging(out: argparse._ArgumentGroup, d: Settings) -> None:
    out.add_argument("--log-format", choices=LOG_FORMATS, default=d.log.format)
    out.add_argument("--log-level", choices=LOG_LEVELS, default=d.log.level)
