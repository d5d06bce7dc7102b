"""The hot POST verbs (/filter, /prioritize, /bind, /preempt, /mutate) answered without Flask's request
machinery.

kube-scheduler calls the extender inside its serial scheduling cycle and kube-apiserver calls /mutate for
every pod a controller creates. Flask spends about 80 µs of the GIL on each request (on the project's
2-core build machine): a request context, the URL map, the app's hooks, a Response object and its
finalizing, which is more than a filter decision over 500 nodes. Here a plain request goes straight to
the verb's ``answer(body, services)`` (the same function the Flask view calls), and the reply is written
with the same status line, headers and body, timed and counted in the same metrics.

Only a plain request takes this way: POST to exactly one of the paths, a Content-Length within
--max-body, no SCRIPT_NAME. Anything else goes to Flask, which answers as it always has: another method
(405), a chunked body, a declared length over the limit (413), a body shorter than declared (400). An
exception that no answer catches is handled as the app's own handler does (500 JSON, counted in
``imex_webhook_internal_errors_total``). Tests send the same requests both ways and compare.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from flask import Flask
from werkzeug.exceptions import HTTPException
from werkzeug.http import HTTP_STATUS_CODES

from webhook.domain.limits import body_limit
from webhook.http.common import Services, answered, decode, error_json, release_memory
from webhook.http.metrics import verb_of

Answer = Callable[[Any, Services], bytes]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def _status_line(code: int) -> str:
    """werkzeug's status line, upper case ("400 BAD REQUEST"), so both ways write the same bytes."""
    return f"{code} {HTTP_STATUS_CODES.get(code, 'unknown').upper()}"


def install(app: Flask, answers: Mapping[str, Answer], max_body: int) -> None:
    """Answer ``POST /<verb>`` for every verb in ``answers`` ahead of Flask, in ``app.wsgi_app``."""
    svc: Services = app.extensions["imex"]
    routes = {f"/{verb}": (verb, answer) for verb, answer in answers.items()}
    flask_app = app.wsgi_app

    def answer_plain(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        route = routes.get(environ.get("PATH_INFO", ""))
        if (route is None or environ.get("REQUEST_METHOD") != "POST" or environ.get("SCRIPT_NAME")
                or "HTTP_TRANSFER_ENCODING" in environ):
            return flask_app(environ, start_response)
        length = _length(environ.get("CONTENT_LENGTH"))
        if length is None or length > body_limit(environ["PATH_INFO"], max_body):
            return flask_app(environ, start_response)
        data = environ["wsgi.input"].read(length) if length else b""
        if len(data) != length:
            environ["wsgi.input"] = io.BytesIO(data)  # Flask finds the body short, as it would have
            return flask_app(environ, start_response)
        verb, answer = route
        try:
            status, body = answered(verb, svc.metrics, lambda: answer(decode(data, max_body), svc))
        except HTTPException as exc:  # no answer raises one; kept as the app's errorhandler would answer it
            status = exc.code or 500
            body = error_json(status, exc.description or exc.name)
        except Exception as exc:  # what the app's errorhandler(Exception) does (webhook.http.app)
            app.logger.exception("unhandled error")
            svc.metrics.internal_errors.labels(verb_of(environ["PATH_INFO"])).inc()
            status, body = 500, error_json(500, f"internal error ({type(exc).__name__})")
        svc.metrics.count(environ["PATH_INFO"], status)
        release_memory(length)  # the decoded request is gone by now
        start_response(_status_line(status), [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    app.wsgi_app = answer_plain  # type: ignore[method-assign]


def _length(value: Any) -> int | None:
    """A Content-Length as werkzeug reads it when it is a plain decimal; None sends the request to Flask."""
    if not isinstance(value, str) or not value.isdigit() or not value.isascii():
        return None
    return int(value)
