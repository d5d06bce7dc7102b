"""``imex-webhook explain`` against the real TLS server running the demo scenario, and against peers
that fail: the service down, a CA that did not sign it, an answer that is an error, not JSON, endless,
or never comes. Every failure is one line on stderr with exit status 1 (the service) or 2 (the command
line), never a traceback."""

from __future__ import annotations

import contextlib
import http.server
import io
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from certs import files, issue
from tests import serving
from webhook.demo import cluster as demo_cluster
from webhook.demo import run as demo
from webhook.tools.explain import client


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    """serve on the demo cluster with the simulated fabric, after the demo's jobs went through it."""
    with serving.serve(tmp_path_factory.mktemp("explain"), "--fabric", "embedded", ready_timeout=60) as served:
        outcomes = demo.run(demo.Client(served.url, served.ca), io.StringIO())
        assert all(o.ok for o in outcomes), [o.problems for o in outcomes]
        yield served


def _explain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = client.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("imex-webhook explain: "), err
    assert "Traceback" not in err
    return lines[0]


# (NAME, words the text must hold)
EXPLAINED = [
    ("train-20", ("Group ml/train-20 (compute-domain group", "State:     pending: 0 of 20 pods placed",
                  "Why:       no domain can host 20 pods of compute-domain group ml/train-20",
                  "Reserved:  no domain reserved for the group", "ml/train-20-0  not placed",
                  # The rack the Why names has 12 free trays: 12 pods of 4 GPUs, a new group's room too.
                  "Room now:  the most pods one new group could get in one domain: 12 of 4 GPUs",
                  f"most room for 4-GPU pods: {demo_cluster.clique_value('gb200-b')} (12)")),
    ("ml/train-16-3", ("Pod ml/train-16-3 runs on node gb200-a-", "Group ml/train-16",
                       f"reserved in domain {demo_cluster.clique_value('gb200-a')} (NVLink clique, 18 nodes",
                       "16 pods x 4 GPUs, one pod per node", "Members:   16 of 16 placed", "*ml/train-16-3")),
    ("fabric-3x2", ("Group ml/fabric-3x2 (annotation group", "reserved in domain pcie-pool-1 (fabric pool, 4 nodes",
                    "Fabric:    ml/fabric-3x2-0 on fab-0", ": 2 GPUs Ready")),
    ("ml/inference-2", ("State:     running: 2 of 2 pods placed", "without a reservation", "gb200-a-00")),
]


@pytest.mark.parametrize(("name", "words"), EXPLAINED, ids=[e[0] for e in EXPLAINED])
def test_explain_tells_where_a_group_is_and_why_one_waits(played: serving.Served, capsys: pytest.CaptureFixture[str],
                                                           name: str, words: tuple[str, ...]) -> None:
    code, out, err = _explain(capsys, "--url", played.url, "--cacert", str(played.ca), name)
    assert (code, err) == (0, "")
    for word in words:
        assert word in out, out


def test_the_command_line_runs_it_as_a_subcommand(played: serving.Served) -> None:
    result = subprocess.run([sys.executable, "-m", "webhook", "explain", "--url", played.url, "--cacert",
                             str(played.ca), "train-8-0"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Pod ml/train-8-0 runs on node gb200-c-0")


def test_many_operators_asking_at_once_get_the_same_answers(played: serving.Served) -> None:
    def ask(name: str) -> tuple[int, str]:
        result = subprocess.run([sys.executable, "-m", "webhook", "explain", "--url", played.url, "--cacert",
                                 str(played.ca), name], capture_output=True, text=True, timeout=120)
        return result.returncode, result.stdout.splitlines()[0] if result.stdout else result.stderr

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(ask, ["train-20", "ml/train-4"] * 3))
    assert answers[0::2] == [(0, answers[0][1])] * 3 and answers[1::2] == [(0, answers[1][1])] * 3
    assert answers[0][1].startswith("Group ml/train-20") and answers[1][1].startswith("Group ml/train-4")


@pytest.mark.parametrize(("args", "status", "words"), [
    (["ml/no-such-pod"], 1, "no group and no pod of a group is named 'ml/no-such-pod'"),
    (["x" * 200_000], 2, "NAME is 200000 characters"),
    (["ml/train-8\x1b[2J"], 2, "holds control characters"),
    (["--cacert", "/nonexistent/ca.crt", "train-8"], 2, "--cacert /nonexistent/ca.crt: no such file"),
    (["--url", "http://localhost:1", "train-8"], 2, "the service speaks only HTTPS"),
    (["--cert", "/nonexistent.crt", "train-8"], 2, "--cert and --key go together"),
    (["--timeout", "-1", "train-8"], 2, "--timeout must be in (0, 3600]"),
], ids=["unknown name", "huge name", "terminal escape", "missing CA file", "plain HTTP", "cert alone",
        "negative timeout"])
def test_a_wrong_command_line_or_name_is_one_line(played: serving.Served, capsys: pytest.CaptureFixture[str],
                                                  args: list[str], status: int, words: str) -> None:
    url = [] if any(a.startswith("--url") for a in args) else ["--url", played.url]
    ca = [] if "--cacert" in args else ["--cacert", str(played.ca)]
    code, out, err = _explain(capsys, *url, *ca, *args)
    assert (code, out) == (status, "")
    assert words in _one_line(err)


def test_a_service_that_is_down_is_one_line(played: serving.Served, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _explain(capsys, "--url", f"https://localhost:{serving.free_port()}", "--cacert",
                            str(played.ca), "train-8")
    assert code == 1 and "cannot connect to https://localhost:" in _one_line(err) and "refused" in err


def test_a_ca_that_did_not_sign_the_service_is_one_line(played: serving.Served, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "other.crt").write_bytes(issue.new_ca("someone else").cert_pem)
    code, _, err = _explain(capsys, "--url", played.url, "--cacert", str(tmp_path / "other.crt"), "train-8")
    line = _one_line(err)
    assert code == 1 and f"TLS with {played.url} failed (CA {tmp_path / 'other.crt'})" in line
    assert "certificate verify failed" in line


class _Peer(http.server.BaseHTTPRequestHandler):
    """A TLS server that answers /inspect as told by the test (``server.mode``)."""

    def do_GET(self) -> None:
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "hang":
            time.sleep(5)
            return
        status, body = {
            "error": (503, b'{"error": "caches not loaded", "status": 503}'),
            "html": (200, b"<html>proxy login</html>"),
            "deep": (200, b"[" * 100_000 + b"]" * 100_000),
            "shape": (200, b'{"groups": [{"group": 7}]}'),
            "endless": (200, b"{" + b" " * (1 << 20)),
        }[mode]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if mode == "endless":  # more than any /inspect: the reader must stop on its own
            self.end_headers()
            with contextlib.suppress(OSError):
                for _ in range(300):
                    self.wfile.write(body)
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _peer(tmp: Path, mode: str) -> Iterator[tuple[str, Path]]:
    ca = issue.new_ca()
    (tmp / "ca.crt").write_bytes(ca.cert_pem)
    files.write_pair(tmp / "tls.crt", tmp / "tls.key", issue.new_serving(ca, ["localhost"], ["127.0.0.1"]))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Peer)
    server.daemon_threads = True
    server.mode = mode  # type: ignore[attr-defined]
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://localhost:{server.server_address[1]}", tmp / "ca.crt"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.parametrize(("mode", "words"), [
    ("error", "/inspect answered 503: caches not loaded"),
    ("html", "did not answer JSON"),
    ("deep", "did not answer JSON"),
    ("shape", "is not what this version reads: groups[0].group is not a string"),
    ("hang", "did not answer within 1 s"),
])
def test_a_peer_that_answers_badly_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str,
                                               words: str) -> None:
    with _peer(tmp_path, mode) as (url, ca):
        code, out, err = _explain(capsys, "--url", url, "--cacert", str(ca), "--timeout", "1", "train-8")
    assert (code, out) == (1, "")
    assert words in _one_line(err)


def test_an_endless_answer_is_cut_off(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "MAX_ANSWER", 8 << 20)
    with _peer(tmp_path, "endless") as (url, ca):
        code, _, err = _explain(capsys, "--url", url, "--cacert", str(ca), "train-8")
    assert code == 1 and "answered more than 8 MiB; not reading it" in _one_line(err)


def test_a_port_that_speaks_no_tls_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer_plain() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        thread = threading.Thread(target=answer_plain, daemon=True)
        thread.start()
        (tmp_path / "ca.crt").write_bytes(issue.new_ca().cert_pem)
        code, _, err = _explain(capsys, "--url", f"https://localhost:{port}", "--cacert", str(tmp_path / "ca.crt"),
                                "--timeout", "5", "train-8")
        thread.join(timeout=10)
    assert code == 1 and f"TLS with https://localhost:{port} failed" in _one_line(err)
