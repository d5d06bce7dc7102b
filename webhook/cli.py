"""The ``imex-webhook`` command: one console script, one subcommand per job.

One argparse parser with a subparser per verb (:mod:`webhook.command`): each verb's module contributes its
flags and its run, and the whole command line is parsed once. The verbs that run on simulators or the demo
(``serve``'s embedded mode, ``agent --nvml-sim``, ``demo``, ``fabric-sim``) go through
:mod:`webhook.composition`, the only module that imports them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from certs import cli as certs_cli
from certs import files as certs_files
from webhook import __version__, command, composition
from webhook.agent import settings as agent_settings
from webhook.command import Command
from webhook.service import deploy, settings
from webhook.tools import cli as tools

CERTS_PROG = "imex-webhook certs"


def add_certs_arguments(parser: argparse.ArgumentParser) -> None:
    """``python -m certs`` under our name, plus the scheduler's configuration in the component it writes."""
    certs_cli.add_arguments(parser)
    parser.add_argument("--fabric", action="store_true",
                        help="with --kustomize: render the scheduler profile for fabric mode (NodeResourcesFit "
                             "ignores nvidia.com/gpu, which is attached at bind time)")


def run_certs(ns: argparse.Namespace) -> int:
    def after(ns: argparse.Namespace) -> None:
        if ns.kustomize is not None:
            ca_pem = (ns.out / certs_files.CA_CERT).read_bytes()
            written = deploy.add_scheduler_ca_to_component(ns.kustomize, ca_pem, ns.fabric)
            print(f"wrote {written} (extender tlsConfig.caData, certFile, keyFile)", file=sys.stderr)

    return certs_cli.run(ns, CERTS_PROG, after)


COMMANDS = (
    Command("serve", "the HTTPS scheduler extender and admission webhook", settings.add_arguments,
            composition.serve,
            "Serve /filter, /prioritize, /bind, /healthz, /readyz, /metrics and /inspect over TLS. Without "
            "--kubeconfig/--in-cluster the cluster is embedded: --cluster files, or the built-in demo topology."),
    Command("agent", "the node agent (DaemonSet): clique labels, GPU inventory, hot-add, release",
            agent_settings.add_arguments, composition.agent,
            "Node agent: label the node with its NVLink clique and fabric health, publish the GPU inventory, "
            "prepare hot-added fabric GPUs and release them safely."),
    Command("fabric-sim", "the stateful Redfish composition simulator", composition.add_fabric_sim_arguments,
            composition.fabric_sim, composition.FABRIC_SIM_DESCRIPTION),
    tools.BENCH,
    tools.SIMULATE,
    tools.SOAK,
    Command("demo", "play a scenario through the real endpoints on the demo cluster",
            composition.add_demo_arguments, composition.demo, composition.DEMO_DESCRIPTION),
    tools.EXPLAIN,
    Command("certs", "create a CA, the Service's serving certificate and the scheduler's client certificate",
            add_certs_arguments, run_certs, certs_cli.DESCRIPTION),
)


def parser() -> argparse.ArgumentParser:
    return command.parser("imex-webhook",
                          "Keep every pod of a multi-node-NVLink job inside one NVLink (IMEX) domain.",
                          COMMANDS, version=f"imex-webhook {__version__}")


def main(argv: Sequence[str] | None = None) -> int:
    return command.main(parser(), list(sys.argv[1:] if argv is None else argv))
