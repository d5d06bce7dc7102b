"""Every ``imex-webhook`` command line the documentation shows parses with the command's own parser.

The lines come from the fenced shell blocks of README.md and docs/*.md: fences tagged ``sh``, ``bash``,
``shell`` or ``console``, or untagged (a ``yaml`` or ``python`` fence holds no command to type). A line is
read as a shell splits it: a trailing backslash continues it, ``#`` starts a comment, ``&&``, ``||``, ``;``
and ``|`` separate commands, redirections and leading ``NAME=value`` assignments are no arguments, and in a
``console`` fence only the lines after a ``$`` prompt are typed. Every command that runs ``imex-webhook``
(any path to it) or ``python -m webhook`` is parsed by ``webhook.cli.parser()``, the parser the console
script uses, and checked for the non-finite numbers ``webhook.command.main`` refuses before a verb runs;
nothing is run. What a reader fills in stands for ``1``, which every text, number and path flag accepts:
``$VAR`` and ``${VAR}``, and a metavar in capitals such as ``FILE`` or ``M``. A synopsis's optional parts
(``[--seed N]``) are checked as if given, and ``...`` (arguments left out) is dropped.

argparse answers a wrong flag, a missing value or an invalid choice with exit status 2 and one line on
stderr; the failure names the file and line and quotes that line.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from webhook import cli, command

ROOT = Path(__file__).resolve().parents[2]
SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
_PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
_METAVAR = re.compile(r"[A-Z][A-Z0-9_]*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_FD_BEFORE_REDIRECT = re.compile(r"(?<![\w-])\d+(?=[<>])")  # the 2 of 2>&1, not of --workers 2 > log


class Documented(NamedTuple):
    where: str  # "docs/X.md:12", the line the command starts on
    line: str  # as written, continuations joined
    argv: list[str] | None  # what follows the program name; None when a shell could not split the line


def shell_lines(text: str) -> Iterator[tuple[int, str, bool]]:
    """(first line number, line with continuations joined, whether the fence names a shell) of every line
    typed in a fenced shell block. An untagged fence may hold anything (a tree, a program's output)."""
    fence: tuple[str, str] | None = None  # (the opening marker, the fence's language)
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        opened = _FENCE.match(raw)
        if fence is None:
            if opened:
                fence = (opened.group(1), opened.group(2).lower())
            continue
        marker, language = fence
        if opened and opened.group(1).startswith(marker) and not opened.group(2):
            fence, pending = None, None
            continue
        if language not in SHELL_FENCES:
            continue
        start, sofar = pending if pending is not None else (number, "")
        line = sofar + raw.strip()
        if line.endswith("\\"):
            pending = (start, line[:-1] + " ")
            continue
        pending = None
        if language == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        elif line.startswith("$ "):
            line = line[2:]
        yield start, line, language != ""


def _simple_commands(line: str) -> Iterator[list[str]]:
    """The words of each simple command of ``line`` (``a && b | c`` holds three), without redirections."""
    lexer = shlex.shlex(_FD_BEFORE_REDIRECT.sub("", line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words: list[str] = []
    skip_next = False
    for token in lexer:
        if skip_next:
            skip_next = False
        elif token and set(token) <= set("<>&") and ("<" in token or ">" in token):
            skip_next = True  # the redirection's target is no argument either
        elif token and set(token) <= set("&|;()"):
            yield words
            words = []
        else:
            words.append(token)
    yield words


def _argv_after_program(words: list[str]) -> list[str] | None:
    """The arguments of an ``imex-webhook`` or ``python -m webhook`` command; None for any other command."""
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return None
    program = os.path.basename(words[0])
    if program == "imex-webhook":
        return words[1:]
    if re.fullmatch(r"python(3(\.\d+)?)?", program) and words[1:3] == ["-m", "webhook"]:
        return words[3:]
    return None


def _filled_in(argv: list[str]) -> list[str]:
    filled = []
    for word in argv:
        if word == "...":
            continue
        if word.startswith("[") and "]" not in word:
            word = word[1:]
        if word.endswith("]") and "[" not in word:
            word = word[:-1]
        word = _PLACEHOLDER.sub("1", word)
        filled.append("1" if _METAVAR.fullmatch(word) else word)
    return filled


def documented_commands(text: str, name: str) -> list[Documented]:
    """Every imex-webhook command line that ``text`` (a markdown file called ``name``) shows in a shell fence."""
    found = []
    for number, line, named_shell in shell_lines(text):
        try:
            commands = list(_simple_commands(line))
        except ValueError:  # a quote left open: no shell could run it, and no command was meant in an untagged fence
            if named_shell and re.search(r"imex-webhook|-m webhook\b", line):
                found.append(Documented(f"{name}:{number}", line, None))
            continue
        for words in commands:
            argv = _argv_after_program(words)
            if argv is not None:
                found.append(Documented(f"{name}:{number}", line, _filled_in(argv)))
    return found


def parse_failure(argv: list[str]) -> str | None:
    """What the ``imex-webhook`` parser says against ``argv``; None when it parses. Parses only, never runs."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            namespace = cli.parser().parse_args(argv)
    except SystemExit as exit_:
        if exit_.code == 0:  # --help, --version
            return None
        return (stderr.getvalue().strip().splitlines() or [f"exit status {exit_.code}"])[-1]
    return command.not_finite(namespace)


def _documentation() -> list[Documented]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [found for page in pages
            for found in documented_commands(page.read_text(), str(page.relative_to(ROOT)))]


def complaint(documented: Documented) -> str | None:
    """Why ``documented`` would not run as written, naming its file and line; None when it parses."""
    if documented.argv is None:
        return f"{documented.where}: {documented.line!r}: a quote is not closed"
    problem = parse_failure(documented.argv)
    return None if problem is None else f"{documented.where}: {documented.line!r} does not parse: {problem}"


DOCUMENTED = _documentation()


@pytest.mark.parametrize("documented", DOCUMENTED, ids=[d.where for d in DOCUMENTED])
def test_a_documented_command_line_parses(documented: Documented) -> None:
    assert complaint(documented) is None, complaint(documented)


def test_the_readme_demo_command_is_among_those_checked() -> None:
    assert any(d.where.startswith("README.md:") and d.argv == ["demo"] for d in DOCUMENTED), DOCUMENTED


PAGE = """Some prose that mentions `imex-webhook serve --no-such-thing` outside a fence.

```sh
python3 -m venv .venv && .venv/bin/imex-webhook demo --exit   # the demo, then stop
IMEX=1 imex-webhook serve --bind 127.0.0.1:9443 \\
    --fabric embedded > serve.log 2>&1 &
imex-webhook serve --no-such-flag
python -m webhook agent --node $NODE_NAME --once
imex-webhook serve --cluster 'demo cluster.yaml
```

```yaml
command: [imex-webhook, serve, --nonsense]
```

```console
$ imex-webhook soak --minutes M [--seed N] [--out DIR]
imex-webhook --this-is-output-not-a-command
```

```
webhook/cli.py   the imex-webhook command's parser
```
"""


def test_every_typed_command_is_extracted_with_its_line_and_placeholders_filled_in() -> None:
    found = documented_commands(PAGE, "page.md")
    assert [(d.where, d.argv) for d in found] == [
        ("page.md:4", ["demo", "--exit"]),
        ("page.md:5", ["serve", "--bind", "127.0.0.1:9443", "--fabric", "embedded"]),
        ("page.md:7", ["serve", "--no-such-flag"]),
        ("page.md:8", ["agent", "--node", "1", "--once"]),
        ("page.md:9", None),
        ("page.md:17", ["soak", "--minutes", "1", "--seed", "1", "--out", "1"]),
    ]


def test_a_wrong_flag_or_an_open_quote_in_a_documented_line_is_reported_with_its_file_and_line() -> None:
    assert [complaint(d) for d in documented_commands(PAGE, "page.md") if complaint(d) is not None] == [
        "page.md:7: 'imex-webhook serve --no-such-flag' does not parse: "
        "imex-webhook: error: unrecognized arguments: --no-such-flag",
        "page.md:9: \"imex-webhook serve --cluster 'demo cluster.yaml\": a quote is not closed",
    ]


@pytest.mark.parametrize(("argv", "problem"), [
    (["serve", "--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
    (["serve", "--threads", "many"], "argument --threads: invalid int value: 'many'"),
    (["soak", "--seed", "1"], "the following arguments are required: --minutes"),
    (["server"], "argument COMMAND: invalid choice: 'server'"),
])
def test_a_bad_value_a_missing_flag_or_an_unknown_verb_does_not_parse(argv: list[str], problem: str) -> None:
    said = parse_failure(argv)
    assert said is not None and problem in said, said


def test_an_infinite_number_is_refused_as_the_command_refuses_it() -> None:
    assert parse_failure(["soak", "--minutes", "inf"]) == "--minutes inf: expected a finite number"
    assert parse_failure(["soak", "--minutes", "1"]) is None
