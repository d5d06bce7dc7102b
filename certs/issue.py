"""Pure certificate builder: a private CA and the serving and client certificates it signs, as PEM bytes.

Nothing here touches the file system or the clock unless asked (``now`` is a parameter), so every
function is a value-in, value-out step that tests can check field by field.

Why the certificates look the way they do:

* kube-apiserver dials a webhook Service with TLS ServerName ``<svc>.<ns>.svc`` and, since Go 1.15
  (Kubernetes 1.19), ignores the Common Name, so the serving certificate must carry that name as a
  dNSName SAN (:func:`service_dns_names` produces it and its siblings).
* The CA is restricted to signing leaves (``path_length=0``) and the leaf cannot sign anything
  (``ca=False``), both marked critical, as RFC 5280 asks.
* ``keyEncipherment`` is only meaningful for RSA key transport, so EC leaves get ``digitalSignature``
  alone (Go's verifier and OpenSSL both accept that for ECDHE).
* Each leaf has one extended key usage: serverAuth for the Service, clientAuth for the scheduler (and
  any other caller). The server verifies client certificates against the same CA, and OpenSSL checks
  the purpose, so the serving certificate cannot be used to call the extender.
* ``not_before`` is a few minutes in the past: a freshly created certificate must not be rejected as
  "not yet valid" by an API server whose clock runs slightly behind ours.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.errors import ImexWebhookError

KeyType: TypeAlias = Literal["ec", "rsa"]
SigningKey: TypeAlias = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
IpAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

KEY_TYPES: tuple[KeyType, ...] = ("ec", "rsa")
RSA_KEY_SIZES = (2048, 3072, 4096)
DEFAULT_RSA_BITS = 2048
CA_DAYS = 3650
SERVING_DAYS = 365
# The longest validity issued: 100 years. Far beyond any rotation, and far below the end of X.509 dates
# (9999-12-31) and of Python's (a timedelta of 10**9 days overflows).
MAX_DAYS = 36500
# Tolerated clock difference between us and whoever verifies the certificate first.
CLOCK_SKEW = datetime.timedelta(minutes=5)


class CertError(ImexWebhookError, ValueError):
    """A certificate cannot be built, parsed or reused; the message says which and why."""


@dataclass(frozen=True)
class CertKey:
    """A certificate and its private key, both PEM encoded (PKCS#8, unencrypted, for the key)."""

    cert_pem: bytes
    key_pem: bytes

    def certificate(self) -> x509.Certificate:
        return load_certificate(self.cert_pem)

    def private_key(self) -> SigningKey:
        return load_private_key(self.key_pem)


def load_certificate(pem: bytes) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as e:
        raise CertError(f"not a PEM certificate: {e}") from e


def load_private_key(pem: bytes) -> SigningKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as e:  # TypeError: the key is encrypted
        raise CertError(f"not an unencrypted PEM private key: {e}") from e
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertError(f"unsupported private key type {type(key).__name__}; use EC or RSA")
    return key


def load_cert_key(cert_pem: bytes, key_pem: bytes) -> CertKey:
    """Parse both halves and check that they belong together, so mistakes surface here."""
    pair = CertKey(cert_pem, key_pem)
    if not key_matches(pair):
        raise CertError("the private key does not match the certificate's public key")
    return pair


def key_matches(pair: CertKey) -> bool:
    public = pair.certificate().public_key()
    return bool(public == pair.private_key().public_key())


def service_dns_names(service: str, namespace: str) -> list[str]:
    """All names a Service is reached by; kube-apiserver itself uses ``<svc>.<ns>.svc``."""
    if not service or not namespace:
        raise CertError("service and namespace must not be empty")
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def general_name(identity: str) -> x509.DNSName | x509.IPAddress:
    """A string that parses as an IP address becomes an IP SAN, anything else a DNS SAN (as trustme)."""
    try:
        return x509.IPAddress(ipaddress.ip_address(identity))
    except ValueError:
        pass
    name = identity.strip().lower()
    if not name or not name.isascii() or any(c.isspace() for c in name):
        raise CertError(f"invalid DNS name {identity!r} (ASCII, no spaces; encode IDNs as punycode)")
    return x509.DNSName(name)


def subject_alt_names(dns_names: Iterable[str], ip_addresses: Iterable[str]) -> list[x509.GeneralName]:
    """DNS entries first, then IPs, without duplicates, keeping the order they were given in."""
    names: list[x509.GeneralName] = []
    for identity in dns_names:
        entry = general_name(identity)
        if entry not in names:
            names.append(entry)
    for identity in ip_addresses:
        try:
            entry = x509.IPAddress(ipaddress.ip_address(identity))
        except ValueError as e:
            raise CertError(f"invalid IP address {identity!r}") from e
        if entry not in names:
            names.append(entry)
    if not names:
        raise CertError("a serving certificate needs at least one DNS name or IP address")
    return names


def new_key(key_type: KeyType = "ec", *, rsa_bits: int = DEFAULT_RSA_BITS) -> SigningKey:
    if key_type == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "rsa":
        if rsa_bits not in RSA_KEY_SIZES:
            raise CertError(f"RSA key size must be one of {RSA_KEY_SIZES}, not {rsa_bits}")
        return rsa.generate_private_key(public_exponent=65537, key_size=rsa_bits)
    raise CertError(f"key type must be one of {KEY_TYPES}, not {key_type!r}")


def new_ca(
    common_name: str = "imex-webhook CA",
    key_type: KeyType = "ec",
    days: int = CA_DAYS,
    *,
    rsa_bits: int = DEFAULT_RSA_BITS,
    now: datetime.datetime | None = None,
) -> CertKey:
    """A self-signed CA that may sign end-entity certificates only."""
    key = new_key(key_type, rsa_bits=rsa_bits)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    not_before, not_after = _validity(days, now)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertKey(_cert_pem(cert), _key_pem(key))


def new_serving(
    ca: CertKey,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    key_type: KeyType = "ec",
    days: int = SERVING_DAYS,
    *,
    rsa_bits: int = DEFAULT_RSA_BITS,
    now: datetime.datetime | None = None,
) -> CertKey:
    """A TLS server certificate for the given names, signed by ``ca``.

    serverAuth only: a server whose key leaks must not be able to call the extender as a client, and a
    server that verifies client certificates against the same CA must not accept this one.
    ``not_after`` is clamped to the CA's own expiry, since no verifier accepts a chain past that.
    """
    sans = subject_alt_names(dns_names, ip_addresses)
    # The CN is informational only (verifiers use the SANs), but humans read it in `openssl x509`.
    first = sans[0]
    common_name = first.value if isinstance(first, x509.DNSName) else str(first.value)
    return _leaf(ca, common_name, (), [ExtendedKeyUsageOID.SERVER_AUTH], sans, key_type, days, rsa_bits, now)


def new_client(
    ca: CertKey,
    common_name: str,
    organizations: Sequence[str] = (),
    key_type: KeyType = "ec",
    days: int = SERVING_DAYS,
    *,
    rsa_bits: int = DEFAULT_RSA_BITS,
    now: datetime.datetime | None = None,
) -> CertKey:
    """A TLS client certificate (clientAuth only) for ``common_name``, signed by ``ca``: what
    kube-scheduler presents to the extender. Kubernetes reads CN as the user and O as the groups."""
    if not common_name or len(common_name) > 64:
        raise CertError("a client certificate needs a common name of 1 to 64 characters")
    return _leaf(ca, common_name, organizations, [ExtendedKeyUsageOID.CLIENT_AUTH], None, key_type, days,
                 rsa_bits, now)


def _leaf(
    ca: CertKey,
    common_name: str,
    organizations: Sequence[str],
    usages: list[x509.ObjectIdentifier],
    sans: list[x509.GeneralName] | None,
    key_type: KeyType,
    days: int,
    rsa_bits: int,
    now: datetime.datetime | None,
) -> CertKey:
    ca_cert, ca_key = ca.certificate(), ca.private_key()
    try:
        is_ca = ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise CertError("the issuing certificate is not a CA (BasicConstraints ca=True is missing)")
    key = new_key(key_type, rsa_bits=rsa_bits)
    not_before, not_after = _validity(days, now)
    not_after = min(not_after, ca_cert.not_valid_after_utc)
    try:
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)
    except x509.ExtensionNotFound:  # a CA made elsewhere may lack it; derive the same value
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            _key_usage(key_encipherment=isinstance(key, rsa.RSAPrivateKey)),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = (
        builder.add_extension(aki, critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return CertKey(_cert_pem(cert), _key_pem(key))


def extended_key_usages(cert: x509.Certificate) -> list[x509.ObjectIdentifier]:
    """The certificate's extended key usages ([] when it has none, which means any usage)."""
    try:
        return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return []


def serving_problem(cert: x509.Certificate) -> str | None:
    """Why ``cert`` is not a TLS server's own certificate (None: it is): a CA's (BasicConstraints CA:TRUE),
    which no client accepts as a server's, or one whose extended key usages leave out serverAuth."""
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if is_ca:
        return ("a CA certificate (BasicConstraints CA:TRUE), not a serving certificate: give the server's own "
                "certificate (tls.crt of `imex-webhook certs`), which that CA signed")
    usages = extended_key_usages(cert)
    if usages and ExtendedKeyUsageOID.SERVER_AUTH not in usages:
        return ("the certificate is not for TLS servers (no serverAuth in its extended key usage), so every "
                "client would refuse it")
    return None


def san_strings(cert: x509.Certificate) -> list[str]:
    """The certificate's SANs as plain strings (IPs in their canonical text form)."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*sans.get_values_for_type(x509.DNSName), *map(str, sans.get_values_for_type(x509.IPAddress))]


def missing_sans(cert: x509.Certificate, dns_names: Iterable[str], ip_addresses: Iterable[str]) -> list[str]:
    """Requested names the certificate does not cover, in request order (empty when it covers all)."""
    wanted = subject_alt_names(dns_names, ip_addresses)
    try:
        present = list(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        present = []
    return [str(n.value) for n in wanted if n not in present]


def is_signed_by(cert: x509.Certificate, ca_cert: x509.Certificate) -> bool:
    """True if ``ca_cert`` issued ``cert`` (names match and the signature checks out)."""
    if cert.issuer != ca_cert.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def validity_problem(days: int) -> str | None:
    """Why ``days`` cannot be a certificate's validity (None: it can)."""
    if days < 1:
        return f"validity must be at least 1 day, not {days}"
    if days > MAX_DAYS:
        return f"validity must be at most {MAX_DAYS} days (100 years), not {days}"
    return None


def _validity(days: int, now: datetime.datetime | None) -> tuple[datetime.datetime, datetime.datetime]:
    if not 1 <= days <= MAX_DAYS:
        raise CertError(validity_problem(days) or "")
    start = now if now is not None else datetime.datetime.now(datetime.UTC)
    return start - CLOCK_SKEW, start + datetime.timedelta(days=days)


def _key_usage(*, key_cert_sign: bool = False, key_encipherment: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not key_cert_sign,
        content_commitment=False,
        key_encipherment=key_encipherment,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=key_cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: SigningKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
