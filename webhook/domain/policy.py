"""The knobs the decisions depend on, read once at start-up and passed in as plain data."""

from __future__ import annotations

from dataclasses import dataclass

from webhook.domain import keys
from webhook.domain.health import HealthPolicy
from webhook.domain.model import Reservation

# kube-scheduler 1.35+ (gang scheduling) holds each pod of a gang at Permit for up to 5 minutes, before
# DRA's PreBind and our /bind run: a reservation (or a promise not yet stored as one) with no member
# placed must outlive that wait, or another group takes the domain while the gang waits to bind.
PERMIT_MAX_WAIT = 300.0
# On top of the Permit wait: scheduling the gang's other members, the bind itself, and the watch event
# that shows the bound pod to every replica.
PERMIT_MARGIN = 60.0
MIN_TTL = PERMIT_MAX_WAIT + PERMIT_MARGIN
# Half the GPUs in NVLink domains: a job's controller creates its pods together, so what a namespace holds
# for pods not yet created is a few members for a few seconds; half a cluster is never that, and the other
# half stays free for everyone else.
DEFAULT_MAX_RESERVED_SHARE = 0.5
# Holds (webhook.domain.jobs.holds): a group waits this long before a domain is held for it, and a hold
# lives this long unless its group starts.
DEFAULT_HOLD_AFTER = 600.0
DEFAULT_HOLD_TIMEOUT = 4 * 3600.0
# Holds give way while a group that needs one domain has waited this long, unless the held job has waited
# the second (docs/SIMULATE.md, "Holds that give way": the trade measured).
DEFAULT_HOLD_YIELD_AFTER = 1200.0
DEFAULT_HOLD_YIELD_UNTIL = 12 * 3600.0
# Each hold is planned again on every round against every domain: a few dozen cost a housekeeping round
# a fraction of a second on thousands of nodes; more would only hold the cluster for jobs queued far back.
MAX_HOLDS = 64


@dataclass(frozen=True, slots=True)
class Policy:
    domain_labels: tuple[str, ...] = keys.DEFAULT_DOMAIN_LABELS
    channel_device_classes: tuple[str, ...] = keys.DEFAULT_CHANNEL_DEVICE_CLASSES
    gpu_device_classes: tuple[str, ...] = keys.DEFAULT_GPU_DEVICE_CLASSES
    gpu_drivers: tuple[str, ...] = keys.DEFAULT_GPU_DRIVERS
    scheduler_name: str = "imex-scheduler"
    reservation_ttl: float = 600.0  # seconds a reservation survives with no member placed
    # Seconds a domain choice not (yet) stored as a reservation keeps its capacity promised: a choice being
    # stored, or a promise in a domain's ledger whose reservation a replica failed to create.
    proposal_ttl: float = MIN_TTL
    # How a domain whose NVLink fabric is degraded is weighed for a new group (webhook.domain.health).
    fabric_health: HealthPolicy = "avoid"
    # Every ComputeDomain's group gets an NVLink domain of its own (webhook.domain.placement.exclusive).
    exclusive_domains: bool = False
    # Node labels of the network above the domains, lowest level first: all segments of a job land under
    # one value of the lowest level that fits, else of the next (webhook.domain.groups.segments).
    block_labels: tuple[str, ...] = ()
    # Admission sends GPU pods outside any group to the dedicated profile, whose extender packs them into
    # domains already in use (webhook.domain.placement.plain_pods).
    pack_plain_gpu_pods: bool = False
    # What a namespace without a GPU ResourceQuota may hold for pods it has not created: a number of GPUs,
    # else a share of the GPUs in NVLink domains (webhook.domain.placement.quotas).
    max_reserved_gpus: int | None = None
    max_reserved_share: float = DEFAULT_MAX_RESERVED_SHARE
    # Holds for the groups that wait longest (webhook.domain.jobs.holds): how many groups may hold domains
    # at once (0: no holds), after how long a wait, and for how long a hold lives unless its group starts.
    max_holds: int = 0
    hold_after: float = DEFAULT_HOLD_AFTER
    hold_timeout: float = DEFAULT_HOLD_TIMEOUT
    # Holds give way to the groups that need one domain (webhook.domain.jobs.hold_order): while such a group,
    # held for by none, has waited longer than ``hold_yield_after`` (0: holds never give way), no hold is made
    # and those made are let go, but a job that has waited longer than ``hold_yield_until`` holds on whatever
    # waits: a large job still never starves, and no group, however hopeless, stalls holds for longer.
    hold_yield_after: float = DEFAULT_HOLD_YIELD_AFTER
    hold_yield_until: float = DEFAULT_HOLD_YIELD_UNTIL
    # Only a walltime Kubernetes enforces (activeDeadlineSeconds, Kueue's maximum execution time) lets a group
    # backfill under a hold; an advisory imex-webhook.io/max-runtime, which a tenant may understate, does not.
    backfill_enforced_only: bool = False

    @property
    def affinity_topology_key(self) -> str:
        """The label the admission webhook's pod affinity and node requirement use, for every group kind:
        ``imex-webhook.io/domain``, which the node domain labeller sets to the node's domain on every node
        that has one (a clique label alone would make fabric-zone groups unschedulable)."""
        return keys.DOMAIN_LABEL

    def live(self, res: Reservation, now: float, stored: bool) -> bool:
        """Whether ``res`` still holds its domain's capacity at ``now``: a stored reservation until no member
        was placed for ``reservation_ttl`` (``Reservation.expired``), a promise not stored yet (a choice in
        flight, a domain ledger's entry) for ``proposal_ttl`` from its choice, a stored hold for ``hold_timeout``
        from its making (a hold's promise whose reservation was never stored is a promise like any other). The
        one rule every verb uses."""
        if stored and res.expected_start is not None and res.placed_at is None:  # a hold: its own lifetime
            return now - res.created_at <= self.hold_timeout
        if stored:
            return not res.expired(now, self.reservation_ttl)
        return now - res.created_at <= self.proposal_ttl

    def ttl_problems(self) -> list[str]:
        """Why the TTLs cannot work with kube-scheduler's gang wait at Permit (empty: they can)."""
        return [
            f"{what} {ttl:g}s is shorter than {MIN_TTL:g}s: pods of a gang wait at Permit up to "
            f"{PERMIT_MAX_WAIT:g}s (kube-scheduler 1.35+) before they bind, and a reservation that expires "
            "meanwhile lets another group take the domain"
            for what, ttl in (("reservation TTL", self.reservation_ttl), ("proposal TTL", self.proposal_ttl))
            if ttl < MIN_TTL
        ]
