"""`imex-webhook certs --kustomize`: the component injects the caBundle into the webhook configuration and
inlines the same CA as the scheduler extender's caData, rendered from the one source of truth."""

from __future__ import annotations

import base64
from pathlib import Path

import kubernetes_validate
import yaml

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
