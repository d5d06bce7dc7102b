"""Waiting for what the converger started: Redfish task monitors polled at the service's pace, and the block
itself when there is no monitor (or it vanished or failed), whose state has the last word.

A monitor answers 202 (or 200 with a running ``TaskState``) while the task runs; 404/410 when it is gone,
which is not a failure: the block is read instead. One PATCH task may serve many blocks, so each monitor
is polled once per round. Polls follow ``Retry-After`` when the service sends it, else an interval that
grows from the transport's ``backoff`` to ``max_poll_interval``; after ``max_polls`` rounds it gives up
(a retryable error: the block may still compose, and a later attach or detach carries on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from webhook.adapters.redfish import payloads as wire
from webhook.adapters.redfish.http import HttpTransport, NoReply, json_of, snippet
from webhook.adapters.redfish.payloads import BlockInfo, FabricError, Goal

ReadBlock = Callable[[str, str, float | None], BlockInfo]  # (uri, operation, deadline): the block read now


@dataclass
class Pending:
    block: str
    monitor: str  # task monitor (or Task) URI; "" when there is no handle and the block itself is watched
    note: str = "no task handle, watching the block"
    final: Any = None  # the body of a final, unsuccessful monitor answer
    errors: int = 0  # consecutive monitor polls without an answer
    retry_after: float | None = None  # from the 202 that started the task


def check_deadline(clock: Callable[[], float], deadline: float, goal: Goal, resource: str, phase: str,
                   what: str = "") -> None:
    if clock() >= deadline:
        raise FabricError(goal.operation, resource, f"deadline passed{what}", phase=phase, retryable=True,
                          deadline=True)


def monitor_of(http: HttpTransport, resp: requests.Response) -> str:
    """Location, else the body's TaskMonitor or @odata.id (services that omit the header), taken apart by the
    transport's one parser and on the service's origin: the monitor is polled with our token."""
    location = resp.headers.get("Location")
    if location:
        return http.link(location, "the Location of the task reply")
    body = json_of(resp)
    named = body.get("TaskMonitor") if isinstance(body, dict) else None
    if not isinstance(named, str):
        named = body.get("@odata.id") if isinstance(body, dict) else None
    return http.link(named, "the task reply") if isinstance(named, str) else ""


class TaskWaiter:
    def __init__(self, http: HttpTransport, read_block: ReadBlock, *, max_poll_interval: float = 2.0,
                 max_polls: int = 600) -> None:
        self.http = http
        self.read_block = read_block
        self.max_poll_interval, self.max_polls = max_poll_interval, max_polls

    def poll(self, p: Pending, deadline: float) -> tuple[str, float | None]:
        """Poll a monitor once: ("running" | "final" | "gone" | "error", Retry-After)."""
        try:
            resp = self.http.send("GET", p.monitor, deadline=deadline)
        except NoReply:
            p.errors += 1
            return "error", None
        hint = wire.retry_after(resp.headers.get("Retry-After"))
        body: Any = json_of(resp)
        state, percent = wire.task_state(body)
        if resp.status_code == 202 or (resp.status_code == 200 and state in wire.RUNNING_TASK_STATES):
            p.errors = 0
            p.note = f"task {p.monitor}: TaskState {state or 'Running'}" + (f", {percent}% done" if percent else "")
            return "running", hint
        if resp.status_code in (404, 410):
            return "gone", None
        if 200 <= resp.status_code < 300 and state not in wire.FAILED_TASK_STATES:
            return "final", None
        p.final = body if body is not None else {"error": {"message": snippet(resp)}}
        p.note = f"task {p.monitor} answered HTTP {resp.status_code}" + (f" (TaskState {state})" if state else "")
        if resp.status_code >= 500 or resp.status_code == 429:
            p.errors += 1
            return "error", hint
        return "final", None

    def wait(self, pending: list[Pending], goal: Goal, deadline: float) -> None:
        """Until every pending block reached the goal; raises when one cannot (or the deadline passes)."""
        http = self.http
        interval, polls = http.backoff, 0
        first = [p.retry_after for p in pending if p.retry_after is not None]
        if first:  # the 202 said when the task is worth asking about
            http.pause(1, deadline, max(first))
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
                        kind, hint = self.poll(p, deadline)
                        polled[p.monitor] = (kind, hint, p)
                    if hint is not None:
                        hints.append(hint)
                    if kind == "running" or (kind == "error" and not goal.attach and p.errors <= http.retries):
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
            what = f" while waiting ({pending[0].note})"
            check_deadline(http.clock, deadline, goal, pending[0].block, "task", what)
            # Retry-After is the service's word on when to look again; our own interval only grows to a cap.
            http.pause(1, deadline, max(hints) if hints else interval)
            interval = min(interval * 1.5, self.max_poll_interval)
            check_deadline(http.clock, deadline, goal, pending[0].block, "task", what)
