"""Attach and detach: the AddResourceBlock / RemoveResourceBlock actions, PATCH of Links.ResourceBlocks,
task monitors, and the checks a composition service makes before it changes anything.

Every request is checked completely before the first change (DSP2050: a failed precondition leaves the
state as it was): unknown block -> 404 ResourceBlockNotFound, another zone -> 400 IncompatibleZone, a
block not Unused -> 409 ResourceBlockInUse, no free slot -> 409 ResourceExhaustion, stale If-Match ->
412, missing If-Match where required -> 428. A second request for a block that is already composed is
refused, not ignored, so a client that retries blindly is caught by the tests.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from webhook.sim.fabric import payloads, sessions
from webhook.sim.fabric.inventory import Inventory, system_block_id
from webhook.sim.fabric.messages import RedfishError, Reply, error_body, message
from webhook.sim.fabric.state import BlockRec, Model, SystemRec

_ACTION_PARAMS = {"ResourceBlock", "ResourceBlockETag", "ComputerSystemETag"}
_HOST = "host"  # marker for a system's own ComputerSystem block


def _content_etag(body: Mapping[str, Any]) -> str:
    """For resources without a change counter: the hash of what they say."""
    return '"' + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16] + '"'


def _etag_matches(header: str, etag: str) -> bool:
    candidates = [c.strip() for c in header.split(",")]
    # Weak and strong forms of the same tag are accepted: clients copy either from the header or the body.
    return "*" in candidates or etag in candidates or f"W/{etag}" in candidates


class Simulator(Model):
    """The whole stateful service; every method is safe to call from many threads."""

    def __init__(self, inventory: Inventory, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(inventory, clock)
        self.sessions = sessions.SessionStore(self.clock)  # not part of reset(): logins outlive it

    # --- authentication --------------------------------------------------------------------------

    def login(self, body: Any, origin: str) -> Reply:
        return self.sessions.create(body, self.options, self.inventory.credentials, origin)

    def authenticate(self, token: str) -> bool:
        return self.sessions.authenticate(token, self.options)

    def basic_ok(self, user: str, password: str) -> bool:
        return sessions.credentials_match(user, password, self.inventory.credentials)

    def logout(self, session_id: str) -> Reply:
        return self.sessions.delete(session_id)

    def patch_session_service(self, body: Any) -> Reply:
        timeout = sessions.patched_timeout(body)
        with self.lock:
            if timeout is not None:  # not set_options: that would also restart the fault RNG
                self.options = dataclasses.replace(self.options, session_timeout_s=timeout)
            resource, etag = self.get(["SessionService"], {})
            return Reply(200, resource, {"ETag": etag})

    # --- request pieces --------------------------------------------------------------------------

    def _preconditions(self, rec: SystemRec, if_match: str | None, param_etag: object = None) -> None:
        etag = self.etag(rec)
        if if_match is not None and not _etag_matches(if_match, etag):
            self.stats.precondition_failed += 1
            raise RedfishError(412, message("PreconditionFailed"), headers={"ETag": etag})
        if param_etag is not None and param_etag != etag and param_etag != f"W/{etag}":
            # The ComputerSystem schema asks for 428 when the ComputerSystemETag parameter is stale.
            self.stats.precondition_required += 1
            raise RedfishError(428, message("PreconditionFailed"))
        if if_match is None and param_etag is None and self.options.require_if_match:
            self.stats.precondition_required += 1
            raise RedfishError(428, message("PreconditionRequired"))

    def _resolve(self, ref: object, where: str, action: str) -> str:
        """A block Id from ``{"@odata.id": ...}``; _HOST-prefixed for a system's own block."""
        uri = ref.get("@odata.id") if isinstance(ref, dict) else None
        if not isinstance(uri, str):
            raise RedfishError(400, message("ActionParameterValueError", where, action))
        head, _, block_id = uri.rstrip("/").rpartition("/")
        if block_id in self.blocks and head == payloads.BLOCKS:
            return block_id
        host = next((s for s in self.systems if system_block_id(s) == block_id), None)
        if host is not None and head == payloads.BLOCKS:
            return f"{_HOST}:{host}"
        raise RedfishError(404, message("ResourceBlockNotFound", block_id or uri))

    def _check_add(self, sys_rec: SystemRec, block_id: str) -> BlockRec:
        if block_id.startswith(f"{_HOST}:"):
            raise RedfishError(409, message("ResourceBlockInUse", system_block_id(block_id.split(":", 1)[1])))
        rec = self.blocks[block_id]
        if rec.spec.zone != sys_rec.spec.zone:
            raise RedfishError(400, message("IncompatibleZone"))
        if rec.state != "Unused" or rec.system is not None:
            raise RedfishError(409, message("ResourceBlockInUse", block_id))
        return rec

    def _check_capacity(self, sys_rec: SystemRec, count: int) -> None:
        if count > sys_rec.spec.max_blocks:
            raise RedfishError(409, message("ResourceExhaustion", payloads.system_uri(sys_rec.spec.id)))

    def _check_remove(self, sys_rec: SystemRec, block_id: str) -> BlockRec:
        if block_id.startswith(f"{_HOST}:"):
            raise RedfishError(400, message("ResourceBlockInvalid", system_block_id(block_id.split(":", 1)[1])))
        rec = self.blocks[block_id]
        if rec.system != sys_rec.spec.id:
            raise RedfishError(400, message("ResourceBlockInvalid", block_id))
        task = self.tasks.get(rec.task or "")
        if task is not None and block_id in task.removes:
            raise RedfishError(409, message("ResourceInUse"))
        return rec

    def _start(self, sys_rec: SystemRec, adds: list[BlockRec], removes: list[BlockRec], method: str,
               target: str, body: dict[str, Any]) -> Reply:
        """Change the state now (no delay) or start a task; then maybe "crash" (fault)."""
        system_id = sys_rec.spec.id
        add_ids, remove_ids = [r.spec.id for r in adds], [r.spec.id for r in removes]
        self.stats.compose_requested += len(add_ids)
        if not add_ids and not remove_ids:
            reply = Reply(200, {"@Message.ExtendedInfo": [message("Success")]})
        elif self.options.compose_delay_s <= 0:
            failed = self.apply_adds(system_id, add_ids)
            self.apply_removes(system_id, remove_ids)
            if failed:
                reply = Reply(500, error_body([message("OperationFailed"),
                                               *(message("ResourceBlockCompositionStateChanged", b) for b in failed)]))
            else:
                reply = Reply(200, {"@Message.ExtendedInfo": [message("Success")]})
        else:
            task = self.new_task(system_id, add_ids, remove_ids, method, target, body)
            for rec in adds:
                rec.state, rec.system, rec.task, rec.seq = "Composing", system_id, task.id, self.next_seq()
                sys_rec.blocks.append(rec.spec.id)
            for rec in removes:
                rec.task, rec.seq = task.id, self.next_seq()
            if adds:
                sys_rec.seq = self.next_seq()
            reply = Reply(202, payloads.task(self, task), self._monitor_headers(task.id))
        if reply.status != 202:  # on a 202 the body is the Task, whose ETag this is not
            reply.headers["ETag"] = self.etag(sys_rec)
        if self.take_crash():
            return Reply(500, error_body([message("InternalError")]))
        return reply

    def _monitor_headers(self, task_id: str) -> dict[str, str]:
        task = self.tasks[task_id]
        headers = {} if self.options.no_location_header else {"Location": f"{payloads.MONITORS}/{task_id}"}
        remaining = task.due - self.clock()
        # Retry-After counts whole seconds; for sub-second tasks it would only slow clients down.
        if math.isfinite(remaining) and task.delay >= 1:
            headers["Retry-After"] = str(max(1, math.ceil(remaining)))
        return headers

    # --- operations ------------------------------------------------------------------------------

    def action(self, system_id: str, name: str, body: Any, if_match: str | None) -> Reply:
        with self.lock:
            self.advance()
            sys_rec = self.system(system_id)
            if name not in (payloads.ADD, payloads.REMOVE) or not self.options.actions:
                raise RedfishError(400, message("ActionNotSupported", name))
            if not isinstance(body, dict):
                raise RedfishError(400, message("ActionParameterMissing", name, "ResourceBlock"))
            unknown = sorted(set(body) - _ACTION_PARAMS)
            if unknown:
                raise RedfishError(400, message("ActionParameterUnknown", name, unknown[0]))
            if "ResourceBlock" not in body:
                raise RedfishError(400, message("ActionParameterMissing", name, "ResourceBlock"))
            self._preconditions(sys_rec, if_match, body.get("ComputerSystemETag"))
            block_id = self._resolve(body["ResourceBlock"], "ResourceBlock", name)
            block_etag = body.get("ResourceBlockETag")
            if block_etag is not None and block_id in self.blocks and \
                    not _etag_matches(str(block_etag), self.etag(self.blocks[block_id])):
                raise RedfishError(428, message("PreconditionFailed"))
            target = f"{payloads.system_uri(system_id)}/Actions/{name}"
            if name == payloads.ADD:
                rec = self._check_add(sys_rec, block_id)
                self._check_capacity(sys_rec, len(sys_rec.blocks) + 1)
                return self._start(sys_rec, [rec], [], "POST", target, body)
            rec = self._check_remove(sys_rec, block_id)
            if rec.task:  # composing: detach cancels the compose (the way out of a stuck task)
                self.cancel_block_task(rec)
                return self._start(sys_rec, [], [], "POST", target, body)
            return self._start(sys_rec, [], [rec], "POST", target, body)

    def patch_system(self, system_id: str, body: Any, if_match: str | None) -> Reply:
        """PATCH with Links.ResourceBlocks: the full desired list, with DSP0266 array semantics ({} keeps
        the element at that index, null removes it); elements past the end of the request are removed."""
        with self.lock:
            self.advance()
            sys_rec = self.system(system_id)
            if not isinstance(body, dict):
                raise RedfishError(400, message("PropertyValueTypeError", str(body)[:64], "(body)"))
            for key in body:
                if key != "Links" and not key.startswith("@"):
                    raise RedfishError(400, message("PropertyNotWritable", key))
            links = body.get("Links")
            if not isinstance(links, dict) or not isinstance(links.get("ResourceBlocks"), list):
                raise RedfishError(400, message("PropertyValueTypeError", str(links)[:64], "Links/ResourceBlocks"))
            for key in links:
                if key != "ResourceBlocks" and not key.startswith("ResourceBlocks@"):
                    raise RedfishError(400, message("PropertyNotWritable", f"Links/{key}"))
            self._preconditions(sys_rec, if_match)
            current = [f"{_HOST}:{system_id}", *sys_rec.blocks]
            desired: list[str] = []
            for i, item in enumerate(links["ResourceBlocks"]):
                if item is None:
                    continue
                if item == {} and i < len(current):
                    block_id = current[i]
                else:
                    block_id = self._resolve(item, f"Links/ResourceBlocks/{i}", "PATCH")
                if block_id not in desired:
                    desired.append(block_id)
            if current[0] not in desired:
                raise RedfishError(400, message("ResourceBlockInvalid", system_block_id(system_id)))
            adds = [self._check_add(sys_rec, b) for b in desired if b not in current]
            removes = [self._check_remove(sys_rec, b) for b in current if b not in desired]
            self._check_capacity(sys_rec, len(desired) - 1)
            for rec in [r for r in removes if r.task]:
                self.cancel_block_task(rec)
                removes.remove(rec)
            return self._start(sys_rec, adds, removes, "PATCH", payloads.system_uri(system_id), body)

    def monitor(self, task_id: str, delete: bool = False) -> Reply:
        """GET: 202 while running, then the operation's own reply. DELETE: cancel the task."""
        with self.lock:
            self.advance()
            task = self.tasks.get(task_id)
            if task is None:
                raise RedfishError(404, message("ResourceNotFound", "TaskMonitor", task_id))
            if delete:
                self.cancel(task)
                return Reply(204)
            self.stats.monitor_polls += 1
            if task.state == "Running":
                return Reply(202, payloads.task(self, task), self._monitor_headers(task_id))
            assert task.result is not None
            return Reply(task.result.status, task.result.body, dict(task.result.headers))

    def get(self, parts: list[str], query: dict[str, str]) -> tuple[dict[str, Any], str]:
        """A resource and its ETag (the change counter for blocks, systems and tasks, else a content hash)."""
        with self.lock:
            self.advance()
            if parts[:1] == ["SessionService"]:
                body = self.sessions.render(self, parts, query)
            else:
                body = payloads.render(self, parts, query)
            etag = body.get("@odata.etag")
            if not isinstance(etag, str):
                etag = _content_etag(body)
                body["@odata.etag"] = etag
            return body, etag

    def snapshot(self) -> dict[str, Any]:
        out = super().snapshot()
        out["sessions"] = self.sessions.snapshot(self.options)
        return out
