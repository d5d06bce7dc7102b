"""The project's own error tree.

- ``WireError``: a request or object that is malformed; carries the JSON path of the offending field.
  The HTTP layer turns it into a 400 JSON body, never a 500.
- ``DecisionError``: a valid request we cannot serve (for example a binding conflict); the extender
  reports it in the ``Error`` field of a 200 reply so the reason reaches the pod's events.
- ``StoreConflict``: a guarded write lost a race (resourceVersion changed); callers re-read and retry.
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
