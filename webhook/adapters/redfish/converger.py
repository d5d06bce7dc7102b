"""The Redfish client's attach / detach engine: retries that never compose twice, tasks, If-Match, rollback.

The rule that keeps retries safe: before every try the block is read again, and the decision comes from
what the service reports (``Links.ComputerSystems`` and ``CompositionState``), never from what the last
reply seemed to say. A reply lost to a reset connection, a 500 sent after the composition was done, a
task monitor that vanished: each ends in a re-read that finds the block composed (done), composing to
this system (wait for it), free (try again, within ``retries``) or taken by another system (refused).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import requests

from webhook.adapters.redfish import payloads as wire
from webhook.adapters.redfish.http import HttpClient, Transport
from webhook.adapters.redfish.payloads import BlockInfo, FabricError, Goal, SystemView

log = logging.getLogger("imex_webhook.fabric")


@dataclass
class Pending:
    block: str
    monitor: str  # task monitor (or Task) URI; "" when there is no handle and the block itself is watched
    note: str = "no task handle, watching the block"
    final: Any = None  # the body of a final, unsuccessful monitor answer
    errors: int = 0  # consecutive monitor polls without an answer
    retry_after: float | None = None  # from the 202 that started the task


class Operations(HttpClient):
    """The engine; RedfishClient provides the cached reads (the four methods that raise NotImplementedError)."""

    max_poll_interval = 2.0
    max_polls = 600
    rollback_grace = 2.0
    needs_if_match = False  # learned from a 428: send If-Match on actions too

    def read_block(self, uri: str, operation: str = "read", deadline: float | None = None) -> BlockInfo:
        raise NotImplementedError

    def read_system(self, uri: str, operation: str, deadline: float | None = None) -> SystemView:
        raise NotImplementedError

    def system_view(self, uri: str, operation: str, deadline: float | None) -> SystemView:
        raise NotImplementedError

    def store_system(self, view: SystemView) -> None:
        raise NotImplementedError

    def _deadline(self, deadline: float, goal: Goal, resource: str, phase: str, what: str = "") -> None:
        if self.clock() >= deadline:
            raise FabricError(goal.operation, resource, f"deadline passed{what}", phase=phase, retryable=True,
                              deadline=True)

    # --- converge ----------------------------------------------------------------------------------

    def converge(self, system: str, uris: list[str], goal: Goal, deadline: float, issued: set[str]) -> list[BlockInfo]:
        view = self.system_view(system, goal.operation, deadline)
        if view.add if goal.attach else view.remove:
            pending = [p for uri in uris if (p := self._by_action(view, uri, goal, deadline, issued))]
        else:
            pending = self._by_patch(view, uris, goal, deadline, issued)
        self.store_system(view)
        self._await(pending, goal, deadline)
        infos = [self.read_block(u, goal.operation, deadline) for u in uris]
        for info in infos:
            if not goal.reached(info):
                raise FabricError(goal.operation, info.id, f"the service reports the block {info.state} to "
                                  f"{', '.join(info.systems) or 'no system'}", phase="confirm", retryable=True)
        return infos

    def _settle(self, uri: str, goal: Goal, deadline: float) -> tuple[bool, Pending | None]:
        """Re-read: (True, None) done, (True, Pending) in flight, (False, None) worth a try; raises if taken."""
        try:
            info = self.read_block(uri, goal.operation, deadline)
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
            raise self.http_error(goal.operation, uri, resp, "submit")
        seen.add(status)
        self.needs_if_match = self.needs_if_match or status == 428
        log.info("%s: HTTP %d from %s, re-reading it", goal.operation, status, view.uri)
        fresh = self.read_system(view.uri, goal.operation, deadline)
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
            if attempts > self.retries:
                raise last or self._unchanged(goal, uri)
            self._deadline(deadline, goal, uri, "submit")
            attempts += 1
            if self.needs_if_match and not view.etag:
                view.update(self.read_system(view.uri, goal.operation, deadline))
            headers = {"If-Match": view.etag} if self.needs_if_match and view.etag else None
            if goal.attach:
                issued.add(uri)
            try:
                resp = self.send("POST", target, json={"ResourceBlock": {"@odata.id": uri}}, headers=headers,
                                 deadline=deadline)
            except Transport as exc:
                last = FabricError(goal.operation, uri, f"no answer: {exc}", phase="submit", retryable=True,
                                   deadline=exc.deadline)
                log.warning("%s: %s; re-reading before a retry", goal.operation, last.detail)
                self.pause(attempts, deadline)
                continue
            status = resp.status_code
            if status == 202:
                view.etag = ""  # the system changed; its new ETag is not in a 202
                return Pending(uri, self._monitor_of(resp), "task accepted",
                               retry_after=wire.retry_after(resp.headers.get("Retry-After")))
            if 200 <= status < 300:
                view.etag = resp.headers.get("ETag", "")
                continue  # the re-read at the top confirms
            if status in (412, 428):
                view.update(self._precondition(resp, view, seen, goal, uri, deadline))
                attempts -= 1
                continue
            last = self.http_error(goal.operation, uri, resp, "submit")
            if last.retryable:
                log.warning("%s: %s; re-reading before a retry", goal.operation, last.detail)
                self.pause(attempts, deadline, wire.retry_after(resp.headers.get("Retry-After")))
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
            if attempts > self.retries:
                raise last or self._unchanged(goal, todo[0])
            self._deadline(deadline, goal, todo[0], "submit")
            attempts += 1
            if not view.etag:  # edit the list as it is now, not as it was
                view.update(self.read_system(view.uri, goal.operation, deadline))
            desired = [b for b in view.blocks if goal.attach or b not in todo]
            desired += [u for u in todo if goal.attach and u not in desired]
            if goal.attach:
                issued.update(todo)
            headers = {"If-Match": view.etag} if view.etag else None
            body = {"Links": {"ResourceBlocks": [{"@odata.id": u} for u in desired]}}
            named = ", ".join(todo)  # errors name the blocks; the operation names the system
            try:
                resp = self.send("PATCH", view.uri, json=body, headers=headers, deadline=deadline)
            except Transport as exc:
                last = FabricError(goal.operation, named, f"no answer: {exc}", phase="submit", retryable=True,
                                   deadline=exc.deadline)
                view.etag = ""
                self.pause(attempts, deadline)
                continue
            status = resp.status_code
            if status == 202:
                view.etag = ""
                monitor, after = self._monitor_of(resp), wire.retry_after(resp.headers.get("Retry-After"))
                return pending + [Pending(u, monitor, "task accepted", retry_after=after) for u in todo]
            if 200 <= status < 300:
                view.blocks, view.etag = desired, resp.headers.get("ETag", "")
                continue
            if status in (412, 428):
                view.update(self._precondition(resp, view, seen, goal, named, deadline))
                attempts -= 1
                continue
            last = self.http_error(goal.operation, named, resp, "submit")
            view.etag = ""
            if last.retryable:
                self.pause(attempts, deadline, wire.retry_after(resp.headers.get("Retry-After")))
                continue
            if attempts > 1 and all(self._settle(u, goal, deadline)[0] for u in todo):
                return pending + [Pending(u, "") for u in todo if goal.attach]
            raise last

    def _unchanged(self, goal: Goal, uri: str) -> FabricError:
        text = f"the service accepted {self.retries + 1} requests but the block did not change"
        return FabricError(goal.operation, uri, text, phase="confirm", retryable=True)

    @staticmethod
    def _monitor_of(resp: requests.Response) -> str:
        """Location, else the body's TaskMonitor or @odata.id (services that omit the header)."""
        location = resp.headers.get("Location")
        if location:
            return wire.path_of(location)
        try:
            body = resp.json()
        except ValueError:
            return ""
        if isinstance(body, dict) and isinstance(body.get("TaskMonitor"), str):
            return wire.path_of(body["TaskMonitor"])
        return wire.odata_id(body)

    # --- waiting ---------------------------------------------------------------------------------

    def _poll(self, p: Pending, deadline: float) -> tuple[str, float | None]:
        """Poll a monitor once: ("running" | "final" | "gone" | "error", Retry-After)."""
        try:
            resp = self.send("GET", p.monitor, deadline=deadline)
        except Transport:
            p.errors += 1
            return "error", None
        hint = wire.retry_after(resp.headers.get("Retry-After"))
        try:
            body: Any = resp.json()
        except ValueError:
            body = None
        state, percent = wire.task_state(body)
        if resp.status_code == 202 or (resp.status_code == 200 and state in wire.RUNNING_TASK_STATES):
            p.errors = 0
            p.note = f"task {p.monitor}: TaskState {state or 'Running'}" + (f", {percent}% done" if percent else "")
            return "running", hint
        if resp.status_code in (404, 410):
            return "gone", None
        if 200 <= resp.status_code < 300 and state not in wire.FAILED_TASK_STATES:
            return "final", None
        p.final = body if body is not None else {"error": {"message": wire.short(resp.text)}}
        p.note = f"task {p.monitor} answered HTTP {resp.status_code}" + (f" (TaskState {state})" if state else "")
        if resp.status_code >= 500 or resp.status_code == 429:
            p.errors += 1
            return "error", hint
        return "final", None

    def _await(self, pending: list[Pending], goal: Goal, deadline: float) -> None:
        interval, polls = self.backoff, 0
        first = [p.retry_after for p in pending if p.retry_after is not None]
        if first:  # the 202 said when the task is worth asking about
            self.pause(1, deadline, max(first))
        while pending:
            waiting, hints = [], []
            polled: dict[str, tuple[str, float | None, Pending]] = {}  # one PATCH task serves many blocks
            for p in pending:
                kind = "gone"
                if p.monitor:
                    if p.monitor in polled:
                        kind, hint, seen = polled[p.monitor]
                        p.note, p.final, p.errors = seen.note, seen.final, seen.errors
                    else:
                        kind, hint = self._poll(p, deadline)
                        polled[p.monitor] = (kind, hint, p)
                    if hint is not None:
                        hints.append(hint)
                    if kind == "running" or (kind == "error" and not goal.attach and p.errors <= self.retries):
                        waiting.append(p)
                        continue
                    if kind == "gone":
                        p.monitor = ""
                info = self.read_block(p.block, goal.operation, deadline)
                if goal.reached(info):
                    continue
                if goal.in_flight(info) or (not goal.attach and kind in ("gone", "error") and not p.final):
                    waiting.append(p)
                    continue
                refusal = goal.refusal(info)
                raise FabricError(goal.operation, p.block, f"{p.note}; the block is {info.state}: "
                                  f"{wire.messages_text(p.final) or (refusal.detail if refusal else 'not done')}",
                                  message_ids=wire.message_ids(p.final), phase="task")
            pending = waiting
            if not pending:
                return
            polls += 1
            if polls > self.max_polls:
                raise FabricError(goal.operation, pending[0].block, f"gave up after {self.max_polls} polls; "
                                  f"{pending[0].note}", phase="task", retryable=True)
            self._deadline(deadline, goal, pending[0].block, "task", f" while waiting ({pending[0].note})")
            # Retry-After is the service's word on when to look again; our own interval only grows to a cap.
            self.pause(1, deadline, max(hints) if hints else interval)
            interval = min(interval * 1.5, self.max_poll_interval)
            self._deadline(deadline, goal, pending[0].block, "task", f" while waiting ({pending[0].note})")

    # --- rollback --------------------------------------------------------------------------------

    def rollback(self, system: str, ours: list[str], deadline: float, error: FabricError) -> FabricError:
        """Detach what a failed attach asked for; the error to raise names what could not be released."""
        if not ours:
            return error
        grace = max(deadline, self.clock() + self.rollback_grace)
        log.warning("attach to %s failed (%s); rolling back %s", system, error.detail, ", ".join(ours))
        try:
            self.converge(system, ours, Goal(False, system), grace, set())
        except FabricError as exc:
            left = self._still_composed(system, ours)
            log.error("rollback on %s failed (%s); still composed: %s", system, exc, ", ".join(left) or "none")
            return error.with_leftover(left)
        return error

    def _still_composed(self, system: str, uris: list[str]) -> list[str]:
        """Which of ``uris`` are composed or composing to ``system`` (unreadable ones count as composed)."""
        left = []
        for uri in uris:
            try:
                info = self.read_block(uri, "rollback")
            except FabricError:
                left.append(uri)
                continue
            if system in info.systems:
                left.append(uri)
        return left
