"""One subcommand of a command line: its name, help, flags and run; and the parser that hosts a list of them.

``webhook.cli`` hosts every verb of ``imex-webhook`` this way, ``webhook.tools.cli`` the tools of
``python -m webhook.tools.cli``. Each verb's module contributes ``add_arguments(parser)`` and
``run(namespace) -> exit status``; argparse parses the whole command line once, so ``VERB --help`` is that
verb's help, printed once, under ``PROG VERB``. A command line names one verb, so the parser it is read with
needs that verb's flags alone (``parser(..., argv=argv)``): a verb whose module is slow to import
(the web server's, the simulators') then costs nothing to the others, to ``--help`` and to a typo. Such a
verb's ``add_arguments`` imports its module and may set the parser's description from it.

argparse's ``float`` reads ``nan``, ``inf`` and ``1e400`` (infinity) as numbers, which no flag of any verb
means: every ``type=float`` flag is checked to be finite before the verb runs, and refused with one line
naming the flag and exit status 2. Each verb checks the range its flags need.

This module imports nothing of the project, so any layer's command line may use it.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

# Where the parser notes each verb's float flags, for main() to check: [(dest, "--flag"), ...].
_FLOAT_FLAGS = "_float_flags"


class Command(NamedTuple):
    name: str
    help: str  # one line, in the top-level --help
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None  # the verb's own --help (default: help)


def parser(prog: str, description: str, commands: Iterable[Command], version: str | None = None,
           argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Every verb with its flags; for a command line ``argv``, the flags of the verb it names alone, none
    when it names none (the others keep their name and one-line help, all the top-level help shows)."""
    only = None if argv is None else verb_of(argv)
    top = argparse.ArgumentParser(prog=prog, description=description)
    if version is not None:
        top.add_argument("--version", action="version", version=version)
    verbs = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        sub = verbs.add_parser(command.name, help=command.help, description=command.description or command.help)
        if argv is None or command.name == only:
            command.add_arguments(sub)
        floats = [(a.dest, a.option_strings[-1]) for a in sub._actions if a.type is float and a.option_strings]
        sub.set_defaults(run=command.run, **{_FLOAT_FLAGS: floats})
    return top


def not_finite(ns: argparse.Namespace) -> str | None:
    """The first float flag whose value is NaN or infinite, as a one-line complaint; None when all are finite."""
    for dest, flag in getattr(ns, _FLOAT_FLAGS, ()):
        value = getattr(ns, dest, None)
        for number in value if isinstance(value, list) else [value]:
            if isinstance(number, float) and not math.isfinite(number):
                return f"{flag} {number}: expected a finite number"
    return None


def verb_of(argv: Sequence[str]) -> str | None:
    """The verb a command line names: its first word that is not an option (the options before a verb,
    --help and --version, take no value). None when it names none."""
    return next((word for word in argv if not word.startswith("-")), None)


Bounds = dict[str, tuple[float, float]]  # flag -> (least, most), both included


def out_of_range(ns: argparse.Namespace, bounds: Bounds) -> str | None:
    """The first flag of ``bounds`` whose value lies outside them, as one line naming it; None when all fit.
    A number past what the verb can use (10**30 jobs, a negative timeout) is refused before it runs."""
    for flag, (least, most) in bounds.items():
        value = getattr(ns, flag.lstrip("-").replace("-", "_"), None)
        if isinstance(value, int | float) and not least <= value <= most:
            kind = "a whole number" if isinstance(value, int) else "a number"
            return f"{flag} {value:g}: expected {kind} in [{least:g}, {most:g}]"
    return None


def main(top: argparse.ArgumentParser, argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the verb it names; the exit status, also for --help (0) and usage errors (2)."""
    try:
        ns = top.parse_args(argv)
    except SystemExit as exc:  # argparse has printed the help, the version or the usage error
        return exc.code if isinstance(exc.code, int) else 2
    problem = not_finite(ns)
    if problem is not None:
        print(f"{top.prog} {ns.command}: {problem}", file=sys.stderr)
        return 2
    code: int = ns.run(ns)
    return code
