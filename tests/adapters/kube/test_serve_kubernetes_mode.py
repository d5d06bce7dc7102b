"""``imex-webhook serve --kubeconfig`` end to end: the real TLS server in a subprocess, its caches fed by
the fake API server (seeded with the demo cluster), answering extender calls exactly as kube-scheduler
sends them: /readyz turns ready once every list arrived, the first filter of a ComputeDomain job stores its
DomainReservation (the clique it keeps the job in), bind creates exactly one pods/binding, and a restarted
server still honours the reservation."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests import serving
from tests.kubefake import KubeFake, eventually
from webhook.demo import cluster as demo


def _reservations(fake: KubeFake) -> list[dict[str, Any]]:
    return [o for o in fake.items("domainreservations") if o["metadata"]["name"].startswith("r-")]


def _filter_body(name: str) -> dict[str, object]:
    body = copy.deepcopy(serving.fixture("extender/filter-names-train-8.json"))
    fresh = demo.pod(name, "train-8", 4)
    body["Pod"]["metadata"].update(name=name, uid=fresh["metadata"]["uid"])
    return body  # type: ignore[no-any-return]


def test_serve_on_the_api_server_places_binds_and_keeps_the_reservation_across_a_restart(
        fake: KubeFake, kubeconfig: Path, tmp_path: Path) -> None:
    fake.seed(demo.objects())
    for i in range(2):
        fake.create("pods", demo.pod(f"train-8-{i}", "train-8", 4), keep_uid=True)
    args = ("--kubeconfig", str(kubeconfig))
    with serving.serve(tmp_path / "first", *args) as served:
        ready = served.get("/readyz").json()
        assert ready["ready"] and ready["checks"]["cluster"]["detail"] == "caches synced"
        result = served.post("/filter", _filter_body("train-8-0")).json()
        clique = demo.clique_value("gb200-c")
        assert result["Error"] == "" and result["NodeNames"]
        assert all(n.startswith("gb200-c-") for n in result["NodeNames"]), clique
        # Stored by the filter, before any bind: the binding cycle only confirms it.
        (reservation,) = _reservations(fake)
        assert reservation["spec"]["domain"] == clique and "placedAt" not in reservation["spec"]
        node = result["NodeNames"][0]
        bind = {"PodName": "train-8-0", "PodNamespace": "ml", "PodUID": demo.uid("pod", "ml", "train-8-0"),
                "Node": node}
        assert served.post("/bind", bind).json() == {"Error": ""}
        assert served.post("/bind", bind).json() == {"Error": ""}  # already bound here: success, no new binding
        assert [b["name"] for b in fake.bindings() if b["status"] == 201] == ["train-8-0"]
        (reservation,) = _reservations(fake)
        assert reservation["spec"]["domain"] == clique and "placedAt" in reservation["spec"]
        eventually(lambda: served.get("/inspect").json()["reservations"][0]["state"] == "reserved")
    # A new server (a restart, or another replica) reads the reservation back and follows it.
    with serving.serve(tmp_path / "second", *args) as served:
        inspect = served.get("/inspect").json()
        assert [r["domain"] for r in inspect["reservations"]] == [clique]
        result = served.post("/filter", _filter_body("train-8-1")).json()
        assert result["NodeNames"] and all(n.startswith("gb200-c-") for n in result["NodeNames"])
        assert node not in result["NodeNames"]  # one ComputeDomain pod per node
