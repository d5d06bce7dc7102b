"""``imex-webhook serve``: gunicorn (gthread workers, TLS) serving the Flask app.

gthread keeps connections alive, so kube-scheduler and kube-apiserver pay the TLS handshake once per
connection (the sync worker re-handshakes per request and is ~4x slower). gunicorn wraps every accepted
connection with a fresh SSL context built from the certificate files, so rotated files take effect on
the next connection while in-flight requests finish on the old one.
"""

from __future__ import annotations

import gc
import logging
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from certs import files as cert_files
from certs import issue as cert_issue
from webhook.adapters import embedded as embedded_backend
from webhook.domain.fabric_plan import Timeouts
from webhook.domain.policy import Policy
from webhook.http.app import create_app
from webhook.service import fabric_wiring
from webhook.service.settings import WORKER_TIMEOUT, Settings
from webhook.state.backend import Backend
from webhook.state.cluster import ClusterStore
from webhook.state.engine import Engine

log = logging.getLogger("imex_webhook.serve")


def tls_files(settings: Settings) -> tuple[Path, Path, Path | None]:
    """(cert, key, CA or None): given files, or a --tls-dir made on first use."""
    if settings.tls_cert is not None and settings.tls_key is not None:
        return settings.tls_cert, settings.tls_key, None
    assert settings.tls_dir is not None
    host = settings.bind.rpartition(":")[0].strip("[]")
    names = ["localhost", *cert_issue.service_dns_names(settings.service_name, settings.namespace)]
    ips = ["127.0.0.1", "::1"]
    if host and host not in ("0.0.0.0", "::", "localhost") and host not in ips:
        (ips if _is_ip(host) else names).append(host)
    made = cert_files.ensure_tls_dir(settings.tls_dir, names, ips)
    verb = "created" if made.created else ("re-issued serving certificate" if made.reissued else "using")
    log.info("%s TLS in %s%s; clients trust the CA at %s", verb, settings.tls_dir,
             f" ({made.reason})" if made.reason else "", made.paths.ca_cert)
    return made.paths.cert, made.paths.key, made.paths.ca_cert


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def tls_check(cert: Path, key: Path) -> Callable[[], tuple[bool, str]]:
    def check() -> tuple[bool, str]:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            return False, f"certificate {cert} / key {key} do not load: {exc}"
        return True, f"certificate {cert}"

    return check


def build_backend(settings: Settings, store: ClusterStore) -> Backend:
    if settings.embedded:
        from webhook.adapters import embedded

        if settings.cluster_files:
            return embedded.from_files(store, list(settings.cluster_files), settings.pod_ttl)
        return embedded.from_demo(store, settings.pod_ttl)
    from webhook.adapters import kube
    from webhook.adapters.kube_watch import WatchSettings

    return kube.connect(str(settings.kubeconfig) if settings.kubeconfig else None, settings.in_cluster, store,
                        settings.holder, label_nodes=True,
                        watch=WatchSettings(stall_timeout=settings.watch_stall_timeout))


def build(settings: Settings, tls_ready: Callable[[], tuple[bool, str]] | None = None) -> tuple[Flask, Engine, Backend]:
    """Everything one worker serves: the cluster source, the engine and the app (started)."""
    policy: Policy = settings.policy
    store = ClusterStore(policy)
    backend = build_backend(settings, store)
    engine = Engine(store, backend.reservations, backend.binder, policy, holder=settings.holder,
                    bind_budget=settings.bind_budget)
    backend.start()
    app = create_app(engine, backend, settings.max_body, tls_ready) if tls_ready else \
        create_app(engine, backend, settings.max_body)
    labeller = getattr(backend, "node_labels", None)  # Kubernetes mode: imex-webhook.io/domain on nodes
    if labeller is not None:
        app.extensions["imex"].metrics.registry.register(labeller.counter)
    nodes = backend.node_objects() if isinstance(backend, embedded_backend.EmbeddedBackend) else []
    parts = fabric_wiring.start(settings.fabric, store, backend, engine, app.extensions["imex"].metrics,
                        credentials=settings.fabric_credentials, ca=settings.fabric_ca,
                        refresh=settings.fabric_refresh,
                        timeouts=Timeouts(attach=settings.attach_timeout, orphan_grace=settings.orphan_grace),
                        node_objects=nodes)
    if parts is not None:
        app.extensions["imex"].checks["fabric"] = parts.fabric.ready
    _start_housekeeping(engine, settings.housekeeping_interval)
    _freeze_when_ready(backend)
    return app, engine, backend


def _freeze_when_ready(backend: Backend) -> None:
    """Once the caches are loaded, move every object alive into the garbage collector's permanent
    generation: tens of thousands of long-lived cache objects are then never traversed again by the
    collections that per-request garbage triggers."""
    def wait() -> None:
        while not backend.ready()[0]:
            time.sleep(0.2)
        gc.collect()
        gc.freeze()
        log.info("caches loaded; %d objects moved out of the garbage collector's way", gc.get_freeze_count())

    threading.Thread(target=wait, name="gc-freeze", daemon=True).start()


def _start_housekeeping(engine: Engine, interval: float) -> None:
    def loop() -> None:
        stop = threading.Event()
        while not stop.wait(interval):
            try:
                engine.housekeep()
            except Exception:  # keep the loop alive; the next round retries
                log.exception("reservation housekeeping failed")

    threading.Thread(target=loop, name="housekeeping", daemon=True).start()


def _ssl_context(conf: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    context = default_factory()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class _Server(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: Settings, cert: Path, key: Path) -> None:
        self.settings = settings
        self.cert = cert
        self.key = key
        super().__init__()

    def load_config(self) -> None:
        s = self.settings
        workers = 1 if s.embedded else s.workers
        options: dict[str, Any] = {
            "bind": [s.bind],
            "workers": workers,
            "worker_class": "gthread",
            "threads": s.threads,
            "certfile": str(self.cert),
            "keyfile": str(self.key),
            "ssl_context": _ssl_context,
            "timeout": WORKER_TIMEOUT,
            "graceful_timeout": 30,
            # kube-scheduler and kube-apiserver keep connections open between calls.
            "keepalive": 75,
            "accesslog": "-" if s.access_log else None,
            "errorlog": "-",
            "loglevel": s.log_level,
            "proc_name": "imex-webhook",
        }
        if s.client_ca is not None:
            options["ca_certs"] = str(s.client_ca)
            options["cert_reqs"] = ssl.CERT_REQUIRED
        if "control_socket_disable" in self.cfg.settings:
            # gunicorn >= 25.1 opens a control socket in $HOME by default: a shared path that two servers on
            # one machine fight over, and a write a read-only root filesystem refuses.
            options["control_socket_disable"] = True
        for key, value in options.items():
            if value is not None:
                self.cfg.set(key, value)

    def load(self) -> Flask:
        # Runs in each worker after the fork: watch threads and caches must live in the worker.
        app, _, _ = build(self.settings, tls_check(self.cert, self.key))
        return app


def serve(settings: Settings) -> int:
    cert, key, _ = tls_files(settings)
    log.info("imex-webhook serving https://%s (%s mode); settings: %s", settings.bind,
             "embedded" if settings.embedded else "kubernetes", settings.redacted())
    _Server(settings, cert, key).run()
    return 0
