"""The Redfish client's attach / detach engine: retries that never compose twice, If-Match, rollback.

The rule that keeps retries safe: before every try the block is read again, and the decision comes from
what the service reports (``Links.ComputerSystems`` and ``CompositionState``), never from what the last
reply seemed to say. A reply lost to a reset connection, a 500 sent after the composition was done, a
task monitor that vanished: each ends in a re-read that finds the block composed (done), composing to
this system (wait for it), free (try again, within ``retries``) or taken by another system (refused).

The engine owns no connection and no cache: it is given the transport (``http.py``) and the reads it
needs (``BlockReads``, which ``inventory.py`` provides), and it waits for tasks with ``tasks.py``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import requests

from webhook.adapters.redfish import payloads as wire
from webhook.adapters.redfish.http import HttpTransport, NoReply
from webhook.adapters.redfish.payloads import BlockInfo, FabricError, Goal, SystemView
from webhook.adapters.redfish.tasks import Pending, TaskWaiter, check_deadline, monitor_of

log = logging.getLogger(__name__)


class BlockReads(Protocol):
    """The reads the engine decides on; ``system_view`` may answer from a cache, the others read now."""

    def read_block(self, uri: str, operation: str = "read", deadline: float | None = None) -> BlockInfo: ...

    def read_system(self, uri: str, operation: str, deadline: float | None = None) -> SystemView: ...

    def system_view(self, uri: str, operation: str, deadline: float | None) -> SystemView: ...

    def store_system(self, view: SystemView) -> None: ...


@dataclass(frozen=True, slots=True)
class Answer:
    """What one request to compose or release came to (``Converger._submit``).

    ``task``: accepted as a task (202), watched through ``monitor``; ``applied``: done at once (2xx), the
    system's new ``etag`` with it; ``again``: a stale or missing If-Match (412, 428), the system re-read and
    the try not counted; ``retry``: no answer or a retryable error, paused already; ``refused``: ``error``."""

    kind: Literal["task", "applied", "again", "retry", "refused"]
    etag: str = ""
    monitor: str = ""
    retry_after: float | None = None
    error: FabricError | None = None


class Converger:
    def __init__(self, http: HttpTransport, reads: BlockReads, *, max_poll_interval: float = 2.0,
                 max_polls: int = 600, rollback_grace: float = 2.0) -> None:
        self.http, self.reads = http, reads
        self.tasks = TaskWaiter(http, reads.read_block, max_poll_interval=max_poll_interval, max_polls=max_polls)
        self.rollback_grace = rollback_grace
        self.needs_if_match = False  # learned from a 428: send If-Match on actions too

    def attach(self, system: str, uris: list[str], deadline: float) -> list[BlockInfo]:
        """Compose ``uris`` to ``system``; on a refusal or an outage, detach again what this call asked for
        (never when only the deadline ran out: the composition may still be in flight)."""
        issued: set[str] = set()
        try:
            return self._converge(system, uris, Goal(True, system), deadline, issued)
        except FabricError as exc:
            if exc.deadline:
                raise
            failed = self._rollback(system, [u for u in uris if u in issued], deadline, exc)
            if failed is exc:
                raise
            raise failed from exc

    def detach(self, system: str, uris: list[str], deadline: float) -> None:
        self._converge(system, uris, Goal(False, system), deadline, set())

    # --- converge ----------------------------------------------------------------------------------

    def _converge(self, system: str, uris: list[str], goal: Goal, deadline: float, issued: set[str]) -> list[BlockInfo]:
        view = self.reads.system_view(system, goal.operation, deadline)
        if view.add if goal.attach else view.remove:
            pending = [p for uri in uris if (p := self._by_action(view, uri, goal, deadline, issued))]
        else:
            pending = self._by_patch(view, uris, goal, deadline, issued)
        self.reads.store_system(view)
        self.tasks.wait(pending, goal, deadline)
        infos = [self.reads.read_block(u, goal.operation, deadline) for u in uris]
        for info in infos:
            if not goal.reached(info):
                raise FabricError(goal.operation, info.id, f"the service reports the block {info.state} to "
                                  f"{', '.join(info.systems) or 'no system'}", phase="confirm", retryable=True)
        return infos

    def _settle(self, uri: str, goal: Goal, deadline: float) -> tuple[bool, Pending | None]:
        """Re-read: (True, None) done, (True, Pending) in flight, (False, None) worth a try; raises if taken."""
        try:
            info = self.reads.read_block(uri, goal.operation, deadline)
        except FabricError as exc:
            if exc.status != 404:
                raise
            raise FabricError(goal.operation, uri, f"no such ResourceBlock ({exc.detail})", status=404,
                              message_ids=(*exc.message_ids, "Composition.1.1.ResourceBlockNotFound"),
                              phase="submit") from exc
        if goal.reached(info):
            return True, None
        if goal.in_flight(info):
            return True, Pending(uri, "")
        refusal = goal.refusal(info)
        if refusal is not None:
            raise refusal
        return False, None

    def _settle_after(self, uri: str, goal: Goal, deadline: float,
                      last: FabricError | None) -> tuple[bool, Pending | None]:
        """_settle, and when the block turns out refused after a failed try, say what that try answered."""
        try:
            return self._settle(uri, goal, deadline)
        except FabricError as refusal:
            if last is None or refusal.status == 404:
                raise
            raise FabricError(goal.operation, uri, f"{refusal.detail}, after {last.detail}",
                              message_ids=(*last.message_ids, *refusal.message_ids),
                              status=refusal.status or last.status, phase="submit") from refusal

    def _precondition(self, resp: requests.Response, view: SystemView, seen: set[int], goal: Goal, uri: str,
                      deadline: float) -> SystemView:
        """412 (stale If-Match) or 428 (If-Match required): re-read the system and try once more."""
        status = resp.status_code
        if status in seen:
            raise self.http.http_error(goal.operation, uri, resp, "submit")
        seen.add(status)
        self.needs_if_match = self.needs_if_match or status == 428
        log.info("%s: HTTP %d from %s, re-reading it", goal.operation, status, view.uri)
        fresh = self.reads.read_system(view.uri, goal.operation, deadline)
        if not fresh.etag and status == 428:
            raise FabricError(goal.operation, view.uri, "the service requires If-Match but sends no ETag",
                              status=428, phase="submit")
        return fresh

    def _by_action(self, view: SystemView, uri: str, goal: Goal, deadline: float, issued: set[str]) -> Pending | None:
        attempts, seen = 0, set[int]()
        last: FabricError | None = None
        target = view.add if goal.attach else view.remove
        while True:
            done, pending = self._settle_after(uri, goal, deadline, last)
            if done:
                return pending
            if attempts > self.http.retries:
                raise last or self._unchanged(goal, uri)
            check_deadline(self.http.clock, deadline, goal, uri, "submit")
            attempts += 1
            if self.needs_if_match and not view.etag:
                view.update(self.reads.read_system(view.uri, goal.operation, deadline))
            headers = {"If-Match": view.etag} if self.needs_if_match and view.etag else None
            if goal.attach:
                issued.add(uri)
            body = {"ResourceBlock": {"@odata.id": uri}}
            answer = self._submit("POST", target, body, headers, view, seen, goal, uri, attempts, deadline)
            if answer.kind == "task":
                view.etag = ""  # the system changed; its new ETag is not in a 202
                return Pending(uri, answer.monitor, "task accepted", retry_after=answer.retry_after)
            if answer.kind == "applied":
                view.etag = answer.etag
                continue  # the re-read at the top confirms
            if answer.kind == "again":
                attempts -= 1
                continue
            last = answer.error
            assert last is not None
            if answer.kind == "retry":
                continue
            if attempts > 1:  # an earlier try may have landed after all: the block says
                done, pending = self._settle(uri, goal, deadline)
                if done:
                    return pending
            raise last

    def _by_patch(self, view: SystemView, uris: list[str], goal: Goal, deadline: float,
                  issued: set[str]) -> list[Pending]:
        attempts, seen = 0, set[int]()
        last: FabricError | None = None
        while True:
            todo, pending = [], []
            for uri in uris:
                done, p = self._settle_after(uri, goal, deadline, last)
                if p is not None:
                    pending.append(p)
                elif not done:
                    todo.append(uri)
            if not todo:
                return pending
            if attempts > self.http.retries:
                raise last or self._unchanged(goal, todo[0])
            check_deadline(self.http.clock, deadline, goal, todo[0], "submit")
            attempts += 1
            if not view.etag:  # edit the list as it is now, not as it was
                view.update(self.reads.read_system(view.uri, goal.operation, deadline))
            desired = [b for b in view.blocks if goal.attach or b not in todo]
            desired += [u for u in todo if goal.attach and u not in desired]
            if goal.attach:
                issued.update(todo)
            headers = {"If-Match": view.etag} if view.etag else None
            body = {"Links": {"ResourceBlocks": [{"@odata.id": u} for u in desired]}}
            named = ", ".join(todo)  # errors name the blocks; the operation names the system
            answer = self._submit("PATCH", view.uri, body, headers, view, seen, goal, named, attempts, deadline)
            if answer.kind == "task":
                view.etag = ""
                return pending + [Pending(u, answer.monitor, "task accepted", retry_after=answer.retry_after)
                                  for u in todo]
            if answer.kind == "applied":
                view.blocks, view.etag = desired, answer.etag
                continue
            if answer.kind == "again":
                attempts -= 1
                continue
            last = answer.error
            assert last is not None
            view.etag = ""  # the list may have changed: edit it as it is now
            if answer.kind == "retry":
                continue
            if attempts > 1 and all(self._settle(u, goal, deadline)[0] for u in todo):
                return pending + [Pending(u, "") for u in todo if goal.attach]
            raise last

    def _submit(self, method: str, url: str, body: dict[str, Any], headers: dict[str, str] | None, view: SystemView,
                seen: set[int], goal: Goal, named: str, attempts: int, deadline: float) -> Answer:
        """Send one try and sort out its answer, the one place that reads the status; ``named``: the
        block(s) the errors name. A try to retry is paused for here (its Retry-After honoured)."""
        try:
            resp = self.http.send(method, url, json=body, headers=headers, deadline=deadline)
        except NoReply as exc:
            error = FabricError(goal.operation, named, f"no answer: {exc}", phase="submit", retryable=True,
                                deadline=exc.deadline)
            log.warning("%s: %s; re-reading before a retry", goal.operation, error.detail)
            self.http.pause(attempts, deadline)
            return Answer("retry", error=error)
        status = resp.status_code
        if status == 202:
            return Answer("task", monitor=monitor_of(self.http, resp),
                          retry_after=wire.retry_after(resp.headers.get("Retry-After")))
        if 200 <= status < 300:
            return Answer("applied", etag=resp.headers.get("ETag", ""))
        if status in (412, 428):
            view.update(self._precondition(resp, view, seen, goal, named, deadline))
            return Answer("again")
        error = self.http.http_error(goal.operation, named, resp, "submit")
        if not error.retryable:
            return Answer("refused", error=error)
        log.warning("%s: %s; re-reading before a retry", goal.operation, error.detail)
        self.http.pause(attempts, deadline, wire.retry_after(resp.headers.get("Retry-After")))
        return Answer("retry", error=error)

    def _unchanged(self, goal: Goal, uri: str) -> FabricError:
        text = f"the service accepted {self.http.retries + 1} requests but the block did not change"
        return FabricError(goal.operation, uri, text, phase="confirm", retryable=True)

    # --- rollback --------------------------------------------------------------------------------

    def _rollback(self, system: str, ours: list[str], deadline: float, error: FabricError) -> FabricError:
        """Detach what a failed attach asked for; the error to raise names what could not be released."""
        if not ours:
            return error
        grace = max(deadline, self.http.clock() + self.rollback_grace)
        log.warning("attach to %s failed (%s); rolling back %s", system, error.detail, ", ".join(ours))
        try:
            self._converge(system, ours, Goal(False, system), grace, set())
        except FabricError as exc:
            left = self._still_composed(system, ours, grace)
            log.error("rollback on %s failed (%s); still composed: %s", system, exc, ", ".join(left) or "none")
            return error.with_leftover(left)
        return error

    def _still_composed(self, system: str, uris: list[str], deadline: float) -> list[str]:
        """Which of ``uris`` are composed or composing to ``system``; ones unreadable by ``deadline`` (the
        rollback's, which a bind waits for) count as composed, and the reconciler's orphan sweep settles them."""
        left = []
        for uri in uris:
            try:
                info = self.reads.read_block(uri, "rollback", deadline)
            except FabricError:
                left.append(uri)
                continue
            if system in info.systems:
                left.append(uri)
        return left
