"""The only module that touches sysfs and procfs, always under the roots it is given (``/sys`` and
``/proc`` on a node; fake trees in tests and simulations).

- PCI: ``bus/pci/rescan`` (enumerate newly attached devices), ``bus/pci/devices/<addr>`` (present?),
  its ``driver`` symlink (bound to which driver?), its ``remove`` (hot-remove); kernel ABI in
  ``Documentation/ABI/testing/sysfs-bus-pci``.
- Processes: ``<proc>/<pid>/fd/*`` symlinks name the files a process holds open; ``<proc>/<pid>/comm``
  its command name. On a node this needs the host PID namespace and root, or other containers'
  processes are invisible (a process we cannot inspect is reported, never assumed harmless).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from webhook.agent.model import normalise_pci
from webhook.errors import ImexWebhookError


class HostError(ImexWebhookError):
    """A sysfs/procfs operation failed; the message names the path and the reason."""


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int
    comm: str
    path: str  # the device node it holds, e.g. /dev/nvidia0

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.comm})"


@dataclass(frozen=True, slots=True)
class Scan:
    holders: tuple[Holder, ...]
    unreadable: tuple[int, ...]  # pids whose open files we could not list (permission)


class Host:
    def __init__(self, sysfs_root: Path = Path("/sys"), proc_root: Path = Path("/proc"),
                 own_pid: int | None = None) -> None:
        self.sysfs_root = sysfs_root
        self.proc_root = proc_root
        # Our own NVML keeps device nodes open; the release shuts it down before removing a device.
        self.own_pid = os.getpid() if own_pid is None else own_pid

    def _device(self, pci: str) -> Path:
        return self.sysfs_root / "bus" / "pci" / "devices" / normalise_pci(pci)

    @staticmethod
    def _write(path: Path, value: str) -> None:
        try:
            with path.open("w") as f:
                f.write(value)
        except OSError as exc:
            raise HostError(f"cannot write {value!r} to {path}: {exc.strerror or exc}") from exc

    # -- PCI ---------------------------------------------------------------------------------------

    def rescan(self) -> None:
        self._write(self.sysfs_root / "bus" / "pci" / "rescan", "1")

    def present(self, pci: str) -> bool:
        return self._device(pci).exists()

    def driver(self, pci: str) -> str | None:
        """The name of the driver bound to the device, None when none is (yet)."""
        link = self._device(pci) / "driver"
        try:
            return Path(os.readlink(link)).name
        except OSError:
            return None

    def remove(self, pci: str) -> None:
        path = self._device(pci) / "remove"
        if not path.exists():
            raise HostError(f"cannot remove {normalise_pci(pci)}: {path} does not exist")
        self._write(path, "1")

    # -- processes ---------------------------------------------------------------------------------

    def comm(self, pid: int) -> str:
        try:
            return (self.proc_root / str(pid) / "comm").read_text().strip() or "?"
        except OSError:
            return "?"

    def holders(self, devices: Iterable[str]) -> Scan:
        """Processes holding any of ``devices`` (e.g. ``/dev/nvidia0``) open, except ourselves."""
        wanted = set(devices)
        found: list[Holder] = []
        unreadable: list[int] = []
        try:
            entries = [e for e in os.scandir(self.proc_root) if e.name.isdigit()]
        except OSError as exc:
            raise HostError(f"cannot list {self.proc_root}: {exc.strerror or exc}") from exc
        for entry in entries:
            pid = int(entry.name)
            if pid == self.own_pid:
                continue
            fd_dir = Path(entry.path) / "fd"
            try:
                fds = list(os.scandir(fd_dir))
            except FileNotFoundError:
                continue  # the process ended while we looked
            except PermissionError:
                unreadable.append(pid)
                continue
            except OSError:
                continue
            held = set()
            for fd in fds:
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target in wanted and target not in held:
                    held.add(target)
                    found.append(Holder(pid=pid, comm=self.comm(pid), path=target))
        return Scan(tuple(sorted(found, key=lambda h: (h.pid, h.path))), tuple(sorted(unreadable)))
