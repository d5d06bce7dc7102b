"""Hot-add: make the fabric GPUs of an ``Attached`` FabricAttachment usable on this node, then say so.

Steps, each with a deadline (``steps.Deadlines``), logged with its duration:

1. ``rescan``: write 1 to ``/sys/bus/pci/rescan`` (a native pciehp event may already have done it);
2. ``enumerate``: wait for ``/sys/bus/pci/devices/<addr>`` of every block, rescanning now and then;
3. ``driver``: wait until each is bound to ``nvidia`` (a GPU bound to vfio-pci is invisible to NVML);
4. ``nvml``: shut NVML down and initialise it again (whether an initialised NVML sees a hot-added GPU is
   not documented), then find each GPU by UUID, else PCI address; never by index;
5. ``check``: readable, fabric COMPLETED/SUCCESS where it has one, not unhealthy, same clique as the node;
6. ``persistence``: persistence mode on, when configured;
7. ``device-plugin``: unless the Node already advertises them, delete only the device-plugin pod on this
   node, so that its DaemonSet starts one that enumerates the GPUs again (no driver or kubelet restart);
8. ``allocatable``: wait until the Node's ``status.allocatable["nvidia.com/gpu"]`` covers them.

The result is the attachment moved to ``Ready`` (blocks carry the UUIDs and PCI addresses NVML reported)
or to ``Failed`` with a message naming the step and what was missing. The caller stores it.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from webhook.agent import clique
from webhook.agent.model import FabricState, Gpu, Health, normalise_pci
from webhook.agent.nvml import Nvml
from webhook.agent.ports import NodeApi, NodeApiError, allocatable_gpus
from webhook.agent.steps import Deadlines, Observe, StepFailed, Steps, now_rfc3339, set_condition
from webhook.agent.sysfs import Host
from webhook.wire.fabric_attachment import READY_CONDITION, Attachment, Block, Phase

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    persistence_mode: bool = False
    deadlines: Deadlines = field(default_factory=Deadlines)
    rescan_every: float = 5.0  # seconds between two rescans while a device has not appeared
    device_plugin: bool = True  # False: no device plugin to refresh (DRA-only nodes); no allocatable wait


class HotAdd:
    def __init__(self, nvml: Nvml, host: Host, api: NodeApi, options: Options, observe: Observe | None = None):
        self.nvml = nvml
        self.host = host
        self.api = api
        self.options = options
        self.observe = observe

    def run(self, att: Attachment) -> Attachment:
        steps = Steps(f"hot-add {att.name}", self.observe, self.options.deadlines.poll)
        log.info("hot-add %s: %d block(s) for pod %s/%s: %s", att.name, len(att.blocks), att.pod_namespace,
                 att.pod_name, ", ".join(b.pci_address or b.uuid for b in att.blocks))
        try:
            found = self._prepare(att, steps)
        except StepFailed as exc:
            message = f"hot-add failed at step {exc.step} after {steps.elapsed:.1f}s: {exc.reason}"
            log.error("%s: %s", att.name, message)
            return dataclasses.replace(
                att, phase=Phase.FAILED, message=message, phase_since=now_rfc3339(),
                conditions=set_condition(att, READY_CONDITION, "False", f"{exc.step.title().replace('-', '')}Failed",
                                         message))
        blocks = tuple(Block(b.id, uuid=g.uuid, pci_address=g.pci_address) for b, g in zip(att.blocks, found,
                                                                                            strict=True))
        message = (f"{len(found)} GPU{'s' if len(found) > 1 else ''} ready in {steps.elapsed:.1f}s: "
                   + ", ".join(g.ref for g in found))
        log.info("%s: %s", att.name, message)
        return dataclasses.replace(att, phase=Phase.READY, blocks=blocks, message=message, phase_since=now_rfc3339(),
                                   conditions=set_condition(att, READY_CONDITION, "True", "GpusReady", message))

    # -- the steps ---------------------------------------------------------------------------------

    def _prepare(self, att: Attachment, steps: Steps) -> list[Gpu]:
        d = self.options.deadlines
        if not att.blocks:
            raise StepFailed("blocks", "status.blocks is empty: nothing to prepare", 0.0)
        for block in att.blocks:
            if not block.uuid and not block.pci_address:
                raise StepFailed("blocks", f"block {block.id} names neither a GPU UUID nor a PCI address", 0.0)
        addresses = [normalise_pci(b.pci_address) for b in att.blocks if b.pci_address]
        with steps.step("rescan"):
            self.host.rescan()
        with steps.step("enumerate"):
            devices = self.host.sysfs_root / "bus" / "pci" / "devices"
            steps.wait("enumerate", d.enumerate, lambda: self._absent(addresses, devices),
                       retry=self.host.rescan, retry_every=self.options.rescan_every)
        with steps.step("driver"):
            steps.wait("driver", d.driver, lambda: self._unbound(addresses))
        found: list[Gpu] = []
        with steps.step("nvml"):
            steps.wait("nvml", d.nvml, lambda: self._find(att.blocks, found, reinit=True))
        with steps.step("check"):
            steps.wait("check", d.check, lambda: self._check(att.blocks, found))
        if self.options.persistence_mode:
            with steps.step("persistence"):
                for gpu in found:
                    if gpu.persistence is not True:
                        self.nvml.set_persistence(gpu, True)
        if self.options.device_plugin:
            self._advertise(steps)
        return found

    def _absent(self, addresses: list[str], devices: object) -> str | None:
        missing = [a for a in addresses if not self.host.present(a)]
        if not missing:
            return None
        return f"PCI device{'s' if len(missing) > 1 else ''} {', '.join(missing)} did not appear under {devices}"

    def _unbound(self, addresses: list[str]) -> str | None:
        problems = []
        for address in addresses:
            driver = self.host.driver(address)
            if driver != "nvidia":
                problems.append(f"{address} is bound to {driver}, not nvidia" if driver
                                else f"{address} is not bound to any driver")
        return "; ".join(problems) or None

    def _find(self, blocks: tuple[Block, ...], found: list[Gpu], reinit: bool) -> str | None:
        if reinit and not self.nvml.reinit():
            return f"NVML is not usable: {self.nvml.error}"
        found.clear()
        problems = []
        for block in blocks:
            gpu = self.nvml.find(block.uuid, block.pci_address)
            if gpu is None:
                problems.append(f"NVML does not see {block.uuid or block.pci_address}")
                continue
            if not gpu.valid:
                problems.append(f"{gpu.ref} cannot be read: {gpu.error}")
                continue
            if block.uuid and gpu.uuid != block.uuid:
                problems.append(f"{gpu.pci_address} holds {gpu.uuid}, but the fabric attached {block.uuid}")
                continue
            if block.pci_address and gpu.pci_address != normalise_pci(block.pci_address):
                log.warning("%s: found at %s, not at %s as the fabric said", gpu.uuid, gpu.pci_address,
                            block.pci_address)
            found.append(gpu)
        return "; ".join(problems) or None

    def _check(self, blocks: tuple[Block, ...], found: list[Gpu]) -> str | None:
        missing = self._find(blocks, found, reinit=False)
        if missing:
            return missing
        others = [g for g in self.nvml.gpus() if g.uuid not in {f.uuid for f in found}]
        node = clique.node_clique(others).clique
        problems = []
        for gpu in found:
            fabric = gpu.fabric
            if fabric.supported and fabric.state is not FabricState.COMPLETED:
                problems.append(f"{gpu.ref}: fabric state {fabric.state.value}")
            elif fabric.supported and not fabric.status_ok:
                problems.append(f"{gpu.ref}: fabric status {fabric.status!r}")
            elif clique.gpu_health(gpu).health is Health.UNHEALTHY:
                problems.append(f"{gpu.ref}: fabric unhealthy ({', '.join(clique.gpu_health(gpu).flags)})")
            elif node and fabric.supported and fabric.clique != node:
                problems.append(f"{gpu.ref}: in clique {fabric.clique}, the node is in {node}")
        return "; ".join(problems) or None

    def _advertise(self, steps: Steps) -> None:
        d = self.options.deadlines
        expected = sum(1 for g in self.nvml.gpus() if g.valid)
        deleted: list[str] | None = None
        with steps.step("device-plugin"):
            if allocatable_gpus(self.api.read_node()) >= expected:
                log.info("%s: the node already advertises %d GPUs; the device plugin is left alone",
                         steps.what, expected)
            else:
                deleted = self.api.refresh_device_plugin()
                if deleted:
                    log.info("%s: deleted device-plugin pod(s) %s", steps.what, ", ".join(deleted))
                else:
                    log.warning("%s: no device-plugin pod found on node %s", steps.what, self.api.node)

        def advertised() -> str | None:
            try:
                have = allocatable_gpus(self.api.read_node())
            except NodeApiError as exc:
                return f"cannot read node {self.api.node}: {exc}"
            if have >= expected:
                return None
            hint = " (no device-plugin pod was found on this node to refresh)" if deleted == [] else ""
            return f"node {self.api.node} advertises {have} nvidia.com/gpu, expected {expected}{hint}"

        with steps.step("allocatable"):
            steps.wait("allocatable", d.allocatable, advertised)
