"""``imex-webhook serve``: gunicorn (gthread workers, TLS) serving the Flask app.

gthread keeps connections alive, so kube-scheduler and kube-apiserver pay the TLS handshake once per
connection (the sync worker re-handshakes per request and is ~4x slower). The worker
(:mod:`webhook.serving.worker`) does each handshake and reads each request in its poller under
deadlines, so slow clients never hold a thread. Every new connection gets the context of
:mod:`webhook.serving.tls`, rebuilt when a certificate file changes, so rotated files take effect on the
next connection while in-flight requests finish on the old one.

The server knows nothing of the app: what it needs (limits, the body limit per route, the caller rules)
and where it reports (metrics, the /healthz check of its stalled service port) are handed to it here, in a
:class:`~webhook.serving.handover.Setup` each worker asks the application object for.

Start-up order: every input is checked (:mod:`webhook.service.preflight`), then the socket is bound, and
only then is "serving" logged; a problem with any of them is one line and exit status 2.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.errors import AppImportError

from certs import files as cert_files
from certs import issue as cert_issue
from webhook.domain.limits import body_limit
from webhook.errors import ImexWebhookError, SettingsError
from webhook.http.common import release_memory
from webhook.http.metrics import verb_of
from webhook.service import assembly, preflight
from webhook.service.embedded_parts import EmbeddedParts
from webhook.service.settings import KEEPALIVE, WORKER_TIMEOUT, Settings
from webhook.serving import callers, listeners
from webhook.serving.conns import Limits
from webhook.serving.handover import Check, Reports, Setup
from webhook.serving.tls import Contexts, TlsFiles, loads_now
from webhook.serving.worker import Worker

log = logging.getLogger("imex_webhook.serve")

MAX_HEAD = 64 * 1024  # request line and headers; kube-scheduler and kube-apiserver send well under 4 KiB
# The probe listener's own pool: the kubelet's probes (one connection each, from the node) and Prometheus.
PROBE_CONNECTIONS = 64
PROBE_CONNECTIONS_PER_SOURCE = 32


def tls_files(settings: Settings) -> tuple[Path, Path, Path | None]:
    """(cert, key, CA or None): given files, or a --tls-dir made on first use."""
    if settings.tls.cert is not None and settings.tls.key is not None:
        return settings.tls.cert, settings.tls.key, None
    assert settings.tls.dir is not None
    host = settings.server.bind.rpartition(":")[0].strip("[]")
    names = ["localhost", *cert_issue.service_dns_names(settings.tls.service_name, settings.tls.namespace)]
    ips = ["127.0.0.1", "::1"]
    if host and host not in ("0.0.0.0", "::", "localhost") and host not in ips:
        (ips if _is_ip(host) else names).append(host)
    made = cert_files.ensure_tls_dir(settings.tls.dir, names, ips)
    verb = "created" if made.created else ("re-issued serving certificate" if made.reissued else "using")
    log.info("%s TLS in %s%s; clients trust the CA at %s", verb, settings.tls.dir,
             f" ({made.reason})" if made.reason else "", made.paths.ca_cert)
    return made.paths.cert, made.paths.key, made.paths.ca_cert


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class _Server(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: Settings, cert: Path, key: Path,
                 checked: preflight.Checked | None = None, embedded: EmbeddedParts | None = None) -> None:
        self.settings = settings
        self.embedded_parts = embedded
        self.cert = cert
        self.key = key
        self.checked = checked or preflight.Checked(TlsFiles(cert, key, settings.tls.client_ca))
        self.tls = Contexts(self.checked.tls)
        limits = settings.limits
        self.limits = Limits(
            handshake=limits.handshake_timeout, header=limits.header_timeout, body=limits.body_timeout,
            keepalive=KEEPALIVE, write=limits.write_timeout, max_head=MAX_HEAD, max_body=limits.max_body,
            buffered=limits.buffered)
        self.stall_timeout = limits.stall_timeout
        # Who may call what (webhook.serving.callers): the worker refuses others before reading a body.
        tls = settings.tls
        self.callers = (callers.Allowed(frozenset(tls.client_subjects), frozenset(tls.inspect_subjects),
                                        tls.loopback_operators) if tls.client_ca is not None else None)
        connections = listeners.worker_connections(limits.max_connections, PROBE_CONNECTIONS)
        # (cap, per source) of the service port and of the probe port (webhook.serving.conn_limits)
        self.pools = ((connections, min(limits.max_connections_per_source, connections)),
                      (PROBE_CONNECTIONS, PROBE_CONNECTIONS_PER_SOURCE))
        self.arbiter: Arbiter | None = None
        self.listener: Any = None
        self.probe_listener: Any = None
        self.built: assembly.Built | None = None  # in a worker, once load() made the app (never with another app)
        super().__init__()

    # -- what each worker gets (webhook.serving.handover.Host) ------------------------------------------

    def serving_setup(self) -> Setup:
        max_body = self.settings.limits.max_body
        return Setup(
            limits=self.limits, service_pool=self.pools[0], probe_pool=self.pools[1],
            body_limit=lambda path: body_limit(path, max_body), stall_timeout=self.stall_timeout,
            callers=self.callers,
            probe_fd=self.probe_listener.fileno() if self.probe_listener is not None else -1,
            release_memory=release_memory,
            reports=Reports(register_liveness=self._register_liveness, dropped=self._count_drop,
                            refused=self._count_refused, internal_error=self._count_internal_error))

    # The worker reports from its start, the app is loaded after: each reaches what load() built, if anything
    # (a subclass that loads another app, the benchmark's baseline, has no metrics and no /healthz checks).

    def _register_liveness(self, name: str, check: Check) -> None:
        if self.built is not None:
            self.built.liveness[name] = check

    def _count_drop(self, reason: str) -> None:
        if self.built is not None:
            self.built.metrics.connections_dropped.labels(reason).inc()

    def _count_refused(self, received: bytes, status: int) -> None:
        if self.built is not None:
            self.built.metrics.count_refused(received, status)

    def _count_internal_error(self, path: str) -> None:
        if self.built is not None:
            self.built.metrics.internal_errors.labels(verb_of(path)).inc()

    def load_config(self) -> None:
        s = self.settings
        workers = 1 if s.cluster.embedded else s.server.workers
        options: dict[str, Any] = {
            "bind": [s.server.bind],
            "workers": workers,
            "worker_class": Worker,
            "threads": s.server.threads,
            # The worker keeps each listener under its own caps and never stops accepting (conn_limits).
            "worker_connections": self.pools[0][0] + self.pools[1][0] + 16,
            # The worker wraps each connection itself with the context of webhook.serving.tls; the files are
            # named here so that gunicorn knows the server speaks TLS (wsgi.url_scheme https).
            "certfile": str(self.cert),
            "keyfile": str(self.key),
            "ssl_context": lambda conf, default: self.tls.current(),
            "timeout": WORKER_TIMEOUT,
            "graceful_timeout": 30,
            "keepalive": int(KEEPALIVE),
            "accesslog": "-" if s.log.access else None,
            "errorlog": "-",
            "loglevel": s.log.level,
            "proc_name": "imex-webhook",
        }
        if "control_socket_disable" in self.cfg.settings:
            # gunicorn >= 25.1 opens a control socket in $HOME by default: a shared path that two servers on
            # one machine fight over, and a write a read-only root filesystem refuses.
            options["control_socket_disable"] = True
        for key, value in options.items():
            if value is not None:
                self.cfg.set(key, value)

    def bind(self) -> None:
        """Listen on --bind (and --probe-bind) now, before anything says "serving"; a refusal is a
        SettingsError."""
        if self.listener is not None:
            return
        (address,) = self.cfg.address
        self.arbiter = Arbiter(self)
        self.listener = listeners.listen(address, self.cfg, self.arbiter.log, "--bind", self.settings.server.bind)
        if self.settings.server.probe_bind:
            host, _, port = self.settings.server.probe_bind.rpartition(":")
            probe_address = (host.strip("[]") or "0.0.0.0", int(port))
            try:
                self.probe_listener = listeners.listen(probe_address, self.cfg, self.arbiter.log, "--probe-bind",
                                                       self.settings.server.probe_bind)
            except SettingsError:
                self.listener.close()
                self.listener = None
                raise

    @property
    def port(self) -> int:
        port: int = self.listener.getsockname()[1]
        return port

    def run(self) -> None:
        self.bind()
        assert self.arbiter is not None
        self.arbiter.LISTENERS = [self.listener] + ([self.probe_listener] if self.probe_listener else [])
        if self.settings.server.exit_with_parent:
            _exit_with_parent()
        self.arbiter.run()

    def load(self) -> Flask:
        # Runs in each worker after the fork: watch threads and caches must live in the worker.
        try:
            built = assembly.build(self.settings, loads_now(self.checked.tls), self.checked.cluster_objects,
                          self.embedded_parts)
        except (ImexWebhookError, OSError, ValueError, RuntimeError) as exc:
            # gunicorn prints the message of this error alone and stops, instead of a traceback per attempt.
            raise AppImportError(f"imex-webhook serve: cannot start: {preflight.one_line(str(exc))}") from exc
        self.built = built
        app = built.app
        if self.callers is not None:
            app.wsgi_app = callers.require_client_certificate(  # type: ignore[method-assign,assignment]
                app.wsgi_app, self.callers, refused=built.metrics.count)
        return app


def _exit_with_parent() -> None:
    """Stop gracefully once the process that started us is gone (its child would otherwise outlive it)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        log.info("the parent process %d exited; stopping", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def serve(settings: Settings, embedded: EmbeddedParts | None = None) -> int:
    """Check every input, bind, then serve until stopped. Raises SettingsError (exit status 2) for an input
    that cannot work, before anything is started. ``embedded``: what the embedded mode runs on (the demo
    topology, the fabric simulator and its node agents), from ``webhook.composition``."""
    try:
        cert, key, _ = tls_files(settings)
    except (cert_issue.CertError, OSError) as exc:
        raise SettingsError(f"--tls-dir {settings.tls.dir}: {preflight.one_line(str(exc))}") from None
    checked = preflight.check(settings, cert, key)
    server = _Server(settings, cert, key, checked, embedded)
    server.bind()
    log.info("imex-webhook serving https://%s (%s mode)%s; settings: %s", settings.server.bind,
             "embedded" if settings.cluster.embedded else "kubernetes",
             f", probes and metrics on http://{settings.server.probe_bind}" if settings.server.probe_bind else "",
             settings.redacted())
    if settings.tls.client_ca is None:
        log.warning("no --client-ca: /filter, /prioritize, /bind and /preempt answer any caller that reaches "
                    "%s; give the scheduler's client CA in a cluster", settings.server.bind)
    server.run()
    return 0
