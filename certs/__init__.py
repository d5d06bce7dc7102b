"""Certificate tool for the imex-webhook Service: a private CA, serving and client certificates, their files.

:mod:`certs.issue` builds certificates as PEM bytes (pure), :mod:`certs.files` writes and reuses them
on disk, :mod:`certs.cli` is ``python -m certs``. The names below are the public API.
"""

from certs.files import (
    TlsDir,
    TlsPaths,
    ca_bundle_b64,
    client_files,
    ensure_tls_dir,
    issue_client,
    read_pair,
    write_bundle,
)
from certs.issue import (
    CertError,
    CertKey,
    KeyType,
    load_cert_key,
    new_ca,
    new_client,
    new_serving,
    service_dns_names,
)

__all__ = [
    "CertError",
    "CertKey",
    "KeyType",
    "TlsDir",
    "TlsPaths",
    "ca_bundle_b64",
    "client_files",
    "ensure_tls_dir",
    "issue_client",
    "load_cert_key",
    "new_ca",
    "new_client",
    "new_serving",
    "read_pair",
    "service_dns_names",
    "write_bundle",
]
