"""From ``serve``'s parsed command line to :class:`.groups.Settings`: every rule checked first, each refusal
one line naming the flag (a :class:`webhook.errors.SettingsError`). The files it names are opened later,
by :mod:`webhook.service.preflight`."""

from __future__ import annotations

import argparse
import re
from typing import Any

from webhook.domain.fabric_plan import Timeouts
from webhook.domain.policy import MAX_HOLDS, MIN_TTL, Policy
from webhook.errors import SettingsError
from webhook.service.settings.groups import (
    DEFAULT_STALL_TIMEOUT,
    WORKER_TIMEOUT,
    ClusterSettings,
    FabricSettings,
    LimitSettings,
    LogSettings,
    ServerSettings,
    Settings,
    TlsSettings,
    default_tls_dir,
)

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


MAX_BLOCK_LEVELS = 8  # network levels above a domain; real fabrics have two or three


def _names(ns: argparse.Namespace) -> None:
    for key in ns.domain_label:
        if not is_label_key(key):
            raise SettingsError(f"--domain-label {_shown(key)}: expected {LABEL_KEY_RULE}")
    for key in ns.block_label:
        if not is_label_key(key):
            raise SettingsError(f"--block-label {_shown(key)}: expected {LABEL_KEY_RULE}")
    if len(ns.block_label) > MAX_BLOCK_LEVELS:
        raise SettingsError(f"--block-label given {len(ns.block_label)} times: at most {MAX_BLOCK_LEVELS} levels")
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
    if ns.stall_timeout is None:
        ns.stall_timeout = max(DEFAULT_STALL_TIMEOUT, 2 * ns.bind_budget)
    if not ns.bind_budget < ns.stall_timeout <= MAX_SECONDS:
        raise SettingsError(f"--stall-timeout {ns.stall_timeout:g}: expected seconds above --bind-budget "
                            f"({ns.bind_budget:g}), the longest a request legitimately takes, and at most "
                            f"{MAX_SECONDS:g}")
    if not 0 <= ns.max_holds <= MAX_HOLDS:
        raise SettingsError(f"--max-holds {ns.max_holds}: expected 0 (no holds) to {MAX_HOLDS}")
    if not 0 <= ns.hold_after <= MAX_SECONDS:
        raise SettingsError(f"--hold-after {ns.hold_after:g}: expected seconds in [0, {MAX_SECONDS:g}]")
    if not 60 <= ns.hold_timeout <= MAX_SECONDS:  # a hold must outlive one housekeeping round and its start's LATE
        raise SettingsError(f"--hold-timeout {ns.hold_timeout:g}: expected seconds in [60, {MAX_SECONDS:g}]")
    if not 0 <= ns.hold_yield_after <= MAX_SECONDS:
        raise SettingsError(f"--hold-yield-after {ns.hold_yield_after:g}: expected seconds in [0, {MAX_SECONDS:g}] "
                            "(0: holds never give way)")
    if not ns.hold_after <= ns.hold_yield_until <= MAX_SECONDS:
        raise SettingsError(f"--hold-yield-until {ns.hold_yield_until:g}: expected seconds in [--hold-after "
                            f"({ns.hold_after:g}), {MAX_SECONDS:g}]: a job must be held for before it stops giving way")
    if not ns.reservation_ttl <= MAX_SECONDS:  # below MIN_TTL: Policy.ttl_problems says why
        raise SettingsError(f"--reservation-ttl {ns.reservation_ttl:g}: expected seconds in [{MIN_TTL:g}, "
                            f"{MAX_SECONDS:g}]")


def _check(ns: argparse.Namespace) -> None:
    """Every rule but the names and the reservation TTL, in the order a command line is read."""
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


def _reserved_cap(raw: str) -> dict[str, Any]:
    """``--max-reserved-gpus-per-namespace``: a whole number of GPUs, or a percentage of the domains' GPUs."""
    text = raw.strip()
    number, percent = (text[:-1], True) if text.endswith("%") else (text, False)
    if not number.isascii() or not number.isdigit() or len(number) > 9 or (percent and int(number) > 100):
        raise SettingsError(f"--max-reserved-gpus-per-namespace {raw[:60]!r}: expected a number of GPUs "
                            "(0 to 999999999) or a percentage (0% to 100%)")
    if percent:
        return {"max_reserved_gpus": None, "max_reserved_share": int(number) / 100}
    return {"max_reserved_gpus": int(number)}


def _policy(ns: argparse.Namespace) -> Policy:
    _names(ns)
    defaults = Policy()
    policy = Policy(
        domain_labels=tuple(ns.domain_label) or defaults.domain_labels,
        channel_device_classes=tuple(ns.channel_device_class) or defaults.channel_device_classes,
        scheduler_name=ns.scheduler_name,
        reservation_ttl=ns.reservation_ttl,
        fabric_health=ns.fabric_health_policy,
        exclusive_domains=ns.exclusive_domains,
        pack_plain_gpu_pods=ns.pack_plain_gpu_pods,
        block_labels=tuple(ns.block_label),
        max_holds=ns.max_holds, hold_after=ns.hold_after, hold_timeout=ns.hold_timeout,
        hold_yield_after=ns.hold_yield_after, hold_yield_until=ns.hold_yield_until,
        backfill_enforced_only=ns.backfill_walltimes == "enforced",
        **_reserved_cap(ns.max_reserved_gpus_per_namespace),
    )
    if policy.ttl_problems():
        raise SettingsError(f"--reservation-ttl {ns.reservation_ttl:g}: " + "; ".join(policy.ttl_problems()))
    return policy


def from_args(ns: argparse.Namespace) -> Settings:
    _check(ns)
    policy = _policy(ns)
    defaults = TlsSettings()
    return Settings(
        server=ServerSettings(bind=ns.bind, probe_bind=ns.probe_bind, workers=ns.workers, threads=ns.threads,
                              exit_with_parent=ns.exit_with_parent),
        tls=TlsSettings(
            cert=ns.tls_cert, key=ns.tls_key,
            dir=ns.tls_dir if ns.tls_dir is not None or ns.tls_cert is not None else default_tls_dir(),
            service_name=ns.service_name, namespace=ns.namespace, client_ca=ns.client_ca,
            client_subjects=_subjects("--client-subject", ns.client_subject, defaults.client_subjects),
            inspect_subjects=_subjects("--inspect-subject", ns.inspect_subject, defaults.inspect_subjects),
            loopback_operators=ns.loopback_operators),
        limits=LimitSettings(
            max_body=ns.max_body, max_buffered=ns.max_buffered, max_connections=ns.max_connections,
            max_connections_per_source=ns.max_connections_per_source, handshake_timeout=ns.handshake_timeout,
            header_timeout=ns.header_timeout, body_timeout=ns.body_timeout, write_timeout=ns.write_timeout,
            bind_budget=ns.bind_budget, stall_timeout=ns.stall_timeout),
        cluster=ClusterSettings(kubeconfig=ns.kubeconfig, in_cluster=ns.in_cluster, files=tuple(ns.cluster),
                                housekeeping_interval=ns.housekeeping_interval, pod_ttl=ns.pod_ttl,
                                watch_stall_timeout=ns.watch_stall_timeout),
        fabric=FabricSettings(manager=ns.fabric, credentials=ns.fabric_credentials, ca=ns.fabric_ca,
                              refresh=ns.fabric_refresh, max_response=ns.fabric_max_response,
                              timeouts=Timeouts(attach=ns.attach_timeout, orphan_grace=ns.orphan_grace)),
        log=LogSettings(format=ns.log_format, level=ns.log_level, access=ns.access_log),
        policy=policy,
    )
