"""``GET /ui`` through the real TLS server: one self-contained page that names no other origin, under a
Content-Security-Policy that admits exactly its own inline script and style; the same listener and
client-certificate rule as ``/inspect``; JSON errors for anything else; many callers at once; and the
page inside the wheel that pip builds."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

import pytest
import requests

from certs import files, issue
from tests import serving

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    with serving.serve(tmp_path_factory.mktemp("ui")) as server:
        yield server


class _Parts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.references: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.tags: list[str] = []
        self.inline: dict[str, list[str]] = {"script": [], "style": []}
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._in = tag if tag in self.inline else None
        if tag in self.inline:
            self.inline[tag].append("")
        self.references += [(tag, k, v or "") for k, v in attrs if k in ("src", "href", "action", "srcset", "data")]

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in:
            self.inline[self._in][-1] += data


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_map_is_one_page_that_names_no_other_origin(served: serving.Served) -> None:
    reply = served.get("/ui")
    assert reply.status_code == 200 and reply.headers["Content-Type"].startswith("text/html")
    parts = _Parts()
    parts.feed(reply.text)
    assert len(parts.inline["script"]) == 1 and len(parts.inline["style"]) == 1
    assert [r for r in parts.references if not r[2].startswith("data:")] == []
    assert not {"iframe", "object", "embed", "img", "base"} & set(parts.tags)
    assert re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", reply.text, flags=re.I) == []
    assert "@import" not in parts.inline["style"][0] and "url(" not in parts.inline["style"][0]
    # The page's only request is /inspect on its own origin.
    assert re.findall(r"fetch\(([^,)]*)", parts.inline["script"][0]) == ['"/inspect"']
    assert "innerHTML" not in reply.text and "eval(" not in reply.text  # text from the cluster is never markup


def test_the_policy_admits_exactly_the_page_s_own_script_and_style(served: serving.Served) -> None:
    reply = served.get("/ui")
    parts = _Parts()
    parts.feed(reply.text)
    policy = dict(d.strip().split(" ", 1) for d in reply.headers["Content-Security-Policy"].split(";"))
    assert policy == {
        "default-src": "'none'", "script-src": _sha256(parts.inline["script"][0]),
        "style-src": _sha256(parts.inline["style"][0]), "connect-src": "'self'", "img-src": "data:",
        "base-uri": "'none'", "form-action": "'none'", "frame-ancestors": "'none'",
    }
    assert reply.headers["X-Content-Type-Options"] == "nosniff"
    assert reply.headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize(("method", "path", "status"), [
    ("POST", "/ui", 405), ("PUT", "/ui", 405), ("DELETE", "/ui", 405),
    ("GET", "/ui/", 404), ("GET", "/ui/../inspect/..%2f", 404), ("GET", "/ui" + "x" * 2_000, 404),
])
def test_anything_but_a_get_of_the_page_is_a_json_error(served: serving.Served, method: str, path: str,
                                                         status: int) -> None:
    reply = requests.request(method, served.url + path, data=b"{" * 5000, verify=str(served.ca), timeout=30)
    assert reply.status_code == status
    assert reply.headers["Content-Type"] == "application/json" and reply.json()["status"] == status


def test_head_and_query_strings_get_the_page(served: serving.Served) -> None:
    head = requests.head(served.url + "/ui", verify=str(served.ca), timeout=30)
    assert head.status_code == 200 and head.text == ""
    odd = served.get("/ui?refresh=-1e309&refresh=%00%ff&" + "x=" + "y" * 3000)  # a request line within 4 KiB
    assert odd.status_code == 200 and odd.content == served.get("/ui").content


def test_many_callers_at_once_get_the_same_page_and_inspect_keeps_answering(served: serving.Served) -> None:
    page = served.get("/ui").content

    def call(i: int) -> tuple[int, bytes]:
        with requests.Session() as session:
            path = "/ui" if i % 2 else "/inspect"
            reply = session.get(served.url + path, verify=str(served.ca), timeout=30)
            return reply.status_code, reply.content if path == "/ui" else b""

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(call, range(64)))
    assert {status for status, _ in results} == {200}
    assert {body for status, body in results if body} == {page}


def _outcome(url: str, ca: Path, cert: tuple[Path, Path] | None) -> str:
    try:
        client = (str(cert[0]), str(cert[1])) if cert else None
        return str(requests.get(url, verify=str(ca), cert=client, timeout=10).status_code)
    except requests.exceptions.SSLError:
        return "refused at the handshake"
    except requests.exceptions.ConnectionError:
        return "connection failed"


def test_the_page_answers_exactly_the_callers_inspect_answers(tmp_path: Path) -> None:
    """With --client-ca: no certificate, one from that CA, one from another CA; /ui and /inspect alike."""
    client_ca, stranger_ca = issue.new_ca("clients"), issue.new_ca("strangers")
    (tmp_path / "client-ca.crt").write_bytes(client_ca.cert_pem)
    files.write_pair(tmp_path / "ok.crt", tmp_path / "ok.key", issue.new_client(client_ca, "operator"))
    files.write_pair(tmp_path / "bad.crt", tmp_path / "bad.key", issue.new_client(stranger_ca, "operator"))
    good, foreign = (tmp_path / "ok.crt", tmp_path / "ok.key"), (tmp_path / "bad.crt", tmp_path / "bad.key")
    with serving.serve(tmp_path / "run", "--client-ca", str(tmp_path / "client-ca.crt"), client_cert=good) as srv:
        for cert in (None, good, foreign):
            ui, inspect = (_outcome(srv.url + path, srv.ca, cert) for path in ("/ui", "/inspect"))
            assert ui == inspect, cert
        assert _outcome(srv.url + "/ui", srv.ca, good) == "200"
        assert _outcome(srv.url + "/ui", srv.ca, foreign) != "200"


def test_the_page_is_in_the_wheel(tmp_path: Path) -> None:
    """pip builds the wheel from the sources as a user would (pyproject's package-data must carry the page)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("webhook", "certs"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                            str(src)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("webhook/http/ui_page.html") == (ROOT / "webhook/http/ui_page.html").read_bytes()
