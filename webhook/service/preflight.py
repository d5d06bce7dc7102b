"""Every input of ``serve`` checked before the server starts, each problem one line naming the input.

``settings.from_args`` checks the command line's shape; this module opens what it names: certificate and
key files, the client CA, the kubeconfig (or the in-cluster account), the ``--cluster`` files, the fabric
credentials and CA. The cluster files are parsed here once and the objects handed to the worker, so a
large file is not read twice. The listening socket is bound afterwards by the server itself.
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509

from certs import issue as cert_issue
from webhook.errors import SettingsError
from webhook.service.settings import Settings
from webhook.serving.tls import TlsFiles, server_context


@dataclass(frozen=True)
class Checked:
    """What the checks produced for the server: its TLS files and the embedded cluster's objects."""

    tls: TlsFiles
    cluster_objects: list[dict[str, Any]] | None = field(default=None, compare=False)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def read_pem(flag: str, path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SettingsError(f"{flag} {path}: no such file") from None
    except OSError as exc:
        raise SettingsError(f"{flag} {path}: cannot read it: {exc.strerror or exc}") from None
    if not data.strip():
        raise SettingsError(f"{flag} {path}: the file is empty")
    return data


def certificates(flag: str, path: Path) -> list[x509.Certificate]:
    data = read_pem(flag, path)
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise SettingsError(f"{flag} {path}: no PEM certificate in it") from None


def check_serving_pair(cert_flag: str, cert: Path, key_flag: str, key: Path) -> None:
    leaf = certificates(cert_flag, cert)[0]
    key_pem = read_pem(key_flag, key)
    try:
        pair = cert_issue.CertKey(cert.read_bytes(), key_pem)
        pair.private_key()
    except cert_issue.CertError:
        raise SettingsError(f"{key_flag} {key}: not an unencrypted PEM private key (EC or RSA)") from None
    if not cert_issue.key_matches(pair):
        raise SettingsError(f"{key_flag} {key}: does not match the public key of {cert_flag} {cert}")
    now = datetime.datetime.now(datetime.UTC)
    if leaf.not_valid_after_utc <= now:
        raise SettingsError(f"{cert_flag} {cert}: expired on {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    problem = cert_issue.serving_problem(leaf)
    if problem is not None:
        raise SettingsError(f"{cert_flag} {cert}: {problem}")


def check_client_ca(path: Path) -> None:
    found = certificates("--client-ca", path)

    def is_ca(cert: x509.Certificate) -> bool:
        try:
            return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            return False

    if not any(is_ca(c) for c in found):
        raise SettingsError(f"--client-ca {path}: holds no CA certificate; give the CA that signs the clients' "
                            "certificates (ca.crt of `imex-webhook certs`), not a client or server certificate")


def check_tls(settings: Settings, cert: Path, key: Path) -> TlsFiles:
    if settings.tls.cert is not None:
        cert_flag, key_flag = "--tls-cert", "--tls-key"
    else:
        cert_flag = key_flag = f"--tls-dir {settings.tls.dir}:"
    check_serving_pair(cert_flag, cert, key_flag, key)
    if settings.tls.client_ca is not None:
        check_client_ca(settings.tls.client_ca)
    files = TlsFiles(cert, key, settings.tls.client_ca)
    try:
        server_context(files)
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(f"TLS: OpenSSL refuses {cert} / {key}"
                            f"{' / ' + str(settings.tls.client_ca) if settings.tls.client_ca else ''}: "
                            f"{one_line(str(getattr(exc, 'reason', None) or exc))}") from None
    return files


def check_cluster_source(settings: Settings) -> list[dict[str, Any]] | None:
    if settings.cluster.kubeconfig is not None or settings.cluster.in_cluster:
        from webhook.adapters.kube.api import KubeConfigError, load_configuration

        if settings.cluster.kubeconfig is not None and not settings.cluster.kubeconfig.is_file():
            raise SettingsError(f"--kubeconfig {settings.cluster.kubeconfig}: no such file")
        try:
            load_configuration(str(settings.cluster.kubeconfig) if settings.cluster.kubeconfig else None,
                               settings.cluster.in_cluster)
        except KubeConfigError as exc:
            flag = "--in-cluster" if settings.cluster.in_cluster else f"--kubeconfig {settings.cluster.kubeconfig}"
            raise SettingsError(f"{flag}: {one_line(str(exc))}") from None
        return None
    if not settings.cluster.files:
        return None
    from webhook.adapters.embedded import ClusterFileError, load_objects

    try:
        return load_objects(list(settings.cluster.files))
    except ClusterFileError as exc:
        raise SettingsError(f"--cluster {one_line(str(exc))}") from None


def check_fabric(settings: Settings) -> None:
    if settings.fabric.kind == "redfish":
        from webhook.service.fabric_wiring import FabricConfigError, read_credentials

        try:
            read_credentials(settings.fabric.credentials)
        except FabricConfigError as exc:
            raise SettingsError(one_line(str(exc))) from None
    if settings.fabric.ca is not None:
        certificates("--fabric-ca", settings.fabric.ca)


def check(settings: Settings, cert: Path, key: Path) -> Checked:
    """Raises :class:`SettingsError` with one line naming the input and the problem."""
    tls = check_tls(settings, cert, key)
    objects = check_cluster_source(settings)
    check_fabric(settings)
    return Checked(tls, objects)
