"""``serve``'s connection flags (webhook.serving.conn_limits, the probe listener): their defaults, the edge
values they accept, and one line naming the flag for each value they refuse."""

from __future__ import annotations

import pytest

from webhook import cli, errors
from webhook.service import settings


def _from(argv: list[str]) -> settings.Settings:
    return settings.from_args(cli.parser().parse_args(["serve", *argv]))


def test_defaults() -> None:
    got = _from([]).limits
    assert (got.max_connections, got.max_connections_per_source, got.write_timeout) == (1000, 256, 30.0)
    assert not _from([]).server.probe_bind, "no probe listener unless asked (the manifests ask for 0.0.0.0:8081)"


@pytest.mark.parametrize("argv", [
    ["--max-connections", "1", "--max-connections-per-source", "1"],
    ["--max-connections", "5000", "--max-connections-per-source", "5000"],
    ["--write-timeout", "0.001"], ["--write-timeout", "3600"],
    ["--probe-bind", "0.0.0.0:8081"], ["--probe-bind", "[::]:1"], ["--probe-bind", "127.0.0.1:65535"],
])
def test_edge_values_are_accepted(argv: list[str]) -> None:
    _from(argv)


@pytest.mark.parametrize(("argv", "message"), [
    (["--max-connections", "0"], "--max-connections 0, --max-connections-per-source 256: expected 1 <= per source "
                                 "<= total"),
    (["--max-connections", "10", "--max-connections-per-source", "11"], "expected 1 <= per source <= total"),
    (["--max-connections-per-source", "0"], "expected 1 <= per source <= total"),
    (["--write-timeout", "0"], "--write-timeout 0: expected seconds in (0, 3600]"),
    (["--write-timeout", "nan"], "--write-timeout nan: expected seconds in (0, 3600]"),
    (["--write-timeout", "inf"], "--write-timeout inf: expected seconds in (0, 3600]"),
    (["--write-timeout", "-1"], "--write-timeout -1: expected seconds in (0, 3600]"),
    (["--probe-bind", "8081"], "--probe-bind '8081': expected HOST:PORT"),
    (["--probe-bind", "host:0"], "--probe-bind 'host:0': expected HOST:PORT"),
    (["--probe-bind", "host:99999"], "--probe-bind 'host:99999': expected HOST:PORT"),
    (["--probe-bind", "host:\uff18\uff10"], "expected HOST:PORT"),  # fullwidth digits
    (["--bind", "0.0.0.0:8443", "--probe-bind", "0.0.0.0:8443"], "--probe-bind 0.0.0.0:8443: must differ from --bind"),
])
def test_refused_values_get_one_line_naming_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(errors.SettingsError) as refused:
        _from(argv)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_every_reason_a_connection_is_dropped_for_has_its_series_from_the_start() -> None:
    """The metric's series are made at start for CONNECTION_DROP_REASONS: a reason missing there would be a
    series that appears with its first drop, which a rate() over it misses."""
    import ast
    import inspect

    from webhook.http.metrics import CONNECTION_DROP_REASONS
    from webhook.serving import closing, conn_limits, reading, worker

    used = set(closing._TIMEOUTS.values())
    for module in (conn_limits, worker, reading):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "drop" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant):
                    used.add(first.value)
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 3:
                reason = node.value.elts[2]
                if isinstance(reason, ast.Constant) and reason.value:
                    used.add(reason.value)
    assert used and used <= set(CONNECTION_DROP_REASONS), used - set(CONNECTION_DROP_REASONS)
    assert {"pipelined", "write-timeout", "evicted-idle", "refused-full"} <= used
