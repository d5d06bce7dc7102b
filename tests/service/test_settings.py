"""``imex-webhook serve`` settings: every validation rule, one row each, and the exit status 2 a refused
command line gets before anything starts. ``--workers`` above 1 is refused in both modes: each worker would
hold its own caches and state (Kubernetes mode scales with Deployment replicas, embedded mode with threads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook import cli
from webhook.service import settings


def _from(argv: list[str]) -> settings.Settings:
    return settings.from_args(cli.parser().parse_args(["serve", *argv]))


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    return {"cluster": str(cluster), "kubeconfig": str(kubeconfig), "missing": str(tmp_path / "nope.yaml")}


REFUSED = [
    (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-key", "k.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-dir", "d"], "either --tls-cert/--tls-key or --tls-dir"),
    (["--kubeconfig", "{kubeconfig}", "--in-cluster"], "either --kubeconfig or --in-cluster"),
    (["--kubeconfig", "{kubeconfig}", "--cluster", "{cluster}"], "--cluster files are for the embedded mode"),
    (["--in-cluster", "--cluster", "{cluster}"], "--cluster files are for the embedded mode"),
    (["--workers", "0"], "--workers and --threads must be at least 1"),
    (["--threads", "0"], "--workers and --threads must be at least 1"),
    (["--kubeconfig", "{kubeconfig}", "--workers", "2"], "--workers 2: Kubernetes mode runs one worker per replica"),
    (["--in-cluster", "--workers", "4"], "--workers 4: Kubernetes mode runs one worker per replica"),
    (["--workers", "2"], "--workers 2: the embedded cluster lives in one process"),
    (["--cluster", "{cluster}", "--workers", "3"], "--workers 3: the embedded cluster lives in one process"),
    (["--bind", "localhost"], "--bind 'localhost': expected HOST:PORT"),
    (["--bind", "localhost:http"], "expected HOST:PORT"),
    (["--cluster", "{missing}"], "no such file"),
    (["--fabric", "redfish"], "--fabric 'redfish': expected a URL"),
    (["--fabric", "https://bmc:8443"], "--fabric URL needs --fabric-credentials"),
    (["--housekeeping-interval", "0"], "--housekeeping-interval 0: expected seconds in (0, 3600]"),
    (["--housekeeping-interval", "3601"], "expected seconds in (0, 3600]"),
    (["--fabric-refresh", "0"], "--fabric-refresh and --attach-timeout must be positive"),
    (["--attach-timeout", "-1"], "--fabric-refresh and --attach-timeout must be positive"),
    (["--orphan-grace", "-1"], "--orphan-grace not negative"),
    (["--reservation-ttl", "10"], "--reservation-ttl 10: "),
    (["--bind", "127.0.0.1:0"], "--bind '127.0.0.1:0': port 0 is out of range (1-65535)"),
    (["--bind", "127.0.0.1:65536"], "port 65536 is out of range"),
    (["--bind", "127.0.0.1:" + "9" * 40], "port 999999999999... is out of range"),
    (["--bind", "127.0.0.1:\uff18\uff14\uff14\uff13"], "expected HOST:PORT"),  # fullwidth digits
    (["--handshake-timeout", "0"], "--handshake-timeout 0: expected seconds in (0, 3600]"),
    (["--header-timeout", "-1"], "--header-timeout -1: expected seconds in (0, 3600]"),
    (["--body-timeout", "3601"], "--body-timeout 3601: expected seconds in (0, 3600]"),
    (["--body-timeout", "nan"], "--body-timeout nan: expected seconds"),
    (["--max-body", "0"], "--max-body 0: expected a positive number of bytes"),
    (["--max-body", "4096", "--max-buffered", "4095"], "--max-buffered 4095: must hold at least one body"),
]


@pytest.mark.parametrize(("argv", "message"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_each_rule_refuses_its_command_line(argv: list[str], message: str, files: dict[str, str]) -> None:
    with pytest.raises(settings.SettingsError) as caught:
        _from([a.format(**files) for a in argv])
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


ACCEPTED = [
    [],
    ["--workers", "1", "--threads", "32"],
    ["--kubeconfig", "{kubeconfig}", "--workers", "1"],
    ["--in-cluster"],
    ["--cluster", "{cluster}", "--cluster", "{cluster}"],
    ["--tls-cert", "c.pem", "--tls-key", "k.pem"],
    ["--fabric", "embedded"],
    ["--fabric", "https://bmc:8443", "--fabric-credentials", "creds"],
    ["--housekeeping-interval", "3600", "--orphan-grace", "0"],
    ["--handshake-timeout", "0.5", "--header-timeout", "3600", "--body-timeout", "1", "--exit-with-parent"],
    ["--bind", "[::1]:65535", "--client-ca", "ca.crt", "--max-body", "10", "--max-buffered", "10"],
]


@pytest.mark.parametrize("argv", ACCEPTED, ids=[" ".join(a) or "(defaults)" for a in ACCEPTED])
def test_valid_command_lines_are_accepted(argv: list[str], files: dict[str, str]) -> None:
    config = _from([a.format(**files) for a in argv])
    assert config.workers == 1


def test_the_workers_message_says_why_and_how_to_scale(files: dict[str, str]) -> None:
    with pytest.raises(settings.SettingsError) as caught:
        _from(["--kubeconfig", files["kubeconfig"], "--workers", "2"])
    text = str(caught.value)
    for words in ("own caches, watches and choose-and-record lock", "Deployment replicas",
                  "share state through the API server"):
        assert words in text


@pytest.mark.parametrize("mode", [["--kubeconfig", "{kubeconfig}"], ["--in-cluster"], []],
                         ids=["kubeconfig", "in-cluster", "embedded"])
def test_serve_with_several_workers_exits_2_before_starting(
        mode: list[str], files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    # Port 1 on a bound address would fail to start; the refusal comes first, with one line on stderr.
    argv = ["serve", "--bind", "127.0.0.1:1", *[a.format(**files) for a in mode], "--workers", "2"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("imex-webhook serve: --workers 2: "), err
