"""``python -m certs``, called as ``main([...])`` and once as a real subprocess.

Covered: stdout is only the base64 caBundle and decodes to ``ca.crt``; stderr lists the files and
SANs; Service names, ``--dns`` and ``--ip`` all end up as SANs; ``--key-type rsa`` with
``--rsa-bits`` and ``--days``; ``--reuse-ca`` keeps the CA; the scheduler's client certificate (and one
per ``--client``) is written with a 0600 key; ``--kustomize`` writes a valid kustomize Component
(JSON6902 patch of the MutatingWebhookConfiguration's caBundle, the scheduler's CA Secret, its client
certificate Secret, 0600) using the module's name constants; usage errors exit 2; an unwritable output directory or
a missing CA exits 1 with a one-line message naming the path.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs import cli, files, issue

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICE_ARGS = ["--service", "imex-webhook", "--namespace", "imex-system"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_stdout_is_the_base64_ca_bundle_of_ca_crt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *SERVICE_ARGS, "--out", str(tmp_path))
    assert code == 0, err
    assert out.count("\n") == 1
    assert base64.b64decode(out.strip(), validate=True) == (tmp_path / "ca.crt").read_bytes()
    for name in ("ca.crt", "ca.key", "tls.crt", "tls.key"):
        assert str(tmp_path / name) in err
    assert "imex-webhook.imex-system.svc" in err


def test_service_names_dns_and_ip_flags_become_sans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SERVICE_ARGS, "--out", str(tmp_path), "--dns", "webhook.example", "--ip", "10.0.0.5"]
    code, _, err = run(capsys, *argv, "--ip", "fd00::5")
    assert code == 0, err
    cert = issue.load_certificate((tmp_path / "tls.crt").read_bytes())
    assert issue.san_strings(cert) == [
        *issue.service_dns_names("imex-webhook", "imex-system"),
        "webhook.example",
        "10.0.0.5",
        "fd00::5",
    ]


def test_rsa_key_size_and_validity_flags_are_honoured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SERVICE_ARGS, "--out", str(tmp_path), "--key-type", "rsa", "--rsa-bits", "3072", "--days", "30"]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    pair = files.read_pair(tmp_path / "tls.crt", tmp_path / "tls.key")
    key = pair.private_key()
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 3072
    cert = pair.certificate()
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 30  # plus the skew margin
    assert oct(os.stat(tmp_path / "tls.key").st_mode & 0o777) == oct(0o600)


def test_reuse_ca_signs_a_new_serving_cert_with_the_existing_ca(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, *SERVICE_ARGS, "--out", str(tmp_path))[0] == 0
    ca_before, tls_before = (tmp_path / "ca.crt").read_bytes(), (tmp_path / "tls.crt").read_bytes()
    code, out, err = run(capsys, *SERVICE_ARGS, "--out", str(tmp_path), "--reuse-ca", "--dns", "new.example")
    assert code == 0, err
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    assert base64.b64decode(out.strip()) == ca_before
    new_cert = issue.load_certificate((tmp_path / "tls.crt").read_bytes())
    assert (tmp_path / "tls.crt").read_bytes() != tls_before
    assert "new.example" in issue.san_strings(new_cert)
    assert issue.is_signed_by(new_cert, issue.load_certificate(ca_before))


def test_kustomize_writes_a_component_that_installs_the_ca_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kdir = tmp_path / "overlay" / "certs"
    code, out, err = run(capsys, *SERVICE_ARGS, "--out", str(tmp_path / "tls"), "--kustomize", str(kdir))
    assert code == 0, err
    bundle = out.strip()
    assert sorted(p.name for p in kdir.iterdir()) == sorted(
        [cli.KUSTOMIZATION_FILE, cli.WEBHOOK_PATCH_FILE, cli.EXTENDER_CA_SECRET_FILE, cli.SCHEDULER_CLIENT_SECRET_FILE]
    )

    kustomization = load_yaml(kdir / cli.KUSTOMIZATION_FILE)
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    assert kustomization["kind"] == "Component"
    assert kustomization["resources"] == [cli.EXTENDER_CA_SECRET_FILE, cli.SCHEDULER_CLIENT_SECRET_FILE]
    [patch_ref] = kustomization["patches"]
    assert patch_ref["path"] == cli.WEBHOOK_PATCH_FILE
    assert patch_ref["target"] == {
        "group": "admissionregistration.k8s.io",
        "version": "v1",
        "kind": "MutatingWebhookConfiguration",
        "name": cli.WEBHOOK_CONFIGURATION_NAME,
    }

    assert load_yaml(kdir / cli.WEBHOOK_PATCH_FILE) == [
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}
    ]

    secret = load_yaml(kdir / cli.EXTENDER_CA_SECRET_FILE)
    assert secret["kind"] == "Secret"
    assert secret["metadata"] == {"name": cli.EXTENDER_CA_SECRET_NAME, "namespace": "imex-system"}
    assert secret["data"] == {cli.EXTENDER_CA_SECRET_KEY: bundle}
    assert base64.b64decode(bundle) == (tmp_path / "tls" / "ca.crt").read_bytes()


def test_the_component_carries_the_schedulers_client_certificate_in_a_private_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kdir = tmp_path / "component"
    code, _, err = run(capsys, *SERVICE_ARGS, "--out", str(tmp_path / "tls"), "--kustomize", str(kdir))
    assert code == 0, err
    path = kdir / cli.SCHEDULER_CLIENT_SECRET_FILE
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o600)  # it holds a private key
    secret = load_yaml(path)
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {"name": cli.SCHEDULER_CLIENT_SECRET_NAME, "namespace": "imex-system"}
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    cert_path, key_path = files.client_files(tmp_path / "tls", files.SCHEDULER_CLIENT)
    assert data == {"tls.crt": cert_path.read_bytes(), "tls.key": key_path.read_bytes(),
                    "ca.crt": (tmp_path / "tls" / "ca.crt").read_bytes()}
    kubernetes_validate.validate(secret, "1.34.0", strict=True)
    assert cli.SCHEDULER_CLIENT_CERT_FILE == f"{cli.SCHEDULER_CLIENT_DIR}/tls.crt"
    assert cli.SCHEDULER_CLIENT_KEY_FILE == f"{cli.SCHEDULER_CLIENT_DIR}/tls.key"


def test_client_certificates_are_written_for_the_scheduler_and_each_client_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *SERVICE_ARGS, "--out", str(tmp_path), "--client", "kube-apiserver")
    assert code == 0, err
    ca = issue.load_certificate((tmp_path / "ca.crt").read_bytes())
    for name in (files.SCHEDULER_CLIENT, "kube-apiserver"):
        cert_path, key_path = files.client_files(tmp_path, name)
        assert str(cert_path) in err
        assert oct(os.stat(key_path).st_mode & 0o777) == oct(0o600)
        cert = files.read_pair(cert_path, key_path).certificate()
        assert cert.subject.rfc4514_string() == f"CN={name}"
        assert issue.is_signed_by(cert, ca)
        assert issue.extended_key_usages(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_reuse_ca_reissues_the_client_certificate_from_the_same_ca(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, *SERVICE_ARGS, "--out", str(tmp_path))[0] == 0
    cert_path, _ = files.client_files(tmp_path, files.SCHEDULER_CLIENT)
    before = cert_path.read_bytes()
    assert run(capsys, *SERVICE_ARGS, "--out", str(tmp_path), "--reuse-ca")[0] == 0
    assert cert_path.read_bytes() != before
    ca = issue.load_certificate((tmp_path / "ca.crt").read_bytes())
    assert issue.is_signed_by(issue.load_certificate(cert_path.read_bytes()), ca)


def test_the_scheduler_ca_file_path_is_inside_the_secret_mount() -> None:
    assert cli.EXTENDER_CA_FILE == "/etc/imex-scheduler/ca/ca.crt"
    assert cli.EXTENDER_CA_FILE == f"{cli.EXTENDER_CA_DIR}/{cli.EXTENDER_CA_SECRET_KEY}"
    assert cli.SCHEDULER_CONFIG_MAP_NAME == "imex-scheduler-config"
    assert cli.SCHEDULER_CONFIG_KEY == "config.yaml"


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--namespace", "ns", "--out", "OUT"], "--service"),
        ([*SERVICE_ARGS], "--out"),
        ([*SERVICE_ARGS, "--out", "OUT", "--ip", "10.0.0.300"], "not an IP address"),
        ([*SERVICE_ARGS, "--out", "OUT", "--dns", "two words"], "invalid DNS name"),
        ([*SERVICE_ARGS, "--out", "OUT", "--days", "0"], "at least 1 day"),
        ([*SERVICE_ARGS, "--out", "OUT", "--days", "soon"], "whole number"),
        ([*SERVICE_ARGS, "--out", "OUT", "--key-type", "dsa"], "invalid choice"),
        ([*SERVICE_ARGS, "--out", "OUT", "--rsa-bits", "1024"], "invalid choice"),
        (["--service", "Imex_Webhook", "--namespace", "ns", "--out", "OUT"], "not a DNS label"),
        ([*SERVICE_ARGS, "--out", "OUT", "--client", "../escape"], "a client name is"),
        ([*SERVICE_ARGS, "--out", "OUT", "--client", "x" * 65], "a client name is"),
        ([*SERVICE_ARGS, "--out", "OUT", "--client", ""], "a client name is"),
    ],
)
def test_usage_errors_exit_2_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], complaint: str
) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, *(str(out_dir) if a == "OUT" else a for a in argv))
    assert code == 2
    assert out == ""
    assert complaint in err
    assert not out_dir.exists()


@pytest.mark.parametrize(("flag", "days", "problem"), [
    ("--days", "1000000000", "validity must be at most 36500 days (100 years), not 1000000000"),
    ("--ca-days", "36501", "validity must be at most 36500 days (100 years), not 36501"),
    ("--days", "0", "validity must be at least 1 day, not 0"),
    ("--ca-days", "-5", "validity must be at least 1 day, not -5"),
])
def test_a_validity_out_of_range_is_one_line_naming_the_flag_exit_2_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, days: str, problem: str
) -> None:
    code, out, err = run(capsys, *SERVICE_ARGS, "--out", str(tmp_path / "out"), f"{flag}={days}")
    assert (code, out) == (2, "")
    assert err == f"python -m certs: error: {flag} {days}: {problem}\n"
    assert not (tmp_path / "out").exists()


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "--kustomize" in out


def test_an_unwritable_out_dir_exits_1_with_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A regular file where a directory must go: unwritable even for root, unlike chmod 0500.
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    code, out, err = run(capsys, *SERVICE_ARGS, "--out", str(blocker / "tls"))
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("python -m certs: error: ") and str(blocker) in err


def test_reuse_ca_without_a_ca_exits_1_naming_the_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *SERVICE_ARGS, "--out", str(tmp_path), "--reuse-ca")
    assert code == 1
    assert str(tmp_path / "ca.crt") in err and "No such file" in err


def test_python_dash_m_certs_works_end_to_end(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "certs", *SERVICE_ARGS, "--out", str(tmp_path), "--ip", "127.0.0.1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert base64.b64decode(result.stdout.strip()) == (tmp_path / "ca.crt").read_bytes()
    files.read_pair(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert "SANs: imex-webhook, " in result.stderr

    bad = subprocess.run(
        [sys.executable, "-m", "certs", "--service", "x"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "required" in bad.stderr
