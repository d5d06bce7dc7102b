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
    except Exception as exc:  # start-up failures: one clear line, not a traceback
        if not isinstance(exc, OSError | ValueError | RuntimeError):
            raise
        print(f"imex-webhook serve: cannot start: {exc}", file=sys.stderr)
        return 1


def _certs(args: list[str]) -> int:
    """``python -m certs``, plus the scheduler's caData in the kustomize component it writes."""
    from pathlib import Path

    from certs import cli as certs_cli
    from certs import files as certs_files
    from webhook.service import deploy

    # --fabric is ours, not the certificate tool's: the scheduler config it renders ignores nvidia.com/gpu.
    fabric = "--fabric" in args
    args = [a for a in args if a != "--fabric"]
    code = certs_cli.main(args)
    known, _ = certs_cli.build_parser().parse_known_args(args)
    if code == 0 and getattr(known, "kustomize", None):
        ca_pem = (Path(known.out) / certs_files.CA_CERT).read_bytes()
        written = deploy.add_scheduler_ca_to_component(Path(known.kustomize), ca_pem, fabric)
        print(f"wrote {written} (extender tlsConfig.caData)", file=sys.stderr)
    return code


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
    sub.add_parser("certs", help="create a CA and a serving certificate for the Service",
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
        from webhook.fabric_sim import cli as fabric_sim_cli

        return fabric_sim_cli.main(args[1:])
    if args[:1] == ["demo"]:
        from webhook.service import demo

        return demo.main(args[1:])
    if args[:1] == ["certs"]:
        # The certificate tool owns its flags (it is also `python -m certs`); hand them over untouched.
        return _certs(args[1:])
    ns = parser().parse_args(args)
    code: int = ns.run(ns)
    return code
