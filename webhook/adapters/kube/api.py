"""Raw JSON calls to the API server through the official client, each with a deadline.

Objects stay plain JSON dicts (orjson), never the client's generated models: turning 5,000 Nodes into
models takes seconds, and the caches parse only what they need (``webhook.domain.reading.parsing``). The
official client still does what it is good at: kubeconfig and in-cluster loading, credentials and their
refresh, TLS, and the connection pool.

Every failure comes out as one ``ApiError``: the HTTP status and the ``Status`` message of the API
server, or status 0 when no answer came (unreachable, timed out, TLS). ``ApiError.explain`` words it
for the ``Error`` of an extender reply.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
import urllib3
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from urllib3.util.retry import Retry

from webhook.errors import ImexWebhookError
from webhook.wire.text import clip

Timeout = tuple[float, float]  # (connect, read) seconds; read bounds each wait for bytes, as urllib3 does

# kube-scheduler waits 5 s for an extender call unless configured otherwise (extenders[].httpTimeout).
# A call of ours that outlives the caller turns a reason we could report into a bare scheduler timeout,
# so one API call may use at most these shares of the caller's deadline: connecting is quick or the API
# server is down; reading gets most of the rest, leaving room for the rest of the request.
EXTENDER_HTTP_TIMEOUT = 5.0
CONNECT_SHARE, READ_SHARE = 0.2, 0.6
MESSAGE_LIMIT = 256  # characters of an API server message we repeat; Status messages can embed whole objects


def call_timeout(deadline: float = EXTENDER_HTTP_TIMEOUT) -> Timeout:
    """The (connect, read) timeout of one API call made while a caller waits ``deadline`` seconds."""
    return (deadline * CONNECT_SHARE, deadline * READ_SHARE)


class ApiError(ImexWebhookError):
    """A failed API call. ``status`` is the HTTP status, 0 when no answer came."""

    def __init__(self, status: int, reason: str, message: str, timed_out: bool = False) -> None:
        self.status = status
        self.reason = reason
        self.message = clip(message, MESSAGE_LIMIT)
        self.timed_out = timed_out
        super().__init__(f"{status} {reason}: {self.message}" if status else f"{reason}: {self.message}")

    @classmethod
    def from_body(cls, status: int, http_reason: str, body: bytes) -> ApiError:
        reason, message = http_reason or "Error", body.decode("utf-8", "replace").strip()
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and doc.get("kind") == "Status":
            reason = str(doc.get("reason") or reason)
            message = str(doc.get("message") or message)
        return cls(status, reason, message or "(no message)")

    def explain(self, action: str, verb: str, resource: str) -> str:
        """A sentence for a human: what we tried, why it failed and, where we can tell, what to do."""
        if self.timed_out:
            return f"could not {action}: the API server did not answer in time ({self.message})"
        if self.status == 0:
            return f"could not {action}: the API server is unreachable ({self.message})"
        if self.status == 401:
            return f"could not {action}: the API server rejected our credentials (401): {self.message}"
        if self.status == 403:
            return (f'could not {action}: forbidden; the service account needs verb "{verb}" on "{resource}" '
                    f"(RBAC, see manifests/): {self.message}")
        return f"could not {action}: {self.status} {self.reason}: {self.message}"


@contextmanager
def _translated(timeout: Timeout) -> Iterator[None]:
    """Network and TLS failures of the client, as ``ApiError`` with status 0."""
    try:
        yield
    except urllib3.exceptions.MaxRetryError as exc:
        cause = exc.reason if exc.reason is not None else exc
        timed_out = isinstance(cause, urllib3.exceptions.TimeoutError) and not isinstance(
            cause, urllib3.exceptions.NewConnectionError)
        raise ApiError(0, "Timeout" if timed_out else "Unreachable", str(cause), timed_out) from exc
    except urllib3.exceptions.NewConnectionError as exc:
        raise ApiError(0, "Unreachable", str(exc)) from exc
    except urllib3.exceptions.TimeoutError as exc:
        raise ApiError(0, "Timeout", f"no answer within {timeout[1]:.1f}s: {exc}", timed_out=True) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise ApiError(0, "Unreachable", str(exc) or type(exc).__name__) from exc
    except ApiException as exc:  # the client's own wrapper, for TLS failures
        raise ApiError(0, "TLS", str(exc.reason)) from exc


Tracker = Callable[[urllib3.BaseHTTPResponse | None], None]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
# Lists with a merge key (a pod's status.conditions, by type) are merged item by item, not replaced.
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class KubeConfigError(ImexWebhookError):
    """No usable credentials: the message says which source was tried and what was wrong."""


def load_configuration(kubeconfig: str | None, in_cluster: bool, pool_size: int = 10) -> Configuration:
    """The client configuration from a kubeconfig file (or the default one) or the in-cluster account."""
    configuration = Configuration()
    try:
        if in_cluster:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration, persist_config=False)
    except (kube_config.ConfigException, OSError, ValueError) as exc:
        source = "the in-cluster service account" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
        raise KubeConfigError(f"cannot load Kubernetes credentials from {source}: {exc}") from exc
    # One quick retry of a failed connect, reads only for idempotent methods (urllib3's default list):
    # a pooled keep-alive connection the server has just closed should not fail a call.
    configuration.retries = Retry(total=1, connect=1, read=1, status=0, redirect=0)
    configuration.connection_pool_maxsize = pool_size
    return configuration


class Api:
    """JSON in, JSON out, over the official client's configured connection pool."""

    def __init__(self, client: ApiClient, timeout: Timeout) -> None:
        self.client = client
        self.timeout = timeout

    def close(self) -> None:
        self.client.close()  # type: ignore[no-untyped-call]

    def open(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = (), body: Any = None,
             timeout: Timeout | None = None, content_type: str = JSON) -> urllib3.BaseHTTPResponse:
        """Send one request; return the unread 2xx response, which the caller must close.

        A PATCH needs the content type that names its patch format (``MERGE_PATCH``): kube-apiserver
        answers 415 to a PATCH sent as plain JSON."""
        timeout = timeout or self.timeout
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.client.param_serialize(method=method, resource_path=path, query_params=list(query),
                                              header_params=headers, body=body, auth_settings=["BearerToken"])
        with _translated(timeout):
            response: urllib3.BaseHTTPResponse = self.client.call_api(*request, _request_timeout=timeout).response
        if 200 <= response.status < 300:
            return response
        try:
            with _translated(timeout):
                data = response.data
        finally:
            response.release_conn()
        raise ApiError.from_body(response.status, response.reason or "", data)

    def call(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = (), body: Any = None,
             timeout: Timeout | None = None, track: Tracker | None = None,
             content_type: str = JSON) -> dict[str, Any]:
        """One request and its JSON object. ``track`` sees the response while it is read, so that
        another thread can interrupt a long read (``Watcher.interrupt``)."""
        timeout = timeout or self.timeout
        response = self.open(method, path, query=query, body=body, timeout=timeout, content_type=content_type)
        if track is not None:
            track(response)
        try:
            with _translated(timeout):
                data = response.data
        finally:
            if track is not None:
                track(None)
            response.release_conn()
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ApiError(response.status, "BadResponse", f"the answer is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise ApiError(response.status, "BadResponse", f"expected a JSON object, got {type(doc).__name__}")
        return doc

    def lines(self, response: urllib3.BaseHTTPResponse, timeout: Timeout) -> Iterator[bytes]:
        """The newline-separated JSON documents of a streaming answer (a watch), as they arrive."""
        buffer = bytearray()
        while True:
            with _translated(timeout):
                chunk = response.read1(65536)
            if not chunk:
                break
            buffer += chunk
            while (end := buffer.find(b"\n")) >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                if line.strip():
                    yield line
        if buffer.strip():
            yield bytes(buffer)
