"""The project's own error tree: every exception raised on purpose, in every package (the extender, the
node agent, the simulators, the tools, ``certs``), derives from ``ImexWebhookError``, so a caller can tell
"we refused this, with a message for a person" from a bug. Errors that carry a library's meaning as well
(``ValueError`` for bad input) derive from both. Only imitations of another library's errors (the fake
pynvml's ``NVMLError``) keep that library's shape instead.

This module imports nothing of the project, so every layer, down to the wire codecs, may raise these.

- ``WireError``: a request or object that is malformed; carries the JSON path of the offending field.
  The HTTP layer turns it into a 400 JSON body, never a 500.
- ``DecisionError``: a valid request we cannot serve (for example a binding conflict); the extender
  reports it in the ``Error`` field of a 200 reply so the reason reaches the pod's events.
- ``StoreConflict``: a guarded write lost a race (resourceVersion changed); callers re-read and retry.
  ``DomainFull`` is the reservation store's kind of it: the domain filled up while a choice was recorded.
- ``FabricFailure``: a fabric manager refused or failed an operation.
"""

from __future__ import annotations


class ImexWebhookError(Exception):
    """Base of every error this project raises on purpose."""


class WireError(ImexWebhookError):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


class DecisionError(ImexWebhookError):
    """A request we understood but cannot satisfy; the message is written for a human to act on."""


class StoreConflict(ImexWebhookError):
    """Someone else changed the object since we read it."""


class DomainFull(StoreConflict):
    """The domain's latest promises leave no room for the group: choose again."""

    def __init__(self, domain: str, group: str) -> None:
        super().__init__(f"domain {domain} has no room left for group {group} next to the promises recorded "
                         "since the choice was made")
        self.domain = domain


class FabricFailure(ImexWebhookError):
    """A fabric manager refused or failed an operation; the message is for an operator."""


class SettingsError(ImexWebhookError, ValueError):
    """A command line, or an input it names, that a command cannot start with; the message is one line
    naming the flag. ``serve`` and ``agent`` exit with status 2 on it."""


class NodeApiError(ImexWebhookError):
    """A call through the node agent's port to the API server failed (``webhook.agent.ports``): ``status``
    is the HTTP status, 0 when no answer came. Defined here, below every layer, because the adapter that
    raises it may not import the agent."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
