"""Certificate files on disk: write a bundle, read it back, and keep a ``--tls-dir`` usable.

Layout of a directory (the names a ``kubernetes.io/tls`` Secret mounts, plus the CA):

* ``ca.crt`` / ``ca.key``: the private CA; the key stays so a serving certificate can be re-issued
  later without changing the caBundle that the API server and kube-scheduler already trust.
* ``tls.crt`` / ``tls.key``: the serving certificate and key.
* ``client-<name>.crt`` / ``client-<name>.key``: client certificates from the same CA (the
  scheduler's is ``client-imex-scheduler``), made by ``python -m certs`` or :func:`issue_client`.

Every file is written atomically (a temporary file in the same directory, then ``os.replace``),
because the server re-reads its certificate on each new connection to pick up rotations and must
never load half a file. Private keys are created with mode 0600 by ``os.open`` itself; a later
``chmod`` would leave a window in which the key is readable by others.
"""

from __future__ import annotations

import base64
import datetime
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.x509.oid import ExtendedKeyUsageOID

from certs import issue

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
SCHEDULER_CLIENT = "imex-scheduler"  # the scheduler's client certificate: its CN and file name
PRIVATE_MODE = 0o600
PUBLIC_MODE = 0o644
# A serving certificate closer than this to its expiry is re-issued when the server starts.
RENEW_BEFORE = datetime.timedelta(days=7)

StrPath = str | os.PathLike[str]


@dataclass(frozen=True)
class TlsPaths:
    """Where the server finds its CA, certificate and key (the CA key is not needed to serve)."""

    ca_cert: Path
    cert: Path
    key: Path

    @classmethod
    def in_dir(cls, directory: StrPath) -> TlsPaths:
        d = Path(directory)
        return cls(ca_cert=d / CA_CERT, cert=d / TLS_CERT, key=d / TLS_KEY)


@dataclass(frozen=True)
class TlsDir:
    """Outcome of :func:`ensure_tls_dir`: the paths, and what had to be written to get there."""

    paths: TlsPaths
    created: bool  # a new CA and serving certificate were made
    reissued: bool = False  # the serving certificate was replaced, signed by the existing CA
    reason: str = ""  # why it was re-issued, for the server's startup log


def ca_bundle_b64(ca_cert_pem: bytes) -> str:
    """The value for ``clientConfig.caBundle`` (and Secret ``data``): base64 of the PEM text."""
    return base64.b64encode(ca_cert_pem).decode("ascii")


def write_atomic(path: StrPath, data: bytes, mode: int) -> None:
    """Replace ``path`` with ``data`` in one step; the new file is created with ``mode`` (minus umask)."""
    target = Path(path)
    # Same directory, so os.replace is a rename within one file system; O_EXCL so that a file
    # planted under the temporary name is never written through.
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def write_pair(cert_path: StrPath, key_path: StrPath, pair: issue.CertKey) -> None:
    """Replace a certificate and its key, each atomically.

    The two renames are not one step: for an instant a reader may pair the new key with the old
    certificate, ``load_cert_chain`` then fails that one handshake and the next one succeeds.
    (Mounted Secrets avoid even this by swapping a symlink to the whole directory.)
    """
    write_atomic(key_path, pair.key_pem, PRIVATE_MODE)
    write_atomic(cert_path, pair.cert_pem, PUBLIC_MODE)


def write_bundle(out_dir: StrPath, ca: issue.CertKey, serving: issue.CertKey) -> TlsPaths:
    """Write ``ca.crt``, ``ca.key``, ``tls.crt`` and ``tls.key`` into ``out_dir`` (created if needed)."""
    directory = Path(out_dir)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_pair(directory / CA_CERT, directory / CA_KEY, ca)
    paths = TlsPaths.in_dir(directory)
    write_pair(paths.cert, paths.key, serving)
    return paths


def client_files(directory: StrPath, name: str) -> tuple[Path, Path]:
    """Where the client certificate and key for ``name`` live in a certificate directory."""
    d = Path(directory)
    return d / f"client-{name}.crt", d / f"client-{name}.key"


def issue_client(directory: StrPath, name: str = SCHEDULER_CLIENT, *, key_type: issue.KeyType = "ec",
                 days: int = issue.SERVING_DAYS, now: datetime.datetime | None = None) -> tuple[Path, Path]:
    """A client certificate (CN ``name``, clientAuth) from the CA in ``directory``; returns (cert, key)."""
    d = Path(directory)
    ca = read_pair(d / CA_CERT, d / CA_KEY)
    cert, key = client_files(d, name)
    write_pair(cert, key, issue.new_client(ca, name, key_type=key_type, days=days, now=now))
    return cert, key


def read_pair(cert_path: StrPath, key_path: StrPath) -> issue.CertKey:
    """Read and check a certificate and its key; errors name the file that is wrong."""
    cert_pem, key_pem = Path(cert_path).read_bytes(), Path(key_path).read_bytes()
    try:
        issue.load_certificate(cert_pem)
    except issue.CertError as e:
        raise issue.CertError(f"{cert_path}: {e}") from e
    try:
        issue.load_private_key(key_pem)
    except issue.CertError as e:
        raise issue.CertError(f"{key_path}: {e}") from e
    pair = issue.CertKey(cert_pem, key_pem)
    if not issue.key_matches(pair):
        raise issue.CertError(f"{key_path} does not match the public key in {cert_path}")
    return pair


def ensure_tls_dir(
    directory: StrPath,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    *,
    key_type: issue.KeyType = "ec",
    renew_before: datetime.timedelta = RENEW_BEFORE,
    now: datetime.datetime | None = None,
) -> TlsDir:
    """Make ``directory`` hold a CA and a serving certificate for the requested names.

    * Nothing there: create a CA and a serving certificate.
    * ``ca.crt``, ``tls.crt`` and ``tls.key`` present: reuse them, unless the serving certificate
      misses a requested SAN, expires within ``renew_before``, does not match its key, was not
      issued by ``ca.crt``, is no serving certificate (a CA's, or one without serverAuth) or also
      allows client authentication; then re-issue it from ``ca.key``,
      or raise :class:`issue.CertError` if that key is absent (a new CA would silently invalidate
      every caBundle already deployed).
    * Only the CA present: issue a serving certificate from it.
    """
    when = now if now is not None else datetime.datetime.now(datetime.UTC)
    base = Path(directory)
    paths = TlsPaths.in_dir(base)
    ca_key_path = base / CA_KEY
    present = {p.name for p in (paths.ca_cert, ca_key_path, paths.cert, paths.key) if p.exists()}
    subject = ", ".join([*dns_names, *ip_addresses])

    if not present & {CA_CERT, TLS_CERT, TLS_KEY}:
        ca = issue.new_ca(key_type=key_type, now=when)
        serving = issue.new_serving(ca, dns_names, ip_addresses, key_type, now=when)
        return TlsDir(write_bundle(base, ca, serving), created=True)

    if {TLS_CERT, TLS_KEY} <= present and CA_CERT in present:
        reason = _reissue_reason(paths, dns_names, ip_addresses, when + renew_before)
        if not reason:
            return TlsDir(paths, created=False)
    elif {CA_CERT, CA_KEY} <= present:
        reason = f"{TLS_CERT} or {TLS_KEY} is missing"
    else:
        missing = sorted({CA_CERT, CA_KEY, TLS_CERT, TLS_KEY} - present)
        raise issue.CertError(
            f"{base} holds an incomplete certificate set (missing {', '.join(missing)}); "
            "restore the files or empty the directory to create a new CA"
        )

    if CA_KEY not in present:
        raise issue.CertError(
            f"serving certificate in {base} must be re-issued ({reason}) but {ca_key_path} is missing; "
            f"provide the CA key, or empty the directory to create a new CA for {subject}"
        )
    ca = read_pair(paths.ca_cert, ca_key_path)
    if ca.certificate().not_valid_after_utc <= when + renew_before:
        raise issue.CertError(
            f"the CA in {paths.ca_cert} expires {ca.certificate().not_valid_after_utc:%Y-%m-%d}; "
            "empty the directory to create a new CA (and update every caBundle)"
        )
    serving = issue.new_serving(ca, dns_names, ip_addresses, key_type, now=when)
    write_pair(paths.cert, paths.key, serving)
    return TlsDir(paths, created=False, reissued=True, reason=reason)


def _reissue_reason(
    paths: TlsPaths, dns_names: Sequence[str], ip_addresses: Sequence[str], deadline: datetime.datetime
) -> str:
    """Why the serving certificate in ``paths`` cannot be reused as it is ('' when it can)."""
    try:
        serving = read_pair(paths.cert, paths.key)
    except issue.CertError as e:
        return str(e)
    try:
        ca_cert = issue.load_certificate(paths.ca_cert.read_bytes())
    except issue.CertError as e:
        raise issue.CertError(f"{paths.ca_cert}: {e}") from e
    cert = serving.certificate()
    problem = issue.serving_problem(cert)
    if problem:  # a CA's certificate put in place of the serving one, say
        return f"{paths.cert}: {problem}"
    missing = issue.missing_sans(cert, dns_names, ip_addresses)
    if missing:
        return f"{paths.cert} lacks SAN {', '.join(missing)}"
    if cert.not_valid_after_utc <= deadline:
        return f"{paths.cert} expires {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    if not issue.is_signed_by(cert, ca_cert):
        return f"{paths.cert} was not issued by {paths.ca_cert}"
    if ExtendedKeyUsageOID.CLIENT_AUTH in issue.extended_key_usages(cert):
        # Made before serving certificates became serverAuth only: it could call the extender as a client.
        return f"{paths.cert} also allows client authentication"
    return ""


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; best effort, some file systems refuse to open directories.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
