"""The cert-manager component (manifests/components/cert-manager) against rules we did not write.

- Rendered by kustomize (``upstream.kustomize``; ``kubectl kustomize`` too where a kubectl new enough is
  installed), every Issuer and Certificate passes cert-manager's own CRD schemas (``upstream.CERT_MANAGER``)
  and the built-in objects the Kubernetes 1.34 schemas.
- Every TLS file ``serve`` and kube-scheduler read is followed from the process's arguments or
  configuration, through its volume mount, to a Secret a Certificate writes, and from there up the
  issuer chain: one CA signs the serving certificate and the scheduler's client certificate, and every
  consumer trusts that CA.
- The certificates those specs describe, issued here as cert-manager's CA issuer would and laid out as
  the kubelet mounts Secrets, carry a real mutual-TLS call from "kube-scheduler" to the running ``serve``.
"""

from __future__ import annotations

import copy
import datetime
import http.client
import json
import os
import posixpath
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs import issue
from tests import serving
from tests.deploy import upstream
from webhook.service import deploy

COMPONENT = upstream.MANIFESTS / "components" / "cert-manager"
MONITORING = upstream.MANIFESTS / "components" / "monitoring"
LEAF_FILES = {"tls.crt", "tls.key", "ca.crt"}  # the keys cert-manager writes into a Certificate's Secret
K8S_VERSION = "1.34.0"
Doc = dict[str, Any]
pytestmark = upstream.COLD_CACHE


@pytest.fixture(scope="module")
def rendered() -> list[Doc]:
    return upstream.render(COMPONENT)


@pytest.fixture(scope="module")
def schemas() -> upstream.Schemas:
    return upstream.schemas(upstream.CERT_MANAGER)


def _all(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def _one(docs: list[Doc], kind: str, name: str) -> Doc:
    (found,) = [d for d in _all(docs, kind) if d["metadata"]["name"] == name]
    return found


def _by_secret(docs: list[Doc]) -> dict[str, Doc]:
    return {c["spec"]["secretName"]: c for c in _all(docs, "Certificate")}


def _issuer_of(docs: list[Doc], certificate: Doc) -> Doc:
    ref = certificate["spec"]["issuerRef"]
    assert ref.get("kind", "Issuer") == "Issuer" and ref.get("group", "cert-manager.io") == "cert-manager.io"
    return _one(docs, "Issuer", ref["name"])


def _pod_spec(docs: list[Doc], name: str) -> Doc:
    spec: Doc = _one(docs, "Deployment", name)["spec"]["template"]["spec"]
    return spec


def _secret_file(pod: Doc, path: str) -> tuple[str, str]:
    """(Secret, key) behind a file a container of ``pod`` reads, through its volume mount."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    for container in pod["containers"]:
        for mount in container.get("volumeMounts", ()):
            if posixpath.dirname(path) == mount["mountPath"].rstrip("/"):
                volume = volumes[mount["name"]]
                assert "secret" in volume, f"{path} is mounted from {volume}, not from a Secret"
                return volume["secret"]["secretName"], posixpath.basename(path)
    raise AssertionError(f"no volume is mounted where {path} is read")


def _flag(args: list[str], name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    return values[0] if values else None


def _scheduler_tls(docs: list[Doc]) -> Doc:
    config_map = _one(docs, "ConfigMap", deploy.SCHEDULER_CONFIG_MAP)
    config = yaml.safe_load(config_map["data"][deploy.SCHEDULER_CONFIG_KEY])
    (extender,) = config["extenders"]
    tls: Doc = extender["tlsConfig"]
    return tls


def _files_read(docs: list[Doc]) -> dict[str, tuple[str, str]]:
    """role -> (Secret, key) of every TLS file serve and kube-scheduler read."""
    webhook = _pod_spec(docs, deploy.SERVICE_NAME)
    (container,) = webhook["containers"]
    out = {role: _secret_file(webhook, path) for role, flag in (("serving cert", "tls-cert"),
           ("serving key", "tls-key"), ("client CA", "client-ca")) if (path := _flag(container["args"], flag))}
    scheduler = _pod_spec(docs, deploy.SCHEDULER_NAME)
    tls = _scheduler_tls(docs)
    out.update({f"scheduler {key}": _secret_file(scheduler, tls[key]) for key in ("caFile", "certFile", "keyFile")
                if key in tls})
    return out


# -- Schemas ---------------------------------------------------------------------------------------------


def test_every_issuer_and_certificate_passes_cert_managers_crd_schemas(rendered: list[Doc],
                                                                       schemas: upstream.Schemas) -> None:
    objects = [d for d in rendered if d["apiVersion"].startswith("cert-manager.io/")]
    assert sorted(d["kind"] for d in objects) == ["Certificate"] * 3 + ["Issuer"] * 2
    for obj in objects:
        assert upstream.problems(obj, schemas) == []
        assert obj["metadata"]["namespace"] == deploy.NAMESPACE


def test_the_schema_check_refuses_what_cert_manager_would(rendered: list[Doc], schemas: upstream.Schemas) -> None:
    certificate = copy.deepcopy(_all(rendered, "Certificate")[0])
    certificate["spec"]["dnsName"] = ["imex-webhook"]
    certificate["spec"]["usages"] = ["serverAuth"]
    found = upstream.problems(certificate, schemas)
    assert any("dnsName" in p for p in found) and any("serverAuth" in p for p in found)


@pytest.mark.parametrize("kind", ["Deployment", "MutatingWebhookConfiguration", "ConfigMap"])
def test_the_patched_built_in_objects_stay_valid_kubernetes(rendered: list[Doc], kind: str) -> None:
    for obj in _all(rendered, kind):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


# -- The chain and who trusts what -----------------------------------------------------------------------


def test_a_self_signed_root_issues_the_ca_and_the_ca_issuer_signs_every_leaf(rendered: list[Doc]) -> None:
    certificates = _all(rendered, "Certificate")
    (root,) = [c for c in certificates if c["spec"].get("isCA")]
    assert "selfSigned" in _issuer_of(rendered, root)["spec"]
    ca_issuer = [i for i in _all(rendered, "Issuer") if i["spec"].get("ca", {}).get("secretName") ==
                 root["spec"]["secretName"]]
    assert len(ca_issuer) == 1
    for leaf in certificates:
        if leaf is not root:
            assert _issuer_of(rendered, leaf) == ca_issuer[0] and not leaf["spec"].get("isCA")
    # Renewed with the same key, so a renewed CA verifies what the old one signed and the other way round.
    assert root["spec"]["privateKey"]["rotationPolicy"] == "Never"


def test_the_serving_certificate_names_the_service_and_serves_only(rendered: list[Doc]) -> None:
    secret, _ = _files_read(rendered)["serving cert"]
    serving_cert = _by_secret(rendered)[secret]["spec"]
    assert serving_cert["dnsNames"] == issue.service_dns_names(deploy.SERVICE_NAME, deploy.NAMESPACE)
    assert deploy.service_dns() in serving_cert["dnsNames"]  # the name kube-scheduler and the API server check
    assert "server auth" in serving_cert["usages"] and "client auth" not in serving_cert["usages"]


def test_every_tls_file_serve_and_kube_scheduler_read_comes_from_a_certificates_secret(rendered: list[Doc]) -> None:
    files = _files_read(rendered)
    assert {"serving cert", "serving key", "scheduler caFile"} <= files.keys()
    by_secret = _by_secret(rendered)
    for role, (secret, key) in files.items():
        assert secret in by_secret, f"{role} is read from Secret {secret}, which no Certificate writes"
        assert key in LEAF_FILES, f"{role}: cert-manager writes no {key}"
    assert files["serving cert"][0] == files["serving key"][0]
    if "scheduler certFile" in files:
        assert files["scheduler certFile"][0] == files["scheduler keyFile"][0]
        assert "client auth" in by_secret[files["scheduler certFile"][0]]["spec"]["usages"]


def test_every_party_trusts_the_ca_that_signed_the_other_sides_certificate(rendered: list[Doc]) -> None:
    files = _files_read(rendered)
    by_secret = _by_secret(rendered)

    def issuer(role: str) -> str:
        return str(by_secret[files[role][0]]["spec"]["issuerRef"]["name"])

    assert files["scheduler caFile"][1] == "ca.crt" and issuer("scheduler caFile") == issuer("serving cert")
    if "client CA" in files:
        assert files["client CA"][1] == "ca.crt" and issuer("client CA") == issuer("scheduler certFile")
    webhook_config = _one(rendered, "MutatingWebhookConfiguration", deploy.WEBHOOK_CONFIGURATION)
    namespace, _, name = webhook_config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].partition("/")
    injected = _one(rendered, "Certificate", name)
    assert namespace == injected["metadata"]["namespace"] and injected["spec"]["secretName"] == files["serving cert"][0]
    assert all("caBundle" not in w["clientConfig"] for w in webhook_config["webhooks"])  # the injector owns it


def test_every_secret_the_pods_mount_is_one_cert_manager_writes(rendered: list[Doc]) -> None:
    by_secret = _by_secret(rendered)
    for name in (deploy.SERVICE_NAME, deploy.SCHEDULER_NAME):
        for volume in _pod_spec(rendered, name)["volumes"]:
            if "secret" in volume:
                assert volume["secret"]["secretName"] in by_secret, f"{name} mounts {volume}: nobody writes it"


def test_kubectl_kustomize_renders_both_components_the_same(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    version = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True, check=False,
                             timeout=60).stdout if kubectl else ""
    found = re.search(r"Kustomize Version: v(\d+)", version)
    if not found or int(found.group(1)) < 4:
        pytest.skip("no kubectl with kustomize v4 or newer (kustomize components); Debian's kubectl 1.20 "
                    "embeds kustomize v2. The kustomize build above is the same renderer.")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(upstream.MANIFESTS, overlay)],
        "components": [os.path.relpath(c, overlay) for c in (COMPONENT, MONITORING)]}))
    assert kubectl is not None
    proc = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    ours = upstream.render(COMPONENT, MONITORING)
    theirs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    # kustomize before v5.8 does not know ValidatingAdmissionPolicy (and its binding) is cluster-scoped and
    # gives it the namespace, which the API server drops: compare without it where we render none.
    for mine, other in zip(ours, theirs, strict=True):
        if "namespace" not in mine["metadata"]:
            other["metadata"].pop("namespace", None)
    assert theirs == ours


# -- A real handshake with certificates issued from these specs --------------------------------------------


_USAGES = {"server auth": ExtendedKeyUsageOID.SERVER_AUTH, "client auth": ExtendedKeyUsageOID.CLIENT_AUTH}


def _key(spec: Doc) -> ec.EllipticCurvePrivateKey:
    assert spec["privateKey"] == {**spec["privateKey"], "algorithm": "ECDSA", "size": 256}
    return ec.generate_private_key(ec.SECP256R1())


def _issue(spec: Doc, signer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None) -> tuple[bytes, bytes]:
    """One Certificate's spec as cert-manager's CA issuer signs it (or a self-signed one for the root)."""
    key = _key(spec)
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, spec["commonName"])] if "commonName" in spec else [])
    issuer_name = signer[0].subject if signer else subject
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(hours=int(spec["duration"].rstrip("h")))))
    if spec.get("isCA"):
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                        critical=True)
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False),
                                        critical=True)
        builder = builder.add_extension(x509.ExtendedKeyUsage([_USAGES[u] for u in spec["usages"] if u in _USAGES]),
                                        critical=False)
    if spec.get("dnsNames"):
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in spec["dnsNames"]]),
                                        critical=False)
    cert = builder.sign(signer[1] if signer else key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _secrets_as_mounted(docs: list[Doc], root: Path) -> dict[str, Path]:
    """Each Certificate's Secret as a directory of tls.crt, tls.key and ca.crt, the way the kubelet mounts it."""
    certificates = _all(docs, "Certificate")
    (ca_spec,) = [c["spec"] for c in certificates if c["spec"].get("isCA")]
    ca_pem, ca_key_pem = _issue(ca_spec, None)
    ca = (x509.load_pem_x509_certificate(ca_pem), serialization.load_pem_private_key(ca_key_pem, None))
    out = {}
    for certificate in certificates:
        spec = certificate["spec"]
        cert_pem, key_pem = (ca_pem, ca_key_pem) if spec.get("isCA") else _issue(spec, ca)  # type: ignore[arg-type]
        directory = root / spec["secretName"]
        directory.mkdir(parents=True)
        for name, data in (("tls.crt", cert_pem), ("tls.key", key_pem), ("ca.crt", ca_pem)):
            (directory / name).write_bytes(data)
        out[spec["secretName"]] = directory
    return out


def _call_as_scheduler(port: int, tls: Doc, files: dict[str, tuple[str, str]], mounted: dict[str, Path],
                       present_certificate: bool = True, path: str = "/filter") -> tuple[int, Doc]:
    """POST /filter the way kube-scheduler's extender client does: CA file, server name, client pair."""
    def local(role: str) -> str:
        secret, key = files[role]
        return str(mounted[secret] / key)

    context = ssl.create_default_context(cafile=local("scheduler caFile"))
    if present_certificate:
        context.load_cert_chain(local("scheduler certFile"), local("scheduler keyFile"))
    body = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "ml", "uid": "u"}, "spec": {}},
                       "NodeNames": ["n1"]}).encode() if path == "/filter" else b""
    head = (f"{'POST' if body else 'GET'} {path} HTTP/1.1\r\nHost: {tls['serverName']}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname=tls["serverName"]) as conn:
        conn.sendall(head.encode() + body)
        response = http.client.HTTPResponse(conn)  # type: ignore[arg-type]
        response.begin()
        return response.status, json.loads(response.read())


def test_certificates_issued_from_these_specs_carry_kube_schedulers_call_to_serve(rendered: list[Doc],
                                                                                  tmp_path: Path) -> None:
    mounted = _secrets_as_mounted(rendered, tmp_path / "secrets")
    files = _files_read(rendered)
    tls = _scheduler_tls(rendered)
    assert tls["serverName"] == deploy.service_dns()

    def local(role: str) -> str:
        secret, key = files[role]
        return str(mounted[secret] / key)

    client_ca = ["--client-ca", local("client CA")] if "client CA" in files else []
    port = serving.free_port()
    log = tmp_path / "serve.log"
    # Started here, not with tests.serving: its readiness check calls https://localhost, a name this
    # certificate rightly does not carry.
    with log.open("w") as out, subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--bind", f"127.0.0.1:{port}", "--tls-cert",
             local("serving cert"), "--tls-key", local("serving key"), *client_ca],
            stdout=out, stderr=subprocess.STDOUT) as proc:
        try:
            _wait_ready(port, tls, files, mounted, proc, log)
            status, reply = _call_as_scheduler(port, tls, files, mounted)
            assert status == 200 and reply.get("NodeNames") == ["n1"], reply
            wrong_name = {**tls, "serverName": "imex-webhook.other.svc"}
            with pytest.raises(ssl.SSLCertVerificationError):
                _call_as_scheduler(port, wrong_name, files, mounted)
            if client_ca:
                status, reply = _call_as_scheduler(port, tls, files, mounted, present_certificate=False)
                assert status == 403, reply
        finally:
            proc.terminate()
            proc.wait(20)


def _wait_ready(port: int, tls: Doc, files: dict[str, tuple[str, str]], mounted: dict[str, Path],
                proc: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, f"serve exited: {log.read_text()}"
        try:
            if _call_as_scheduler(port, tls, files, mounted, path="/readyz")[0] == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        assert time.monotonic() < deadline, f"serve not ready: {log.read_text()}"
        time.sleep(0.1)
