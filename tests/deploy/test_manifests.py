"""The kustomize base: every listed file exists and every manifest is listed; every object validates
against the Kubernetes 1.34 schemas (CRDs included) and our custom resources against their CRDs; the
scheduler configuration is the one webhook/service/deploy.py renders and agrees with serve (verbs, port,
TLS names, timeouts, scheduler name); the webhook configuration's CEL is valid and selects the right pods."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml

from certs import cli as certs_cli
from certs import issue
from webhook.domain import keys
from webhook.domain.policy import Policy
from webhook.service import deploy, settings
from webhook.wire import fabric_attachment as attachments

MANIFESTS = Path(__file__).parents[2] / "manifests"
K8S_VERSION = "1.34.0"


def _kustomization() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    return loaded


def _objects() -> list[dict[str, Any]]:
    out = []
    for name in _kustomization()["resources"]:
        out += [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]
    return out


def _one(kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in _objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def test_every_listed_file_exists_and_every_manifest_is_listed() -> None:
    listed = set(_kustomization()["resources"])
    on_disk = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


@pytest.mark.parametrize("obj", _objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_every_object_validates_against_the_kubernetes_schemas(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def _crd_schema(plural: str) -> dict[str, Any]:
    crd = _one("CustomResourceDefinition", f"{plural}.imex-webhook.io")
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def test_a_fabric_attachment_as_the_code_writes_it_matches_its_crd() -> None:
    att = attachments.Attachment(
        name=attachments.name_for("uid-1"), node="fab-00", pod_namespace="ml", pod_name="p", pod_uid="uid-1",
        zone="pcie-pool-1", gpus=2, system="/redfish/v1/Systems/fab-00", phase=attachments.Phase.ATTACHED,
        blocks=(attachments.Block("/redfish/v1/CompositionService/ResourceBlocks/GPU1", "GPU-1", "0000:41:00.0"),),
        conditions=(attachments.Condition("Released", "False", "Busy", "pid 42 holds /dev/nvidia1"),),
    )
    jsonschema.validate(attachments.to_object(att), _crd_schema("fabricattachments"))


def test_the_scheduler_config_map_is_the_rendered_source_of_truth() -> None:
    config_map = _one("ConfigMap", deploy.SCHEDULER_CONFIG_MAP)
    assert yaml.safe_load(config_map["data"][deploy.SCHEDULER_CONFIG_KEY]) == deploy.scheduler_config()
    assert (MANIFESTS / "scheduler-config.yaml").read_text() == deploy.render_manifest(deploy.scheduler_config_map())


def test_the_extender_verbs_are_routes_serve_answers_with_post() -> None:
    from webhook.adapters import embedded
    from webhook.demo import cluster as demo
    from webhook.engine.engine import Engine
    from webhook.http.app import create_app
    from webhook.state.cluster import ClusterStore

    store = ClusterStore(Policy())
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    app = create_app(Engine(store, backend.reservations, backend.binder, Policy()), backend)
    routes = {rule.rule: rule.methods for rule in app.url_map.iter_rules()}
    (extender,) = deploy.scheduler_config()["extenders"]
    for key in ("filterVerb", "prioritizeVerb", "bindVerb"):
        assert "POST" in routes["/" + extender[key]]
    assert "POST" in routes[deploy.WEBHOOK_PATH]


def test_timeouts_nest_inside_each_other() -> None:
    (extender,) = deploy.scheduler_config()["extenders"]
    http_timeout = int(extender["httpTimeout"].rstrip("s"))
    assert settings.DEFAULT_BIND_BUDGET < http_timeout < settings.WORKER_TIMEOUT
    webhook = _one("MutatingWebhookConfiguration", deploy.WEBHOOK_CONFIGURATION)["webhooks"][0]
    assert webhook["timeoutSeconds"] == deploy.WEBHOOK_TIMEOUT_S <= 30


def test_the_extender_reaches_the_service_on_the_port_serve_binds() -> None:
    (extender,) = deploy.scheduler_config()["extenders"]
    service = _one("Service", deploy.SERVICE_NAME)
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == "https"]
    assert extender["urlPrefix"] == f"https://{deploy.SERVICE_NAME}.{service['metadata']['namespace']}.svc:{port['port']}"
    container = _one("Deployment", deploy.SERVICE_NAME)["spec"]["template"]["spec"]["containers"][0]
    (named,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert f"--bind=0.0.0.0:{named['containerPort']}" in container["args"]
    assert named["containerPort"] == deploy.CONTAINER_PORT


def test_the_tls_names_the_scheduler_and_apiserver_use_are_in_the_serving_certificate() -> None:
    sans = issue.service_dns_names(deploy.SERVICE_NAME, deploy.NAMESPACE)
    (extender,) = deploy.scheduler_config()["extenders"]
    assert extender["tlsConfig"]["serverName"] in sans
    assert f"{deploy.SERVICE_NAME}.{deploy.NAMESPACE}.svc" in sans  # kube-apiserver's ServerName


def test_the_extender_ca_file_is_the_mounted_secret_the_certs_tool_writes() -> None:
    (extender,) = deploy.scheduler_config()["extenders"]
    spec = _one("Deployment", deploy.SCHEDULER_NAME)["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    (ca_volume,) = [n for n, v in volumes.items() if v.get("secret", {}).get("secretName") ==
                    certs_cli.EXTENDER_CA_SECRET_NAME]
    assert extender["tlsConfig"]["caFile"] == f"{mounts[ca_volume]}/{certs_cli.EXTENDER_CA_SECRET_KEY}"
    assert f"--config={deploy.SCHEDULER_CONFIG_DIR}/{deploy.SCHEDULER_CONFIG_KEY}" in spec["containers"][0]["command"]


def test_inlined_ca_data_replaces_the_ca_file() -> None:
    tls = deploy.scheduler_config(b"-----BEGIN CERTIFICATE-----\n")["extenders"][0]["tlsConfig"]
    assert "caFile" not in tls and base64.b64decode(tls["caData"]).startswith(b"-----BEGIN")


def test_the_profile_is_the_scheduler_name_the_webhook_sets() -> None:
    config = deploy.scheduler_config()
    assert [p["schedulerName"] for p in config["profiles"]] == [Policy().scheduler_name] == [deploy.SCHEDULER_NAME]
    assert config["profiles"][0]["percentageOfNodesToScore"] == 100
    (extender,) = config["extenders"]
    assert extender["nodeCacheCapable"] and extender["weight"] >= 12 and not extender["ignorable"]


def test_the_scheduler_config_uses_only_known_extender_fields() -> None:
    # Field names of KubeSchedulerConfiguration v1 Extender (k8s.io/kube-scheduler/config/v1/types.go).
    known = {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
             "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"}
    (extender,) = deploy.scheduler_config()["extenders"]
    assert set(extender) <= known
    assert set(extender["tlsConfig"]) <= {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData",
                                          "keyData", "caData"}


def _cel(expression: str, **variables: Any) -> Any:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    return program.evaluate({k: celpy.json_to_cel(v) for k, v in variables.items()})


@pytest.mark.parametrize(("pod", "sent"), [
    ({"metadata": {}, "spec": {"resourceClaims": [{"name": "ch", "resourceClaimTemplateName": "t"}]}}, True),
    ({"metadata": {"annotations": {keys.GROUP_ANNOTATION: "job"}}, "spec": {}}, True),
    ({"metadata": {"annotations": {"other": "x"}}, "spec": {"resourceClaims": []}}, False),
    ({"metadata": {}, "spec": {}}, False),
])
def test_match_conditions_send_only_pods_with_claims_or_the_group_annotation(pod: dict[str, Any],
                                                                           sent: bool) -> None:
    webhook = _one("MutatingWebhookConfiguration", deploy.WEBHOOK_CONFIGURATION)["webhooks"][0]
    assert len(webhook["matchConditions"]) <= 64
    assert all(_cel(c["expression"], object=pod) for c in webhook["matchConditions"]) is sent


def test_the_webhook_configuration_is_safe_to_reinvoke_and_skips_system_namespaces() -> None:
    webhook = _one("MutatingWebhookConfiguration", deploy.WEBHOOK_CONFIGURATION)["webhooks"][0]
    assert webhook["sideEffects"] == "None" and webhook["reinvocationPolicy"] == "IfNeeded"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["clientConfig"]["service"] == {"namespace": deploy.NAMESPACE, "name": deploy.SERVICE_NAME,
                                                  "path": deploy.WEBHOOK_PATH, "port": deploy.SERVICE_PORT}
    (excluded,) = [e for e in webhook["namespaceSelector"]["matchExpressions"] if e["operator"] == "NotIn"]
    assert {"kube-system", deploy.NAMESPACE} <= set(excluded["values"])
    assert webhook["failurePolicy"] in ("Fail", "Ignore")


def test_the_agent_policy_expressions_compile() -> None:
    policy = _one("ValidatingAdmissionPolicy", "imex-agent-own-node")
    env = celpy.Environment()
    for item in [*policy["spec"]["matchConditions"], *policy["spec"]["variables"], *policy["spec"]["validations"]]:
        env.compile(item["expression"])


def _webhook_policy_verdicts(old: dict[str, Any], new: dict[str, Any]) -> list[bool]:
    policy = _one("ValidatingAdmissionPolicy", "imex-webhook-segment-label-only")
    env = celpy.Environment()
    activation: dict[str, Any] = {"object": celpy.json_to_cel(new), "oldObject": celpy.json_to_cel(old)}
    variables = {}
    for item in policy["spec"]["variables"]:
        variables[item["name"]] = env.program(env.compile(item["expression"])).evaluate(activation)
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()})
    return [bool(env.program(env.compile(v["expression"])).evaluate(activation))
            for v in policy["spec"]["validations"]]


def test_the_webhook_policy_binds_the_service_account_the_webhook_runs_as() -> None:
    policy = _one("ValidatingAdmissionPolicy", "imex-webhook-segment-label-only")
    (condition,) = policy["spec"]["matchConditions"]
    account = _one("Deployment", deploy.SERVICE_NAME)["spec"]["template"]["spec"]["serviceAccountName"]
    assert f"'system:serviceaccount:{deploy.NAMESPACE}:{account}'" in condition["expression"]
    binding = _one("ValidatingAdmissionPolicyBinding", "imex-webhook-segment-label-only")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]


_LABELS = {"app": "train", keys.GROUP_LABEL: "train"}


def _pod(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
         image: str = "i") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "w-0", "annotations": annotations or {"a": "b"}}
    if labels is not None:
        metadata["labels"] = labels
    return {"metadata": metadata, "spec": {"containers": [{"name": "c", "image": image}]}}


_POD = _pod(_LABELS)


@pytest.mark.parametrize(("new", "allowed"), [
    (_pod({"app": "train", keys.GROUP_LABEL: "train", keys.SEGMENT_LABEL: "1"}), True),
    (_pod(dict(_LABELS)), True),
    (_pod({"app": "other", keys.GROUP_LABEL: "train", keys.SEGMENT_LABEL: "1"}), False),
    (_pod({"app": "train", keys.GROUP_LABEL: "train", "extra": "x"}), False),
    (_pod({keys.GROUP_LABEL: "train"}), False),
    (_pod({}), False),
    (_pod(dict(_LABELS), annotations={"a": "c"}), False),
    (_pod(dict(_LABELS), image="other"), False),
], ids=["adds-the-segment", "changes-nothing", "changes-another-label", "adds-another-label",
        "drops-a-label", "drops-every-label", "changes-an-annotation", "changes-the-spec"])
def test_the_webhook_may_change_only_the_segment_label_of_a_pod(new: dict[str, Any], allowed: bool) -> None:
    assert all(_webhook_policy_verdicts(_POD, new)) is allowed


def test_the_webhook_policy_accepts_a_pod_that_had_no_labels() -> None:
    bare = _pod()
    assert all(_webhook_policy_verdicts(bare, _pod({keys.SEGMENT_LABEL: "0"})))
    assert not all(_webhook_policy_verdicts(bare, _pod({"app": "x"})))


def test_workloads_run_as_non_root_with_read_only_roots_and_no_capabilities() -> None:
    for name in (deploy.SERVICE_NAME, deploy.SCHEDULER_NAME):
        spec = _one("Deployment", name)["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"]
        for container in spec["containers"]:
            ctx = container["securityContext"]
            assert ctx["readOnlyRootFilesystem"] and ctx["capabilities"]["drop"] == ["ALL"]
            assert not ctx["allowPrivilegeEscalation"]
            assert "limits" in container["resources"] and "requests" in container["resources"]


def _fit_args(config: dict[str, Any]) -> dict[str, Any]:
    (profile,) = config["profiles"]
    (fit,) = [c for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit"]
    args: dict[str, Any] = fit["args"]
    return args


def test_without_a_fabric_the_scheduler_keeps_judging_gpus_itself() -> None:
    assert "ignoredResources" not in _fit_args(deploy.scheduler_config())
    assert _fit_args(deploy.scheduler_config(fabric=True))["ignoredResources"] == ["nvidia.com/gpu"]


def test_the_extender_is_asked_about_every_pod_dra_only_ones_included() -> None:
    # With managedResources the scheduler calls the extender only for pods whose containers request a
    # listed resource; a pod whose GPUs come from a DRA claim requests none and would skip us entirely.
    for fabric in (False, True):
        (extender,) = deploy.scheduler_config(fabric=fabric)["extenders"]
        assert "managedResources" not in extender


def test_the_dedicated_profile_packs_and_one_point_of_our_score_outweighs_every_in_tree_plugin() -> None:
    config = deploy.scheduler_config()
    assert _fit_args(config)["scoringStrategy"]["type"] == "MostAllocated"
    (extender,) = config["extenders"]
    # final score = ours (0..10) x weight x 10 + sum of in-tree plugins (0..100 each x their weight)
    assert extender["weight"] * 10 > sum(deploy.IN_TREE_SCORE_WEIGHTS.values()) * 100
    assert (extender["weight"] - 1) * 10 <= sum(deploy.IN_TREE_SCORE_WEIGHTS.values()) * 100


def test_the_fabric_component_patches_the_webhook_into_fabric_mode() -> None:
    import jsonpatch

    component = MANIFESTS / "components" / "fabric"
    kustomization = yaml.safe_load((component / "kustomization.yaml").read_text())
    (patch_ref,) = kustomization["patches"]
    deployment = _one("Deployment", deploy.SERVICE_NAME)
    ops = yaml.safe_load((component / patch_ref["path"]).read_text())
    # The replace targets the --fabric argument of the base, by index: fail loudly if the base moves it.
    index = int(ops[0]["path"].rsplit("/", 1)[-1])
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"][index] == "--fabric=none"
    patched = jsonpatch.apply_patch(deployment, ops)
    kubernetes_validate.validate(patched, K8S_VERSION, strict=True)
    args = patched["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--fabric=$(IMEX_FABRIC_URL)" in args and "--fabric=none" not in args
    assert any(a.startswith("--fabric-credentials=") for a in args)
