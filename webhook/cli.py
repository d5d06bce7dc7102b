"""The ``imex-webhook`` command: one console script, one subcommand per job.

One argparse parser with a subparser per verb (:mod:`webhook.command`): each verb's module contributes its
flags and its run, and the whole command line is parsed once. The verbs that run on simulators or the demo
(``serve``'s embedded mode, ``agent --nvml-sim``, ``demo``, ``fabric-sim``) go through
:mod:`webhook.composition`, the only module that imports them.

A verb's module is imported when that verb is read: the command line is parsed with that verb's flags
alone (:func:`webhook.command.parser`'s ``argv``), so ``imex-webhook --help`` and ``imex-webhook agent``
load neither Flask, gunicorn, the Kubernetes client nor a simulator (tests/service/test_import_weight.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from webhook import __version__, command, composition
from webhook.command import Command
from webhook.tools import cli as tools

CERTS_PROG = "imex-webhook certs"


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    from webhook.service import settings

    settings.add_arguments(parser)


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    from webhook.agent import settings

    settings.add_arguments(parser)


def add_certs_arguments(parser: argparse.ArgumentParser) -> None:
    """``python -m certs`` under our name, plus the scheduler's configuration in the component it writes."""
    from certs import cli as certs_cli

    parser.description = certs_cli.DESCRIPTION
    certs_cli.add_arguments(parser)
    parser.add_argument("--fabric", action="store_true",
                        help="with --kustomize: render the scheduler profile for fabric mode (NodeResourcesFit "
                             "ignores nvidia.com/gpu, which is attached at bind time)")


def run_certs(ns: argparse.Namespace) -> int:
    from certs import cli as certs_cli
    from certs import files as certs_files
    from webhook.service import deploy

    def after(ns: argparse.Namespace) -> None:
        if ns.kustomize is not None:
            ca_pem = (ns.out / certs_files.CA_CERT).read_bytes()
            written = deploy.add_scheduler_ca_to_component(ns.kustomize, ca_pem, ns.fabric)
            print(f"wrote {written} (extender tlsConfig.caData, certFile, keyFile)", file=sys.stderr)

    return certs_cli.run(ns, CERTS_PROG, after)


COMMANDS = (
    Command("serve", "the HTTPS scheduler extender and admission webhook", add_serve_arguments,
            composition.serve,
            "Serve /filter, /prioritize, /bind, /healthz, /readyz, /metrics and /inspect over TLS. Without "
            "--kubeconfig/--in-cluster the cluster is embedded: --cluster files, or the built-in demo topology."),
    Command("agent", "the node agent (DaemonSet): clique labels, GPU inventory, hot-add, release",
            add_agent_arguments, composition.agent,
            "Node agent: label the node with its NVLink clique and fabric health, publish the GPU inventory, "
            "prepare hot-added fabric GPUs and release them safely."),
    Command("fabric-sim", "the stateful Redfish composition simulator", composition.add_fabric_sim_arguments,
            composition.fabric_sim),
    tools.BENCH,
    tools.SIMULATE,
    tools.SOAK,
    Command("demo", "play a scenario through the real endpoints on the demo cluster",
            composition.add_demo_arguments, composition.demo),
    tools.EXPLAIN,
    Command("certs", "create a CA, the Service's serving certificate and the scheduler's client certificate",
            add_certs_arguments, run_certs),
)


def parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Every verb's flags; for the command line ``argv``, those of the verb it names alone."""
    return command.parser("imex-webhook",
                          "Keep every pod of a multi-node-NVLink job inside one NVLink (IMEX) domain.",
                          COMMANDS, version=f"imex-webhook {__version__}", argv=argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return command.main(parser(args), args)
