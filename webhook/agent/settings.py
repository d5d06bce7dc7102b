"""Settings of ``imex-webhook agent``: read once from the command line (and ``NODE_NAME``), then frozen."""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.adapters.kube.resources import DEFAULT_DEVICE_PLUGIN_SELECTORS
from webhook.agent.steps import Deadlines
from webhook.errors import SettingsError

# Loopback by default: an agent started by hand on a node must not offer its endpoints to the network. The
# DaemonSet listens on every address of its pod's own network namespace (manifests/agent.yaml).
DEFAULT_LISTEN = "127.0.0.1:8081"
STEP_NAMES = tuple(f.name.replace("_", "-") for f in dataclasses.fields(Deadlines))
# The longest pass interval and step deadline: beyond it a wait would overflow the clock (1e10 s does) long
# before it could mean anything for a node.
MAX_SECONDS = 86400.0
LOG_FORMATS = ("plain", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")

__all__ = ["AgentSettings", "SettingsError", "add_arguments", "from_args"]


@dataclass(frozen=True)
class AgentSettings:
    node: str
    kubeconfig: Path | None = None
    in_cluster: bool = False
    nvml_sim: Path | None = None
    sysfs_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    interval: float = 30.0
    once: bool = False
    dry_run: bool = False
    own_clique_label: bool = False
    persistence_mode: bool = False
    device_plugin_selectors: tuple[str, ...] = DEFAULT_DEVICE_PLUGIN_SELECTORS
    device_plugin_namespace: str | None = None
    device_plugin: bool = True
    listen: str = DEFAULT_LISTEN
    deadlines: Deadlines = field(default_factory=Deadlines)
    log_format: str = "plain"
    log_level: str = "info"

    @property
    def simulated(self) -> bool:
        return self.nvml_sim is not None

    @property
    def standalone(self) -> bool:
        """A simulation with no API server: the Node lives in memory and changes are only logged."""
        return self.simulated and self.kubeconfig is None and not self.in_cluster

    def redacted(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        return {k: str(v) if isinstance(v, Path) else v for k, v in out.items()}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``agent``; every default is the one :class:`AgentSettings` holds."""
    d = AgentSettings
    p.add_argument("--node", default=os.environ.get("NODE_NAME"),
                   help="the Node this agent runs on (default: $NODE_NAME, set from spec.nodeName)")
    kube = p.add_mutually_exclusive_group()
    kube.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    kube.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    p.add_argument("--nvml-sim", type=Path, metavar="FILE",
                   help="simulated GPUs from a scenario file (YAML/JSON) instead of NVML, with fake sysfs/procfs")
    p.add_argument("--sysfs-root", type=Path, default=d.sysfs_root,
                   help="where sysfs is mounted (default %(default)s)")
    p.add_argument("--proc-root", type=Path, default=d.proc_root, help="where procfs is mounted (default %(default)s)")
    p.add_argument("--interval", type=float, default=d.interval, help="seconds between passes (default %(default)g)")
    p.add_argument("--once", action="store_true", help="one pass (read, publish, handle attachments), then exit")
    p.add_argument("--dry-run", action="store_true", help="print the changes it would make, make none")
    p.add_argument("--own-clique-label", action="store_true",
                   help="set and remove nvidia.com/gpu.clique (leave off when GFD or the DRA plugin owns it)")
    p.add_argument("--persistence-mode", action="store_true", help="enable persistence mode on hot-added GPUs")
    p.add_argument("--device-plugin-selector", action="append", metavar="SELECTOR",
                   help="label selector of the device-plugin pods to refresh after a hot-add; repeatable "
                        f"(default: {' and '.join(d.device_plugin_selectors)})")
    p.add_argument("--device-plugin-namespace", help="look for device-plugin pods only in this namespace")
    p.add_argument("--no-device-plugin", action="store_true",
                   help="no device plugin on this node (DRA only): no pod refresh, no allocatable wait")
    p.add_argument("--listen", default=d.listen,
                   help="HOST:PORT of /healthz /readyz /metrics /gpus, plain HTTP (/gpus answers loopback "
                        "clients only); 'none' to disable (default %(default)s)")
    p.add_argument("--deadline", action="append", default=[], metavar="STEP=SECONDS",
                   help=f"deadline of one step; steps: {', '.join(STEP_NAMES)}")
    p.add_argument("--log-format", choices=LOG_FORMATS, default=d.log_format)
    p.add_argument("--log-level", choices=LOG_LEVELS, default=d.log_level)


def _deadlines(values: list[str]) -> Deadlines:
    changes: dict[str, float] = {}
    for value in values:
        step, sep, seconds = value.partition("=")
        if not sep or step.strip().replace("_", "-") not in STEP_NAMES:
            raise SettingsError(f"--deadline {value!r}: expected STEP=SECONDS with STEP one of {', '.join(STEP_NAMES)}")
        try:
            number = float(seconds)
        except ValueError as exc:
            raise SettingsError(f"--deadline {value!r}: {seconds!r} is not a number of seconds") from exc
        if not 0 < number <= MAX_SECONDS:
            raise SettingsError(f"--deadline {value!r}: expected seconds in (0, {MAX_SECONDS:g}]")
        changes[step.strip().replace("-", "_")] = number
    return dataclasses.replace(Deadlines(), **changes)


def from_args(ns: argparse.Namespace) -> AgentSettings:
    if not ns.node:
        raise SettingsError("--node is required (or set NODE_NAME, e.g. from the downward API spec.nodeName)")
    if not 0 < ns.interval <= MAX_SECONDS:
        raise SettingsError(f"--interval {ns.interval:g}: expected seconds in (0, {MAX_SECONDS:g}]")
    listen = "" if ns.listen in ("", "none") else ns.listen
    port = listen.rpartition(":")[2]
    if listen and not (port.isascii() and port.isdigit()):
        raise SettingsError(f"--listen {ns.listen!r}: expected HOST:PORT")
    if listen and (len(port.lstrip("0")) > 5 or not 1 <= int(port) <= 65535):
        shown = port if len(port) <= 12 else port[:12] + "..."
        raise SettingsError(f"--listen {listen[:60]!r}: port {shown} is out of range (1-65535)")
    if ns.nvml_sim is not None and not ns.nvml_sim.is_file():
        raise SettingsError(f"--nvml-sim {ns.nvml_sim}: no such file")
    return AgentSettings(
        node=ns.node, kubeconfig=ns.kubeconfig, in_cluster=ns.in_cluster, nvml_sim=ns.nvml_sim,
        sysfs_root=ns.sysfs_root, proc_root=ns.proc_root, interval=ns.interval, once=ns.once, dry_run=ns.dry_run,
        own_clique_label=ns.own_clique_label, persistence_mode=ns.persistence_mode,
        device_plugin_selectors=tuple(ns.device_plugin_selector or AgentSettings.device_plugin_selectors),
        device_plugin_namespace=ns.device_plugin_namespace, device_plugin=not ns.no_device_plugin,
        listen=listen, deadlines=_deadlines(ns.deadline), log_format=ns.log_format, log_level=ns.log_level,
    )
