"""Command lines a new user gets wrong: ``serve`` checks every input it names before anything starts and
answers each problem with one line naming the input, exit status 2, and no "serving" log line; a port in
use says so and names the flag to change (in ``demo`` too). "serving" is logged only once the socket
accepts connections. ``demo`` stops cleanly on Ctrl-C, removes its temporary directory, and its server
does not outlive a demo killed with SIGKILL. ``simulate`` checks matplotlib and --out before it runs and
says where it wrote.

The tests that run a command as a process wait for events (a line in its output, a port that accepts or
refuses, the process's exit), never for a guessed time: ``PATIENCE_S`` is only a safety net, for a loaded
machine on a fresh clone. The demo plays its scenario in well under a second, so a Ctrl-C sent "during the
demo" would race it; its stdout is a pipe already full, which holds the demo at the table it prints after
the last job until the test is done with it."""

from __future__ import annotations

import datetime
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from certs import files, issue
from tests import serving
from webhook import cli
from webhook.service import server


@pytest.fixture(autouse=True)
def never_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command line that wrongly passes every check fails here instead of starting a server in-process."""
    def refuse(self: object) -> None:
        raise AssertionError("serve got past its checks and would have started")

    monkeypatch.setattr(server._Server, "run", refuse)


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, str]:
    ca = issue.new_ca()
    good = issue.new_serving(ca, ["localhost"], ["127.0.0.1"])
    files.write_pair(tmp_path / "tls.crt", tmp_path / "tls.key", good)
    files.write_pair(tmp_path / "ca.crt", tmp_path / "ca.key", ca)
    files.write_pair(tmp_path / "client.crt", tmp_path / "client.key", issue.new_client(ca, "imex-scheduler"))
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    files.write_pair(tmp_path / "old.crt", tmp_path / "old.key", issue.new_serving(ca, ["localhost"], days=1, now=past))
    (tmp_path / "other.key").write_bytes(issue.new_ca().key_pem)
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "garbage").write_text("::: not yaml, not PEM [")
    (tmp_path / "no-contexts").write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    (tmp_path / "kindless.yaml").write_text("metadata: {name: n}\n")
    (tmp_path / "broken.yaml").write_text("kind: Node\nmetadata: {name: [unclosed\n")
    (tmp_path / "binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (tmp_path / "creds-bad").write_text("just-a-word\n")
    return {k: str(tmp_path / v) for k, v in {
        "dir": "", "cert": "tls.crt", "key": "tls.key", "ca": "ca.crt", "ca_key": "ca.key", "client": "client.crt",
        "client_key": "client.key", "old": "old.crt", "old_key": "old.key", "other_key": "other.key",
        "empty": "empty", "garbage": "garbage", "no_contexts": "no-contexts", "kindless": "kindless.yaml",
        "broken": "broken.yaml", "binary": "binary.yaml", "creds_bad": "creds-bad", "missing": "missing.pem"}.items()}


TLS = ["--tls-cert", "{cert}", "--tls-key", "{key}"]
REFUSED = [
    ("kubeconfig-missing", ["--kubeconfig", "{missing}"], "--kubeconfig {missing}: no such file"),
    ("kubeconfig-garbage", ["--kubeconfig", "{garbage}"], "--kubeconfig {garbage}: "),
    ("kubeconfig-no-context", ["--kubeconfig", "{no_contexts}"], "--kubeconfig {no_contexts}: "),
    ("in-cluster-outside", ["--in-cluster"], "--in-cluster: "),
    ("cluster-unparsable", ["--cluster", "{broken}"],
     "--cluster {broken}: not valid YAML or JSON: expected ',' or ']', but got '<stream end>' at line 3, column 1"),
    ("cluster-binary", ["--cluster", "{binary}"], "--cluster {binary}: not UTF-8 text (byte 0x89 at offset 0)"),
    ("cluster-no-kind", ["--cluster", "{kindless}"], "--cluster {kindless} document 1: object has no kind"),
    ("fabric-credentials-missing", ["--fabric", "https://bmc.example", "--fabric-credentials", "{missing}"],
     "--fabric-credentials {missing}: "),
    ("fabric-credentials-bad", ["--fabric", "https://bmc.example", "--fabric-credentials", "{creds_bad}"],
     "--fabric-credentials {creds_bad}: "),
    ("fabric-ca-missing", ["--fabric-ca", "{missing}"], "--fabric-ca {missing}: no such file"),
    ("fabric-ca-garbage", ["--fabric-ca", "{garbage}"], "--fabric-ca {garbage}: no PEM certificate in it"),
    ("tls-cert-empty", ["--tls-cert", "{empty}", "--tls-key", "{key}"], "--tls-cert {empty}: the file is empty"),
    ("tls-key-empty", ["--tls-cert", "{cert}", "--tls-key", "{empty}"], "--tls-key {empty}: the file is empty"),
    ("tls-cert-missing", ["--tls-cert", "{missing}", "--tls-key", "{key}"], "--tls-cert {missing}: no such file"),
    ("tls-cert-garbage", ["--tls-cert", "{garbage}", "--tls-key", "{key}"], "no PEM certificate in it"),
    ("tls-key-garbage", ["--tls-cert", "{cert}", "--tls-key", "{garbage}"], "--tls-key {garbage}: not an unencrypted"),
    ("tls-key-mismatch", ["--tls-cert", "{cert}", "--tls-key", "{other_key}"], "does not match the public key"),
    ("tls-cert-for-clients", ["--tls-cert", "{client}", "--tls-key", "{client_key}"], "not for TLS servers"),
    ("tls-cert-expired", ["--tls-cert", "{old}", "--tls-key", "{old_key}"], "--tls-cert {old}: expired on"),
    ("tls-cert-is-a-ca", ["--tls-cert", "{ca}", "--tls-key", "{ca_key}"],
     "--tls-cert {ca}: a CA certificate (BasicConstraints CA:TRUE), not a serving certificate"),
    ("client-ca-missing", [*TLS, "--client-ca", "{missing}"], "--client-ca {missing}: no such file"),
    ("client-ca-empty", [*TLS, "--client-ca", "{empty}"], "--client-ca {empty}: the file is empty"),
    ("client-ca-garbage", [*TLS, "--client-ca", "{garbage}"], "--client-ca {garbage}: no PEM certificate"),
    ("client-ca-is-a-leaf", [*TLS, "--client-ca", "{cert}"], "--client-ca {cert}: holds no CA certificate"),
    ("tls-dir-is-a-file", ["--tls-dir", "{ca}"], "--tls-dir {ca}: "),
    ("port-out-of-range", [*TLS, "--bind", "127.0.0.1:70000"], "port 70000 is out of range"),
    ("address-not-here", [*TLS, "--bind", "192.0.2.1:8443"], "--bind 192.0.2.1:8443: 192.0.2.1 is not an address"),
    ("host-unresolvable", [*TLS, "--bind", "no-such-host.invalid:8443"], "cannot resolve 'no-such-host.invalid'"),
]


@pytest.mark.parametrize(("argv", "message"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_each_bad_input_is_one_line_naming_it_and_exit_status_2_before_serving(
        argv: list[str], message: str, pki: dict[str, str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", pki["dir"])  # the default --tls-dir, where one is made
    args = [a.format(**pki) for a in argv]
    if "--bind" not in args:
        args += ["--bind", f"127.0.0.1:{serving.free_port()}"]
    assert cli.main(["serve", *args]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("imex-webhook serve: ") and message.format(**pki) in lines[0], lines[0]
    assert "serving" not in out


def test_a_port_in_use_says_so_and_names_the_flag(pki: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code = cli.main(["serve", "--tls-cert", pki["cert"], "--tls-key", pki["key"], "--bind", f"127.0.0.1:{port}"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.strip() == (f"imex-webhook serve: --bind 127.0.0.1:{port}: port {port} is already in use (another "
                           "process listens there); choose another port with --bind HOST:PORT")
    assert "serving" not in out


PATIENCE_S = 300.0  # a safety net only: each wait below ends on an event, in seconds on an idle machine


def _stop(proc: subprocess.Popen[str]) -> None:
    """Terminate and reap a process this test started, killing it if it outlasts the safety net."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(PATIENCE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


def _run(*argv: str, timeout: float = PATIENCE_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook", *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False)


def test_as_a_real_command_a_bad_input_prints_one_line_and_no_traceback(pki: dict[str, str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        in_use = _run("serve", "--tls-cert", pki["cert"], "--tls-key", pki["key"], "--bind", f"127.0.0.1:{port}")
    bad_kubeconfig = _run("serve", "--kubeconfig", pki["garbage"], "--bind", f"127.0.0.1:{serving.free_port()}",
                          "--tls-cert", pki["cert"], "--tls-key", pki["key"])
    for result in (in_use, bad_kubeconfig):
        assert result.returncode == 2
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stdout + result.stderr
        assert "serving" not in result.stdout
    assert "--bind" in in_use.stderr and "--kubeconfig" in bad_kubeconfig.stderr


def test_serving_is_logged_only_once_the_socket_accepts_connections(tmp_path: Path) -> None:
    port = serving.free_port()
    with (tmp_path / "serve.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "webhook", "serve", "--bind", f"127.0.0.1:{port}",
                                 "--tls-dir", str(tmp_path / "tls")], stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + PATIENCE_S
        while "imex-webhook serving" not in (tmp_path / "serve.log").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # connected: the socket was listening when the line was written
    finally:
        _stop(proc)


# -- demo -------------------------------------------------------------------------------------------------


def test_the_demo_on_a_port_in_use_says_so_and_names_its_flag() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = _run("demo", "--exit", "--port", str(port))
    assert result.returncode == 2
    assert result.stderr.strip() == f"imex-webhook demo: port {port} is already in use; choose another with --port"


def _full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is already full: a write to it blocks until its reader reads, which ours never
    does while the writer lives."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # a page: little to fill
    os.set_blocking(write_end, False)
    for size in (4096, 1):  # pages, then any byte still fitting
        try:
            while True:
                os.write(write_end, b"." * size)
        except BlockingIOError:
            pass
    os.set_blocking(write_end, True)
    return read_end, write_end


@contextmanager
def demo(*argv: str) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """The demo as a process, its stderr lines collected as they come. Its stdout is a full pipe, so it
    stops at the table it prints after the last job, still inside the demo, until it is interrupted."""
    held, stdout = _full_pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "webhook", "demo", *argv], stdout=stdout,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    finally:
        os.close(stdout)
    lines: list[str] = []
    stream = proc.stderr
    assert stream is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stream.readline, "")), daemon=True)
    reader.start()
    try:
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(PATIENCE_S)
        stream.close()
        os.close(held)


def _wait_for(lines: list[str], words: str, proc: subprocess.Popen[str], seconds: float = PATIENCE_S) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for line in list(lines):
            if words in line:
                return line
        assert proc.poll() is None, "".join(lines)
        time.sleep(0.05)
    raise AssertionError(f"no {words!r} in:\n{''.join(lines)}")


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _until_closed(port: int, what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while _accepts(port):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_ctrl_c_during_the_demo_stops_it_and_its_server_without_a_traceback_and_removes_its_temp_dir() -> None:
    port = serving.free_port()
    with demo("--port", str(port)) as (proc, lines):
        serving_line = _wait_for(lines, "imex-webhook serving", proc)
        workdir = Path(re.findall(r"CA (\S+)/tls/ca\.crt", serving_line)[0])
        assert workdir.is_dir()
        _wait_for(lines, "==> ", proc)  # playing; it cannot finish before the signal (see _full_pipe)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(PATIENCE_S) == 130
    text = "".join(lines)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert text.rstrip().endswith("imex-webhook demo: interrupted; the server was stopped")
    assert not workdir.exists()
    # The demo waits for its server; a server it had to kill on a slow machine drops its port a moment later.
    _until_closed(port, "the demo's server still listens after the demo stopped")


def test_a_demo_killed_outright_leaves_no_server_behind(tmp_path: Path) -> None:
    port = serving.free_port()
    with demo("--port", str(port), "--workdir", str(tmp_path)) as (proc, lines):
        _wait_for(lines, "imex-webhook serving", proc)
        assert _accepts(port)
        proc.kill()
        proc.wait()
    _until_closed(port, "the demo's server still listens after the demo was killed")
    assert "the parent process" in (tmp_path / "serve.log").read_text()  # logged before it stopped listening


# -- simulate ---------------------------------------------------------------------------------------------


def test_simulate_refuses_an_out_path_that_is_a_file_before_running(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    start = time.monotonic()
    assert cli.main(["simulate", "--out", str(blocker), "--no-plots"]) == 2
    assert time.monotonic() - start < 5  # nothing was simulated
    assert capsys.readouterr().err.strip() == f"imex-webhook simulate: --out {blocker}: exists and is not a directory"


def test_simulate_without_matplotlib_says_how_to_get_it_or_skip_plots_before_running(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert cli.main(["simulate", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "--no-plots" in err and "pip install" in err
    assert not (tmp_path / "out").exists()


def test_simulate_prints_where_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "deep" / "out"
    code = cli.main(["simulate", "--out", str(out), "--cliques", "2", "--jobs", "10", "--fabric-zones", "1",
                                    "--policies", "default", "--no-plots"])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.rstrip().endswith(f"Wrote report.md, metrics.json to {out.resolve()}")
    assert (out / "report.md").is_file() and (out / "metrics.json").is_file()
