"""The composition root: the one module that puts the simulators and the demo where a cluster, a fabric
manager or a node would be, and hands them to the service and the node agent as parameters.

The production packages (service, agent, http, adapters, state, domain, wire) and ``webhook.cli`` import
neither ``webhook.sim`` nor ``webhook.demo``; the import-linter contracts in pyproject.toml keep it so.
What is built here:

- ``serve``: :class:`~webhook.service.embedded_parts.EmbeddedParts` for the embedded mode: the demo
  topology (``webhook.demo.cluster``), the Redfish composition simulator of ``--fabric embedded`` and its
  simulated node agents (``webhook.sim``). gunicorn calls the factories in each worker, after the fork.
- ``agent``: the machine of ``--nvml-sim``: a fake pynvml, fake sysfs and procfs trees, and the Node in
  memory when no API server is given.
- ``demo`` and ``fabric-sim``, whole commands that are simulators.

Every verb's module is imported when that verb is read or run, never when this module is: ``import
webhook.cli`` loads neither the web server nor a simulator, and ``imex-webhook agent`` not the web server.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.errors import SettingsError
from webhook.service import logs

if TYPE_CHECKING:
    from webhook.agent.cli import SimulatedMachine
    from webhook.agent.settings import AgentSettings as Agent
    from webhook.service.embedded_parts import EmbeddedParts, RunningFabric

log = logging.getLogger(__name__)


# The commands that are simulators, for webhook.cli to host: their flags, description and run.
def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    from webhook.demo import cli as demo_cli

    parser.description = demo_cli.DESCRIPTION
    demo_cli.add_arguments(parser)


def demo(ns: argparse.Namespace) -> int:
    from webhook.demo import cli as demo_cli

    return demo_cli.run(ns)


def add_fabric_sim_arguments(parser: argparse.ArgumentParser) -> None:
    from webhook.sim.fabric import cli as fabric_sim_cli

    parser.description = fabric_sim_cli.DESCRIPTION
    fabric_sim_cli.add_arguments(parser)


def fabric_sim(ns: argparse.Namespace) -> int:
    from webhook.sim.fabric import cli as fabric_sim_cli

    return fabric_sim_cli.run(ns)


def _demo_cluster() -> list[dict[str, Any]]:
    from webhook.demo import cluster

    return cluster.objects()


def _start_fabric() -> RunningFabric:
    from webhook.service.embedded_parts import RunningFabric
    from webhook.sim.fabric import inventory, server

    demo_inventory = inventory.demo()
    running = server.start_in_thread(demo_inventory)
    return RunningFabric(running.url, demo_inventory.credentials.username, demo_inventory.credentials.password,
                         running.stop)


def embedded_parts() -> EmbeddedParts:
    from webhook.service.embedded_parts import EmbeddedParts
    from webhook.sim.agents import EmbeddedAgents

    return EmbeddedParts(demo_cluster=_demo_cluster, start_fabric=_start_fabric, start_node_agents=EmbeddedAgents)


def serve(ns: argparse.Namespace) -> int:
    """``imex-webhook serve``: exit status 2 for an input that cannot work, 1 for a failure to start."""
    from webhook.service import server, settings

    try:
        config = settings.from_args(ns)
    except SettingsError as exc:
        print(f"imex-webhook serve: {exc}", file=sys.stderr)
        return 2
    logs.configure(config.log.format, config.log.level)
    try:
        return server.serve(config, embedded_parts())
    except SettingsError as exc:  # an input that cannot work, found before anything started
        print(f"imex-webhook serve: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, RuntimeError) as exc:  # start-up failures: one clear line, not a traceback
        print(f"imex-webhook serve: cannot start: {exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:  # gunicorn stops its master this way; the worker said why on the line above
        code = exc.code if isinstance(exc.code, int) else 1
        if code:
            print(f"imex-webhook serve: stopped with status {code}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return 130


def simulate_node(agent_settings: Agent, stack: ExitStack) -> SimulatedMachine:
    """The machine of ``--nvml-sim``: GPUs, sysfs and procfs from the scenario file (fake trees in a
    temporary directory unless --sysfs-root / --proc-root name others)."""
    from webhook.agent.cli import SimulatedMachine
    from webhook.agent.settings import AgentSettings
    from webhook.sim import node_scenario
    from webhook.sim.agents import MemoryNodeApi
    from webhook.sim.host import SimHost
    from webhook.sim.nvml import FakePynvml

    assert agent_settings.nvml_sim is not None
    try:
        node = node_scenario.load(agent_settings.nvml_sim)
    except node_scenario.ScenarioError as exc:
        raise SettingsError(str(exc)) from None
    sysfs_root, proc_root = agent_settings.sysfs_root, agent_settings.proc_root
    real_sysfs, real_proc = sysfs_root == AgentSettings.sysfs_root, proc_root == AgentSettings.proc_root
    if real_sysfs or real_proc:  # never write into the machine's own trees
        tmp = Path(tempfile.mkdtemp(prefix="imex-agent-sim-"))
        stack.callback(shutil.rmtree, tmp, True)
        sysfs_root = tmp / "sys" if real_sysfs else sysfs_root
        proc_root = tmp / "proc" if real_proc else proc_root
    host = SimHost(node, sysfs_root, proc_root).start()
    stack.callback(host.close)
    log.info("simulated node %s from %s: %d GPUs, sysfs %s, proc %s", node.name, agent_settings.nvml_sim,
             len(node.gpus), sysfs_root, proc_root)
    return SimulatedMachine(FakePynvml(node), sysfs_root, proc_root,
                            memory_node=lambda name: MemoryNodeApi({"metadata": {"name": name}}, node))


def agent(ns: argparse.Namespace) -> int:
    """``imex-webhook agent``, with the service's log set-up (the agent does not import the service)."""
    from webhook.agent import cli as agent_cli

    return agent_cli.run(ns, configure_logging=logs.configure, simulate=simulate_node)
