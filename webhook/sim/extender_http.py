"""The emulator's ``Extender`` for a running extender: the wire dicts sent over HTTP(S), as kube-scheduler
sends them, to ``<url>/<verb>``.

Kept beside the emulator, not inside it (``webhook.sim.cycle`` stays free of I/O). A reply other than
200, or a connection that fails, raises ``ExtenderCallFailed`` with the text kube-scheduler reports for it.
``observe`` (optional) sees every call: verb, request, and the decoded reply or ``None`` after a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import requests

from webhook.sim.cycle import ExtenderCallFailed, ExtenderConfig, http_failure

Observer = Callable[[str, dict[str, Any], Any], None]


class HttpExtender:
    def __init__(self, url: str, ca: str, config: ExtenderConfig, *, session: requests.Session | None = None,
                 timeout: float = 60.0, observe: Observer | None = None) -> None:
        self.url = url.rstrip("/")
        self.ca = ca
        self.config = config
        self.session = session or requests.Session()
        self.timeout = timeout
        self.observe = observe

    def endpoint(self) -> tuple[str, requests.Session]:
        """Where the next call goes; a subclass may follow a server that restarts on another port."""
        return self.url, self.session

    def _call(self, verb: str, args: dict[str, Any]) -> Any:
        url, session = self.endpoint()
        try:
            # verify goes with each request: REQUESTS_CA_BUNDLE in the environment overrides a session's.
            reply = session.post(f"{url}/{verb}", json=args, timeout=self.timeout, verify=self.ca)
        except requests.RequestException as exc:
            self._seen(verb, args, None)
            raise ExtenderCallFailed(f'Post "{url}/{verb}": {exc}') from exc
        if reply.status_code != 200:
            self._seen(verb, args, None)
            raise http_failure(self.config, verb, reply.status_code)
        body = reply.json()
        self._seen(verb, args, body)
        return body

    def _seen(self, verb: str, args: dict[str, Any], reply: Any) -> None:
        if self.observe is not None:
            self.observe(verb, args, reply)

    def filter(self, args: dict[str, Any]) -> Any:
        return self._call("filter", args)

    def prioritize(self, args: dict[str, Any]) -> Any:
        return self._call("prioritize", args)

    def bind(self, args: dict[str, Any]) -> Any:
        return self._call("bind", args)

    def preempt(self, args: dict[str, Any]) -> Any:
        return self._call("preempt", args)
