"""Leader election on a coordination.k8s.io/v1 Lease: the fabric reconciler runs on one replica at a time,
and another takes over when the holder stops renewing.

``LeaseLeader.is_leader()`` is what the reconciler asks before each round (``webhook.engine.reconciler``):
it returns at once while the last renewal is fresh (younger than a third of the lease), and otherwise
makes at most three API calls (read, then create or a replace guarded by the resourceVersion read), each
under the deadline of ``api.Api``. No thread: a replica stops leading by no longer asking, and another
takes over once the lease has run out.

Why not the official client's ``kubernetes.leaderelection`` (``LeaderElection`` with a ``LeaseLock``):

- it blocks its caller: ``LeaderElection.run()`` loops in ``acquire()`` (sleeping ``retry_period``)
  until it leads, then in ``renew_loop()`` until a renewal fails, and reports leadership only through
  the ``onstarted_leading``/``onstopped_leading`` callbacks; the reconciler needs a non-blocking answer
  at the start of each round;
- it cannot be stopped on demand: neither loop checks a stop flag or a cancellation (there is no
  ``ReleaseOnCancel`` as in client-go), so a follower's thread never returns from ``acquire()``;
- ``LeaseLock`` calls ``client.CoordinationV1Api()`` on the process-wide default ``ApiClient`` and
  passes no ``_request_timeout``: it would not use this adapter's client (credentials, connection pool,
  user agent), and one call to an API server that does not answer has no deadline;
- it reads ``time.time()`` itself (no injectable clock, so the takeover test in
  tests/adapters/kube/test_attachments.py could not run it on a test clock), its ``Config`` refuses a
  ``retry_period`` under one second and answers a bad setting with ``sys.exit``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from webhook.adapters.kube.api import Api, ApiError
from webhook.wire.kinds import LEASES
from webhook.wire.timestamps import parse_rfc3339, rfc3339

log = logging.getLogger(__name__)


class LeaseLeader:
    """Leader election on a Lease: ``is_leader()`` is what the reconciler asks before each round."""

    def __init__(self, api: Api, namespace: str, name: str, holder: str, duration: float = 30.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._api = api
        self._namespace = namespace
        self._name = name
        self._holder = holder
        self._duration = duration
        self._clock = clock
        self._held_until = 0.0

    def is_leader(self) -> bool:
        now = self._clock()
        # Renew at a third of the duration; until then the last successful renewal is good enough.
        if self._held_until - now > self._duration * 2 / 3:
            return True
        try:
            self._held_until = now + self._duration if self._acquire(now) else 0.0
        except ApiError as exc:
            log.warning("lease %s/%s: %s", self._namespace, self._name, exc)
            self._held_until = 0.0 if self._held_until <= now else self._held_until
        return self._held_until > now

    def _acquire(self, now: float) -> bool:
        path = LEASES.path(namespace=self._namespace, name=self._name)
        spec = {"holderIdentity": self._holder, "leaseDurationSeconds": int(self._duration),
                "renewTime": rfc3339(now, "us")}
        try:
            lease = self._api.call("GET", path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self._name, "namespace": self._namespace},
                    "spec": {**spec, "acquireTime": spec["renewTime"]}}
            try:
                self._api.call("POST", LEASES.path(namespace=self._namespace), body=body)
            except ApiError as create_exc:
                if create_exc.status == 409:
                    return False  # someone else created it first
                raise
            return True
        current = lease.get("spec") or {}
        holder = current.get("holderIdentity")
        renewed = current.get("renewTime")
        expired = True
        if renewed:
            renewed_at = parse_rfc3339(renewed, "spec.renewTime")
            expired = renewed_at + float(current.get("leaseDurationSeconds") or self._duration) < now
        if holder not in (None, "", self._holder) and not expired:
            return False
        new_spec = {**current, **spec}
        if holder != self._holder:
            new_spec["acquireTime"] = spec["renewTime"]
            new_spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = new_spec
        try:
            self._api.call("PUT", path, body=lease)  # guarded by the resourceVersion we read
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True
