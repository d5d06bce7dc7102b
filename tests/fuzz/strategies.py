"""Hypothesis strategies for hostile requests: valid shapes (the recorded fixtures) with hostile leaves put
at the fields we read and at random places, plus raw junk.

A hostile leaf is an overflowing or malformed quantity, a huge or odd string, a deep nesting (as a value,
or as JSON text inside an annotation), a wrong type. Bodies are built as JSON text: nesting deeper than
Python's own encoder recurses (1,100 levels) is spliced in as raw text.
"""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from tests import serving
from webhook.domain import keys

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Raw:
    """JSON text spliced into the body as it is (too deep for json.dumps, or not JSON at all)."""

    text: str


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes | None
    content_type: str = "application/json"

    def __repr__(self) -> str:  # what hypothesis prints for a failing example: short, but enough to see
        shown = self.body if self.body is None or len(self.body) <= 2000 else self.body[:2000] + b"..."
        return f"Request({self.method} {self.path}, {len(self.body or b'')} bytes: {shown!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def request(method: st.SearchStrategy[str], path: st.SearchStrategy[str], body: st.SearchStrategy[bytes | None],
            content_type: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[Request]:
    # Not st.builds: hypothesis would describe a failing example by the call, megabytes of body included.
    parts = st.tuples(method, path, body, content_type if content_type is not None else st.just("application/json"))
    return parts.map(lambda p: Request(*p))


QUANTITIES = [
    "1e309", "1E309", "1e308Ei", "9" * 400, "-" + "9" * 400, "²", "\u0661", "1e-400", "-1", "+", "-", ".", ".e-10",
    "8Ei", "9Ei", "1e4294967296", "1e9223372036854775808", "1e2147483647", "1e-2147483648", "0x10", " 4 ",
    "4 GPUs", "NaN", "Infinity", "1_000", "4\x00", "1.5", "500m", "1Ki", "4e0", "0.000000001", "1e18",
    "9223372036854775807", "9223372036854775808", "1e308", "1.7976931348623157e308", "1e300Ki", "9e307",
    "4611686018427387904", "1.", ".5", "1e", "1ee3", "1Mi5", "\u00a04\u00a0", "4\u2028",
]
DEPTHS = [20, 100, 253, 254, 255, 300, 1000, 1100]
SIZES = [64, 254, 1000, 70_000, 300_000]
WRONG_TYPES: list[Any] = [None, True, False, 0, -1, 2**63, -(2**63) - 1, 2**64, 1.5, -0.0, 1e308, [], {}, [1, "a"],
                          {"a": {"b": None}}, "", " "]


def deep(levels: int, kind: str) -> Raw:
    if kind == "list":
        return Raw("[" * levels + "]" * levels)
    return Raw('{"a":' * levels + "null" + "}" * levels)


def huge(size: int, char: str) -> str:
    return char * size


_LEAVES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(QUANTITIES),
    st.sampled_from(WRONG_TYPES),
    st.builds(deep, st.sampled_from(DEPTHS), st.sampled_from(["list", "object"])),
    st.builds(huge, st.sampled_from(SIZES), st.sampled_from(["x", "9", "\u00e9", "\u202e", "/", "\U0001f600"])),
    # deep nesting as JSON text in a string (an annotation the node agent would have written)
    st.builds(lambda n: "[" * n + "]" * n, st.sampled_from([1000, 100_000])),
    st.text(max_size=30),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)


def leaves() -> st.SearchStrategy[Any]:
    # Copied: a drawn list or object is mutated by later draws, and must not be shared between places.
    return _LEAVES.map(copy.deepcopy)


def _one_of_fixtures(docs: list[Any]) -> st.SearchStrategy[Any]:
    # By index: a failing example then names a small number, not every fixture in full.
    return st.integers(0, len(docs) - 1).map(lambda i: docs[i])


def _set(doc: Any, path: Path, leaf: Any) -> Any:
    """``doc`` with ``leaf`` at ``path``, creating objects on the way; the root replaced when path is ()."""
    if not path:
        return leaf
    node = doc
    for step, following in itertools.pairwise(path):
        if isinstance(node, dict):
            if not isinstance(node.get(step), dict | list):
                node[step] = {} if isinstance(following, str) else [{}]
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and node:
            node = node[min(step, len(node) - 1)]
        else:
            return doc  # the path runs through a leaf an earlier mutation put there
    last = path[-1]
    if isinstance(node, dict):
        node[last] = leaf
    elif isinstance(node, list) and isinstance(last, int) and node:
        node[min(last, len(node) - 1)] = leaf
    return doc


@st.composite
def _random_path(draw: st.DrawFn, doc: Any) -> Path:
    """A path into ``doc`` as it is now: down through existing keys and items, maybe to a new key."""
    path: list[str | int] = []
    node = doc
    while isinstance(node, dict | list) and node and draw(st.integers(0, 9)) < 8:
        step: str | int = draw(st.sampled_from(sorted(node))) if isinstance(node, dict) else \
            draw(st.integers(0, len(node) - 1))
        path.append(step)
        node = node[step]  # type: ignore[index]
    if isinstance(node, dict) and draw(st.booleans()):
        path.append(draw(st.sampled_from(["x", "metadata", "spec", "items", "Pods", "UID", ""])))
    return tuple(path)


def encode(doc: Any) -> bytes:
    raws: dict[str, str] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, Raw):
            token = f"@@RAW{len(raws)}@@"
            raws[token] = value.text
            return token
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    text = json.dumps(walk(doc))
    for token, raw in raws.items():
        text = text.replace(json.dumps(token), raw)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def mutated(draw: st.DrawFn, base: Any, focus: list[Path]) -> bytes:
    """``base`` with one to three hostile leaves: at the fields we read (``focus``), or anywhere."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(focus)) if focus and draw(st.integers(0, 3)) else draw(_random_path(doc))
        doc = _set(doc, path, draw(leaves()))
    return encode(doc)


# The fields the service reads, relative to a pod, a node and each request shape.
POD_FIELDS: list[Path] = [
    ("metadata", "name"), ("metadata", "namespace"), ("metadata", "uid"), ("metadata", "labels"),
    ("metadata", "labels", keys.GROUP_LABEL), ("metadata", "annotations"),
    ("metadata", "annotations", keys.GROUP_ANNOTATION), ("metadata", "annotations", keys.GROUP_SIZE_ANNOTATION),
    ("metadata", "annotations", keys.GROUP_ID_ANNOTATION), ("metadata", "annotations", "other"),
    ("metadata", "annotations", keys.EXCLUSIVE_ANNOTATION), ("metadata", "annotations", keys.SEGMENT_SIZE_ANNOTATION),
    ("metadata", "annotations", keys.SPARE_NODES_ANNOTATION),
    ("metadata", "ownerReferences"), ("metadata", "ownerReferences", 0, "name"),
    ("metadata", "ownerReferences", 0, "kind"), ("metadata", "deletionTimestamp"),
    ("spec", "containers", 0, "resources", "limits", keys.GPU_RESOURCE),
    ("spec", "containers", 0, "resources", "requests", keys.GPU_RESOURCE),
    ("spec", "containers", 0, "resources"), ("spec", "containers"),
    ("spec", "initContainers", 0, "resources", "limits", keys.GPU_RESOURCE),
    ("spec", "initContainers", 0, "restartPolicy"),
    ("spec", "resourceClaims"), ("spec", "resourceClaims", 0, "resourceClaimTemplateName"),
    ("spec", "resourceClaims", 0, "resourceClaimName"), ("spec", "resourceClaims", 0, "name"),
    ("spec", "nodeName"), ("spec", "schedulerName"), ("spec", "affinity"), ("status", "phase"), (),
]
NODE_FIELDS: list[Path] = [
    ("metadata", "name"), ("metadata", "labels"), ("metadata", "labels", keys.CLIQUE_LABEL),
    ("metadata", "labels", keys.FABRIC_ZONE_LABEL), ("metadata", "labels", keys.COMPUTE_DOMAIN_LABEL),
    ("metadata", "annotations"), ("metadata", "annotations", keys.FABRIC_SLOTS_ANNOTATION),
    ("metadata", "annotations", keys.INVENTORY_ANNOTATION), ("status", "allocatable", keys.GPU_RESOURCE),
    ("status", "allocatable"), ("spec", "unschedulable"), ("status", "nodeInfo"), ("x",), (),
]


def _under(prefix: Path, fields: list[Path]) -> list[Path]:
    return [prefix + f for f in fields]


def _nodelist_bases() -> list[Any]:
    """The group pod's NodeList and the same nodes for a plain pod, which every node passes: the reply
    then echoes every node as it was sent, hostile fields included."""
    group = serving.fixture("extender/filter-nodelist-train-8.json")
    group["Nodes"]["items"] = group["Nodes"]["items"][:6]
    plain = copy.deepcopy(group)
    plain["Pod"] = serving.fixture("extender/filter-names-plain.json")["Pod"]
    return [group, plain]


def _victims_base() -> Any:
    body = serving.fixture("extender/preempt-meta-train-4.json")
    victim = copy.deepcopy(body["Pod"])
    victim["metadata"].update(name="victim", uid="victim-uid")
    body["NodeNameToVictims"] = {node: {"Pods": [victim], "NumPDBViolations": 0}
                                 for node in body.pop("NodeNameToMetaVictims")}
    body["NodeNameToMetaVictims"] = None
    return body


ADMISSION_FIXTURES = ["create-annotation-group.json", "create-job-pod-generate-name.json", "create-plain-pod.json",
                      "create-existing-affinity.json", "update-pod.json", "delete-pod.json"]


def extender_args() -> st.SearchStrategy[Request]:
    """/filter and /prioritize, in nodeNames mode and in NodeList mode."""
    names = [serving.fixture("extender/filter-names-train-8.json"), serving.fixture("extender/filter-names-plain.json")]
    for body in names:
        body["NodeNames"] = body["NodeNames"][:40]
    names_focus = [*_under(("Pod",), POD_FIELDS), ("NodeNames",), ("NodeNames", 0), ("Nodes",)]
    nodelist_focus = [*_under(("Pod",), POD_FIELDS), *_under(("Nodes", "items", 0), NODE_FIELDS),
                      *_under(("Nodes", "items", 3), NODE_FIELDS), ("Nodes",), ("Nodes", "items"), ("NodeNames",)]
    bodies = st.one_of(_one_of_fixtures(names).flatmap(lambda b: mutated(b, names_focus)),
                       _one_of_fixtures(_nodelist_bases()).flatmap(lambda b: mutated(b, nodelist_focus)))
    return request(st.just("POST"), st.sampled_from(["/filter", "/prioritize"]), bodies)


def binding_args() -> st.SearchStrategy[Request]:
    focus: list[Path] = [("PodName",), ("PodNamespace",), ("PodUID",), ("Node",), ()]
    return request(st.just("POST"), st.just("/bind"),
                     mutated(serving.fixture("extender/bind-train-8-0.json"), focus))


def preemption_args() -> st.SearchStrategy[Request]:
    meta = serving.fixture("extender/preempt-meta-train-4.json")
    meta_focus = [
        *_under(("Pod",), POD_FIELDS), ("NodeNameToMetaVictims",), ("NodeNameToMetaVictims", "gb200-a-00"),
        ("NodeNameToMetaVictims", "gb200-a-00", "Pods"), ("NodeNameToMetaVictims", "gb200-a-00", "Pods", 0, "UID"),
        ("NodeNameToMetaVictims", "gb200-a-00", "NumPDBViolations"), ("NodeNameToMetaVictims", "x" * 300),
        ("NodeNameToVictims",)]
    victims_focus = [*_under(("NodeNameToVictims", "gb200-a-00", "Pods", 0), POD_FIELDS),
                     ("NodeNameToVictims", "gb200-a-00", "NumPDBViolations"), ("NodeNameToMetaVictims",)]
    return request(st.just("POST"), st.just("/preempt"),
                     st.one_of(mutated(meta, meta_focus), mutated(_victims_base(), victims_focus)))


def admission_reviews() -> st.SearchStrategy[Request]:
    reviews = [serving.fixture(f"admission/{name}") for name in ADMISSION_FIXTURES]
    focus = [
        *_under(("request", "object"), POD_FIELDS),
        ("apiVersion",), ("kind",), ("request",), ("request", "uid"), ("request", "operation"),
        ("request", "resource"), ("request", "resource", "resource"), ("request", "resource", "group"),
        ("request", "subResource"), ("request", "namespace"), ("request", "name"), ("request", "dryRun"),
        ("request", "object"), ("request", "oldObject"),
        ("request", "object", "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
         "nodeSelectorTerms"),
        ("request", "object", "spec", "affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ]
    return request(st.just("POST"), st.just("/mutate"),
                     _one_of_fixtures(reviews).flatmap(lambda r: mutated(r, focus)))


POSTS = ["/filter", "/prioritize", "/bind", "/preempt", "/mutate"]
GETS = ["/healthz", "/readyz", "/metrics", "/inspect"]


def junk() -> st.SearchStrategy[Request]:
    """Bodies that are not JSON, not UTF-8, valid JSON followed by junk, JSON of the wrong kind."""
    valid = [encode(serving.fixture("extender/bind-train-8-0.json")), b'{"Pod": {}}', b"[]", b"null", b"0"]
    bodies = st.one_of(
        st.binary(max_size=300),
        st.builds(lambda v, j: v + j, st.sampled_from(valid), st.binary(min_size=1, max_size=50)),
        st.sampled_from([b"", b"NaN", b"Infinity", b'{"a":1e400}', b"1" * 500, b'"\\ud800"', b"\xff\xfe{}",
                         b"\xef\xbb\xbf{}", b'{"Pod":' + b"[" * 2000, b"{" * 100_000, b'{"a":"\x00"}']),
        st.text(max_size=100).map(lambda t: t.encode("utf-8", "surrogatepass")),
    )
    content_types = st.sampled_from(["application/json", "text/plain", "", "application/x-www-form-urlencoded",
                                     "multipart/form-data; boundary=x"])
    return request(st.just("POST"), st.sampled_from(POSTS), bodies, content_types)


COSTLY = [b"[],", b"{},", b"[0],", b"[[]],", b'"ab",', b'"a",', b"1.5,", b'{"a":1},', b'{"ab":"cd"},',
          b'"\xf0\x9f\x98\x80",']


def costly() -> st.SearchStrategy[Request]:
    """Bodies that cost the most Python objects per byte (webhook.http.common.decoded_size), from 1 KiB to a
    few hundred KiB, bare or inside the field an ExtenderArgs or AdmissionReview would have there."""
    def build(shapes: list[bytes], size: int, wrapper: tuple[bytes, bytes]) -> bytes:
        unit = b"".join(shapes)
        return wrapper[0] + unit * max(1, size // len(unit)) + b"0" + wrapper[1]

    wrappers = st.sampled_from([(b"[", b"]"), (b'{"Pod": {}, "NodeNames": [', b"]}"),
                                (b'{"apiVersion": "admission.k8s.io/v1", "request": {"object": {"x": [', b"]}}}")])
    bodies = st.builds(build, st.lists(st.sampled_from(COSTLY), min_size=1, max_size=3),
                       st.integers(1024, 400_000), wrappers)
    return request(st.just("POST"), st.sampled_from(POSTS), bodies)


def other_routes() -> st.SearchStrategy[Request]:
    """Every route with the wrong method, the GET routes with junk, paths nobody serves."""
    paths = st.one_of(st.sampled_from(POSTS + GETS),
                      st.sampled_from(["/", "/filter/", "//filter", "/nope", "/metrics/x", "/%ff", "/\u00e9",
                                       "/inspect?x=" + "y" * 5000, "/healthz?%zz", "/static/x"]))
    return request(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]), paths,
                     st.one_of(st.none(), st.binary(max_size=100)))
