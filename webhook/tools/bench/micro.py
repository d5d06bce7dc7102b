"""In-process micro-benchmarks: the decision functions alone, next to ``orjson.loads`` of the same payload.

No HTTP, no TLS: these figures say what the service's own code costs per call, and the floor says
what merely decoding the request costs. The engine and store are the service's (an embedded backend
over the same cluster the HTTP benchmark serves); the NodeList case goes through the Flask view with
the test client, so parsing every Node of the list and encoding the reply are counted too.
"""

from __future__ import annotations

import gc
import io
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.adapters.embedded import EmbeddedBackend
from webhook.domain.admission import admission_review
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.engine.engine import Engine
from webhook.http.app import create_app
from webhook.state.cluster import ClusterStore
from webhook.tools.bench import baseline, payloads
from webhook.tools.stats import percentile
from webhook.wire import admission


@dataclass(frozen=True)
class Timing:
    samples: int
    p50_ms: float
    p99_ms: float
    mean_ms: float

    def as_dict(self) -> dict[str, float]:
        return {"samples": self.samples, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms, "mean_ms": self.mean_ms}


def timing(seconds: list[float]) -> Timing:
    ms = [s * 1e3 for s in seconds]
    return Timing(len(ms), percentile(ms, 50), percentile(ms, 99), sum(ms) / len(ms) if ms else 0.0)


def sample(fn: Callable[[], Any], budget: float, least: int = 5, most: int = 5000,
           before: Callable[[], Any] | None = None) -> list[float]:
    """Time ``fn`` until ``budget`` seconds are spent (at least ``least``, at most ``most`` calls).

    ``before`` runs untimed ahead of every call (to reset state, e.g. forget a domain choice)."""
    fn()  # first call warms caches (snapshot, interned strings) that a running service has warm
    out: list[float] = []
    end = time.perf_counter() + budget
    while len(out) < most and (len(out) < least or time.perf_counter() < end):
        if before is not None:
            before()
        begin = time.perf_counter()
        fn()
        out.append(time.perf_counter() - begin)
    return out


def paired(fn: Callable[[], Any], floor: Callable[[], Any], pairs: int) -> tuple[list[float], list[float]]:
    """Alternate ``floor`` and ``fn``, so a busy neighbour slows both alike; the garbage collector runs
    between calls, not inside one (a 25 MiB payload leaves a lot behind)."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(pairs):
        for call, out in ((floor, a), (fn, b)):
            gc.collect()
            begin = time.perf_counter()
            call()
            out.append(time.perf_counter() - begin)
    return b, a


class Bench:
    """The service's engine over a generated cluster of ``nodes`` nodes, with the measured group's first
    pod bound, so the group has a stored reservation in a domain as in steady state."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        policy = Policy()
        self.store = ClusterStore(policy)
        self.backend = EmbeddedBackend(self.store, payloads.cluster_objects(nodes), f"bench cluster of {nodes}")
        self.engine = Engine(self.store, self.backend.reservations, self.backend.binder, policy)
        self.backend.start()
        self.app = create_app(self.engine, self.backend, max_body=payloads.NODELIST_MAX_BODY, embedded=self.backend)
        self.names = payloads.names(nodes)
        first = parsing.pod(payloads.scheduled_pod(f"{payloads.MEASURED_CD}-0", payloads.MEASURED_CD))
        self.backend.note_pod(first)
        passed = self.engine.filter(first, self.names).passed
        if not passed:
            raise RuntimeError(f"no node in the {nodes}-node bench cluster can host {payloads.MEASURED_CD}")
        self.engine.bind(first.namespace, first.name, first.uid, passed[0])
        self.reserved_pod = parsing.pod(payloads.scheduled_pod(f"{payloads.MEASURED_CD}-1", payloads.MEASURED_CD))
        self.backend.note_pod(self.reserved_pod)
        self.fresh_pod = parsing.pod(payloads.scheduled_pod(f"{payloads.FRESH_CD}-0", payloads.FRESH_CD))
        self.backend.note_pod(self.fresh_pod)
        outcome = self.engine.filter(self.fresh_pod, ())
        group = outcome.context.group if outcome.context else None
        if group is None:
            raise RuntimeError(f"{payloads.FRESH_CD} pods are not recognised as a group")
        self.fresh_group = group.id
        self.forget_choice()

    def forget_choice(self) -> None:
        """Make the fresh group's next filter choose its domain again (the first pod of a group)."""
        self.engine.choices.forget(self.fresh_group)


def _names_cases(bench: Bench, budget: float) -> dict[str, Any]:
    size, engine, names = bench.nodes, bench.engine, bench.names
    names_body = orjson.dumps(payloads.extender_args(payloads.scheduled_pod(
        f"{payloads.MEASURED_CD}-1", payloads.MEASURED_CD), size, full=False))
    reserved = engine.filter(bench.reserved_pod, names)
    first = engine.filter(bench.fresh_pod, names)
    half = random.Random(size).sample(names, len(names) // 2)
    baseline_app = baseline.create_app()
    return {
        f"filter_names_{size}_reserved": {
            **timing(sample(lambda: engine.filter(bench.reserved_pod, names), budget)).as_dict(),
            "passed": len(reserved.passed), "what": "Engine.filter, group with a stored reservation"},
        f"filter_names_{size}_first_pod": {
            **timing(sample(lambda: engine.filter(bench.fresh_pod, names), budget,
                            before=bench.forget_choice)).as_dict(),
            "passed": len(first.passed), "what": "Engine.filter, first pod of a group: the domain choice runs"},
        f"prioritize_names_{size}": {
            **timing(sample(lambda: engine.prioritize(bench.reserved_pod, names), budget)).as_dict(),
            "what": "Engine.prioritize over every name (the scheduler sends only filter survivors)"},
        f"orjson_loads_names_{size}": {
            **timing(sample(lambda: orjson.loads(names_body), budget)).as_dict(),
            "bytes": len(names_body), "what": "orjson.loads of the names-mode ExtenderArgs (the floor)"},
        f"filter_names_{size}_half_shuffled": {
            **timing(sample(lambda: engine.filter(bench.reserved_pod, half), budget)).as_dict(),
            "what": "Engine.filter of a random half of the names, shuffled: not every labelled node is a "
                    "candidate, so the outside reasons are built for the call"},
        f"filter_view_names_{size}": {
            **timing(sample(lambda: wsgi_post(bench.app, "/filter", names_body), budget)).as_dict(),
            "what": "POST /filter through the app in-process (decode, parse, decide, log, encode; no TLS)"},
        f"baseline_view_names_{size}": {
            **timing(sample(lambda: wsgi_post(baseline_app, "/filter", names_body), budget)).as_dict(),
            "what": "the same body through the baseline's Flask view (decode and encode only)"},
    }


def wsgi_post(app: Any, path: str, body: bytes) -> bytes:
    """One POST through a WSGI app, as gunicorn calls it, without a test client's own costs."""
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "SCRIPT_NAME": "", "SERVER_NAME": "localhost",
               "SERVER_PORT": "443", "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "https",
               "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
               "wsgi.errors": io.StringIO()}
    status: list[str] = []
    reply = b"".join(app(environ, lambda line, headers, exc=None: status.append(line)))
    if not status or not status[0].startswith("200"):
        raise RuntimeError(f"{path} answered {status}: {reply[:200]!r}")
    return reply


def _nodelist_case(bench: Bench, pairs: int) -> dict[str, Any]:
    size = bench.nodes
    full_body = orjson.dumps(payloads.extender_args(payloads.scheduled_pod(
        f"{payloads.MEASURED_CD}-1", payloads.MEASURED_CD), size, full=True))
    client = bench.app.test_client()

    def view() -> None:
        reply = client.post("/filter", data=full_body, content_type="application/json")
        if reply.status_code != 200:
            raise RuntimeError(f"/filter answered {reply.status_code}: {reply.data[:200]!r}")

    decision, floor = paired(view, lambda: orjson.loads(full_body), pairs)
    ratios = sorted(d / f for d, f in zip(decision, floor, strict=True))
    return {f"filter_nodelist_{size}": {
        "decision": timing(decision).as_dict(), "orjson_loads": timing(floor).as_dict(),
        "bytes": len(full_body), "ratio_to_loads": ratios[len(ratios) // 2], "target_ratio": 1.5,
        "what": "/filter view in-process (parse every Node, decide, encode) vs orjson.loads of the body"}}


def _mutate_cases(bench: Bench, budget: float) -> dict[str, Any]:
    review = orjson.dumps(payloads.admission_review())
    engine = bench.engine

    def mutate() -> bytes:
        parsed = admission.parse(orjson.loads(review))
        snap = engine.snapshot()
        result = admission_review.admit(parsed, snap.catalog, snap.nodes, engine.policy)
        return orjson.dumps(admission_review.respond(parsed.uid, result))

    reply = orjson.loads(mutate())
    if not admission.decode_patch(reply["response"]):
        raise RuntimeError(f"the mutate decision produced no patch for the bench pod: {reply}")
    pod = payloads.scheduled_pod(f"{payloads.MEASURED_CD}-1", payloads.MEASURED_CD)
    return {
        "parse_pod": {**timing(sample(lambda: parsing.pod(pod, "Pod"), budget)).as_dict(),
                      "what": "parsing.pod of the scheduled pod: once per cycle (filter); prioritize and a "
                              "retry of the same pod version reuse it"},
        "mutate": {**timing(sample(mutate, budget)).as_dict(), "target_p50_ms": 0.2,
                   "what": "AdmissionReview decode, admit, respond and encode (pure functions)"},
        "orjson_loads_review": {**timing(sample(lambda: orjson.loads(review), budget)).as_dict(),
                                "bytes": len(review), "what": "orjson.loads of the AdmissionReview (the floor)"},
    }


def run(sizes: tuple[int, ...], budget: float, nodelist_pairs: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Every in-process figure, keyed by case name; ``budget`` seconds per timed case."""
    out: dict[str, Any] = {}
    for size in sizes:
        log(f"in-process: {size}-node cluster: filter and prioritize over names")
        bench = Bench(size)
        out.update(_names_cases(bench, budget))
        log(f"in-process: {size}-node cluster: full NodeList through the /filter view vs orjson.loads")
        out.update(_nodelist_case(bench, nodelist_pairs))
        if size == min(sizes):
            log("in-process: mutate")
            out.update(_mutate_cases(bench, budget))
        del bench
        gc.collect()
    return out
