"""A Kubernetes API server for tests, over real HTTP: kmock's ``KubernetesEmulator`` with API-server rules.

kmock (https://github.com/nolar/kmock) provides the HTTP server, the parsing of each request (resource,
namespace, name, subresource, verb), discovery, ``Status``-shaped errors, the reaction DSL and a request
log. Its emulator keeps objects but merges every write blindly and knows no resourceVersion, which is
exactly what our adapter depends on, so ``ApiServerEmulator`` adds, on kmock's own object storage:

- ``metadata.uid``, ``resourceVersion`` (one increasing counter) and ``creationTimestamp`` on create, a
  new resourceVersion on every write;
- optimistic concurrency: 409 ``Conflict`` for a stale resourceVersion (PUT, PATCH, DELETE
  preconditions), 409 ``AlreadyExists`` on a duplicate create, 404 ``NotFound``;
- PUT (replace), which kmock does not route, and RFC 7386 merge PATCH;
- lists that carry their resourceVersion and page with ``limit``/``continue``;
- watches that resume from a resourceVersion (replaying the event log), honour ``timeoutSeconds`` and
  ``allowWatchBookmarks``, and can be made to fail with 410 Gone once;
- ``pods/{name}/binding`` with kube-apiserver's conflict messages; every binding request is recorded;
- custom resources whose CRD is not installed answer 404.

Its writes replace ``KubernetesEmulator._handle`` (kept: the dispatch of ``RawHandler``), because the
emulator's pre-dispatch writes would otherwise apply every request a second time, without these rules.
Finalizers and label/field selectors are not emulated: nothing here uses them.

``KubeFake`` runs it on its own event loop in a daemon thread, so synchronous code (the official client)
talks to it over localhost HTTP while the test drives it through thread-safe helpers. It can stop and
start again on the same port with the same objects, as an API server restarts with its data in etcd.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import copy
import dataclasses
import datetime
import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import attrs
import kmock
import pytest

from webhook.domain.admission.patches import merge_patch

T = TypeVar("T")
Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How kube-apiserver names the resource in messages: ``pods``, ``jobs.batch``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def resource(self) -> kmock.resource:
        return kmock.resource(self.group, self.version, self.plural)


KINDS: dict[str, Kind] = {k.plural: k for k in (
    Kind("", "v1", "nodes", "Node", False),
    Kind("", "v1", "pods", "Pod", True),
    Kind("batch", "v1", "jobs", "Job", True),
    Kind("", "v1", "resourcequotas", "ResourceQuota", True),
    Kind("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True),
    Kind("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    Kind("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False),
    Kind("resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain", True),
    Kind("imex-webhook.io", "v1alpha1", "domainreservations", "DomainReservation", False),
    Kind("imex-webhook.io", "v1alpha1", "fabricattachments", "FabricAttachment", False),
    Kind("coordination.k8s.io", "v1", "leases", "Lease", True),
    Kind("events.k8s.io", "v1", "events", "Event", True),
    # What groups come from besides our own sources (docs/GROUPS.md); served unless a test uninstalls them.
    Kind("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", True),
    Kind("scheduling.k8s.io", "v1alpha1", "workloads", "Workload", True),
    Kind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True),
    Kind("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", True),
    Kind("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", True),
)}
CRDS = ("computedomains", "domainreservations", "fabricattachments")
# Kinds whose status is a subresource: writes to the object ignore status, writes to /status only touch it.
WITH_STATUS = ("fabricattachments",)
# Kinds whose status subresource this fake serves for PATCH only (a pod's conditions), leaving their
# create and update as they are: a strategic merge patch of /status touches only the status.
STATUS_PATCHABLE = ("pods",)


def _merge_conditions(current: Obj, patch: Obj) -> Obj:
    """The one list a strategic merge patch merges here as kube-apiserver does: ``status.conditions``, by
    ``type`` (its patchMergeKey); the rest of the patch is applied as a merge patch."""
    conditions = (patch.get("status") or {}).get("conditions")
    if not isinstance(conditions, list):
        return patch
    merged = {c.get("type"): c for c in (current.get("status") or {}).get("conditions") or []}
    for condition in conditions:
        merged[condition.get("type")] = {**merged.get(condition.get("type"), {}), **condition}
    return {**patch, "status": {**patch["status"], "conditions": list(merged.values())}}


def _error(status: int, reason: str, message: str, **details: Any) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=status, reason=reason, message=message, details=details or {})


def _conflict(kind: Kind, name: str, why: str) -> kmock.KubernetesError:
    return _error(409, "Conflict", f'Operation cannot be fulfilled on {kind.qualified} "{name}": {why}',
                  name=name, kind=kind.plural)


@dataclasses.dataclass(frozen=True)
class _Event:
    plural: str
    type: str  # ADDED, MODIFIED, DELETED; or GONE / END: instructions to the open watches
    namespace: str | None = None
    obj: Obj = dataclasses.field(default_factory=dict)


@attrs.define(kw_only=True)
class ApiServerEmulator(kmock.KubernetesEmulator):
    installed: set[str] = attrs.field(factory=lambda: set(KINDS))
    token: str | None = None  # when set, requests without this bearer token get 401
    bindings: list[Obj] = attrs.field(factory=list)  # every binding request: namespace, name, body, status
    binding_events: bool = True  # False: a binding is stored and no watch sees it yet (a watch behind)
    watching: Counter[str] = attrs.field(factory=Counter)  # open watches by plural
    closing: bool = False
    # Called with every request before it is served: one that returns a response answers it (a fault), one
    # that returns None lets it through (after a delay, if it awaited one). Cheaper than a kmock reaction,
    # which re-filters the whole request history for every request.
    interceptors: list[Callable[[kmock.Request], Awaitable[Any]]] = attrs.field(factory=list)
    # Keep only about this many requests in kmock's history (None: all). Each request is matched against
    # the history, so a long run (the chaos tests) slows down quadratically without a bound; tests that
    # count requests keep the default.
    history_limit: int | None = None
    _revision: int = attrs.field(default=0, init=False)
    _log: list[_Event] = attrs.field(factory=list, init=False)
    _log_revisions: list[int] = attrs.field(factory=list, init=False)
    _compacted: int = attrs.field(default=0, init=False)  # a watch from an older resourceVersion gets 410
    _status_gone: set[str] = attrs.field(factory=set, init=False)  # next watch of these: HTTP 410
    _wakeup: asyncio.Event | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()  # registers self._serve_list & co., which this class overrides
        self.fallback[kmock.K8sCriteria(method=kmock.method.PUT)] << self._serve_replace
        self.fallback[kmock.K8sCriteria(method=kmock.method.POST, subresource="binding")] << self._serve_binding
        # The official client asks discovery for "/apis/" and "/api/v1/", which kmock routes only without the
        # slash; above the fallbacks, because "/api/v1/" otherwise parses as a LIST of nothing.
        discovery = self ** -1e9
        discovery["get", re.compile(r"/apis/[^/]+/[^/]+/")] << self._serve_version
        discovery["get", re.compile(r"/apis/[^/]+/")] << self._serve_group
        discovery["get", re.compile(r"/api/[^/]+/")] << self._serve_version
        discovery["get /apis/"] << self._serve_apis
        discovery["get /api/"] << self._serve_api
        self.sync_discovery()

    def sync_discovery(self) -> None:
        for kind in KINDS.values():
            if kind.plural in self.installed:
                self.resources[kind.resource] = kmock.ResourceInfo(
                    namespaced=kind.namespaced, kind=kind.kind, singular=kind.kind.lower(),
                    verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
                    subresources={"binding"} if kind.plural == "pods" else
                    {"status"} if kind.plural in WITH_STATUS else set(),
                )
            elif kind.resource in self.resources:
                del self.resources[kind.resource]

    async def _handle(self, request: kmock.Request) -> Any:
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            return await self._render_error(_error(401, "Unauthorized", "Unauthorized"))
        if self.history_limit is not None and len(self._requests) > 2 * self.history_limit:
            del self._requests[:-self.history_limit]
        for intercept in tuple(self.interceptors):
            answer = await intercept(request)
            if answer is not None:
                return answer
        # Skip KubernetesEmulator._handle (its blind merge-writes); keep RawHandler's dispatch.
        return await kmock.RawHandler._handle(self, request)

    # -- state: every write goes through _commit (also used by KubeFake's helpers) -------------------

    def kind_of(self, request: kmock.Request) -> Kind:
        res = request.resource
        kind = KINDS.get(res.plural or "") if res is not None else None
        served = kind is not None and kind.resource == res and kind.plural in self.installed
        status = kind is not None and (kind.plural in WITH_STATUS or
                                       (kind.plural in STATUS_PATCHABLE and request.method == "PATCH"))
        allowed = {"binding"} | ({"status"} if status else set())
        if kind is None or not served or (request.subresource and request.subresource not in allowed):
            raise _error(404, "NotFound", "the server could not find the requested resource")
        return kind

    def _key(self, kind: Kind, namespace: str | None, name: str) -> tuple[Any, str | None, str]:
        return (kind.resource, (namespace or "default") if kind.namespaced else None, name)

    def current(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        key = self._key(kind, namespace, name)
        if key not in self._objects or self._objects[key].deleted:
            return None
        return copy.deepcopy(self._objects[key].raw)

    def _existing(self, kind: Kind, namespace: str | None, name: str) -> Obj:
        found = self.current(kind, namespace, name)
        if found is None:
            raise _error(404, "NotFound", f'{kind.qualified} "{name}" not found', name=name, kind=kind.plural)
        return found

    def _commit(self, kind: Kind, namespace: str | None, name: str, obj: Obj | None, emit: bool) -> Obj:
        self._revision += 1
        key = self._key(kind, namespace, name)
        if obj is None:
            obj = self._objects[key].raw
            obj["metadata"] = dict(obj["metadata"], resourceVersion=str(self._revision))
            self._objects[key].delete()
            event = "DELETED"
        else:
            obj["metadata"]["resourceVersion"] = str(self._revision)
            event = "ADDED" if key not in self._objects or self._objects[key].deleted else "MODIFIED"
            if key in self._objects:
                self._objects[key].create(copy.deepcopy(obj))
            else:
                self._objects[key] = copy.deepcopy(obj)
        if emit:
            self._append(_Event(kind.plural, event, key[1], copy.deepcopy(obj)), self._revision)
        return copy.deepcopy(obj)

    def _append(self, event: _Event, revision: int) -> None:
        self._log.append(event)
        self._log_revisions.append(revision)
        if self._wakeup is not None:
            self._wakeup.set()
        self._wakeup = asyncio.Event()

    def wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def create(self, kind: Kind, namespace: str | None, obj: Obj, emit: bool = True, keep_uid: bool = False) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            raise _error(422, "Invalid", "metadata.name: Required value: name or generateName is required")
        if kind.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        if self.current(kind, meta.get("namespace"), name) is not None:
            raise _error(409, "AlreadyExists", f'{kind.qualified} "{name}" already exists',
                         name=name, kind=kind.plural)
        meta.update(uid=meta.get("uid") if keep_uid and meta.get("uid") else str(uuid.uuid4()),
                    creationTimestamp=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        if kind.plural in WITH_STATUS:
            obj.pop("status", None)  # as kube-apiserver does when the status subresource is enabled
        return self._commit(kind, meta.get("namespace"), name, obj, emit)

    def _guard(self, kind: Kind, name: str, current: Obj, rv: Any) -> None:
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise _conflict(kind, name, "the object has been modified; please apply your changes to the "
                                        "latest version and try again")

    def _keep_identity(self, current: Obj, new: Obj) -> Obj:
        meta = new.setdefault("metadata", {})
        for field in ("name", "namespace", "uid", "creationTimestamp"):
            if field in current["metadata"]:
                meta[field] = current["metadata"][field]
        return new

    def replace(self, kind: Kind, namespace: str | None, name: str, obj: Obj, emit: bool = True,
                subresource: str | None = None) -> Obj:
        current = self._existing(kind, namespace, name)
        obj = copy.deepcopy(obj)
        rv = obj.get("metadata", {}).get("resourceVersion")
        if not rv and kind.plural in CRDS:
            raise _error(422, "Invalid", "metadata.resourceVersion: Invalid value: 0x0: must be specified "
                                         "for an update")
        self._guard(kind, name, current, rv)
        if kind.plural in WITH_STATUS:
            if subresource == "status":  # only the status changes
                obj = dict(current, status=obj.get("status"))
            else:  # everything but the status changes
                obj = {k: v for k, v in obj.items() if k != "status"}
                if "status" in current:
                    obj["status"] = current["status"]
        return self._commit(kind, namespace, name, self._keep_identity(current, obj), emit)

    def patch(self, kind: Kind, namespace: str | None, name: str, patch: Obj, emit: bool = True,
              subresource: str | None = None, strategic: bool = False) -> Obj:
        current = self._existing(kind, namespace, name)
        uid = (patch.get("metadata") or {}).get("uid")
        if uid and uid != current["metadata"].get("uid"):
            raise _error(409, "Conflict", f"Operation cannot be fulfilled on {kind.plural} \"{name}\": uid mismatch")
        if strategic:
            patch = _merge_conditions(current, patch)
        if kind.plural in STATUS_PATCHABLE and subresource == "status":
            patch = {"status": patch.get("status")}
        if kind.plural in WITH_STATUS:
            rv = (patch.get("metadata") or {}).get("resourceVersion")
            if subresource == "status":  # only the status (and the resourceVersion guard) count
                patch = {"status": patch.get("status"), **({"metadata": {"resourceVersion": rv}} if rv else {})}
            else:
                patch = {k: v for k, v in patch.items() if k != "status"}
        self._guard(kind, name, current, (patch.get("metadata") or {}).get("resourceVersion"))
        return self._commit(kind, namespace, name, self._keep_identity(current, merge_patch(current, patch)), emit)

    def delete(self, kind: Kind, namespace: str | None, name: str, options: Obj | None = None,
               emit: bool = True) -> Obj:
        current = self._existing(kind, namespace, name)
        pre = (options or {}).get("preconditions") or {}
        for field, key in (("resourceVersion", "ResourceVersion"), ("uid", "UID")):
            if pre.get(field) and pre[field] != current["metadata"].get(field):
                raise _conflict(kind, name, f"Precondition failed: {key} in precondition: {pre[field]}, "
                                            f"{key} in object meta: {current['metadata'].get(field)}")
        return self._commit(kind, namespace, name, None, emit)

    def objects_of(self, kind: Kind, namespace: str | None = None) -> list[Obj]:
        found = [copy.deepcopy(obj.raw) for (res, ns, _), obj in self._objects.items()
                 if res == kind.resource and not obj.deleted and (namespace is None or ns == namespace)]
        return sorted(found, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))

    def expire(self, plural: str, as_status: bool) -> None:
        """Forget the history so far: open watches of ``plural`` end (ERROR 410, or closed for as_status)."""
        self._compacted = self._revision
        if as_status:
            self._status_gone.add(plural)
        self._append(_Event(plural, "END" if as_status else "GONE"), self._revision)

    # -- HTTP handlers (registered as kmock fallbacks) ------------------------------------------------

    async def _serve_create(self, request: kmock.Request) -> Any:
        kind = self.kind_of(request)
        if not isinstance(request.data, dict):
            raise _error(400, "BadRequest", "the body of the request is not a JSON object")
        return kmock.Response(status=201, payload=self.create(kind, request.namespace, request.data))

    async def _serve_fetch(self, request: kmock.Request) -> Any:
        kind = self.kind_of(request)
        return self._existing(kind, request.namespace, request.name or "")

    async def _serve_replace(self, request: kmock.Request) -> Any:
        kind = self.kind_of(request)
        body = request.data if isinstance(request.data, dict) else {}
        if body.get("metadata", {}).get("name", request.name) != request.name:
            raise _error(400, "BadRequest", "the name of the object does not match the name on the URL")
        return self.replace(kind, request.namespace, request.name or "", body, subresource=request.subresource)

    async def _serve_update(self, request: kmock.Request) -> Any:
        kind = self.kind_of(request)
        # As kube-apiserver: a PATCH must say which patch format it is (this fake applies merge patches).
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            raise _error(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                                                      f"accepted media types include: application/merge-patch+json, "
                                                      f"application/strategic-merge-patch+json (got {content_type!r})")
        return self.patch(kind, request.namespace, request.name or "", request.data or {},
                          subresource=request.subresource,
                          strategic=content_type == "application/strategic-merge-patch+json")

    async def _serve_delete(self, request: kmock.Request) -> Any:
        kind = self.kind_of(request)
        options = request.data if isinstance(request.data, dict) else None
        return self.delete(kind, request.namespace, request.name or "", options)

    async def _serve_binding(self, request: kmock.Request) -> Any:
        kind = self.kind_of(request)
        body = request.data if isinstance(request.data, dict) else {}
        record: Obj = {"namespace": request.namespace, "name": request.name, "body": body, "status": 201}
        self.bindings.append(record)
        try:
            if kind.plural != "pods":
                raise _error(404, "NotFound", "the server could not find the requested resource")
            name = request.name or ""
            pod = self._existing(kind, request.namespace, name)
            uid = (body.get("metadata") or {}).get("uid")
            binding = Kind("", "v1", "pods/binding", "Binding", True)
            if uid and uid != pod["metadata"]["uid"]:
                raise _conflict(binding, name, f"Precondition failed: UID in precondition: {uid}, UID in object "
                                               f"meta: {pod['metadata']['uid']}")
            assigned = (pod.get("spec") or {}).get("nodeName")
            if assigned:
                raise _conflict(binding, name, f'pod {name} is already assigned to node "{assigned}"')
            target = (body.get("target") or {}).get("name")
            if not target:
                raise _error(422, "Invalid", "target.name: Required value")
            pod.setdefault("spec", {})["nodeName"] = target
            self._commit(kind, request.namespace, name, pod, emit=self.binding_events)
        except kmock.KubernetesError as exc:
            record["status"] = exc.status
            raise
        return kmock.Response(status=201, payload={"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                   "status": "Success", "code": 201})

    async def _serve_list(self, request: kmock.Request) -> Any:
        kind = self.kind_of(request)
        token = request.params.get("continue")
        revision, start = json.loads(base64.b64decode(token)) if token else (self._revision, 0)
        items = self.objects_of(kind, request.namespace)
        limit = int(request.params.get("limit") or 0) or len(items)
        meta: Obj = {"resourceVersion": str(revision)}
        if start + limit < len(items):
            meta["continue"] = base64.b64encode(json.dumps([revision, start + limit]).encode()).decode()
        return {"apiVersion": kind.api_version, "kind": f"{kind.kind}List", "metadata": meta,
                "items": items[start:start + limit]}

    async def _serve_watch(self, request: kmock.Request) -> Any:
        kind = self.kind_of(request)
        if kind.plural in self._status_gone:
            self._status_gone.discard(kind.plural)
            raise _error(410, "Expired", "too old resource version")
        raw = request.params.get("resourceVersion") or "0"
        since = int(raw) if raw.isdigit() else 0
        timeout = float(request.params.get("timeoutSeconds") or 1800)
        bookmarks = request.params.get("allowWatchBookmarks") == "true"
        return self._watch(kind, request.namespace, since, timeout, bookmarks)

    def _gone(self) -> Obj:
        return {"type": "ERROR", "object": {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                                            "code": 410, "reason": "Expired", "message": "too old resource version"}}

    async def _watch(self, kind: Kind, namespace: str | None, since: int, timeout: float,
                     bookmarks: bool) -> AsyncIterator[Any]:
        self.watching[kind.plural] += 1
        try:
            yield b""  # send the headers at once, as kube-apiserver does
            if since and since < self._compacted:
                yield self._gone()
                return
            if not since:  # "from any version": the current state as ADDED, then what follows
                since = self._revision
                for obj in self.objects_of(kind, namespace):
                    yield {"type": "ADDED", "object": obj}
            index = bisect.bisect_right(self._log_revisions, since)
            deadline = asyncio.get_running_loop().time() + timeout
            while not self.closing:
                if self._wakeup is None:
                    self._wakeup = asyncio.Event()
                wakeup = self._wakeup  # taken before reading the log: no await in between, no lost wake-up
                for event in self._log[index:]:
                    index += 1
                    if event.plural != kind.plural:
                        continue
                    if event.type in ("GONE", "END"):
                        if event.type == "GONE":
                            yield self._gone()
                        return
                    if namespace and event.namespace != namespace:
                        continue
                    yield {"type": event.type, "object": event.obj}
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    if bookmarks:
                        yield {"type": "BOOKMARK", "object": {"apiVersion": kind.api_version, "kind": kind.kind,
                                                              "metadata": {"resourceVersion": str(self._revision)}}}
                    return
                try:
                    await asyncio.wait_for(wakeup.wait(), remaining)
                except TimeoutError:
                    pass
        finally:
            self.watching[kind.plural] -= 1


class KubeFake:
    """The emulator served on 127.0.0.1 from a background event loop; every helper is thread-safe."""

    def __init__(self, crds: Iterable[str] = CRDS, token: str | None = "test-token") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kubefake", daemon=True)
        self._thread.start()
        installed = {p for p in KINDS if p not in CRDS} | set(crds)
        self.token = token
        self.emulator: ApiServerEmulator = self._run(self._open(installed, token))
        self.port = 0
        self._server: kmock.Server | None = None
        self.start()

    async def _open(self, installed: set[str], token: str | None) -> ApiServerEmulator:
        emulator = ApiServerEmulator(installed=installed, token=token)
        emulator.sync_discovery()
        await emulator.__aenter__()
        return emulator

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        async def call() -> T:
            return fn(*args, **kwargs)
        return self._run(call())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        async def start() -> kmock.Server:
            server = kmock.Server(self.emulator, port=self.port or None)
            await server.__aenter__()
            return server
        self._server = self._run(start())
        self.port = self._server.port

    def stop(self) -> None:
        """Take the API server down: open watches end, new connections are refused; objects stay."""
        server, self._server = self._server, None
        if server is None:
            return

        async def stop() -> None:
            self.emulator.closing = True
            self.emulator.wake()
            try:
                await server.__aexit__(None, None, None)
            finally:
                self.emulator.closing = False
        self._run(stop())

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()

    def close(self) -> None:
        self.stop()
        self._run(self.emulator.__aexit__(None, None, None))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    # -- objects, as the test's own kubectl (watch events are emitted unless emit=False) ----------------

    def create(self, plural: str, obj: Obj, *, emit: bool = True, keep_uid: bool = False) -> Obj:
        """POST as a client would; ``keep_uid`` for objects that "existed before" and are referenced by uid."""
        meta = obj.get("metadata", {})
        return self._call(self.emulator.create, KINDS[plural], meta.get("namespace"), obj, emit, keep_uid)

    def seed(self, objects: Iterable[Obj]) -> None:
        """Load objects that carry apiVersion and kind (e.g. ``webhook.demo.cluster.objects()``), uids kept."""
        plurals = {(k.api_version, k.kind): k.plural for k in KINDS.values()}
        for obj in objects:
            self.create(plurals[obj["apiVersion"], obj["kind"]], obj, keep_uid=True)

    def replace(self, plural: str, obj: Obj, *, emit: bool = True) -> Obj:
        """An unconditional update (the object's own resourceVersion, if any, still guards it)."""
        meta = obj.get("metadata", {})
        current = self.get(plural, meta.get("namespace"), meta["name"])
        body = copy.deepcopy(obj)
        body.setdefault("metadata", {}).setdefault("resourceVersion", (current or {}).get("metadata", {})
                                                   .get("resourceVersion"))
        return self._call(self.emulator.replace, KINDS[plural], meta.get("namespace"), meta["name"], body, emit)

    def replace_status(self, plural: str, obj: Obj, *, emit: bool = True) -> Obj:
        """A write to the /status subresource (for kinds that have one), as a controller would make it."""
        meta = obj.get("metadata", {})
        current = self.get(plural, meta.get("namespace"), meta["name"])
        body = copy.deepcopy(obj)
        body.setdefault("metadata", {}).setdefault("resourceVersion", (current or {}).get("metadata", {})
                                                   .get("resourceVersion"))
        return self._call(self.emulator.replace, KINDS[plural], meta.get("namespace"), meta["name"], body, emit,
                          "status")

    def patch(self, plural: str, namespace: str | None, name: str, patch: Obj, *, emit: bool = True) -> Obj:
        return self._call(self.emulator.patch, KINDS[plural], namespace, name, patch, emit)

    def delete(self, plural: str, namespace: str | None, name: str, *, emit: bool = True) -> Obj:
        return self._call(self.emulator.delete, KINDS[plural], namespace, name, None, emit)

    def get(self, plural: str, namespace: str | None, name: str) -> Obj | None:
        return self._call(self.emulator.current, KINDS[plural], namespace, name)

    def items(self, plural: str) -> list[Obj]:
        return self._call(self.emulator.objects_of, KINDS[plural])

    # -- faults and observations ----------------------------------------------------------------------

    def hold_binding_events(self, held: bool = True) -> None:
        """While held, bindings are stored but no watch event shows them: the watch is behind the writes.
        ``replace`` of the pod afterwards shows it (with its node)."""
        self._call(setattr, self.emulator, "binding_events", not held)

    def expire_watches(self, plural: str, *, as_status: bool = False) -> None:
        """410 Gone: as an ERROR event on the open watches, or (as_status) as the HTTP status of the next one."""
        self._call(self.emulator.expire, plural, as_status)

    def _react(self, method: str, plural: str, subresource: str | None, payload: Any) -> None:
        criteria = kmock.K8sCriteria(method=kmock.method(method.upper()), resource=KINDS[plural].resource,
                                     subresource=subresource)
        self._call(lambda: self.emulator[criteria] << payload)

    def fail(self, method: str, plural: str, status: int, reason: str, message: str,
             subresource: str | None = None, times: int | None = None) -> None:
        """From now on (or for the next ``times`` such requests), answer every such request with this
        ``Status`` error (a kmock reaction; past ``times`` it passes the request on)."""
        error = _error(status, reason, message)
        left = [times]

        def answer() -> None:
            if left[0] is None or left[0] > 0:
                left[0] = None if left[0] is None else left[0] - 1
                raise error
        self._react(method, plural, subresource, answer)

    def delay(self, method: str, plural: str, seconds: float, subresource: str | None = None) -> None:
        """Hold the next such request for ``seconds``, then serve it as usual (it may still succeed)."""
        async def hold() -> None:
            await asyncio.sleep(seconds)  # then None: kmock passes the request on to the next reaction
        self._react(method, plural, subresource, hold)

    def uninstall(self, plural: str) -> None:
        def uninstall() -> None:
            self.emulator.installed.discard(plural)
            self.emulator.sync_discovery()
        self._call(uninstall)

    def install(self, plural: str) -> None:
        def install() -> None:
            self.emulator.installed.add(plural)
            self.emulator.sync_discovery()
        self._call(install)

    def watches(self, plural: str) -> int:
        return self._call(lambda: self.emulator.watching[plural])

    def requests(self, action: str, plural: str) -> int:
        """How many requests of a kmock action (``list``, ``watch``, ``create``...) reached ``plural``."""
        wanted = kmock.action(action.upper())
        resource = KINDS[plural].resource
        return self._call(lambda: sum(1 for r in self.emulator if r.action == wanted and r.resource == resource))

    def bindings(self) -> list[Obj]:
        return self._call(lambda: copy.deepcopy(self.emulator.bindings))

    def write_kubeconfig(self, path: Path) -> Path:
        user: Obj = {"token": self.token} if self.token else {}
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": user}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
        }
        path.write_text(json.dumps(config))  # JSON is YAML: the kubeconfig loader reads it as is
        return path


def eventually(check: Callable[[], T], timeout: float = 60.0, what: str = "") -> T:
    """Poll ``check`` until it returns something truthy and return that; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout}s: {what or check}; last value {value!r}")
        time.sleep(0.01)


@pytest.fixture
def kube_fake() -> Iterator[KubeFake]:
    fake = KubeFake()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def kubeconfig(kube_fake: KubeFake, tmp_path: Path) -> Path:
    return kube_fake.write_kubeconfig(tmp_path / "kubeconfig")
