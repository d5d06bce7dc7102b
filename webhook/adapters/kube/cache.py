"""A watch-fed cache of one resource's objects, decoded: the ``Sink`` of a ``watch.Watcher`` (the
reflector), behind the extender's FabricAttachment and DomainReservation stores and the node agent's
attachment cache.

Objects are kept by name (``namespace/name`` for a namespaced one), as client-go's store keys them; an
index by anything else is the owner's, built in a listener.

- ``replace`` (a list arrived): the cache becomes exactly the objects of the list that decode;
- ``apply`` (a watch event): ADDED and MODIFIED keep the decoded object unless the cache holds a newer
  resourceVersion; DELETED drops the name;
- ``store`` (the answer to one of our own writes): kept the same way, so the late watch event of an
  earlier write cannot roll back what our write returned.

The decoder decides what an object is to the cache: a value is kept; ``None`` means not ours (another
node's attachment) and drops the name; a ``WireError`` is logged and, by default, the last good version
stays (a store that forgot it would act as if the object were gone); ``forget_unreadable`` drops it.

Listeners run after each change, under the cache's lock and so in the order of the changes, with the new
contents as a read-only mapping: they must be quick and must not write to the cache. Reads never lock:
they see the mapping published with the last change.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from webhook.errors import WireError
from webhook.wire.kinds import Kind, object_key
from webhook.wire.kinds import resource_version as _version

log = logging.getLogger(__name__)

T = TypeVar("T")
Listener = Callable[[Mapping[str, T]], None]


def older(new: str, old: str) -> bool:
    """Whether resourceVersion ``new`` is older than ``old``. resourceVersions are opaque, but etcd's are
    increasing integers; for anything else the newest arrival is trusted."""
    return new.isdigit() and old.isdigit() and int(new) < int(old)


def cache_key(obj: Any) -> str | None:
    """``name`` or ``namespace/name`` of a Kubernetes object (``webhook.wire.kinds.object_key``); ``None``
    when it has no readable name."""
    namespace, name = object_key(obj)
    if not name:
        return None
    return f"{namespace}/{name}" if namespace else name


class WatchedCache(Generic[T]):
    """One resource's objects as ``decode`` reads them, kept equal to the API server's view."""

    def __init__(self, kind: str, decode: Callable[[Mapping[str, Any]], T | None], *,
                 forget_unreadable: bool = False) -> None:
        self.kind = kind
        self._decode = decode
        self._forget_unreadable = forget_unreadable
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[str, T]] = {}  # key -> (resourceVersion, decoded object)
        self._view: Mapping[str, T] = MappingProxyType({})
        self._listeners: list[Listener[T]] = []
        self._synced = False

    # -- the watcher's Sink ---------------------------------------------------------------------------

    def replace(self, kind: Kind | str, objects: Iterable[Mapping[str, Any]]) -> None:
        entries: dict[str, tuple[str, T]] = {}
        for obj in objects:
            key = self._key(obj)
            if key is None:
                continue
            try:
                value = self._decode(obj)
            except WireError as exc:
                self._skipped(key, exc)
                continue
            if value is not None:
                entries[key] = (_version(obj), value)
        with self._lock:
            self._entries = entries
            self._publish()

    def apply(self, kind: Kind | str, event: str, obj: Mapping[str, Any]) -> None:
        key = self._key(obj)
        if key is None:
            return
        if event == "DELETED":
            self.forget(key)
            return
        try:
            value = self._decode(obj)
        except WireError as exc:
            self._skipped(key, exc)
            if self._forget_unreadable:
                self.forget(key)
            return
        if value is None:
            self.forget(key)
        else:
            self._keep(key, _version(obj), value)

    def mark_synced(self, kind: Kind | str, synced: bool = True) -> None:
        with self._lock:
            self._synced = synced

    @property
    def synced(self) -> bool:
        """Whether the first list has arrived."""
        with self._lock:
            return self._synced

    # -- the owner's writes ---------------------------------------------------------------------------

    def store(self, obj: Mapping[str, Any]) -> T:
        """Keep the answer to our own write (unless the cache has a newer version already) and return it
        decoded; raises ``WireError`` when it is not an object this cache keeps."""
        key, value = cache_key(obj), self._decode(obj)
        if key is None or value is None:
            raise WireError("metadata.name" if key is None else "", f"not a {self.kind} this cache keeps")
        self._keep(key, _version(obj), value)
        return value

    def forget(self, key: str) -> None:
        with self._lock:
            if self._entries.pop(key, None) is not None:
                self._publish()

    def subscribe(self, listener: Listener[T]) -> None:
        """Call ``listener`` with the contents after each change from now on."""
        with self._lock:
            self._listeners.append(listener)

    # -- reads ----------------------------------------------------------------------------------------

    def get(self, key: str) -> T | None:
        return self._view.get(key)

    def items(self) -> Mapping[str, T]:
        """Everything, by key, as of the last change (a read-only mapping that later changes replace)."""
        return self._view

    # -- internals ------------------------------------------------------------------------------------

    def _key(self, obj: Mapping[str, Any]) -> str | None:
        key = cache_key(obj)
        if key is None:
            log.warning("skipping a %s without a name", self.kind)
        return key

    def _skipped(self, key: str, exc: WireError) -> None:
        log.warning("skipping malformed %s %s: %s", self.kind, key, exc)

    def _keep(self, key: str, version: str, value: T) -> None:
        with self._lock:
            current = self._entries.get(key)
            if current is not None and older(version, current[0]):
                return  # a late watch event must not roll back what our own write returned
            self._entries[key] = (version, value)
            self._publish()

    def _publish(self) -> None:
        self._view = MappingProxyType({key: value for key, (_, value) in self._entries.items()})
        for listener in self._listeners:
            listener(self._view)
