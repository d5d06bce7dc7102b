"""The server's TLS policy, and its context rebuilt only when a certificate file changes.

* TLS 1.2 and 1.3 only; TLS 1.2 offers AEAD suites with forward secrecy only (ECDHE with AES-GCM or
  ChaCha20-Poly1305). Every TLS 1.3 suite is AEAD already.
* With a client CA the certificate is *requested*, not required: the kubelet's probes and Prometheus
  connect without one, while a certificate that is presented must chain to the client CA and carry the
  clientAuth extended key usage (OpenSSL checks the purpose on the server side), or the handshake fails.
  Which paths need a verified client is decided per request (:mod:`webhook.serving.callers`).
* The files are re-read when their identity changes (a rotated Secret swaps them; an atomic write
  replaces the inode), so new connections get the new certificate without a restart, and an unchanged
  certificate costs three ``stat`` calls per connection instead of a fresh context. A pair that does
  not load (half-way through a rotation) leaves the last good one in use; ``/readyz`` reports it.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# OpenSSL cipher string for TLS 1.2 (TLS 1.3 suites are configured apart and are all AEAD).
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """A fresh server context from the files; raises ``OSError`` or ``ssl.SSLError`` naming what is wrong."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    # Renegotiation would let a client restart the handshake inside a connection the server already
    # accepted, outside the handshake deadline.
    context.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
    context.load_cert_chain(str(files.cert), str(files.key))
    if files.client_ca is not None:
        context.load_verify_locations(cafile=str(files.client_ca))
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def loads_now(files: TlsFiles) -> Callable[[], tuple[bool, str]]:
    """A check for /readyz: do the files on disk load now (the server keeps the last good pair if not)?"""
    def check() -> tuple[bool, str]:
        try:
            server_context(files)
        except (OSError, ssl.SSLError) as exc:
            return False, f"certificate {files.cert} / key {files.key} do not load: {exc}"
        return True, f"certificate {files.cert}"

    return check


def _identity(path: Path | None) -> tuple[int, int, int, int] | None:
    if path is None:
        return None
    st = os.stat(path)
    return st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns


class Contexts:
    """The current server context; rebuilt when any file's identity changed since it was built."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._key: tuple[object, ...] | None = None
        self._context: ssl.SSLContext | None = None

    def current(self) -> ssl.SSLContext:
        f = self.files
        key = (_identity(f.cert), _identity(f.key), _identity(f.client_ca))
        with self._lock:
            if self._context is None or key != self._key:
                try:
                    self._context = server_context(f)
                except (OSError, ssl.SSLError):
                    # Half-way through a rotation (new certificate, old key) the pair does not load: keep
                    # serving the last good pair and look again on the next connection.
                    if self._context is None:
                        raise
                    return self._context
                self._key = key
            return self._context
