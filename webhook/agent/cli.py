"""``imex-webhook agent``: wiring of the node agent from its settings, and its process life cycle.

``main(argv, configure_logging)`` parses the agent's own flags (``webhook.cli`` hands them over);
``add_arguments`` and ``run`` let a parent parser host them as a subcommand instead. With ``--nvml-sim``
the GPUs, sysfs and procfs are simulated from the scenario (fake trees in a temporary directory unless
``--sysfs-root`` / ``--proc-root`` name others); without an API server either, the Node lives in memory.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import FrameType
from typing import Any

from webhook.adapters.kube import node_agent as kube_agent
from webhook.agent import hotplug, release
from webhook.agent.loop import Agent
from webhook.agent.nvml import Nvml
from webhook.agent.ports import DryRunNodeApi, NodeApi
from webhook.agent.server import ProbeServer
from webhook.agent.settings import AgentSettings, SettingsError, add_arguments, from_args
from webhook.agent.sysfs import Host
from webhook.sim import node_scenario as scenario
from webhook.sim.host import SimHost
from webhook.sim.nvml import FakePynvml

log = logging.getLogger(__name__)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="imex-webhook agent",
        description="Node agent: label the node with its NVLink clique and fabric health, publish the GPU "
                    "inventory, prepare hot-added fabric GPUs and release them safely.")
    add_arguments(p)
    return p


def build(settings: AgentSettings, stack: ExitStack) -> Agent:
    """The agent and what it runs on; everything that needs closing is registered on ``stack``."""
    sysfs_root, proc_root = settings.sysfs_root, settings.proc_root
    nvml_module: Any = None
    sim: scenario.SimNode | None = None
    if settings.nvml_sim is not None:
        sim = scenario.load(settings.nvml_sim)
        if settings.sysfs_root == Path("/sys") or settings.proc_root == Path("/proc"):
            tmp = Path(tempfile.mkdtemp(prefix="imex-agent-sim-"))
            stack.callback(shutil.rmtree, tmp, True)
            sysfs_root = tmp / "sys" if settings.sysfs_root == Path("/sys") else sysfs_root
            proc_root = tmp / "proc" if settings.proc_root == Path("/proc") else proc_root
        host_sim = SimHost(sim, sysfs_root, proc_root).start()
        stack.callback(host_sim.close)
        nvml_module = FakePynvml(sim)
        log.info("simulated node %s from %s: %d GPUs, sysfs %s, proc %s", sim.name, settings.nvml_sim,
                 len(sim.gpus), sysfs_root, proc_root)
    nvml = Nvml(nvml_module)
    stack.callback(nvml.shutdown)
    host = Host(sysfs_root, proc_root, own_pid=-1 if settings.simulated else None)
    api: NodeApi
    if settings.standalone and sim is not None:
        from webhook.sim.agents import MemoryNodeApi

        api = MemoryNodeApi({"metadata": {"name": settings.node}}, sim)
        log.info("no API server given: node %s lives in memory", settings.node)
    else:
        kube_api = kube_agent.connect(settings.node, str(settings.kubeconfig) if settings.kubeconfig else None,
                                      settings.in_cluster, device_plugin_selectors=settings.device_plugin_selectors,
                                      device_plugin_namespace=settings.device_plugin_namespace)
        stack.callback(kube_api.stop)
        api = kube_api
    if settings.dry_run:
        api = DryRunNodeApi(api)
    return Agent(nvml, host, api, own_clique_label=settings.own_clique_label, dry_run=settings.dry_run,
                 hot_add=hotplug.Options(persistence_mode=settings.persistence_mode, deadlines=settings.deadlines,
                                         device_plugin=settings.device_plugin),
                 releasing=release.Options(deadlines=settings.deadlines, device_plugin=settings.device_plugin))


LogSetup = Callable[[str, str], None]  # (format, level): ``webhook.service.logs.configure``


def run(ns: argparse.Namespace, configure_logging: LogSetup | None = None) -> int:
    try:
        settings = from_args(ns)
    except SettingsError as exc:
        print(f"imex-webhook agent: {exc}", file=sys.stderr)
        return 2
    if configure_logging is not None:
        configure_logging(settings.log_format, settings.log_level)
    log.info("agent settings: %s", json.dumps(settings.redacted(), default=str, sort_keys=True))
    with ExitStack() as stack:
        try:
            agent = build(settings, stack)
        except (scenario.ScenarioError, kube_agent.AgentConfigError) as exc:
            print(f"imex-webhook agent: {exc}", file=sys.stderr)
            return 1
        if settings.once:
            agent.pass_once()
            ok, why = agent.api_ok
            if not ok:
                print(f"imex-webhook agent: {why}", file=sys.stderr)
            return 0 if ok else 1
        stopping = threading.Event()

        def stop(signum: int, frame: FrameType | None) -> None:
            log.info("signal %d: stopping", signum)
            stopping.set()
            agent.wake()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)
        if settings.listen:
            try:
                server = ProbeServer(agent, settings.listen).start()
            except OSError as exc:
                print(f"imex-webhook agent: cannot listen on {settings.listen}: {exc}", file=sys.stderr)
                return 1
            stack.callback(server.stop)
        agent.run(stopping, settings.interval)
    return 0


def main(argv: Sequence[str] | None = None, configure_logging: LogSetup | None = None) -> int:
    """The ``agent`` subcommand; ``webhook.cli`` passes ``webhook.service.logs.configure`` (the agent
    does not import the service layer, which may import the agent for the embedded simulation)."""
    return run(parser().parse_args(list(sys.argv[1:] if argv is None else argv)), configure_logging)
