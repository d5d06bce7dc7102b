"""``GET /ui``: the live cluster map, one self-contained page that draws ``/inspect`` every few seconds.

Served by the same app as ``/inspect``, so the same TLS listener and client-certificate rule apply;
the page reads nothing but ``/inspect`` on its own origin. Its Content-Security-Policy allows exactly its
own inline script and style (by hash), requests to this origin and ``data:`` images, so the page works
offline and a name in the cluster that looks like markup cannot run as script.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib import resources

from flask import Blueprint, Response

blueprint = Blueprint("ui", __name__)

PAGE_FILE = "ui_page.html"


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _inline(page: str, tag: str) -> str:
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.S)
    if len(found) != 1:
        raise RuntimeError(f"{PAGE_FILE} must hold exactly one <{tag}> block, found {len(found)}")
    text: str = found[0]
    return text


def load_page() -> tuple[bytes, str]:
    """The page and its Content-Security-Policy."""
    page = resources.files("webhook.http").joinpath(PAGE_FILE).read_text(encoding="utf-8")
    policy = "; ".join([
        "default-src 'none'",
        f"script-src {_hash(_inline(page, 'script'))}",
        f"style-src {_hash(_inline(page, 'style'))}",
        "connect-src 'self'",
        "img-src data:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ])
    return page.encode(), policy


_PAGE, _POLICY = load_page()


@blueprint.get("/ui")
def ui() -> Response:
    return Response(_PAGE, mimetype="text/html", headers={
        "Content-Security-Policy": _POLICY,
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    })
