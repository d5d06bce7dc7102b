"""The kustomize base: every listed file exists and every manifest is listed; every object validates
against the Kubernetes 1.34 schemas (CRDs included) and our custom resources against their CRDs; the
scheduler configuration is the one webhook/service/deploy.py renders and agrees with serve (verbs, port,
TLS names, timeouts, scheduler name); the webhook configuration's CEL is valid and selects the right pods;
the ValidatingAdmissionPolicies that narrow the webhook's writes (a pod's segment label, its CapacityReturned
condition, a node's domain label) match only its service account and refuse everything else."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml

from certs import cli as certs_cli
from certs import issue
from tests import builders
from webhook.domain import keys, requeue
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
    from webhook.http.app import create_app
    from webhook.state.cluster import ClusterStore

    store = ClusterStore(Policy())
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    app = create_app(builders.engine(backend), backend, embedded=backend)
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


SEGMENT_POLICY = "imex-webhook-segment-label-only"
CONDITION_POLICY = "imex-webhook-capacity-condition-only"
DOMAIN_POLICY = "imex-webhook-domain-label-only"
WEBHOOK_POLICIES = (SEGMENT_POLICY, CONDITION_POLICY, DOMAIN_POLICY)


def _webhook_policy_verdicts(old: dict[str, Any], new: dict[str, Any], name: str = SEGMENT_POLICY) -> list[bool]:
    policy = _one("ValidatingAdmissionPolicy", name)
    env = celpy.Environment()
    activation: dict[str, Any] = {"object": celpy.json_to_cel(new), "oldObject": celpy.json_to_cel(old)}
    variables = celpy.celtypes.MapType()
    activation["variables"] = variables
    for item in policy["spec"]["variables"]:  # in order: a variable may use the ones before it
        variables[celpy.celtypes.StringType(item["name"])] = env.program(
            env.compile(item["expression"])).evaluate(activation)
    return [bool(env.program(env.compile(v["expression"])).evaluate(activation))
            for v in policy["spec"]["validations"]]


@pytest.mark.parametrize("name", WEBHOOK_POLICIES)
def test_each_webhook_policy_matches_exactly_the_service_account_the_webhook_runs_as(name: str) -> None:
    policy = _one("ValidatingAdmissionPolicy", name)
    (condition,) = policy["spec"]["matchConditions"]
    account = _one("Deployment", deploy.SERVICE_NAME)["spec"]["template"]["spec"]["serviceAccountName"]
    # Equality with the one user name: kubelets, the scheduler and controllers are never evaluated.
    assert condition["expression"] == (
        f"request.userInfo.username == 'system:serviceaccount:{deploy.NAMESPACE}:{account}'")
    for user, matched in ((f"system:serviceaccount:{deploy.NAMESPACE}:{account}", True),
                          ("system:node:gb200-a-00", False), ("system:kube-scheduler", False),
                          (f"system:serviceaccount:{deploy.NAMESPACE}:imex-agent", False),
                          ("system:serviceaccount:kube-system:generic-garbage-collector", False)):
        assert bool(_cel(condition["expression"], request={"userInfo": {"username": user}})) is matched, user
    assert policy["spec"]["failurePolicy"] == "Fail"
    binding = _one("ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}


def test_every_core_object_the_webhook_may_patch_is_narrowed_by_one_of_its_policies() -> None:
    """RBAC grants a verb on a resource, never a field: each update/patch the ClusterRole grants on pods,
    their subresources or nodes must meet a policy that matches that exact resource (a rule for ``pods``
    does not match ``pods/status``)."""
    role = _one("ClusterRole", deploy.SERVICE_NAME)
    granted = {res for rule in role["rules"] if "" in rule["apiGroups"] and {"update", "patch"} & set(rule["verbs"])
               for res in rule["resources"] if res != "events"}
    assert granted == {"nodes", "pods", "pods/status"}
    narrowed: dict[str, str] = {}
    for name in WEBHOOK_POLICIES:
        for rule in _one("ValidatingAdmissionPolicy", name)["spec"]["matchConstraints"]["resourceRules"]:
            assert rule["apiGroups"] == [""] and rule["operations"] == ["UPDATE"]
            narrowed.update({res: name for res in rule["resources"]})
    assert narrowed == {"pods": SEGMENT_POLICY, "pods/status": CONDITION_POLICY, "nodes": DOMAIN_POLICY}
    # No other write on those objects: binding is the extender's job, and nothing deletes or creates them.
    writes = {(res, verb) for rule in role["rules"] if "" in rule["apiGroups"] for res in rule["resources"]
              for verb in rule["verbs"] if verb not in ("get", "list", "watch") and res != "events"}
    assert writes == {("nodes", "patch"), ("pods", "patch"), ("pods/status", "patch"), ("pods/binding", "create")}


@pytest.mark.parametrize("name", WEBHOOK_POLICIES)
def test_the_webhook_policy_expressions_compile(name: str) -> None:
    policy = _one("ValidatingAdmissionPolicy", name)
    env = celpy.Environment()
    for item in [*policy["spec"]["matchConditions"], *policy["spec"]["variables"], *policy["spec"]["validations"]]:
        env.compile(item["expression"])


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


def _changed(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``obj`` with the field at dotted ``path`` set to ``value`` (``None``: removed)."""
    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    here = out
    for key in parents:
        here = here.setdefault(key, {})
    if value is None:
        here.pop(last, None)
    else:
        here[last] = value
    return out


def test_the_segment_policy_keeps_the_rest_of_a_pods_metadata() -> None:
    managed = _changed(_changed(_POD, "metadata.managedFields", [{"manager": "imex-webhook"}]),
                       "metadata.labels", {**_LABELS, keys.SEGMENT_LABEL: "0"})
    assert all(_webhook_policy_verdicts(_POD, managed))
    assert not all(_webhook_policy_verdicts(_POD, _changed(_POD, "metadata.finalizers", ["example.com/hold"])))
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "gone", "uid": "0000"}]
    assert not all(_webhook_policy_verdicts(_POD, _changed(_POD, "metadata.ownerReferences", owner)))


_OURS = {"type": requeue.CONDITION, "status": "True", "reason": requeue.REASON, "message": "a",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}
_SCHEDULED = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
_READY = {"type": "Ready", "status": "True"}
_STATUS_POD: dict[str, Any] = {
    "metadata": {"name": "w-0", "namespace": "ml", "uid": "u", "resourceVersion": "7",
                 "labels": dict(_LABELS), "annotations": {"a": "b"},
                 "managedFields": [{"manager": "kube-scheduler"}]},
    "spec": {"containers": [{"name": "c", "image": "i"}]},
    "status": {"phase": "Running", "conditions": [_SCHEDULED, _READY], "podIP": "10.0.0.1"},
}


@pytest.mark.parametrize(("new", "allowed"), [
    (_changed(_STATUS_POD, "status.conditions", [_SCHEDULED, _READY, _OURS]), True),
    (_changed(_STATUS_POD, "metadata.managedFields", [{"manager": "kube-scheduler"}, {"manager": "imex-webhook"}]),
     True),
    (_changed(_STATUS_POD, "status.conditions", [_SCHEDULED, {**_READY, "status": "False"}]), False),
    (_changed(_STATUS_POD, "status.conditions", [_SCHEDULED]), False),
    (_changed(_STATUS_POD, "status.conditions", [_READY, _SCHEDULED]), False),
    (_changed(_STATUS_POD, "status.conditions", [_SCHEDULED, _READY, {**_OURS, "type": "Other"}]), False),
    (_changed(_STATUS_POD, "status.phase", "Failed"), False),
    (_changed(_STATUS_POD, "status.phase", None), False),
    (_changed(_STATUS_POD, "status.podIP", "10.0.0.2"), False),
    (_changed(_STATUS_POD, "status.message", "evicted"), False),
    (_changed(_STATUS_POD, "metadata.labels", {"app": "other"}), False),
    (_changed(_STATUS_POD, "metadata.annotations", {"a": "c"}), False),
    (_changed(_STATUS_POD, "metadata.finalizers", ["example.com/hold"]), False),
    (_changed(_STATUS_POD, "spec.nodeName", "gb200-a-00"), False),
], ids=["adds-its-condition", "only-managed-fields", "ready-false", "drops-a-condition", "reorders-conditions",
        "adds-another-condition", "phase-failed", "drops-the-phase", "changes-the-pod-ip", "adds-a-message",
        "changes-a-label", "changes-an-annotation", "adds-a-finalizer", "changes-the-spec"])
def test_through_pods_status_the_webhook_may_change_only_its_own_condition(new: dict[str, Any],
                                                                          allowed: bool) -> None:
    assert all(_webhook_policy_verdicts(_STATUS_POD, new, CONDITION_POLICY)) is allowed


def test_the_webhook_may_change_and_remove_its_own_condition() -> None:
    with_ours = _changed(_STATUS_POD, "status.conditions", [_SCHEDULED, _READY, _OURS])
    changed = _changed(with_ours, "status.conditions", [_SCHEDULED, _READY, {**_OURS, "message": "b"}])
    assert all(_webhook_policy_verdicts(with_ours, changed, CONDITION_POLICY))
    assert all(_webhook_policy_verdicts(with_ours, _STATUS_POD, CONDITION_POLICY))
    no_status = _changed(_STATUS_POD, "status", None)
    assert all(_webhook_policy_verdicts(no_status, _changed(no_status, "status.conditions", [_OURS]),
                                        CONDITION_POLICY))


_NODE: dict[str, Any] = {
    "metadata": {"name": "gb200-a-00", "resourceVersion": "9", "managedFields": [{"manager": "kubelet"}],
                 "labels": {keys.CLIQUE_LABEL: "uuid.1", "kubernetes.io/os": "linux"},
                 "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
    "spec": {"podCIDR": "10.0.1.0/24"},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}
_NODE_LABELS = _NODE["metadata"]["labels"]


@pytest.mark.parametrize(("new", "allowed"), [
    (_changed(_NODE, "metadata.labels", {**_NODE_LABELS, keys.DOMAIN_LABEL: "uuid.1"}), True),
    (_changed(_changed(_NODE, "metadata.labels", {**_NODE_LABELS, keys.DOMAIN_LABEL: "uuid.1"}),
              "metadata.managedFields", [{"manager": "kubelet"}, {"manager": "imex-webhook"}]), True),
    (_changed(_NODE, "metadata.labels", {**_NODE_LABELS, keys.CLIQUE_LABEL: "uuid.2"}), False),
    (_changed(_NODE, "metadata.labels", {keys.CLIQUE_LABEL: "uuid.1"}), False),
    (_changed(_NODE, "metadata.labels", None), False),
    (_changed(_NODE, "metadata.annotations", {}), False),
    (_changed(_NODE, "metadata.finalizers", ["example.com/hold"]), False),
    (_changed(_NODE, "spec.unschedulable", True), False),
    (_changed(_NODE, "spec.taints", [{"key": "example.com/evict", "effect": "NoExecute"}]), False),
    (_changed(_NODE, "spec", None), False),
], ids=["adds-the-domain", "with-managed-fields", "changes-the-clique", "drops-a-label", "drops-every-label",
        "drops-an-annotation", "adds-a-finalizer", "cordons", "taints", "drops-the-spec"])
def test_the_webhook_may_change_only_the_domain_label_of_a_node(new: dict[str, Any], allowed: bool) -> None:
    assert all(_webhook_policy_verdicts(_NODE, new, DOMAIN_POLICY)) is allowed


def test_the_webhook_may_change_and_remove_the_domain_label_of_a_node() -> None:
    labelled = _changed(_NODE, "metadata.labels", {**_NODE_LABELS, keys.DOMAIN_LABEL: "uuid.1"})
    moved = _changed(_NODE, "metadata.labels", {**_NODE_LABELS, keys.DOMAIN_LABEL: "uuid.2"})
    assert all(_webhook_policy_verdicts(labelled, moved, DOMAIN_POLICY))
    assert all(_webhook_policy_verdicts(labelled, _NODE, DOMAIN_POLICY))
    bare = _changed(_changed(_NODE, "metadata.labels", None), "metadata.annotations", None)
    assert all(_webhook_policy_verdicts(bare, _changed(bare, "metadata.labels", {keys.DOMAIN_LABEL: "z"}),
                                        DOMAIN_POLICY))


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
