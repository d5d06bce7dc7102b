"""`imex-webhook certs --kustomize`: the component injects the caBundle into the webhook configuration,
inlines the same CA as the scheduler extender's caData, rendered from the one source of truth, and installs
the scheduler's client certificate, which the scheduler's Deployment mounts where the extender tlsConfig
names it and which chains to the CA the webhook's --client-ca trusts."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs import cli as certs_cli
from certs import issue
from webhook import cli
from webhook.service import deploy


def test_the_component_carries_the_ca_for_both_the_webhook_and_the_scheduler(tmp_path: Path) -> None:
    out, component = tmp_path / "tls", tmp_path / "component"
    code = cli.main(["certs", "--service", deploy.SERVICE_NAME, "--namespace", deploy.NAMESPACE,
                     "--out", str(out), "--kustomize", str(component)])
    assert code == 0
    ca_pem = (out / "ca.crt").read_bytes()
    kustomization = yaml.safe_load((component / "kustomization.yaml").read_text())
    assert {"path": deploy.SCHEDULER_CA_PATCH_FILE} in kustomization["patches"]
    config_map = yaml.safe_load((component / deploy.SCHEDULER_CA_PATCH_FILE).read_text())
    kubernetes_validate.validate(config_map, "1.34.0", strict=True)
    config = yaml.safe_load(config_map["data"][deploy.SCHEDULER_CONFIG_KEY])
    (extender,) = config["extenders"]
    assert base64.b64decode(extender["tlsConfig"]["caData"]) == ca_pem
    assert config == deploy.scheduler_config(ca_pem)
    bundle = (component / "mutating-webhook-cabundle.yaml").read_text()
    assert base64.b64encode(ca_pem).decode() in bundle


def test_running_it_twice_does_not_list_the_patch_twice(tmp_path: Path) -> None:
    args = ["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path / "tls"),
            "--kustomize", str(tmp_path / "c")]
    assert cli.main(args) == 0 and cli.main([*args, "--reuse-ca"]) == 0
    kustomization = yaml.safe_load((tmp_path / "c" / "kustomization.yaml").read_text())
    assert [p.get("path") for p in kustomization["patches"]].count(deploy.SCHEDULER_CA_PATCH_FILE) == 1


def test_fabric_mode_renders_a_scheduler_config_that_leaves_gpus_to_the_extender(tmp_path: Path) -> None:
    args = ["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path / "tls"),
            "--kustomize", str(tmp_path / "c"), "--fabric"]
    assert cli.main(args) == 0
    config_map = yaml.safe_load((tmp_path / "c" / deploy.SCHEDULER_CA_PATCH_FILE).read_text())
    config = yaml.safe_load(config_map["data"][deploy.SCHEDULER_CONFIG_KEY])
    (extender,) = config["extenders"]
    assert "managedResources" not in extender
    (fit,) = config["profiles"][0]["pluginConfig"]
    assert fit["args"]["ignoredResources"] == ["nvidia.com/gpu"]


MANIFESTS = Path(__file__).parents[2] / "manifests"


def _deployment(file: str) -> dict[str, Any]:
    (obj,) = [d for d in yaml.safe_load_all((MANIFESTS / file).read_text()) if d and d["kind"] == "Deployment"]
    return obj


def _mounted_secrets(deployment: dict[str, Any]) -> dict[str, str]:
    """secret name -> where the first container mounts it."""
    spec = deployment["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    return {v["secret"]["secretName"]: mounts[v["name"]] for v in spec["volumes"] if "secret" in v}


def test_the_scheduler_presents_the_client_certificate_the_component_installs() -> None:
    (extender,) = deploy.scheduler_config()["extenders"]
    mounted = _mounted_secrets(_deployment("scheduler.yaml"))
    where = mounted[certs_cli.SCHEDULER_CLIENT_SECRET_NAME]
    assert where == certs_cli.SCHEDULER_CLIENT_DIR
    assert extender["tlsConfig"]["certFile"] == f"{where}/tls.crt" == deploy.SCHEDULER_CLIENT_CERT_FILE
    assert extender["tlsConfig"]["keyFile"] == f"{where}/tls.key" == deploy.SCHEDULER_CLIENT_KEY_FILE


def test_the_webhook_requires_client_certificates_from_the_ca_in_its_serving_secret() -> None:
    webhook = _deployment("webhook.yaml")
    args = webhook["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--client-ca={deploy.WEBHOOK_CLIENT_CA_FILE}" in args
    assert _mounted_secrets(webhook)["imex-webhook-tls"] == deploy.WEBHOOK_TLS_DIR
    assert f"--tls-cert={deploy.WEBHOOK_TLS_DIR}/tls.crt" in args


def test_the_rendered_client_certificate_chains_to_the_ca_the_webhook_trusts(tmp_path: Path) -> None:
    out, component = tmp_path / "tls", tmp_path / "component"
    assert cli.main(["certs", "--service", deploy.SERVICE_NAME, "--namespace", deploy.NAMESPACE,
                     "--out", str(out), "--kustomize", str(component)]) == 0
    secret = yaml.safe_load((component / certs_cli.SCHEDULER_CLIENT_SECRET_FILE).read_text())
    kubernetes_validate.validate(secret, "1.34.0", strict=True)
    client = issue.load_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca = issue.load_certificate((out / "ca.crt").read_bytes())
    assert issue.is_signed_by(client, ca)
    assert issue.extended_key_usages(client) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    serving = issue.load_certificate((out / "tls.crt").read_bytes())
    assert issue.extended_key_usages(serving) == [ExtendedKeyUsageOID.SERVER_AUTH]
    kustomization = yaml.safe_load((component / "kustomization.yaml").read_text())
    assert certs_cli.SCHEDULER_CLIENT_SECRET_FILE in kustomization["resources"]


def test_imex_webhook_certs_help_is_printed_once_under_its_own_name_with_fabric(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["certs", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.count("usage:") == 1
    assert out.startswith("usage: imex-webhook certs ")
    assert "--fabric" in out and "--kustomize" in out and "--client" in out
