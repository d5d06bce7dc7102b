"""Safe release: remove the GPUs of a ``Releasing`` FabricAttachment from this node before the fabric
detaches them, and only when nothing uses them.

1. The loop has already marked them ``releasing`` in the inventory annotation: the extender stops
   counting them, so no new pod is placed on them.
2. ``busy``: refuse while NVML lists a compute or graphics process on the GPU, or any process holds
   ``/dev/nvidiaN`` open (N = its minor number; DCGM, exporters and plugins hold it without a context),
   naming them (pid and command) in the ``Released=False`` condition; the loop asks again next pass.
3. ``persistence``: persistence mode off (it holds the GPU initialised).
4. ``drain``: where NVML can, drain the GPU and look for users once more, which closes the window between
   the check and the removal.
5. ``remove``: ``nvmlDeviceRemoveGpu_v2`` where the binding offers it, else our own NVML is shut down
   (it holds device nodes too) and 1 is written to ``/sys/bus/pci/devices/<addr>/remove``.
6. ``gone``: wait until sysfs and a fresh NVML no longer see it; then ``Released=True``;
7. ``device-plugin``: refresh the device-plugin pod on this node so that the Node stops advertising the
   removed GPUs (best effort: a failure is logged, the GPUs are gone either way).

Only this attachment's GPUs are touched: no other GPU's persistence, drain state or handle changes.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from webhook.agent.model import Gpu, normalise_pci
from webhook.agent.nvml import Nvml, NvmlCallError
from webhook.agent.ports import NodeApi
from webhook.agent.steps import Deadlines, Observe, Refused, StepFailed, Steps, set_condition
from webhook.agent.sysfs import Host
from webhook.wire.fabric_attachment import RELEASED_CONDITION, Attachment, Block

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    deadlines: Deadlines = field(default_factory=Deadlines)
    device_plugin: bool = True  # refresh the device plugin after a removal


class InUse(Refused):
    """The GPUs are still used; the message names who uses them."""


@dataclass
class Target:
    block: Block
    gpu: Gpu | None  # None: NVML does not see it (already removed, or bound to another driver)

    @property
    def pci(self) -> str:
        return self.gpu.pci_address if self.gpu is not None else normalise_pci(self.block.pci_address)

    @property
    def ref(self) -> str:
        return self.gpu.ref if self.gpu is not None else (self.block.pci_address or self.block.uuid)


class Release:
    def __init__(self, nvml: Nvml, host: Host, options: Options, observe: Observe | None = None,
                 api: NodeApi | None = None) -> None:
        self.nvml = nvml
        self.host = host
        self.options = options
        self.observe = observe
        self.api = api

    def run(self, att: Attachment) -> Attachment:
        """The attachment with its ``Released`` condition set: True when the GPUs are gone, False with the
        reason while they are in use or their removal failed."""
        steps = Steps(f"release {att.name}", self.observe, self.options.deadlines.poll)
        try:
            removed = self._release(att, steps)
        except InUse as exc:
            log.info("release %s refused: %s", att.name, exc)
            return self._released(att, "False", "InUse", str(exc))
        except StepFailed as exc:
            message = f"release failed at step {exc.step} after {steps.elapsed:.1f}s: {exc.reason}"
            log.error("%s: %s", att.name, message)
            return self._released(att, "False", "RemoveFailed", message)
        message = (f"removed {len(removed)} GPU{'s' if len(removed) != 1 else ''} in {steps.elapsed:.1f}s"
                   + (": " + ", ".join(removed) if removed else " (already gone)"))
        log.info("release %s: %s", att.name, message)
        return self._released(att, "True", "Removed", message)

    @staticmethod
    def _released(att: Attachment, status: str, reason: str, message: str) -> Attachment:
        return dataclasses.replace(att, conditions=set_condition(att, RELEASED_CONDITION, status, reason, message))

    def _release(self, att: Attachment, steps: Steps) -> list[str]:
        d = self.options.deadlines
        with steps.step("locate"):
            targets = self._locate(att)
        if not targets:
            return []
        with steps.step("busy"):
            self._refuse_if_busy(targets)
        with steps.step("persistence"):
            for t in targets:
                if t.gpu is not None and t.gpu.persistence:
                    self.nvml.set_persistence(t.gpu, False)
        drained: list[Target] = []
        with steps.step("drain"):
            for t in targets:
                if t.gpu is not None and self.nvml.drain(t.gpu, True):
                    drained.append(t)
            try:
                self._refuse_if_busy(targets)
            except InUse:
                self._undrain(drained)
                raise
        with steps.step("remove"):
            try:
                self._remove(targets)
            except NvmlCallError as exc:
                if exc.in_use:
                    self._undrain(drained)
                    raise InUse(f"NVML refused to remove the GPU: {exc}") from exc
                raise
        with steps.step("gone"):
            steps.wait("gone", d.gone, lambda: self._still_there(targets))
        if self.api is not None and self.options.device_plugin:
            try:
                with steps.step("device-plugin"):
                    self.api.refresh_device_plugin()
            except StepFailed as exc:
                log.warning("%s: the device plugin keeps advertising the removed GPUs until it restarts: %s",
                            steps.what, exc.reason)
        return [t.ref for t in targets]

    def _locate(self, att: Attachment) -> list[Target]:
        if not self.nvml.initialised and not self.nvml.init():
            raise StepFailed("locate", f"NVML is not usable ({self.nvml.error}): cannot tell whether the GPUs "
                                       "are idle", 0.0)
        targets = []
        for block in att.blocks:
            gpu = self.nvml.find(block.uuid, block.pci_address)
            if gpu is None and block.pci_address and self.host.driver(block.pci_address) == "nvidia":
                self.nvml.reinit()  # bound to nvidia but unknown to our NVML: enumerate afresh
                gpu = self.nvml.find(block.uuid, block.pci_address)
            if gpu is not None and not gpu.valid:
                raise StepFailed("locate", f"{gpu.ref} cannot be read: {gpu.error}", 0.0)
            target = Target(block, gpu)
            if gpu is None:
                if not block.pci_address or not self.host.present(block.pci_address):
                    log.info("release %s: %s is already gone", att.name, block.pci_address or block.uuid)
                    continue
                driver = self.host.driver(block.pci_address)
                raise InUse(f"{target.ref} is bound to {driver or 'no driver'}, not nvidia: NVML cannot tell "
                            "whether it is idle; unbind it by hand")
            targets.append(target)
        return targets

    def _refuse_if_busy(self, targets: list[Target]) -> None:
        devices: dict[str, Target] = {}
        users: dict[str, set[str]] = {t.ref: set() for t in targets}
        for t in targets:
            gpu = t.gpu
            assert gpu is not None
            fresh = self.nvml.find(gpu.uuid, gpu.pci_address) or gpu
            for p in fresh.processes or ():
                users[t.ref].add(f"pid {p.pid} ({self.host.comm(p.pid)})")
            if gpu.minor is None:
                raise InUse(f"{t.ref}: NVML does not report its minor number, so its device node is unknown")
            devices[f"/dev/nvidia{gpu.minor}"] = t
        scan = self.host.holders(devices)
        for holder in scan.holders:
            users[devices[holder.path].ref].add(str(holder))
        busy = {ref: who for ref, who in users.items() if who}
        if scan.unreadable:
            pids = ", ".join(str(p) for p in scan.unreadable[:10])
            raise InUse(f"cannot see the open files of pids {pids}: the agent needs root and the host PID "
                        "namespace to tell that the GPUs are idle")
        if busy:
            raise InUse("; ".join(f"{ref} is in use by {', '.join(sorted(who, key=_pid_order))}"
                                  for ref, who in busy.items()))

    def _undrain(self, drained: list[Target]) -> None:
        for t in drained:
            assert t.gpu is not None
            try:
                self.nvml.drain(t.gpu, False)
            except NvmlCallError as exc:
                log.warning("cannot undrain %s: %s", t.ref, exc)

    def _remove(self, targets: list[Target]) -> None:
        if self.nvml.can_remove():
            for t in targets:
                assert t.gpu is not None
                self.nvml.remove(t.gpu)
            return
        # Our own NVML holds the device nodes open; the driver's remove would wait for it.
        self.nvml.shutdown()
        try:
            for t in targets:
                self.host.remove(t.pci)
        finally:
            self.nvml.init()

    def _still_there(self, targets: list[Target]) -> str | None:
        left = [t.pci for t in targets if self.host.present(t.pci)]
        if left:
            return f"{', '.join(left)} still under {self.host.sysfs_root}/bus/pci/devices"
        if not self.nvml.reinit():
            return None  # NVML is gone altogether: nothing can see the GPU
        seen = [t.ref for t in targets if t.gpu is not None and self.nvml.find(t.gpu.uuid, t.gpu.pci_address)]
        return f"NVML still sees {', '.join(seen)}" if seen else None


def _pid_order(text: str) -> tuple[int, str]:
    try:
        return int(text.split()[1]), text
    except (IndexError, ValueError):
        return 0, text
