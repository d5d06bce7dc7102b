"""A fake kernel for a simulated node: sysfs and procfs trees under temporary roots that react to writes
the way Linux does, driven by the same ``SimNode`` as the fake pynvml.

- ``<sysfs>/bus/pci/rescan``: writing a non-zero value enumerates the GPUs the fabric has attached
  (scenario ``hotplug: pending``): after ``appear_delay`` the device directory appears, after
  ``bind_delay`` more its ``driver`` symlink points at ``bus/pci/drivers/<driver>``;
- ``<sysfs>/bus/pci/devices/<addr>/remove``: writing a non-zero value removes the device (and, for
  NVML, the GPU); doing so while a process holds the GPU is recorded in ``SimNode.violations``;
- ``<proc>/<pid>/comm`` and ``<proc>/<pid>/fd/<n>`` symlinks mirror the scenario's processes.

A daemon thread polls the trees every few milliseconds (``step`` runs one round, for tests that want
no thread); the agent only reads and writes files, exactly as on a real node.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path

from webhook.sim.node_scenario import SimGpu, SimNode

log = logging.getLogger(__name__)
POLL = 0.005


class SimHost:
    def __init__(self, node: SimNode, sysfs_root: Path, proc_root: Path) -> None:
        self.node = node
        self.sysfs_root = sysfs_root
        self.proc_root = proc_root
        self._due: dict[str, tuple[float, float]] = {}  # pci -> (appear at, bind at)
        self._drawn = -1
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._devices = sysfs_root / "bus" / "pci" / "devices"
        self._drivers = sysfs_root / "bus" / "pci" / "drivers"
        self._devices.mkdir(parents=True, exist_ok=True)
        for driver in ("nvidia", "vfio-pci"):
            (self._drivers / driver).mkdir(parents=True, exist_ok=True)
        (sysfs_root / "bus" / "pci" / "rescan").write_text("")
        proc_root.mkdir(parents=True, exist_ok=True)
        self.rescans = 0
        self.step()

    def start(self) -> SimHost:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"simhost-{self.node.name}", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(2)
            self._thread = None

    def _run(self) -> None:
        while not self._stopping.wait(POLL):
            try:
                self.step()
            except OSError as exc:  # a test removed the tree under us: keep going, the next round redraws
                log.debug("simulated kernel: %s", exc)

    # -- one round ---------------------------------------------------------------------------------

    def step(self) -> None:
        now = time.monotonic()
        with self.node.lock:
            self._rescan(now)
            self._removes()
            self._advance(now)
            if self._drawn != self.node.version:
                self._draw()
                self._drawn = self.node.version

    def _rescan(self, now: float) -> None:
        rescan = self.sysfs_root / "bus" / "pci" / "rescan"
        if not rescan.exists() or not rescan.read_text().strip().strip("0"):
            return
        rescan.write_text("")
        self.rescans += 1
        for gpu in self.node.gpus:
            if gpu.presence == "pending" and gpu.pci not in self._due:
                appear = now + self.node.appear_delay
                self._due[gpu.pci] = (appear, appear + self.node.bind_delay)

    def _removes(self) -> None:
        for gpu in self.node.gpus:
            remove = self._devices / gpu.pci / "remove"
            if gpu.enumerated and remove.exists() and remove.read_text().strip().strip("0"):
                self._remove(gpu)

    def _remove(self, gpu: SimGpu) -> None:
        holders = [p.pid for p in self.node.procs.values() if f"/dev/nvidia{gpu.minor}" in p.fds]
        if gpu.processes or holders:
            self.node.violations.append(f"{gpu.pci} removed while in use by pids "
                                        f"{sorted({p.pid for p in gpu.processes} | set(holders))}")
        gpu.presence, gpu.enumerated, gpu.bound = "removed", False, ""
        self._due.pop(gpu.pci, None)
        self.node.changed()

    def _advance(self, now: float) -> None:
        for gpu in self.node.gpus:
            due = self._due.get(gpu.pci)
            if due is None:
                continue
            appear, bind = due
            if now >= appear and not gpu.enumerated:
                gpu.enumerated, gpu.presence = True, "present"
                self.node.changed()
            if now >= bind and gpu.enumerated and not gpu.bound:
                gpu.bound = gpu.driver
                del self._due[gpu.pci]
                self.node.changed()

    # -- drawing the trees -------------------------------------------------------------------------

    def _draw(self) -> None:
        wanted = {g.pci: g for g in self.node.gpus if g.enumerated}
        for entry in self._devices.iterdir():
            if entry.name not in wanted:
                shutil.rmtree(entry, ignore_errors=True)
        for pci, gpu in wanted.items():
            device = self._devices / pci
            if not device.exists():
                device.mkdir()
                (device / "remove").write_text("")
                (device / "vendor").write_text("0x10de\n")
                (device / "class").write_text("0x030200\n")
            link = device / "driver"
            if gpu.bound and not link.is_symlink():
                (self._drivers / gpu.bound).mkdir(parents=True, exist_ok=True)
                link.symlink_to(self._drivers / gpu.bound)
            elif not gpu.bound and link.is_symlink():
                link.unlink()
        self._draw_procs()

    def _draw_procs(self) -> None:
        wanted = self.node.procs
        for entry in self.proc_root.iterdir():
            if entry.name.isdigit() and int(entry.name) not in wanted:
                shutil.rmtree(entry, ignore_errors=True)
        for pid, proc in wanted.items():
            base = self.proc_root / str(pid)
            fd_dir = base / "fd"
            fd_dir.mkdir(parents=True, exist_ok=True)
            (base / "comm").write_text(proc.comm + "\n")
            have = {p.name: str(p.readlink()) for p in fd_dir.iterdir() if p.is_symlink()}
            target = {str(n + 3): path for n, path in enumerate(proc.fds)}  # 0-2: stdin/out/err
            for name in set(have) - set(target):
                (fd_dir / name).unlink()
            for name, path in target.items():
                if have.get(name) != path:
                    if name in have:
                        (fd_dir / name).unlink()
                    (fd_dir / name).symlink_to(path)
