"""One subcommand of a command line: its name, help, flags and run; and the parser that hosts a list of them.

``webhook.cli`` hosts every verb of ``imex-webhook`` this way, ``webhook.tools.cli`` the tools of
``python -m webhook.tools.cli``. Each verb's module contributes ``add_arguments(parser)`` and
``run(namespace) -> exit status``; argparse parses the whole command line once, so ``VERB --help`` is that
verb's help, printed once, under ``PROG VERB``.

This module imports nothing of the project, so any layer's command line may use it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple


class Command(NamedTuple):
    name: str
    help: str  # one line, in the top-level --help
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None  # the verb's own --help (default: help)


def parser(prog: str, description: str, commands: Iterable[Command], version: str | None = None
           ) -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=prog, description=description)
    if version is not None:
        top.add_argument("--version", action="version", version=version)
    verbs = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        sub = verbs.add_parser(command.name, help=command.help, description=command.description or command.help)
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return top


def main(top: argparse.ArgumentParser, argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the verb it names; the exit status, also for --help (0) and usage errors (2)."""
    try:
        ns = top.parse_args(argv)
    except SystemExit as exc:  # argparse has printed the help, the version or the usage error
        return exc.code if isinstance(exc.code, int) else 2
    code: int = ns.run(ns)
    return code
