"""The monitoring component (manifests/components/monitoring) against rules we did not write.

- The ServiceMonitor, PodMonitor and PrometheusRule pass the Prometheus Operator's own CRD schemas
  (``upstream.PROMETHEUS_OPERATOR``), rendered by kustomize, and point at what the base really runs.
- Every rule and dashboard expression parses with promql-parser, and every metric they name is exported by
  a running service (the demo cluster with its fabric, driven through the demo's jobs; and a replica in
  Kubernetes mode) or a running node agent, as prometheus_client's text parser reads their /metrics; the
  labels they match on, group by and show in annotations are ones those series carry.
- Each alert has a runbook section in docs/OPERATING.md; thresholds tied to settings agree with them.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import promql_parser as pp
import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests import serving
from tests.deploy import promql, upstream
from tests.kubefake import KubeFake
from webhook.demo import cluster as demo_cluster
from webhook.demo import run as demo
from webhook.domain import keys
from webhook.service import deploy, settings

MONITORING = upstream.MANIFESTS / "components" / "monitoring"
DOCS = upstream.REPO / "docs" / "OPERATING.md"
SEVERITIES = {"critical", "warning", "info"}
# Series with samples only after a fault (an internal error) or a fabric hot-add on a node: their names are
# checked, their labels cannot be read from a healthy scrape.
FAULT_ONLY = {"imex_webhook_internal_errors_total", "imex_webhook_fabric_cleanups_total",
              "imex_agent_operations_total", "imex_agent_operation_duration_seconds_bucket"}


def rule_file() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return doc


def alerts() -> list[dict[str, Any]]:
    return [r for g in rule_file()["spec"]["groups"] for r in g["rules"]]


def alert(name: str) -> dict[str, Any]:
    (found,) = [a for a in alerts() if a["alert"] == name]
    return found


def dashboard() -> dict[str, Any]:
    board: dict[str, Any] = json.loads((MONITORING / "dashboard.json").read_text())
    return board


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every alert and every dashboard query."""
    out = [(f"alert {a['alert']}", a["expr"]) for a in alerts()]
    out += [(f"panel {p['title']!r} {t['refId']}", t["expr"]) for p in panels() for t in p["targets"]]
    return out


# -- PromQL ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("where", "expr"), expressions(), ids=[w for w, _ in expressions()])
def test_every_expression_parses_with_a_real_promql_parser(where: str, expr: str) -> None:
    promql.parse(expr)


def test_the_parser_refuses_what_prometheus_would_refuse() -> None:
    for broken in ('sum(rate(imex_webhook_requests_total[5m])', 'rate(imex_webhook_requests_total)',
                   'imex_webhook_requests_total{code=~"5.."} > bool', 'histogram_quantile(0.99 imex)'):
        with pytest.raises(ValueError):
            promql.parse(broken)


def test_the_latency_alert_fires_at_80_percent_of_the_schedulers_http_timeout() -> None:
    assert promql.threshold(alert("ImexExtenderLatencyNearTimeout")["expr"]) == \
        (">", 0.8 * deploy.EXTENDER_HTTP_TIMEOUT_S)


def test_the_attach_alert_fires_at_80_percent_of_the_bind_budget() -> None:
    assert promql.threshold(alert("ImexFabricAttachSlow")["expr"]) == (">", 0.8 * settings.DEFAULT_BIND_BUDGET)


FULL_RACK = "ImexWebhookNoDomainFitsFullRack"


def _full_rack(rule: dict[str, Any]) -> tuple[tuple[str, float], tuple[str, float], str]:
    """The full-rack alert's two comparisons, (room for 4-GPU pods, GPUs of the largest domain), and its
    duration: ``<room> < pods and on (namespace) <size> >= GPUs``."""
    top = promql.parse(rule["expr"])
    assert isinstance(top, pp.BinaryExpr) and str(top.op) == "and", rule["expr"]
    (room,) = promql.selectors(str(top.lhs))
    assert promql.metric_name(room) == "imex_webhook_largest_group_fits"
    assert ("gpus_per_pod", "4") in {(m.name, m.value) for m in room.matchers.matchers}
    return promql.threshold(str(top.lhs)), promql.threshold(str(top.rhs)), str(rule["for"])


def test_the_full_rack_alert_wants_room_for_a_64_gpu_job_where_a_domain_could_hold_one() -> None:
    room, size, duration = _full_rack(alert(FULL_RACK))
    assert (room, size, duration) == (("<", 16), (">=", 64), "2h")
    assert room[1] * 4 == size[1]  # 16 pods of 4 GPUs


def test_the_domain_health_alert_warns_of_a_degraded_or_unhealthy_domain_by_name_after_10_minutes() -> None:
    rule = alert("ImexWebhookDomainDegraded")
    (selector,) = promql.selectors(rule["expr"])
    assert promql.metric_name(selector) == "imex_webhook_domain_health"
    (health,) = [m for m in selector.matchers.matchers if m.name == "health"]
    assert re.fullmatch(health.value, "degraded") and re.fullmatch(health.value, "unhealthy")
    assert not re.fullmatch(health.value, "healthy")
    assert promql.threshold(rule["expr"]) == ("==", 1)
    assert (rule["for"], rule["labels"]["severity"]) == ("10m", "warning")
    assert "domain" in promql.template_labels({"summary": rule["annotations"]["summary"]})


# -- Alerts and their runbook ----------------------------------------------------------------------------


def _anchors(markdown: str) -> dict[str, str]:
    """GitHub's heading anchors -> the text under each heading, up to the next heading."""
    out: dict[str, str] = {}
    parts = re.split(r"^(#{1,6} .+)$", markdown, flags=re.MULTILINE)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        title = heading.lstrip("#").strip().lower()
        out[re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-")] = body.strip()
    return out


def test_every_alert_is_named_once_and_says_how_bad_and_what_it_means() -> None:
    names = [a["alert"] for a in alerts()]
    assert len(names) == len(set(names)) and len(names) >= 20
    for rule in alerts():
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_every_alert_has_a_runbook_section_in_the_operating_guide() -> None:
    text = DOCS.read_text()
    anchors = _anchors(text)
    for rule in alerts():
        url = rule["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        assert path == "docs/OPERATING.md", url
        assert anchor == rule["alert"].lower() and len(anchors.get(anchor, "")) > 100, \
            f"{rule['alert']}: no runbook section under #{anchor}"
        assert f"| {rule['alert']} | {rule['labels']['severity']} |" in text, f"{rule['alert']} not in the table"


# -- Exported metrics ------------------------------------------------------------------------------------


Exported = dict[str, set[str]]  # series name -> label names its samples carry
SAMPLED = "__sampled__"  # marks a series that had samples (an unlabelled one carries no other name)


def _series(text: str) -> Exported:
    suffixes = {"counter": ("_total", "_created"), "gauge": ("",), "info": ("_info",), "unknown": ("",),
                "histogram": ("_bucket", "_count", "_sum", "_created"), "summary": ("", "_count", "_sum", "_created")}
    out: Exported = {}
    for family in text_string_to_metric_families(text):
        for suffix in suffixes.get(family.type, ("",)):
            out.setdefault(family.name + suffix, set())
        for sample in family.samples:
            out.setdefault(sample.name, set()).update({*sample.labels, SAMPLED})
    return out


def _merge(*scrapes: Exported) -> Exported:
    out: Exported = {}
    for scrape in scrapes:
        for name, labels in scrape.items():
            out.setdefault(name, set()).update(labels)
    return out


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """/metrics of a service that ran the demo's jobs, of a Kubernetes-mode replica and of an agent."""
    tmp = tmp_path_factory.mktemp("scrapes")
    embedded = _demo_scrape(tmp / "demo")
    fake = KubeFake()
    try:
        kubeconfig = fake.write_kubeconfig(tmp / "kubeconfig")
        with serving.serve(tmp / "kube", "--kubeconfig", str(kubeconfig)) as served:
            kube = served.get("/metrics").text
    finally:
        fake.close()
    port = serving.free_port()
    scenario = upstream.REPO / "tests" / "fixtures" / "nvml" / "fabric-struct-v2.yaml"
    with subprocess.Popen([sys.executable, "-m", "webhook", "agent", "--node", "gpu-1", "--nvml-sim", str(scenario),
                           "--listen", f"127.0.0.1:{port}", "--log-level", "warning"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as agent:
        try:
            agent_text = _poll(f"http://127.0.0.1:{port}/metrics")
        finally:
            agent.terminate()
            agent.wait(15)
    return {"embedded": embedded, "kube": kube, "agent": agent_text}


@pytest.fixture(scope="module")
def exported(scrapes: dict[str, str]) -> Exported:
    series = {source: _series(text) for source, text in scrapes.items()}
    # What the runs must have produced for the label checks below to mean something.
    assert "domain" in series["embedded"]["imex_webhook_domain_gpus"]
    assert "kind" in series["kube"]["imex_webhook_cache_stalled"]
    assert "health" in series["agent"]["imex_agent_gpus"]
    return _merge(*series.values())


def _demo_scrape(tmp: Path) -> str:
    """/metrics of the demo cluster's service with its fabric, after the demo's jobs went through it."""
    with serving.serve(tmp, "--fabric", "embedded") as served:
        outcomes = demo.run(demo.Client(served.url, served.ca), io.StringIO())
        assert all(o.ok for o in outcomes), [o.problems for o in outcomes]
        return served.get("/metrics").text


def _poll(url: str) -> str:
    import time

    deadline = time.monotonic() + 30
    while True:
        try:
            reply = requests.get(url, timeout=5)
            if reply.status_code == 200 and "imex_agent_gpus{" in reply.text:
                return reply.text
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer"
        time.sleep(0.1)


def test_every_metric_a_rule_or_the_dashboard_names_is_exported(exported: Exported) -> None:
    named = {(where, promql.metric_name(s)) for where, expr in expressions() for s in promql.selectors(expr)}
    variables = [v["definition"] for v in dashboard()["templating"]["list"] if v["type"] == "query"]
    named |= {("dashboard variable", m) for v in variables for m in re.findall(r"label_values\((\w+)", v)}
    missing = sorted((where, name) for where, name in named if name not in exported and name not in promql.SYNTHETIC)
    assert not missing, missing
    assert len({name for _, name in named}) >= 15


def _labels_of(exported: Exported) -> Any:
    def labels(name: str) -> set[str]:
        return exported.get(name, set()) | promql.TARGET_LABELS
    return labels


def test_every_label_matched_or_grouped_on_is_one_the_series_carry(exported: Exported) -> None:
    checked = 0
    for where, expr in expressions():
        names = {promql.metric_name(s) for s in promql.selectors(expr)} - promql.SYNTHETIC
        carried = set().union(*(exported[n] for n in names)) | promql.TARGET_LABELS | {"le"}
        for selector in promql.selectors(expr):
            name = promql.metric_name(selector)
            if name in promql.SYNTHETIC or name in FAULT_ONLY:
                continue
            assert SAMPLED in exported[name], f"{where}: {name} has no samples to read its labels from"
            assert promql.matched_labels(selector) <= exported[name] | promql.TARGET_LABELS, (where, name)
            checked += 1
        if not names & FAULT_ONLY:
            assert promql.grouping_labels(expr) <= carried, where
    assert checked >= 40


def test_every_label_an_alert_shows_in_its_annotations_is_on_its_series(exported: Exported) -> None:
    for rule in alerts():
        shown = promql.template_labels(rule["annotations"])
        kept = promql.result_labels(rule["expr"], _labels_of(exported))
        assert shown <= kept, f"{rule['alert']} shows {sorted(shown - kept)}, which its result does not carry"


def test_the_demo_run_shows_in_the_alerting_metrics(scrapes: dict[str, str]) -> None:
    """The demo's 20-pod job fits no domain: the metric ImexGroupsNeverFit reads says so."""
    text = scrapes["embedded"]
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for f in text_string_to_metric_families(text) for s in f.samples}
    assert values[("imex_webhook_groups_waiting", (("reason", "no-domain-ever"),))] == 1
    assert values[("imex_webhook_fabric_attachments", (("phase", "Ready"),))] == 2  # the fabric job's two pods
    assert values[("imex_webhook_fabric_attach_duration_seconds_count", (("outcome", "ready"),))] == 2
    # The racks with a tray whose fabric is degraded (rack B) are degraded, ImexWebhookDomainDegraded's
    # condition; every other domain is healthy; each domain has exactly one health at 1.
    health = {labels: v for (name, labels), v in values.items() if name == "imex_webhook_domain_health"}
    current = {dict(labels)["domain"]: dict(labels)["health"] for labels, v in health.items() if v == 1}
    assert len(health) == 3 * len(current) and sum(health.values()) == len(current) == 4
    labels = [n["metadata"]["labels"] for n in demo_cluster.nodes()]
    degraded = {n[keys.CLIQUE_LABEL] for n in labels if n.get(keys.HEALTH_LABEL) == "degraded"}
    assert {d for d, h in current.items() if h != "healthy"} == degraded
    assert {current[d] for d in degraded} <= {"degraded"}
    # After the demo's jobs no rack has 16 trays free: the full-rack alert's condition holds.
    room, _, _ = _full_rack(alert(FULL_RACK))
    assert values[("imex_webhook_largest_group_fits", (("gpus_per_pod", "4"),))] == 12 < room[1]
    bucket = [s for s in values if s[0] == "imex_webhook_request_duration_seconds_bucket"]
    top = max(float(dict(labels)["le"]) for _, labels in bucket if dict(labels)["le"] != "+Inf")
    # histogram_quantile can only report a p99 above the alert's threshold if a bucket bound lies above it.
    assert top >= promql.threshold(alert("ImexExtenderLatencyNearTimeout")["expr"])[1]


# -- Dashboard -------------------------------------------------------------------------------------------


def test_the_dashboard_is_one_grid_of_panels_each_querying_the_chosen_prometheus() -> None:
    board = dashboard()
    assert board["uid"] == "imex-webhook" and board["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, panel["title"]
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]


def test_the_dashboard_covers_what_an_operator_asks_first() -> None:
    queried = " ".join(t["expr"] for p in panels() for t in p["targets"])
    for metric in ("imex_webhook_domain_gpus", "imex_webhook_groups_waiting", "imex_webhook_request_duration_seconds",
                   "imex_webhook_fabric_attach_duration_seconds", "imex_webhook_cache_progress_age_seconds",
                   "imex_webhook_domain_fit_pods", "imex_webhook_largest_group_fits", "imex_webhook_domain_health",
                   "imex_webhook_spare_nodes"):
        assert metric in queried, metric
    latency = [t["expr"] for p in panels() for t in p["targets"] if "request_duration_seconds_bucket" in t["expr"]]
    assert latency and all("verb" in promql.grouping_labels(e) for e in latency)


def test_the_domain_health_panel_lists_each_domains_current_health_beside_the_spare_nodes_held() -> None:
    (panel,) = [p for p in panels() if p["title"] == "Domain health"]
    (target,) = panel["targets"]
    assert panel["type"] == "table" and target["instant"] and target["format"] == "table"
    assert promql.grouping_labels(target["expr"]) == {"domain", "health"}
    assert promql.threshold(target["expr"]) == ("==", 1)  # the enum's current value only
    (spares,) = [p for p in panels() if any("imex_webhook_spare_nodes" in t["expr"] for t in p["targets"])]
    assert spares["gridPos"]["y"] == panel["gridPos"]["y"]  # side by side, in the Domains row


def test_the_largest_group_panel_draws_the_full_rack_alerts_line() -> None:
    (panel,) = [p for p in panels() if any("imex_webhook_largest_group_fits" in t["expr"] for t in p["targets"])]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    room, _, _ = _full_rack(alert(FULL_RACK))
    assert [s["value"] for s in steps] == [None, room[1]]
    assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "line"


# -- The component, rendered -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return upstream.render(MONITORING)


@pytest.fixture(scope="module")
def operator_schemas() -> upstream.Schemas:
    return upstream.schemas(upstream.PROMETHEUS_OPERATOR)


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found


@upstream.COLD_CACHE
def test_the_monitoring_objects_pass_the_prometheus_operators_crd_schemas(
        rendered: list[dict[str, Any]], operator_schemas: upstream.Schemas) -> None:
    objects = [d for d in rendered if d["apiVersion"].startswith("monitoring.coreos.com/")]
    assert sorted(d["kind"] for d in objects) == ["PodMonitor", "PrometheusRule", "ServiceMonitor"]
    for obj in objects:
        assert upstream.problems(obj, operator_schemas) == []
        assert obj["metadata"]["namespace"] == deploy.NAMESPACE


@upstream.COLD_CACHE
def test_the_schema_check_catches_a_misspelt_field(rendered: list[dict[str, Any]],
                                                   operator_schemas: upstream.Schemas) -> None:
    monitor = copy.deepcopy(_one(rendered, "PodMonitor"))
    monitor["spec"]["podMetricEndpoints"] = monitor["spec"].pop("podMetricsEndpoints")
    rule = copy.deepcopy(_one(rendered, "PrometheusRule"))
    rule["spec"]["groups"][0]["rules"][0]["for"] = 300  # a duration is a string
    assert any("podMetricEndpoints" in p for p in upstream.problems(monitor, operator_schemas))
    assert upstream.problems(rule, operator_schemas)


@upstream.COLD_CACHE
def test_the_service_monitor_scrapes_the_webhook_replicas_on_their_probe_port(
        rendered: list[dict[str, Any]]) -> None:
    service = _one(rendered, "Service", deploy.SERVICE_NAME)
    monitor = _one(rendered, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert (endpoint["scheme"], endpoint["path"]) == ("http", "/metrics") and "tlsConfig" not in endpoint
    # The Service's port leads to the container port serve --probe-bind listens on (plain HTTP).
    target = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}[endpoint["port"]]
    (container,) = _one(rendered, "Deployment", deploy.SERVICE_NAME)["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[target] == deploy.PROBE_PORT and f"--probe-bind=0.0.0.0:{deploy.PROBE_PORT}" in container["args"]


@upstream.COLD_CACHE
def test_the_pod_monitor_scrapes_every_agent_on_its_metrics_port(rendered: list[dict[str, Any]]) -> None:
    agents = _one(rendered, "DaemonSet")["spec"]["template"]
    monitor = _one(rendered, "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= agents["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (container,) = agents["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    listen = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--listen=")]
    assert endpoint["path"] == "/metrics" and listen == [f"0.0.0.0:{ports[endpoint['port']]}"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in endpoint["relabelings"]


@upstream.COLD_CACHE
def test_the_dashboard_ships_as_a_config_map_grafanas_sidecar_loads(rendered: list[dict[str, Any]]) -> None:
    config_map = _one(rendered, "ConfigMap", "imex-webhook-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == deploy.NAMESPACE
    assert json.loads(config_map["data"]["imex-webhook.json"]) == dashboard()
    assert len(yaml.safe_dump(config_map).encode()) < 1024 * 1024  # a ConfigMap holds at most 1 MiB


def _documented_patch() -> list[dict[str, Any]]:
    """The overlay patch the full-rack alert's runbook section gives."""
    section = _anchors(DOCS.read_text())[FULL_RACK.lower()]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    patches: list[dict[str, Any]] = yaml.safe_load(block)["patches"]
    return patches


def _build(overlay: Path, component: Path, patches: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(upstream.MANIFESTS, overlay)],
        "components": [os.path.relpath(component, overlay)], "patches": patches}))
    return subprocess.run([str(upstream.kustomize()), "build", str(overlay)], capture_output=True, text=True,
                          check=False, timeout=120)


@upstream.COLD_CACHE
def test_the_runbooks_patch_sets_the_full_rack_alerts_threshold_and_duration_alone(tmp_path: Path) -> None:
    proc = _build(tmp_path / "overlay", MONITORING, _documented_patch())
    assert proc.returncode == 0, proc.stderr
    rule = _one([d for d in yaml.safe_load_all(proc.stdout) if d], "PrometheusRule")
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    (patched,) = [r for r in rules if r["alert"] == FULL_RACK]
    assert _full_rack(patched) == (("<", 18), (">=", 72), "30m")
    assert [r for r in rules if r is not patched] == [a for a in alerts() if a["alert"] != FULL_RACK]


@upstream.COLD_CACHE
def test_the_runbooks_patch_is_refused_once_the_rule_has_moved(tmp_path: Path) -> None:
    moved = tmp_path / "monitoring"
    shutil.copytree(MONITORING, moved)
    doc = rule_file()
    doc["spec"]["groups"].insert(0, doc["spec"]["groups"].pop())
    (moved / "prometheusrule.yaml").write_text(yaml.safe_dump(doc))
    assert _build(tmp_path / "same", moved, []).returncode == 0  # the moved rule file itself builds
    proc = _build(tmp_path / "overlay", moved, _documented_patch())
    assert proc.returncode != 0 and "/spec/groups/5/rules/0/alert" in proc.stderr, proc.stderr


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return selector.get("matchLabels", {}).items() <= labels.items() and not selector.get("matchExpressions")


@upstream.COLD_CACHE
def test_the_network_policies_let_prometheus_reach_every_port_the_monitors_scrape(
        rendered: list[dict[str, Any]]) -> None:
    service = _one(rendered, "Service", deploy.SERVICE_NAME)
    webhook = _one(rendered, "Deployment", deploy.SERVICE_NAME)["spec"]["template"]
    agents = _one(rendered, "DaemonSet")["spec"]["template"]
    (service_endpoint,) = _one(rendered, "ServiceMonitor")["spec"]["endpoints"]
    target = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}[service_endpoint["port"]]
    (agent_endpoint,) = _one(rendered, "PodMonitor")["spec"]["podMetricsEndpoints"]
    for pod, port_name in ((webhook, target), (agents, agent_endpoint["port"])):
        ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", ())}
        governing = [p for p in rendered if p["kind"] == "NetworkPolicy"
                     and _selects(p["spec"]["podSelector"], pod["metadata"]["labels"])
                     and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]
        if not governing:
            continue  # no policy: every source is admitted
        admitted = {port["port"] for p in governing for rule in p["spec"].get("ingress", ())
                    for port in rule.get("ports", ())}
        assert ports[port_name] in admitted or port_name in admitted, f"no policy admits port {port_name}"
