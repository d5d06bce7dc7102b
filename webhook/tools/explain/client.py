"""``imex-webhook explain POD|GROUP``: ask a running service where a group is reserved, which of its pods
run where, and why a waiting one waits.

Reads ``GET /inspect`` over TLS (``--url``, ``--cacert``; ``--cert``/``--key`` when the service requires
client certificates) and prints what ``webhook.tools.explain.words`` makes of the answer. Exit status:
0 explained; 1 the service could not be asked (down, TLS refused, an error or an unreadable answer) or
knows no such name; 2 the command line is wrong (no such file, a NAME that cannot be a name, a NAME that
fits several groups). Every failure is one line on stderr.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import requests

from webhook.errors import ImexWebhookError
from webhook.service.settings import DEFAULT_BIND, default_tls_dir
from webhook.tools.explain import words

MAX_ANSWER = 256 * 1024 * 1024  # /inspect of a 5,000-node cluster is a few MiB; refuse anything absurd
DEFAULT_URL = f"https://localhost:{DEFAULT_BIND.rpartition(':')[2]}"


class Failed(ImexWebhookError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


DESCRIPTION = ("Ask a running imex-webhook where a group is reserved, which of its pods are placed where, and "
               "why a waiting group waits (from its GET /inspect). Exit status 0 explained, 1 the service could "
               "not be asked or knows no such name, 2 a wrong command line.")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="imex-webhook explain", description=DESCRIPTION)
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="POD|GROUP",
                   help="a pod of a group or a group: namespace/name, a bare name, or a group id (cd:<uid>, ...)")
    p.add_argument("--url", default=DEFAULT_URL, help="the service (default %(default)s)")
    p.add_argument("--cacert", type=Path, default=None,
                   help=f"CA that signed the service's certificate (default {default_tls_dir() / 'ca.crt'} when "
                        "it exists, else the system's trusted CAs)")
    p.add_argument("--cert", type=Path, help="client certificate, when the service requires one (--client-ca)")
    p.add_argument("--key", type=Path, help="the client certificate's key")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the answer (default %(default)s)")


def _verify(cacert: Path | None) -> str | bool:
    if cacert is None:
        default = default_tls_dir() / "ca.crt"
        return str(default) if default.is_file() else True
    if not cacert.is_file():
        raise Failed(2, f"--cacert {cacert}: no such file")
    return str(cacert)


def _client_cert(ns: argparse.Namespace) -> tuple[str, str] | None:
    if (ns.cert is None) != (ns.key is None):
        raise Failed(2, "--cert and --key go together")
    if ns.cert is None:
        return None
    for flag, path in (("--cert", ns.cert), ("--key", ns.key)):
        if not path.is_file():
            raise Failed(2, f"{flag} {path}: no such file")
    return str(ns.cert), str(ns.key)


def _reason(exc: Exception) -> str:
    """The part of a requests/urllib3/ssl error a person can act on, without the nested reprs."""
    text = str(exc)
    for pattern in (r"certificate verify failed: [^'\")(]+", r"hostname '[^']*' doesn't match[^'\")(]*",
                    r"\[Errno -?\d+\] [^'\")(]+", r"tlsv1 alert [a-z ]+", r"sslv3 alert [a-z ]+",
                    r"Read timed out", r"timed out"):
        found = re.search(pattern, text)
        if found:
            return found.group(0).strip().rstrip(".")
    return words.safe(text, 200)


def fetch(url: str, verify: str | bool, cert: tuple[str, str] | None, timeout: float) -> Any:
    """GET {url}/inspect as JSON; Failed(1, one line) for everything that can go wrong on the way."""
    target = url.rstrip("/") + "/inspect"
    ca = f" (CA {verify})" if isinstance(verify, str) else " (system CAs)"
    try:
        with requests.get(target, verify=verify, cert=cert, timeout=timeout, stream=True) as reply:
            body = reply.raw.read(MAX_ANSWER + 1, decode_content=True)
            status = reply.status_code
    except requests.exceptions.SSLError as exc:
        raise Failed(1, f"TLS with {url} failed{ca}: {_reason(exc)}") from exc
    except requests.exceptions.Timeout as exc:
        raise Failed(1, f"{url} did not answer within {timeout:g} s") from exc
    except (requests.exceptions.ConnectionError, OSError) as exc:
        raise Failed(1, f"cannot connect to {url}: {_reason(exc)}") from exc
    except requests.exceptions.RequestException as exc:
        raise Failed(1, f"cannot ask {url}: {_reason(exc)}") from exc
    if len(body) > MAX_ANSWER:
        raise Failed(1, f"{target} answered more than {MAX_ANSWER // 2**20} MiB; not reading it")
    if status != 200:
        try:
            detail = str(orjson.loads(body).get("error", ""))
        except (orjson.JSONDecodeError, AttributeError):
            detail = body[:200].decode(errors="replace")
        hint = " (the service may require a client certificate: --cert/--key)" if status in (401, 403) else ""
        raise Failed(1, f"{target} answered {status}: {words.safe(detail, 200)}{hint}")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Failed(1, f"{target} did not answer JSON ({exc})") from exc


def main(argv: Sequence[str] | None = None) -> int:
    return run(parser().parse_args(argv))


def run(ns: argparse.Namespace) -> int:
    try:
        problem = words.name_problem(ns.name)
        if problem:
            raise Failed(2, problem)
        if not ns.url.startswith("https://"):
            raise Failed(2, f"--url {words.safe(ns.url, 80)}: the service speaks only HTTPS (https://...)")
        if not 0 < ns.timeout <= 3600:
            raise Failed(2, "--timeout must be in (0, 3600] seconds")
        answer = fetch(ns.url, _verify(ns.cacert), _client_cert(ns), ns.timeout)
        try:
            status, text = words.explain_name(answer, ns.name, time.time())
        except words.AnswerError as exc:
            raise Failed(1, f"the /inspect answer of {ns.url} is not what this version reads: {exc}") from exc
        if status:
            raise Failed(status, text)
    except Failed as exc:
        print(f"imex-webhook explain: {exc}", file=sys.stderr)
        return exc.status
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
