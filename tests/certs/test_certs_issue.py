"""The pure certificate builder, field by field.

Covered: the Service DNS names; SANs exactly as requested (IP vs DNS, order, duplicates); the CA's
and the serving certificate's basic constraints, key usages, extended key usages and key
identifiers; EC P-256 and RSA 2048/3072 keys; validity (defaults, clock skew, clamped to the CA);
PEM encodings; the helpers that judge an existing certificate (missing SANs, issuer, key match); and
the CertError raised for each kind of bad input.
"""

from __future__ import annotations

import datetime
import ipaddress
from typing import TypeVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs import issue

NOW = datetime.datetime(2030, 1, 1, 12, 0, tzinfo=datetime.UTC)
SERVICE, NAMESPACE = "svc", "ns"  # as in conftest.py


E = TypeVar("E", bound=x509.ExtensionType)


def ext(cert: x509.Certificate, kind: type[E]) -> x509.Extension[E]:
    return cert.extensions.get_extension_for_class(kind)


def test_service_dns_names_cover_every_name_a_service_is_reached_by() -> None:
    assert issue.service_dns_names("imex-webhook", "imex-system") == [
        "imex-webhook",
        "imex-webhook.imex-system",
        "imex-webhook.imex-system.svc",
        "imex-webhook.imex-system.svc.cluster.local",
    ]


def test_serving_cert_carries_exactly_the_requested_sans(ec_ca: issue.CertKey) -> None:
    pair = issue.new_serving(ec_ca, ["svc", "svc.ns.svc"], ["10.0.0.7", "fd00::1"])
    sans = ext(pair.certificate(), x509.SubjectAlternativeName).value
    assert list(sans) == [
        x509.DNSName("svc"),
        x509.DNSName("svc.ns.svc"),
        x509.IPAddress(ipaddress.ip_address("10.0.0.7")),
        x509.IPAddress(ipaddress.ip_address("fd00::1")),
    ]


@pytest.mark.parametrize("identity", ["127.0.0.1", "10.96.0.10", "::1", "fd00::1"])
def test_a_name_that_parses_as_an_ip_becomes_an_ip_san(ec_ca: issue.CertKey, identity: str) -> None:
    pair = issue.new_serving(ec_ca, [identity])
    sans = ext(pair.certificate(), x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == []
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address(identity)]


def test_duplicate_names_are_listed_once_in_first_seen_order(ec_ca: issue.CertKey) -> None:
    pair = issue.new_serving(ec_ca, ["b.example", "a.example", "b.example", "10.0.0.1"], ["10.0.0.1"])
    assert issue.san_strings(pair.certificate()) == ["b.example", "a.example", "10.0.0.1"]


def test_the_ca_may_sign_leaves_but_no_further_cas(ec_ca: issue.CertKey) -> None:
    cert = ec_ca.certificate()
    constraints = ext(cert, x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value == x509.BasicConstraints(ca=True, path_length=0)
    usage = ext(cert, x509.KeyUsage)
    assert usage.critical
    assert usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature and not usage.value.key_encipherment
    ski = ext(cert, x509.SubjectKeyIdentifier).value
    assert ski == x509.SubjectKeyIdentifier.from_public_key(cert.public_key())
    assert cert.issuer == cert.subject


def test_the_serving_cert_is_an_end_entity_for_server_auth_only(
    ec_ca: issue.CertKey, ec_serving: issue.CertKey
) -> None:
    cert, ca_cert = ec_serving.certificate(), ec_ca.certificate()
    constraints = ext(cert, x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca is False
    eku = ext(cert, x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    aki = ext(cert, x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ext(ca_cert, x509.SubjectKeyIdentifier).value.digest
    assert cert.issuer == ca_cert.subject
    assert issue.is_signed_by(cert, ca_cert)


@pytest.mark.parametrize(("serving_fixture", "key_encipherment"), [("ec_serving", False), ("rsa_serving", True)])
def test_key_encipherment_is_set_only_for_rsa_keys(
    request: pytest.FixtureRequest, serving_fixture: str, key_encipherment: bool
) -> None:
    usage = ext(request.getfixturevalue(serving_fixture).certificate(), x509.KeyUsage)
    assert usage.critical
    assert usage.value.digital_signature
    assert usage.value.key_encipherment is key_encipherment
    assert not usage.value.key_cert_sign


def test_ec_keys_are_p256_and_rsa_keys_2048_bits_by_default(
    ec_serving: issue.CertKey, rsa_serving: issue.CertKey
) -> None:
    ec_key = ec_serving.private_key()
    assert isinstance(ec_key, ec.EllipticCurvePrivateKey) and isinstance(ec_key.curve, ec.SECP256R1)
    rsa_key = rsa_serving.private_key()
    assert isinstance(rsa_key, rsa.RSAPrivateKey) and rsa_key.key_size == 2048


def test_rsa_3072_can_be_asked_for_and_signed_by_an_ec_ca(ec_ca: issue.CertKey) -> None:
    pair = issue.new_serving(ec_ca, ["svc"], key_type="rsa", rsa_bits=3072)
    key = pair.private_key()
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 3072
    assert issue.is_signed_by(pair.certificate(), ec_ca.certificate())


def test_validity_defaults_to_a_year_for_serving_and_ten_for_the_ca() -> None:
    ca = issue.new_ca(now=NOW)
    serving = issue.new_serving(ca, ["svc"], now=NOW)
    assert ca.certificate().not_valid_after_utc == NOW + datetime.timedelta(days=3650)
    assert serving.certificate().not_valid_after_utc == NOW + datetime.timedelta(days=365)


def test_validity_starts_a_little_in_the_past_to_absorb_clock_skew() -> None:
    ca = issue.new_ca(now=NOW)
    serving = issue.new_serving(ca, ["svc"], days=30, now=NOW)
    for cert in (ca.certificate(), serving.certificate()):
        assert NOW - datetime.timedelta(hours=1) < cert.not_valid_before_utc < NOW
    assert serving.certificate().not_valid_after_utc == NOW + datetime.timedelta(days=30)


def test_a_serving_cert_never_outlives_its_ca() -> None:
    ca = issue.new_ca(days=10, now=NOW)
    serving = issue.new_serving(ca, ["svc"], days=365, now=NOW)
    assert serving.certificate().not_valid_after_utc == ca.certificate().not_valid_after_utc


def test_pems_are_a_certificate_and_an_unencrypted_pkcs8_key(ec_serving: issue.CertKey) -> None:
    assert ec_serving.cert_pem.startswith(b"-----BEGIN CERTIFICATE-----\n")
    assert ec_serving.key_pem.startswith(b"-----BEGIN PRIVATE KEY-----\n")


def test_a_matching_pair_loads_and_a_foreign_key_is_rejected(ec_serving: issue.CertKey, ec_ca: issue.CertKey) -> None:
    assert issue.load_cert_key(ec_serving.cert_pem, ec_serving.key_pem) == ec_serving
    with pytest.raises(issue.CertError, match="does not match"):
        issue.load_cert_key(ec_serving.cert_pem, ec_ca.key_pem)


def test_missing_sans_names_what_the_cert_does_not_cover(ec_serving: issue.CertKey) -> None:
    cert = ec_serving.certificate()
    requested = issue.service_dns_names(SERVICE, NAMESPACE)
    assert issue.missing_sans(cert, requested, ["127.0.0.1"]) == []
    assert issue.missing_sans(cert, [*requested, "extra.example"], ["127.0.0.1", "10.0.0.9"]) == [
        "extra.example",
        "10.0.0.9",
    ]


def test_is_signed_by_tells_the_own_ca_from_another(ec_serving: issue.CertKey, ec_ca: issue.CertKey) -> None:
    look_alike = issue.new_ca("test CA")  # same subject, different key
    assert issue.is_signed_by(ec_serving.certificate(), ec_ca.certificate())
    assert not issue.is_signed_by(ec_serving.certificate(), look_alike.certificate())
    assert not issue.is_signed_by(ec_serving.certificate(), issue.new_ca("other CA").certificate())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dns_names": []}, "at least one"),
        ({"ip_addresses": ["not-an-ip"]}, "invalid IP address 'not-an-ip'"),
        ({"dns_names": ["has space.example"]}, "invalid DNS name"),
        ({"dns_names": ["bücher.example"]}, "punycode"),
        ({"days": 0}, "at least 1 day"),
        ({"days": issue.MAX_DAYS + 1}, "at most 36500 days"),
        ({"days": 10 ** 9}, "at most 36500 days"),  # past what a timedelta holds: no OverflowError
        ({"key_type": "dsa"}, "key type"),
        ({"key_type": "rsa", "rsa_bits": 1024}, "RSA key size"),
    ],
)
def test_bad_input_raises_a_cert_error_that_says_what_is_wrong(
    ec_ca: issue.CertKey, kwargs: dict[str, object], message: str
) -> None:
    args: dict[str, object] = {"dns_names": ["svc"], **kwargs}
    with pytest.raises(issue.CertError, match=message):
        issue.new_serving(ec_ca, **args)  # type: ignore[arg-type]


def test_a_leaf_cannot_be_used_as_an_issuer(ec_serving: issue.CertKey) -> None:
    with pytest.raises(issue.CertError, match="not a CA"):
        issue.new_serving(ec_serving, ["svc"])


def test_garbage_pem_raises_a_cert_error() -> None:
    with pytest.raises(issue.CertError, match="not a PEM certificate"):
        issue.load_certificate(b"nope")
    with pytest.raises(issue.CertError, match="private key"):
        issue.load_private_key(b"nope")


def test_the_client_cert_is_an_end_entity_for_client_auth_only_with_its_names(ec_ca: issue.CertKey) -> None:
    pair = issue.new_client(ec_ca, "imex-scheduler", ["imex:schedulers"], now=NOW)
    cert, ca_cert = pair.certificate(), ec_ca.certificate()
    assert ext(cert, x509.BasicConstraints).value.ca is False
    assert list(ext(cert, x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == "imex-scheduler"
    assert cert.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)[0].value == "imex:schedulers"
    assert issue.san_strings(cert) == []  # a client is named by its CN; it serves nothing
    assert issue.is_signed_by(cert, ca_cert)
    assert issue.key_matches(pair)


@pytest.mark.parametrize("name", ["", "x" * 65])
def test_a_client_cert_needs_a_common_name_of_sensible_length(ec_ca: issue.CertKey, name: str) -> None:
    with pytest.raises(issue.CertError, match="common name"):
        issue.new_client(ec_ca, name)


def test_a_leaf_cannot_issue_client_certs_either(ec_serving: issue.CertKey) -> None:
    with pytest.raises(issue.CertError, match="not a CA"):
        issue.new_client(ec_serving, "imex-scheduler")


def test_the_client_cert_never_outlives_its_ca() -> None:
    ca = issue.new_ca(days=10, now=NOW)
    client = issue.new_client(ca, "imex-scheduler", days=365, now=NOW)
    assert client.certificate().not_valid_after_utc == ca.certificate().not_valid_after_utc


@pytest.mark.parametrize(("fixture", "usages"), [
    ("ec_serving", [ExtendedKeyUsageOID.SERVER_AUTH]),
    ("ec_ca", []),
])
def test_extended_key_usages_lists_what_the_certificate_carries(
    request: pytest.FixtureRequest, fixture: str, usages: list[x509.ObjectIdentifier]
) -> None:
    assert issue.extended_key_usages(request.getfixturevalue(fixture).certificate()) == usages


def test_the_longest_validity_is_a_hundred_years() -> None:
    ca = issue.new_ca(days=issue.MAX_DAYS, now=NOW)
    assert ca.certificate().not_valid_after_utc == NOW + datetime.timedelta(days=36500)
    with pytest.raises(issue.CertError, match=r"^validity must be at most 36500 days \(100 years\), not 36501$"):
        issue.new_ca(days=36501, now=NOW)


@pytest.mark.parametrize(("fixture", "problem"), [
    ("ec_serving", None),
    ("rsa_serving", None),
    ("ec_ca", "a CA certificate (BasicConstraints CA:TRUE), not a serving certificate"),
    ("ec_client", "the certificate is not for TLS servers (no serverAuth in its extended key usage)"),
])
def test_only_a_leaf_for_servers_is_a_serving_certificate(
        request: pytest.FixtureRequest, fixture: str, problem: str | None) -> None:
    found = issue.serving_problem(request.getfixturevalue(fixture).certificate())
    assert found == problem if problem is None else (found or "").startswith(problem)


@pytest.fixture
def ec_client(ec_ca: issue.CertKey) -> issue.CertKey:
    return issue.new_client(ec_ca, "imex-scheduler")
