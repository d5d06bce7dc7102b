"""Certificate files on disk and the ``serve --tls-dir`` directory.

Covered: ``write_bundle`` writes the four files with the right contents; private keys are 0600
from the moment they exist (no chmod); writes replace files atomically and leave no temporary files,
even when the replace fails; the caBundle is base64 of the CA PEM; ``read_pair`` names the bad file;
``ensure_tls_dir`` creates everything in an empty directory, reuses a good set untouched, and
re-issues the serving certificate from the existing CA when a SAN is missing, it expires within
7 days, the key does not match, it is a CA's certificate, or it also allows client authentication
(made before serving certificates became serverAuth only), failing clearly when the CA key is absent,
the CA is expiring or the set is incomplete; a re-issued certificate is trusted through the unchanged ``ca.crt``;
``issue_client`` makes a client certificate from the directory's CA, its key 0600.
"""

from __future__ import annotations

import base64
import datetime
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs import files, issue

Handshake = Callable[..., bytes]
NAMES = issue.service_dns_names("svc", "ns")
NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_write_bundle_writes_ca_and_serving_files(
    tmp_path: Path, ec_ca: issue.CertKey, ec_serving: issue.CertKey
) -> None:
    paths = files.write_bundle(tmp_path / "new" / "tls", ec_ca, ec_serving)
    assert paths == files.TlsPaths.in_dir(tmp_path / "new" / "tls")
    assert snapshot(paths.cert.parent) == {
        "ca.crt": ec_ca.cert_pem,
        "ca.key": ec_ca.key_pem,
        "tls.crt": ec_serving.cert_pem,
        "tls.key": ec_serving.key_pem,
    }


def test_private_keys_are_created_0600_without_a_later_chmod(
    tmp_path: Path, ec_ca: issue.CertKey, ec_serving: issue.CertKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_chmod(*args: object, **kwargs: object) -> None:
        raise AssertionError("chmod after writing leaves the key readable for a moment")

    monkeypatch.setattr(os, "chmod", no_chmod)
    monkeypatch.setattr(os, "fchmod", no_chmod)
    old_umask = os.umask(0)  # the mode must come from os.open, not from a friendly umask
    try:
        paths = files.write_bundle(tmp_path, ec_ca, ec_serving)
    finally:
        os.umask(old_umask)
    assert mode(paths.key) == 0o600
    assert mode(tmp_path / "ca.key") == 0o600
    assert mode(paths.cert) == 0o644


def test_rewriting_replaces_the_file_instead_of_truncating_it(tmp_path: Path) -> None:
    target = tmp_path / "tls.crt"
    files.write_atomic(target, b"old", 0o644)
    before = target.stat().st_ino
    with target.open("rb") as reader:  # a server holding the old file keeps reading the old bytes
        files.write_atomic(target, b"new", 0o644)
        assert reader.read() == b"old"
    assert target.read_bytes() == b"new"
    assert target.stat().st_ino != before
    assert [p.name for p in tmp_path.iterdir()] == ["tls.crt"]


def test_a_failed_replace_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "tls.key"
    files.write_atomic(target, b"old", 0o600)

    def broken_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space"):
        files.write_atomic(target, b"new", 0o600)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["tls.key"]


def test_the_ca_bundle_is_base64_of_the_ca_pem(ec_ca: issue.CertKey) -> None:
    bundle = files.ca_bundle_b64(ec_ca.cert_pem)
    assert bundle.isascii() and "\n" not in bundle
    assert base64.b64decode(bundle, validate=True) == ec_ca.cert_pem


def test_read_pair_names_the_file_that_is_wrong(tmp_path: Path, ec_serving: issue.CertKey) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(ec_serving.cert_pem)
    key.write_bytes(b"garbage")
    with pytest.raises(issue.CertError, match=r"tls\.key: not an unencrypted PEM private key"):
        files.read_pair(cert, key)
    key.write_bytes(issue.new_ca().key_pem)
    with pytest.raises(issue.CertError, match=r"tls\.key does not match .*tls\.crt"):
        files.read_pair(cert, key)


def test_ensure_tls_dir_creates_a_ca_and_serving_cert_in_a_missing_directory(
    tmp_path: Path, handshake: Handshake
) -> None:
    result = files.ensure_tls_dir(tmp_path / "tls", NAMES, ["127.0.0.1"])
    assert result.created and not result.reissued
    assert sorted(p.name for p in (tmp_path / "tls").iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert mode(result.paths.key) == 0o600
    paths = result.paths
    assert handshake(paths.cert, paths.key, paths.ca_cert, "svc.ns.svc") == b"hello"


def test_ensure_tls_dir_reuses_a_good_set_untouched(tmp_path: Path) -> None:
    files.ensure_tls_dir(tmp_path, NAMES, ["127.0.0.1"])
    before = snapshot(tmp_path)
    result = files.ensure_tls_dir(tmp_path, list(reversed(NAMES)), [])  # a subset, in another order
    assert not result.created and not result.reissued
    assert snapshot(tmp_path) == before


def test_ensure_tls_dir_reuses_files_made_elsewhere_without_a_ca_key(
    tmp_path: Path, ec_ca: issue.CertKey, ec_serving: issue.CertKey
) -> None:
    files.write_bundle(tmp_path, ec_ca, ec_serving)
    (tmp_path / "ca.key").unlink()
    result = files.ensure_tls_dir(tmp_path, NAMES)
    assert not result.created and not result.reissued


def test_a_missing_san_reissues_the_serving_cert_from_the_same_ca(tmp_path: Path, handshake: Handshake) -> None:
    files.ensure_tls_dir(tmp_path, NAMES)
    before = snapshot(tmp_path)
    result = files.ensure_tls_dir(tmp_path, NAMES, ["127.0.0.1"])
    assert result.reissued and not result.created
    assert "lacks SAN 127.0.0.1" in result.reason
    after = snapshot(tmp_path)
    assert after["ca.crt"] == before["ca.crt"] and after["ca.key"] == before["ca.key"]
    assert after["tls.crt"] != before["tls.crt"] and after["tls.key"] != before["tls.key"]
    # Clients that trusted the old ca.crt (deployed caBundles) accept the new certificate.
    assert handshake(result.paths.cert, result.paths.key, result.paths.ca_cert, "127.0.0.1") == b"hello"


def test_a_cert_expiring_within_seven_days_is_reissued(tmp_path: Path) -> None:
    files.ensure_tls_dir(tmp_path, NAMES, now=NOW)
    eight_days_left = NOW + datetime.timedelta(days=365 - 8)
    assert not files.ensure_tls_dir(tmp_path, NAMES, now=eight_days_left).reissued
    six_days_left = NOW + datetime.timedelta(days=365 - 6)
    result = files.ensure_tls_dir(tmp_path, NAMES, now=six_days_left)
    assert result.reissued and "expires" in result.reason
    new_expiry = issue.load_certificate(result.paths.cert.read_bytes()).not_valid_after_utc
    assert new_expiry == six_days_left + datetime.timedelta(days=365)


def test_a_key_that_does_not_match_its_cert_is_reissued(tmp_path: Path) -> None:
    files.ensure_tls_dir(tmp_path, NAMES)
    (tmp_path / "tls.key").write_bytes(issue.new_ca().key_pem)
    result = files.ensure_tls_dir(tmp_path, NAMES)
    assert result.reissued and "does not match" in result.reason
    files.read_pair(result.paths.cert, result.paths.key)  # consistent again


def test_a_serving_cert_that_also_allows_client_auth_is_reissued_for_servers_only(tmp_path: Path) -> None:
    made = files.ensure_tls_dir(tmp_path, NAMES)
    ca = files.read_pair(made.paths.ca_cert, tmp_path / "ca.key")
    # What earlier versions issued: serverAuth and clientAuth on the serving certificate.
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    old = issue._leaf(ca, NAMES[0], (), both, issue.subject_alt_names(NAMES, []), "ec", 365,
                      issue.DEFAULT_RSA_BITS, None)
    files.write_pair(made.paths.cert, made.paths.key, old)
    result = files.ensure_tls_dir(tmp_path, NAMES)
    assert result.reissued and "also allows client authentication" in result.reason
    cert = issue.load_certificate(result.paths.cert.read_bytes())
    assert issue.extended_key_usages(cert) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not files.ensure_tls_dir(tmp_path, NAMES).reissued


def test_a_ca_certificate_in_place_of_the_serving_one_is_reissued(tmp_path: Path) -> None:
    made = files.ensure_tls_dir(tmp_path, NAMES)
    (tmp_path / "tls.crt").write_bytes(made.paths.ca_cert.read_bytes())
    (tmp_path / "tls.key").write_bytes((tmp_path / "ca.key").read_bytes())
    result = files.ensure_tls_dir(tmp_path, NAMES)
    assert result.reissued and "a CA certificate (BasicConstraints CA:TRUE)" in result.reason
    assert issue.serving_problem(issue.load_certificate(result.paths.cert.read_bytes())) is None


def test_issue_client_makes_the_schedulers_certificate_from_the_directory_ca(tmp_path: Path) -> None:
    made = files.ensure_tls_dir(tmp_path, NAMES)
    cert_path, key_path = files.issue_client(tmp_path)
    assert (cert_path, key_path) == files.client_files(tmp_path, files.SCHEDULER_CLIENT)
    assert mode(key_path) == files.PRIVATE_MODE
    pair = files.read_pair(cert_path, key_path)
    assert issue.is_signed_by(pair.certificate(), issue.load_certificate(made.paths.ca_cert.read_bytes()))
    assert issue.extended_key_usages(pair.certificate()) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_issue_client_without_a_ca_names_the_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        files.issue_client(tmp_path)
    assert caught.value.filename == str(tmp_path / "ca.crt")


def test_a_serving_cert_from_another_ca_is_reissued(tmp_path: Path, ec_serving: issue.CertKey) -> None:
    files.ensure_tls_dir(tmp_path, NAMES, ["127.0.0.1"])
    files.write_pair(tmp_path / "tls.crt", tmp_path / "tls.key", ec_serving)
    result = files.ensure_tls_dir(tmp_path, NAMES, ["127.0.0.1"])
    assert result.reissued and "not issued by" in result.reason


def test_reissuing_without_the_ca_key_fails_with_a_clear_error(tmp_path: Path) -> None:
    files.ensure_tls_dir(tmp_path, NAMES)
    (tmp_path / "ca.key").unlink()
    before = snapshot(tmp_path)
    with pytest.raises(issue.CertError, match=r"lacks SAN extra\.example.*ca\.key is missing"):
        files.ensure_tls_dir(tmp_path, [*NAMES, "extra.example"])
    assert snapshot(tmp_path) == before


def test_an_expiring_ca_is_not_used_to_reissue(tmp_path: Path) -> None:
    ca = issue.new_ca(days=30, now=NOW)
    files.write_bundle(tmp_path, ca, issue.new_serving(ca, NAMES, now=NOW))
    with pytest.raises(issue.CertError, match=r"the CA in .* expires"):
        files.ensure_tls_dir(tmp_path, NAMES, now=NOW + datetime.timedelta(days=25))


def test_a_ca_alone_gets_a_serving_cert(tmp_path: Path, ec_ca: issue.CertKey) -> None:
    files.write_pair(tmp_path / "ca.crt", tmp_path / "ca.key", ec_ca)
    result = files.ensure_tls_dir(tmp_path, NAMES)
    assert result.reissued and not result.created
    assert (tmp_path / "ca.crt").read_bytes() == ec_ca.cert_pem
    assert issue.is_signed_by(issue.load_certificate(result.paths.cert.read_bytes()), ec_ca.certificate())


def test_an_incomplete_set_is_refused_rather_than_replaced(tmp_path: Path, ec_serving: issue.CertKey) -> None:
    files.write_pair(tmp_path / "tls.crt", tmp_path / "tls.key", ec_serving)
    with pytest.raises(issue.CertError, match=r"incomplete .*missing ca\.crt, ca\.key"):
        files.ensure_tls_dir(tmp_path, NAMES)
