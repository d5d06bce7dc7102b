"""The simulator's state: blocks, systems, tasks, ETags, options and faults, behind one lock.

One ``threading.RLock`` guards everything, because the server answers requests on many threads and the
invariants span resources (a block's ``system`` and the system's block list change together). Tasks do
not run on timers: every public call first ``_advance``s the clock-driven tasks that are due, so a test
with an injected clock, or a request arriving late, sees exactly the same state.

ETags come from one counter that only grows (across resets too), so a stale ETag can never match a
resource that changed and changed back.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webhook.sim.fabric import inventory as inv
from webhook.sim.fabric.messages import RedfishError, Reply, error_body, message
from webhook.wire.timestamps import rfc3339

MAX_TASKS = 200  # finished tasks beyond this are purged, oldest first (their monitors then answer 404)


def now_iso() -> str:
    return rfc3339(time.time(), "s")


@dataclass
class BlockRec:
    spec: inv.BlockSpec
    state: str  # CompositionState: Unused, Composing, Composed, Failed, Unavailable
    system: str | None  # the system it is composed (or composing) to
    seq: int
    reserved: bool = False
    task: str | None = None  # the running task that changes this block


@dataclass
class SystemRec:
    spec: inv.SystemSpec
    blocks: list[str]  # GPU block Ids in Links order (the system's own block is rendered first)
    seq: int


@dataclass
class TaskRec:
    id: str
    system: str
    adds: list[str]
    removes: list[str]
    method: str
    target: str
    body: dict[str, Any]
    created: float
    delay: float
    due: float  # math.inf for a stuck task
    seq: int
    started_at: str = field(default_factory=now_iso)
    state: str = "Running"
    ended_at: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    result: Reply | None = None


@dataclass
class Stats:
    requests: int = 0
    compose_requested: int = 0  # blocks a request asked to compose (a second try counts again)
    composed: int = 0
    decomposed: int = 0
    injected_errors: int = 0
    crashes: int = 0
    precondition_failed: int = 0  # 412 answers (stale If-Match)
    precondition_required: int = 0  # 428 answers
    dropped_connections: int = 0
    monitor_polls: int = 0


class Model:
    def __init__(self, inventory: inv.Inventory, clock: Callable[[], float] = time.monotonic) -> None:
        self.inventory = inventory
        self.clock = clock
        self.lock = threading.RLock()
        self._counter = itertools.count(1)
        self._unhang = threading.Event()
        self.blocks: dict[str, BlockRec] = {}
        self.systems: dict[str, SystemRec] = {}
        self.tasks: dict[str, TaskRec] = {}
        self.zones: dict[str, inv.ZoneSpec] = {}
        self.options = inventory.options
        self.stats = Stats()
        self.rng = random.Random(0)
        self._task_ids = itertools.count(1)
        self.reset()

    # --- lifecycle -------------------------------------------------------------------------------

    def reset(self) -> None:
        """Back to the inventory as loaded: states, options and faults (statistics start over)."""
        with self.lock:
            self.zones = {z.id: z for z in self.inventory.zones}
            self.systems = {s.id: SystemRec(s, [], self.next_seq()) for s in self.inventory.systems}
            self.blocks = {}
            for b in self.inventory.blocks:
                rec = BlockRec(b, b.state, b.system or None, self.next_seq())
                self.blocks[b.id] = rec
                if rec.system:
                    self.systems[rec.system].blocks.append(b.id)
            self.tasks = {}
            self.stats = Stats()
            self.set_options(self.inventory.options)

    def set_options(self, options: inv.Options) -> None:
        """Replace options and faults; the error RNG restarts from the seed, so what follows repeats."""
        with self.lock:
            self.options = options
            self.rng = random.Random(options.faults.seed)
            if options.faults.hang:
                self._unhang.clear()
            else:
                self._unhang.set()

    def release_hung(self) -> None:
        """Let every waiting request go (the server is stopping)."""
        self._unhang.set()

    def next_seq(self) -> int:
        return next(self._counter)

    @staticmethod
    def etag(rec: BlockRec | SystemRec | TaskRec) -> str:
        return f'"{rec.seq}"'

    # --- faults ----------------------------------------------------------------------------------

    def wait_if_hung(self) -> bool:
        """Called outside the lock. True: go on; False: the cap passed, drop the connection."""
        faults = self.options.faults
        if not faults.hang:
            return True
        released = self._unhang.wait(faults.hang_cap_s)
        if not released:
            with self.lock:
                self.stats.dropped_connections += 1
        return released

    def injected_error(self, method: str) -> Reply | None:
        """An error answered before any processing (no state change), per error_rate and fail_next."""
        with self.lock:
            self.stats.requests += 1
            faults = self.options.faults
            if faults.error_methods and method.upper() not in faults.error_methods:
                return None
            hit = False
            if faults.fail_next > 0:
                self.options = _with_faults(self.options, fail_next=faults.fail_next - 1)
                hit = True
            elif faults.error_rate > 0:
                # One draw per matching request, so a seeded run fails the same requests every time.
                hit = self.rng.random() < faults.error_rate
            if not hit:
                return None
            self.stats.injected_errors += 1
            status = faults.error_status
            if status == 503:
                return Reply(503, error_body([message("ServiceTemporarilyUnavailable", "1")]), {"Retry-After": "1"})
            return Reply(status, error_body([message("InternalError")]))

    def take_crash(self) -> bool:
        """Consume one "compose then crash": the state change stands, the reply becomes a 500."""
        with self.lock:
            left = self.options.faults.crash_after_compose
            if left <= 0:
                return False
            self.options = _with_faults(self.options, crash_after_compose=left - 1)
            self.stats.crashes += 1
            return True

    # --- tasks -----------------------------------------------------------------------------------

    def new_task(self, system: str, adds: list[str], removes: list[str], method: str, target: str,
                 body: dict[str, Any]) -> TaskRec:
        now = self.clock()
        delay = self.options.compose_delay_s
        due = math.inf if self.options.faults.stuck_tasks else now + delay
        task = TaskRec(str(next(self._task_ids)), system, list(adds), list(removes), method, target, body,
                       now, delay, due, self.next_seq())
        task.messages.append(message("TaskStarted", task.id, legacy_severity=False))
        self.tasks[task.id] = task
        self._purge_tasks()
        return task

    def percent(self, task: TaskRec) -> int:
        if task.state != "Running":
            return 100
        if task.delay <= 0:
            return 0
        return min(99, int(100 * (self.clock() - task.created) / task.delay))

    def advance(self) -> None:
        """Finish the tasks that are due (called first by every public operation)."""
        with self.lock:
            now = self.clock()
            for task in list(self.tasks.values()):
                if task.state == "Running" and task.due <= now:
                    self.finish(task)

    def finish(self, task: TaskRec) -> None:
        failed = self.apply_adds(task.system, task.adds)
        self.apply_removes(task.system, task.removes)
        task.ended_at = now_iso()
        task.seq = self.next_seq()
        if failed:
            task.state = "Exception"
            details = [message("ResourceBlockCompositionStateChanged", b) for b in failed]
            task.messages += [message("TaskAborted", task.id, legacy_severity=False),
                              *(message("ResourceBlockCompositionStateChanged", b, legacy_severity=False)
                                for b in failed)]
            task.result = Reply(500, error_body([message("OperationFailed"), *details]))
        else:
            task.state = "Completed"
            task.messages.append(message("TaskCompletedOK", task.id, legacy_severity=False))
            task.result = Reply(200, {"@Message.ExtendedInfo": [message("Success")]})

    def cancel_block_task(self, rec: BlockRec) -> None:
        """Take ``rec`` out of its running task: a compose is undone, a decompose is abandoned."""
        task = self.tasks.get(rec.task or "")
        rec.task = None
        if task is None:
            return
        if rec.spec.id in task.adds:
            task.adds.remove(rec.spec.id)
            self._unlink(rec)
            rec.state = "Unused"
            rec.seq = self.next_seq()
        if rec.spec.id in task.removes:
            task.removes.remove(rec.spec.id)
        if not task.adds and not task.removes and task.state == "Running":
            self.cancel(task)

    def cancel(self, task: TaskRec) -> None:
        if task.state != "Running":
            return
        task.state = "Cancelled"  # first, so that cancel_block_task does not come back here
        for block_id in list(task.adds) + list(task.removes):
            self.cancel_block_task(self.blocks[block_id])
        task.ended_at = now_iso()
        task.seq = self.next_seq()
        task.messages.append(message("TaskCancelled", task.id, legacy_severity=False))
        task.result = Reply(409, error_body([message("TaskCancelled", task.id)]))

    def _purge_tasks(self) -> None:
        done = [t for t in self.tasks.values() if t.state != "Running"]
        for task in done[: max(0, len(self.tasks) - MAX_TASKS)]:
            del self.tasks[task.id]

    # --- state changes ---------------------------------------------------------------------------

    def apply_adds(self, system: str, block_ids: list[str]) -> list[str]:
        """Compose now; returns the blocks whose composition failed (fault ``fail_compose``)."""
        failed = []
        sys_rec = self.systems[system]
        for block_id in block_ids:
            rec = self.blocks[block_id]
            rec.task = None
            rec.seq = self.next_seq()
            if block_id in self.options.faults.fail_compose:
                self._unlink(rec)
                rec.state = "Failed"
                failed.append(block_id)
                continue
            rec.state, rec.system = "Composed", system
            if block_id not in sys_rec.blocks:
                sys_rec.blocks.append(block_id)
                sys_rec.seq = self.next_seq()
            self.stats.composed += 1
        return failed

    def apply_removes(self, system: str, block_ids: list[str]) -> None:
        for block_id in block_ids:
            rec = self.blocks[block_id]
            rec.task = None
            self._unlink(rec)
            rec.state = "Unused"
            rec.seq = self.next_seq()
            self.stats.decomposed += 1

    def _unlink(self, rec: BlockRec) -> None:
        if rec.system and rec.spec.id in self.systems[rec.system].blocks:
            sys_rec = self.systems[rec.system]
            sys_rec.blocks.remove(rec.spec.id)
            sys_rec.seq = self.next_seq()
        rec.system = None

    # --- lookups ---------------------------------------------------------------------------------

    def system(self, system_id: str) -> SystemRec:
        rec = self.systems.get(system_id)
        if rec is None:
            raise RedfishError(404, message("ResourceNotFound", "ComputerSystem", system_id))
        return rec

    def set_block_state(self, block_id: str, state: str) -> None:
        """Admin: force a block into Unused, Failed or Unavailable (maintenance, repair)."""
        with self.lock:
            rec = self.blocks.get(block_id)
            if rec is None or state not in ("Unused", "Failed", "Unavailable"):
                raise ValueError(f"unknown block {block_id!r} or state {state!r} (Unused, Failed, Unavailable)")
            if rec.task:
                self.cancel_block_task(rec)
            self._unlink(rec)
            rec.state = state
            rec.seq = self.next_seq()

    def snapshot(self) -> dict[str, Any]:
        """The admin view: everything a test wants to assert on, in plain JSON."""
        with self.lock:
            self.advance()
            return {
                "blocks": {b: {"state": r.state, "system": r.system, "task": r.task, "zone": r.spec.zone}
                           for b, r in self.blocks.items()},
                "systems": {s: list(r.blocks) for s, r in self.systems.items()},
                "tasks": {t: {"state": r.state, "system": r.system, "adds": r.adds, "removes": r.removes}
                          for t, r in self.tasks.items()},
                "stats": dict(vars(self.stats)),
                "options": inv.to_dict(inv.Inventory((), (), (), options=self.options))["options"],
            }


def _with_faults(options: inv.Options, **changes: Any) -> inv.Options:
    return dataclasses.replace(options, faults=dataclasses.replace(options.faults, **changes))
