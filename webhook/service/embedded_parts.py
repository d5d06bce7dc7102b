"""What ``serve`` runs on in place of a cluster and a fabric manager, as the service needs it.

The service does not import the simulators or the demo: ``webhook.composition`` builds these factories from
them and hands them to :func:`webhook.service.server.serve`. They are called in each gunicorn worker, after
the fork, so every worker gets its own running copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook.adapters.memory import MemoryAttachmentStore
from webhook.state.cluster import ClusterStore


class Stoppable(Protocol):
    def stop(self) -> None: ...


@dataclass(frozen=True)
class RunningFabric:
    """A Redfish service started in this process (``--fabric embedded``): where it listens, how to log in."""

    url: str
    username: str
    password: str = field(repr=False)
    stop: Callable[[], None] = field(repr=False)


# The simulated node agents of the embedded mode: they take attachments from Attached to Ready and from
# Releasing to Released as DaemonSet agents would, and write the Nodes they change into the cluster store.
StartNodeAgents = Callable[[MemoryAttachmentStore, ClusterStore, list[dict[str, Any]]], Stoppable]


@dataclass(frozen=True)
class EmbeddedParts:
    """``demo_cluster``: the objects of the built-in demo topology (no ``--cluster`` files given);
    ``start_fabric``: the composition simulator of ``--fabric embedded``; ``start_node_agents``: its
    simulated node agents."""

    demo_cluster: Callable[[], list[dict[str, Any]]]
    start_fabric: Callable[[], RunningFabric]
    start_node_agents: StartNodeAgents
