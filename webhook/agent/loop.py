"""The agent's loop: one pass reads the GPUs, publishes what changed on the Node, and handles this node's
FabricAttachments (``Attached`` -> hot-add, ``Releasing`` -> safe release), one at a time: both re-enumerate
NVML, which must not interleave.

A pass runs every ``interval`` seconds and at once when an attachment changes (the watch wakes it). A
failing pass is logged and counted; the next one starts over from what NVML and the API server say now.
Before a release the GPUs are published as ``releasing``, so the extender stops counting them.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import TextIO

from webhook.agent import hotplug, inventory, release
from webhook.agent.metrics import AgentMetrics
from webhook.agent.model import Gpu
from webhook.agent.nvml import Nvml
from webhook.agent.ports import NodeApi, NodeApiError
from webhook.agent.sysfs import Host
from webhook.wire.fabric_attachment import RELEASED_CONDITION, Attachment, Phase

log = logging.getLogger(__name__)


class Agent:
    def __init__(self, nvml: Nvml, host: Host, api: NodeApi, *, own_clique_label: bool = False,
                 hot_add: hotplug.Options | None = None, releasing: release.Options | None = None,
                 dry_run: bool = False, out: TextIO | None = None) -> None:
        self.nvml = nvml
        self.host = host
        self.api = api
        self.own_clique_label = own_clique_label
        self.dry_run = dry_run
        self.out = out or sys.stdout
        self.gpus: list[Gpu] = []
        self.metrics = AgentMetrics(lambda: list(self.gpus))
        self.hot_add = hotplug.HotAdd(nvml, host, api, hot_add or hotplug.Options(), self.metrics.observer("hot-add"))
        self.release = release.Release(nvml, host, releasing or release.Options(), self.metrics.observer("release"),
                                       api)
        self.api_ok: tuple[bool, str] = (False, "no pass yet")
        self.passes = 0
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._hot_added: dict[str, str] = {}  # attachment -> resourceVersion we already answered
        self._names: set[str] = set()

    # -- one pass ----------------------------------------------------------------------------------

    def pass_once(self) -> None:
        with self._lock:
            try:
                self._pass()
            except NodeApiError as exc:
                self.api_ok = (False, str(exc))
                self.metrics.passes.labels("api-error").inc()
                log.error("pass failed: the API server: %s", exc)
                return
            self.passes += 1
            self.api_ok = (True, "last pass reached the API server")
            self.metrics.passes.labels("ok").inc()

    def _pass(self) -> None:
        self.gpus = self.nvml.gpus()
        self.metrics.nvml_up.set(1 if self.nvml.initialised else 0)
        attachments = [a for a in self.api.attachments() if a.node == self.api.node]
        self._names = {a.name for a in attachments}
        self.publish(attachments)
        handled = False
        for att in attachments:
            if att.phase is Phase.ATTACHED and not att.deleting:
                if self._hot_added.get(att.name) == att.version:
                    continue  # our answer is on its way through the watch
                handled |= self._handle(att, "hot-add")
            elif att.phase is Phase.RELEASING and not att.released:
                handled |= self._handle(att, "release")
        if handled:
            self.gpus = self.nvml.gpus()
            self.publish([a for a in self.api.attachments() if a.node == self.api.node])

    def publish(self, attachments: list[Attachment]) -> None:
        if self.nvml.initialised:
            want = inventory.desired(self.gpus, inventory.ownership(attachments), self.own_clique_label)
        else:
            want = inventory.unavailable(f"NVML is not available: {self.nvml.error}")
        patch = inventory.node_patch(self.api.read_node(), want)
        if patch is None:
            return
        self.api.patch_node(patch)
        self.metrics.node_patches.inc()
        verb = "would be patched (dry run)" if self.dry_run else "patched"
        log.info("node %s %s: %s", self.api.node, verb, json.dumps(patch, sort_keys=True)[:1000])

    def _handle(self, att: Attachment, operation: str) -> bool:
        if self.dry_run:
            print(json.dumps({"dryRun": operation, "attachment": att.name, "node": self.api.node,
                              "blocks": [{"id": b.id, "uuid": b.uuid, "pciAddress": b.pci_address}
                                         for b in att.blocks]}, sort_keys=True), file=self.out, flush=True)
            return False
        began = time.monotonic()
        result = self.hot_add.run(att) if operation == "hot-add" else self.release.run(att)
        if operation == "hot-add":
            outcome = "ready" if result.phase is Phase.READY else "failed"
        else:
            cond = result.condition(RELEASED_CONDITION)
            outcome = "released" if result.released else (cond.reason.lower() if cond else "refused")
            old = att.condition(RELEASED_CONDITION)
            if cond is not None and old is not None and (old.status, old.reason, old.message) == (
                    cond.status, cond.reason, cond.message):
                return False  # still refused for the same reason: nothing new to store
        self.metrics.finished(operation, outcome, time.monotonic() - began)
        self._store(result)
        if operation == "hot-add":
            self._hot_added = {k: v for k, v in self._hot_added.items() if k in self._names} | {att.name: att.version}
        return True

    def _store(self, att: Attachment) -> None:
        try:
            self.api.write_status(att)
        except NodeApiError as exc:
            if exc.status in (404, 409):
                log.warning("%s changed or went away while we worked (%s); the next pass looks again",
                            att.name, exc)
                return
            raise

    # -- running -----------------------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def run(self, stopping: threading.Event, interval: float) -> None:
        self.api.start(self.wake)
        while not stopping.is_set():
            self._wake.clear()
            try:
                self.pass_once()
            except Exception:  # a bug must not end the agent: log it, the next pass starts afresh
                self.metrics.passes.labels("error").inc()
                log.exception("pass failed")
            self._wake.wait(interval)
        log.info("agent for node %s stopped", self.api.node)

    def ready(self) -> tuple[bool, str]:
        if not self.nvml.initialised:
            return False, f"NVML is not available: {self.nvml.error or 'not initialised'}"
        ok, why = self.api_ok
        if not ok:
            return False, f"the API server is not reachable: {why}"
        return True, f"NVML initialised (driver {self.nvml.driver or 'unknown'}), {len(self.gpus)} GPUs"
