"""The hardened HTTP server: gunicorn's gthread worker changed so that no client can hold a thread.

Its poller does the TLS handshakes and reads whole requests under deadlines, a thread only serves a request
that has fully arrived, and the poller writes the response out. One part per module: the gunicorn worker
(:mod:`~webhook.serving.worker`) owns the others and hands each what it needs: the connection table
(:mod:`~webhook.serving.table`), the reader that drives each connection (:mod:`~webhook.serving.reading`),
the closer with its deadlines (:mod:`~webhook.serving.closing`) and a thread's side of a request
(:mod:`~webhook.serving.thread_side`), over the pure pieces: request framing, connections, connection caps,
stalls, the caller check and the TLS context.

The server knows nothing of the app it serves: ``webhook.service.server`` (the composition root) hands it
everything through :mod:`~webhook.serving.handover`. It imports no engine, state, domain, web view or
service module (an import-linter contract in pyproject.toml); the gunicorn internals it relies on are
listed in docs/ARCHITECTURE.md, "The HTTP server and gunicorn".
"""
