"""``imex-webhook agent``: wiring of the node agent from its settings, and its process life cycle.

``webhook.cli`` hosts the flags (:func:`webhook.agent.settings.add_arguments`) as a subcommand and
``webhook.composition`` calls :func:`run`, handing in the logging set-up and, for ``--nvml-sim``, the
simulated machine: GPUs, sysfs and procfs from the scenario (fake trees in a temporary directory unless
``--sysfs-root`` / ``--proc-root`` name others); without an API server either, the Node lives in memory.
The agent imports neither the service nor the simulators.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from webhook.adapters.kube import node_agent as kube_agent
from webhook.agent import hotplug, release
from webhook.agent.loop import Agent
from webhook.agent.nvml import Nvml
from webhook.agent.ports import DryRunNodeApi, NodeApi
from webhook.agent.server import ProbeServer
from webhook.agent.settings import AgentSettings, from_args
from webhook.agent.sysfs import Host
from webhook.errors import SettingsError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimulatedMachine:
    """What ``--nvml-sim`` puts in place of the node: a pynvml stand-in, the sysfs and procfs trees it
    keeps, and the Node in memory for a run without an API server (``memory_node(name)``)."""

    nvml_module: Any
    sysfs_root: Path
    proc_root: Path
    memory_node: Callable[[str], NodeApi]


# Builds the machine of --nvml-sim, registering what needs closing on the stack; raises SettingsError,
# naming the file, for a scenario it cannot use.
SimulateNode = Callable[[AgentSettings, ExitStack], SimulatedMachine]


def build(settings: AgentSettings, stack: ExitStack, simulate: SimulateNode | None = None) -> Agent:
    """The agent and what it runs on; everything that needs closing is registered on ``stack``."""
    sysfs_root, proc_root = settings.sysfs_root, settings.proc_root
    machine: SimulatedMachine | None = None
    if settings.nvml_sim is not None:
        if simulate is None:
            raise SettingsError(f"--nvml-sim {settings.nvml_sim}: this command was started without the simulators")
        try:
            machine = simulate(settings, stack)
        except ValueError as exc:  # SettingsError, or what reading the scenario raised (not UTF-8, say)
            raise SettingsError(scenario_problem(settings.nvml_sim, exc)) from None
        sysfs_root, proc_root = machine.sysfs_root, machine.proc_root
    nvml = Nvml(machine.nvml_module if machine is not None else None)
    stack.callback(nvml.shutdown)
    host = Host(sysfs_root, proc_root, own_pid=-1 if settings.simulated else None)
    api: NodeApi
    if settings.standalone and machine is not None:
        api = machine.memory_node(settings.node)
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


def scenario_problem(path: Path, exc: BaseException) -> str:
    """One line naming ``--nvml-sim`` and what is wrong with its file: a YAML error by its place, without the
    parser's multi-line excerpt; bytes that are not UTF-8 by their offset."""
    cause: BaseException | None = exc
    while cause is not None:  # the scenario loader's own error wraps the parser's
        if isinstance(cause, UnicodeDecodeError):
            return f"--nvml-sim {path}: not UTF-8 text (byte 0x{cause.object[cause.start]:02x} at offset {cause.start})"
        if isinstance(cause, yaml.MarkedYAMLError) and cause.problem_mark is not None:
            mark = cause.problem_mark
            return (f"--nvml-sim {path}: not valid YAML or JSON: {cause.problem} at line {mark.line + 1}, "
                    f"column {mark.column + 1}")
        cause = cause.__cause__ or cause.__context__
    text = " ".join(str(exc).split())
    return f"--nvml-sim {path}: {text.removeprefix(f'{path}: ')}"


def listen_problem(listen: str, exc: OSError) -> str:
    """One line naming ``--listen`` and why the agent cannot listen there."""
    port = listen.rpartition(":")[2]
    if exc.errno == errno.EADDRINUSE:
        return (f"--listen {listen}: port {port} is already in use (another process listens there); choose another "
                "port with --listen HOST:PORT, or --listen none")
    return f"--listen {listen}: cannot listen there: {' '.join(str(exc.strerror or exc).split())}"


LogSetup = Callable[[str, str], None]  # (format, level): ``webhook.service.logs.configure``


def run(ns: argparse.Namespace, configure_logging: LogSetup | None = None,
        simulate: SimulateNode | None = None) -> int:
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
            agent = build(settings, stack, simulate)
        except SettingsError as exc:
            print(f"imex-webhook agent: {exc}", file=sys.stderr)
            # A file or flag the user can fix: 2. A command built without the simulators: 1, as a failure.
            return 2 if settings.nvml_sim is None or simulate is not None else 1
        except kube_agent.AgentConfigError as exc:
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
                print(f"imex-webhook agent: {listen_problem(settings.listen, exc)}", file=sys.stderr)
                return 2
            stack.callback(server.stop)
        agent.run(stopping, settings.interval)
    return 0
