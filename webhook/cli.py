"""The ``imex-webhook`` command: one console script, one subcommand per job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from webhook import __version__
from webhook.service import logs, settings


def _serve(ns: argparse.Namespace) -> int:
    from webhook.service import server

    try:
        config = settings.from_args(ns)
    except settings.SettingsError as exc:
        print(f"imex-webhook serve: {exc}", file=sys.stderr)
        return 2
    logs.configure(config.log_format, config.log_level)
    try:
        return server.serve(config)
    except settings.SettingsError as exc:  # an input that cannot work, found before anything started
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


def _certs(args: list[str]) -> int:
    """``python -m certs`` under our name, plus the scheduler's configuration in the component it writes."""
    from certs import cli as certs_cli
    from certs import files as certs_files
    from webhook.service import deploy

    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--fabric", action="store_true",
                       help="with --kustomize: render the scheduler profile for fabric mode (NodeResourcesFit "
                            "ignores nvidia.com/gpu, which is attached at bind time)")

    def after(ns: argparse.Namespace) -> None:
        if ns.kustomize is not None:
            ca_pem = (ns.out / certs_files.CA_CERT).read_bytes()
            written = deploy.add_scheduler_ca_to_component(ns.kustomize, ca_pem, ns.fabric)
            print(f"wrote {written} (extender tlsConfig.caData, certFile, keyFile)", file=sys.stderr)

    return certs_cli.main(args, prog="imex-webhook certs", add_arguments=add_arguments, after=after)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="imex-webhook",
        description="Keep every pod of a multi-node-NVLink job inside one NVLink (IMEX) domain.",
    )
    top.add_argument("--version", action="version", version=f"imex-webhook {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="the HTTPS scheduler extender and admission webhook",
                           description="Serve /filter, /prioritize, /bind, /healthz, /readyz, /metrics and "
                                       "/inspect over TLS. Without --kubeconfig/--in-cluster the cluster is "
                                       "embedded: --cluster files, or the built-in demo topology.")
    settings.add_arguments(serve)
    serve.set_defaults(run=_serve)
    sub.add_parser("agent", help="the node agent (DaemonSet): clique labels, GPU inventory, hot-add, release",
                   add_help=False)
    sub.add_parser("fabric-sim", help="the stateful Redfish composition simulator", add_help=False)
    sub.add_parser("bench", help="measure the service against a trivial baseline in the same run", add_help=False)
    sub.add_parser("simulate", help="compare placement policies on a simulated cluster", add_help=False)
    sub.add_parser("soak", help="a long mixed request stream against serve: resources, latency, invariants",
                   add_help=False)
    sub.add_parser("demo", help="play a scenario through the real endpoints on the demo cluster", add_help=False)
    sub.add_parser("explain", help="ask a running service where a group is placed and why a pod waits",
                   add_help=False)
    sub.add_parser("certs", help="create a CA, the Service's serving certificate and the scheduler's client "
                                 "certificate",
                           add_help=False, description="Same as python -m certs; see --help.")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["agent"]:
        from webhook.agent import cli as agent_cli

        return agent_cli.main(args[1:], configure_logging=logs.configure)
    if args[:1] in (["bench"], ["simulate"], ["soak"]):
        from webhook.tools import cli as tools_cli

        tool = {"bench": tools_cli.bench_main, "simulate": tools_cli.simulate_main, "soak": tools_cli.soak_main}
        return tool[args[0]](args[1:])
    if args[:1] == ["fabric-sim"]:
        from webhook.sim.fabric import cli as fabric_sim_cli

        return fabric_sim_cli.main(args[1:])
    if args[:1] == ["explain"]:
        from webhook.tools import explain

        return explain.main(args[1:])
    if args[:1] == ["demo"]:
        from webhook.demo import run as demo

        return demo.main(args[1:])
    if args[:1] == ["certs"]:
        # The certificate tool owns its flags (it is also `python -m certs`); hand them over untouched.
        return _certs(args[1:])
    ns = parser().parse_args(args)
    code: int = ns.run(ns)
    return code
