"""The knobs the decisions depend on, read once at start-up and passed in as plain data."""

from __future__ import annotations

from dataclasses import dataclass

from webhook.domain import keys


@dataclass(frozen=True, slots=True)
class Policy:
    domain_labels: tuple[str, ...] = keys.DEFAULT_DOMAIN_LABELS
    channel_device_classes: tuple[str, ...] = keys.DEFAULT_CHANNEL_DEVICE_CLASSES
    gpu_device_classes: tuple[str, ...] = keys.DEFAULT_GPU_DEVICE_CLASSES
    scheduler_name: str = "imex-scheduler"
    reservation_ttl: float = 600.0  # seconds a reservation survives with no member placed
    proposal_ttl: float = 120.0  # seconds a not-yet-bound domain choice is remembered by this process

    @property
    def affinity_topology_key(self) -> str:
        """The label the admission webhook's pod affinity uses: the cluster's primary domain label."""
        return self.domain_labels[0]
