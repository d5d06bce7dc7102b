"""The cluster map in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``)
loads ``/ui`` from ``serve`` over TLS on the demo cluster with the simulated fabric, and the page shows
every domain and group ``/inspect`` knows, follows the demo scenario's binds within a refresh, draws the
fabric pool's attached GPUs and free blocks, says why the group that fits nowhere waits, shows a hostile
group name as text, badges a degraded or unhealthy domain (never a healthy one) and the spare nodes held in
a domain, marks a domain held for the group that waited longest ``(held)``, and logs no console error (a
failed load or a refused inline script would be one).
Saves a screenshot (to $IMEX_UI_SCREENSHOT too when set: docs/cluster-map.png is made that way)."""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests import builders, serving
from tests.domain.test_holds import _group
from tests.ui import browser
from webhook.demo import cluster as demo_cluster
from webhook.demo import run as demo
from webhook.domain import keys
from webhook.wire.timestamps import parse_rfc3339, rfc3339

pytestmark = pytest.mark.timeout(120)
HOSTILE = "<img src=x onerror=window.__pwned=1>"


def _wait(what: str, check: Callable[[], Any], seconds: float = 20.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"the page did not {what} within {seconds:g} s")
        time.sleep(0.2)


def _drawn(driver: Any, inspect: Callable[[], dict[str, Any]], what: str,
           until: Callable[[dict[str, Any]], bool] = lambda body: True) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what the page shows, the /inspect answer it drew) once the page drew an answer that satisfies
    ``until``. The service's snapshot moves on by itself (fabric reconcile, learnt pods), so the page and
    a fresh /inspect are compared until they agree on the version."""
    last: dict[str, Any] = {}
    answer: dict[str, Any] = {}

    def done() -> bool:
        answer.clear()
        answer.update(inspect())
        last.clear()
        last.update(_shown(driver))
        return until(answer) and last["version"] == str(answer["version"])

    try:
        _wait(what, done)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the page shows version {last.get('version')} of {answer.get('version')} "
                             f"after {last.get('refreshes')} refreshes, status {last.get('status')!r}") from exc
    return last, answer


def _shown(driver: Any) -> dict[str, Any]:
    """What the page draws, read from its DOM in one script call."""
    result: dict[str, Any] = driver.execute_script("""
        const cells = {};
        for (const c of document.querySelectorAll('.gpu[data-group]')) {
          const node = c.closest('.tray').dataset.node;
          (cells[c.dataset.group] = cells[c.dataset.group] || []).push(node);
        }
        const trays = {};
        for (const d of document.querySelectorAll('[data-domain]'))
          trays[d.dataset.domain] = [...d.querySelectorAll('.tray')].map(t => t.dataset.node);
        return {
          version: document.body.dataset.version || null,
          refreshes: Number(document.body.dataset.refreshes || 0),
          trays: trays,
          metas: Object.fromEntries([...document.querySelectorAll('[data-domain]')].map(
            d => [d.dataset.domain, d.querySelector('.meta').textContent])),
          fits: Object.fromEntries([...document.querySelectorAll('[data-domain]')].map(
            d => [d.dataset.domain, (d.querySelector('.fits') || {}).textContent || null])),
          largest: document.getElementById('largest').textContent,
          groups: [...document.querySelectorAll('#groups tr[data-group]')].map(r => r.dataset.group),
          waiting: Object.fromEntries([...document.querySelectorAll('#waiting [data-group]')].map(
            w => [w.dataset.group, w.textContent])),
          cells: cells,
          attachedOn: Object.fromEntries([...document.querySelectorAll('.tray')].map(
            t => [t.dataset.node, t.querySelectorAll('.gpu.attached').length])),
          pools: Object.fromEntries([...document.querySelectorAll('.pool[data-zone]')].map(
            p => [p.dataset.zone, p.querySelectorAll('.block').length])),
          attachments: [...document.querySelectorAll('#attachments tr[data-pod]')].map(r => r.dataset.pod),
          reservations: [...document.querySelectorAll('#reservations tr[data-group]')].map(r => r.dataset.group),
          status: document.getElementById('status').textContent,
          pwned: window.__pwned === 1,
          hostileImages: document.querySelectorAll('img').length,
        };
    """)
    return result


def _check_matches(shown: dict[str, Any], inspect: dict[str, Any]) -> None:
    """Every domain with its nodes and the room a new group has there, every group, its GPUs on the nodes its
    pods are bound to."""
    assert shown["trays"] == {d["domain"]: [n["node"] for n in d["nodeDetails"]] for d in inspect["domains"]}
    assert sorted(shown["groups"]) == sorted(g["group"] for g in inspect["groups"])
    for g in inspect["groups"]:
        expected = sorted(n for p in g["pods"] if p["node"] for n in [p["node"]] * p["gpus"])
        assert sorted(shown["cells"].get(g["group"], [])) == expected, g["name"]
    waiting = {g["group"] for g in inspect["groups"] if g["pending"]}
    assert set(shown["waiting"]) == waiting
    assert sorted(shown["reservations"]) == sorted(r["group"] for r in inspect["reservations"])
    assert sorted(shown["attachments"]) == sorted(a["pod"] for a in inspect["attachments"])
    assert shown["pools"] == {z: min(n, 512) for z, n in inspect["fabricFree"].items()}
    assert shown["fits"] == {d["domain"]: "a new group fits here now: " + _room(d["fitPods"])
                             for d in inspect["domains"]}
    assert shown["largest"] == "Largest new group one domain fits now: " + _room(inspect["largestGroupFits"])


def _room(fits: dict[str, int]) -> str:
    pods = "pod" if fits["4"] == 1 else "pods"
    return f"{fits['4']} {pods} \N{MULTIPLICATION SIGN} 4 GPUs \N{MIDDLE DOT} {fits['2']} \N{MULTIPLICATION SIGN} 2 " \
           f"\N{MIDDLE DOT} {fits['1']} \N{MULTIPLICATION SIGN} 1"


def test_the_map_shows_the_demo_cluster_follows_binds_and_logs_no_error(tmp_path: Path) -> None:
    with serving.serve(tmp_path / "serve", "--fabric", "embedded", ready_timeout=60) as served, \
            browser.chromium(tmp_path / "profile", tmp_path / "serve" / "tls" / "tls.crt") as driver:
        def inspect() -> dict[str, Any]:
            body: dict[str, Any] = served.get("/inspect").json()
            return body

        driver.get(served.url + "/ui?refresh=1")
        before, first = _drawn(driver, inspect, "draw /inspect")
        _check_matches(before, first)
        assert len(before["trays"]) == 4 and before["status"].startswith("live")
        metas = [before["metas"][demo_cluster.clique_value(r)] for r in ("gb200-a", "gb200-b", "gb200-c")]
        times = "\N{MULTIPLICATION SIGN}"
        assert [m.split(" · ")[:2] for m in metas] == [["NVL72", f"18 trays {times} 4 GPUs"]] * 2 + [
            ["NVL36", f"9 trays {times} 4 GPUs"]]
        assert list(before["cells"]) == [f"cd:{demo_cluster.uid('cd', 'ml', 'inference-2')}"]

        outcomes = demo.run(demo.Client(served.url, served.ca), io.StringIO())  # /mutate, /filter, /bind
        assert all(o.ok for o in outcomes), [o.problems for o in outcomes]
        shown, after = _drawn(driver, inspect, "follow the binds",
                              lambda body: sum(g["placed"] for g in body["groups"]) == 2 + 8 + 16 + 4 + 2)
        _check_matches(shown, after)
        names = {g["group"]: g["name"] for g in after["groups"]}
        assert {names[g] for g in shown["cells"]} == {"ml/inference-2", "ml/train-8", "ml/train-16", "ml/train-4",
                                                       "ml/fabric-3x2"}
        (waiting,) = shown["waiting"].values()
        assert "ml/train-20" in waiting and "no domain can host 20 pods" in waiting
        assert shown["attachedOn"]["fab-00"] == 2 and shown["attachedOn"]["fab-01"] == 2

        shot = tmp_path / "cluster-map.png"
        height = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]["height"]
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",  # the whole page, for docs/cluster-map.png
                               {"width": 1600, "height": min(int(height), 4000), "deviceScaleFactor": 1,
                                "mobile": False})
        assert driver.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("IMEX_UI_SCREENSHOT"):
            shutil.copyfile(shot, os.environ["IMEX_UI_SCREENSHOT"])

        # A group's namespace is text, never markup, even when it looks like an image with a handler (a
        # request's namespace is not validated in embedded mode; a group name must be a label value).
        hostile = demo_cluster.pod("hostile-0", None, 4, annotations={keys.GROUP_ANNOTATION: "hostile",
                                                                      keys.GROUP_SIZE_ANNOTATION: "30"},
                                   namespace=HOSTILE)
        nodes = [n["metadata"]["name"] for n in demo_cluster.nodes()]
        assert served.post("/filter", {"Pod": hostile, "Nodes": None, "NodeNames": nodes}).status_code == 200
        shown, _ = _drawn(driver, inspect, "show the hostile group",
                          lambda body: any(HOSTILE in g["name"] for g in body["groups"]))
        assert any(HOSTILE in text for text in shown["waiting"].values())
        assert not shown["pwned"] and shown["hostileImages"] == 0

        errors = browser.console_errors(driver)
        driver.execute_script("console.error('probe: the console is collected')")
        probe = browser.console_errors(driver)
        assert errors == [], errors
        assert any("probe: the console is collected" in m for m in probe)  # the check above can fail


def test_the_map_says_so_when_the_service_goes_away_and_keeps_the_last_picture(tmp_path: Path) -> None:
    with serving.serve(tmp_path / "serve", ready_timeout=60) as served, \
            browser.chromium(tmp_path / "profile", tmp_path / "serve" / "tls" / "tls.crt") as driver:
        driver.get(served.url + "/ui?refresh=1")
        _wait("draw /inspect", lambda: _shown(driver)["version"])
        drawn = _shown(driver)["trays"]
        served.process.terminate()
        served.process.wait(timeout=20)
        status = _wait("report the lost service", lambda: (s := _shown(driver))["status"].startswith("cannot")
                       and s["status"])
        assert "showing the last map" in status and _shown(driver)["trays"] == drawn
        # The failed fetches are the browser's own console errors; nothing else (no script exception).
        assert all("inspect" in m or "Failed to fetch" in m or "ERR_CONNECTION_REFUSED" in m
                   for m in browser.console_errors(driver))
    with pytest.raises(requests.ConnectionError):
        requests.get(served.url + "/ui", verify=str(served.ca), timeout=5)


def _node(name: str, domain: str, fabric: str = "") -> dict[str, Any]:
    node = builders.node(name, 4, domain)
    if fabric:
        node["metadata"]["labels"][keys.HEALTH_LABEL] = fabric
    return node


def _badges(driver: Any) -> dict[str, dict[str, Any]]:
    """Each domain card's health badge (text and tooltip, None without one) and spare-node badge."""
    result: dict[str, dict[str, Any]] = driver.execute_script("""
        return Object.fromEntries([...document.querySelectorAll('[data-domain]')].map(d => {
          const health = d.querySelector('.health'), spare = d.querySelector('.spare');
          return [d.dataset.domain, {health: health ? health.textContent : null, why: health ? health.title : null,
                                     spare: spare ? spare.textContent : null}];
        }));
    """)
    return result


def test_a_degraded_domain_shows_its_badge_with_the_nodes_behind_it_and_a_healthy_one_none(tmp_path: Path) -> None:
    nodes = [_node("ok-00", "dom-ok"), _node("ok-01", "dom-ok"), _node("ok-02", "dom-ok"),
             _node("bad-00", "dom-bad"), _node("bad-01", "dom-bad", fabric="degraded"),
             _node("down-00", "dom-down", fabric="unhealthy")]
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    with serving.serve(tmp_path / "serve", "--cluster", str(cluster), ready_timeout=60) as served, \
            browser.chromium(tmp_path / "profile", tmp_path / "serve" / "tls" / "tls.crt") as driver:
        # A group of 2 asking for 1 spare node: the healthy domain is chosen (--fabric-health-policy avoid).
        spare = {keys.GROUP_ANNOTATION: "spared", keys.GROUP_SIZE_ANNOTATION: "2", keys.SPARE_NODES_ANNOTATION: "1"}
        pod = builders.pod("spared-0", None, 4, annotations=spare)
        names = [n["metadata"]["name"] for n in nodes]
        assert served.post("/filter", {"Pod": pod, "Nodes": None, "NodeNames": names}).status_code == 200
        domains = {d["domain"]: d for d in served.get("/inspect").json()["domains"]}
        assert (domains["dom-ok"]["spareNodes"], domains["dom-bad"]["health"]) == (1, "degraded")

        driver.get(served.url + "/ui?refresh=1")
        shown = _wait("draw the domains' badges", lambda: (b := _badges(driver)) and len(b) == 3 and b)
        assert shown["dom-ok"] == {"health": None, "why": None, "spare": "1 spare"}
        assert shown["dom-bad"]["health"] == "degraded" and shown["dom-bad"]["spare"] is None
        assert "bad-01" in shown["dom-bad"]["why"] and "bad-00" not in shown["dom-bad"]["why"]
        assert shown["dom-down"]["health"] == "unhealthy" and "down-00" in shown["dom-down"]["why"]
        assert browser.console_errors(driver) == []


def _held_cluster(now: float) -> list[dict[str, Any]]:
    """Racks a and b of 4 trays: rack a runs two groups that end within the hour by their walltimes, rack b
    one that states none; 'big' (4 pods, one rack's worth) has waited 20 minutes: rack a is held for it
    until 'long' ends, 50 minutes from ``now``. The groups are the hold tests' (tests/domain/test_holds.py)."""
    started = now - 600
    objects = [*builders.rack("a", "aaaa-1111.7", 4), *builders.rack("b", "bbbb-2222.7", 4),
               *_group("short", 2, runtime="30m", nodes=["a-00", "a-01"], created=started),
               *_group("long", 2, runtime="1h", nodes=["a-02", "a-03"], created=started),
               *_group("endless", 4, nodes=["b-00", "b-01", "b-02", "b-03"], created=started),
               *_group("big", 4, created=now - 1200)]
    for obj in objects:
        if obj["kind"] == "Pod" and obj["status"].get("startTime"):
            obj["status"]["startTime"] = rfc3339(started, "s")
    return objects


def test_a_held_domain_is_marked_held_on_the_map_with_the_group_it_is_held_for(tmp_path: Path) -> None:
    """The map shows no held GPUs or expected start of its own (they are /inspect's, explain's and the
    metrics'): the domain card names the group it is reserved for, marked ``(held)``, and the reservations
    table gives the state ``held``."""
    now = time.time()
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": _held_cluster(now)}))
    with serving.serve(tmp_path / "serve", "--cluster", str(cluster), "--max-holds", "1", "--hold-after", "60",
                       "--housekeeping-interval", "1", ready_timeout=60) as served, \
            browser.chromium(tmp_path / "profile", tmp_path / "serve" / "tls" / "tls.crt") as driver:
        def inspect() -> dict[str, Any]:
            body: dict[str, Any] = served.get("/inspect").json()
            return body

        body = _wait("hold rack a for ml/big (upkeep's timed round)",
                     lambda: (b := inspect()) and any(r["state"] == "held" for r in b["reservations"]) and b)
        (hold,) = [r for r in body["reservations"] if r["state"] == "held"]
        assert (hold["name"], hold["domain"]) == ("ml/big", "aaaa-1111.7")
        assert abs(parse_rfc3339(hold["expectedStart"]) - (now + 3000)) < 5, "when 'long' ends by its walltime"
        assert {d["domain"]: d["heldGpus"] for d in body["domains"]} == {"aaaa-1111.7": 16, "bbbb-2222.7": 0}

        driver.get(served.url + "/ui?refresh=1")
        shown, _ = _drawn(driver, inspect, "draw the hold",
                               lambda b: any(r["state"] == "held" for r in b["reservations"]))
        assert shown["metas"]["aaaa-1111.7"].endswith("reserved for ml/big (held)"), shown["metas"]
        assert "(held)" not in shown["metas"]["bbbb-2222.7"]
        rows = driver.execute_script("""
            return [...document.querySelectorAll('#reservations tr[data-group]')].map(
              r => [...r.children].map(c => c.textContent));
        """)
        assert [(r[0], r[2]) for r in rows] == [("ml/big", "held")], rows
        assert browser.console_errors(driver) == []
