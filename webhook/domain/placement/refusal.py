"""Why no domain can host a group now, in words a person can act on: the domains the scheduler offered
first, each with what ruled its nodes out, then whether any domain could once running pods finish.

The scheduler sends only the nodes its own filters passed. A domain it offered no node of cannot host the
group whatever its room, so when it offered nodes in some domains only, the reason speaks of those: a
group whose offered nodes all have an unhealthy NVLink fabric is told so, not pointed at an unrelated
domain whose nodes the scheduler rejected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

SHOWN = 3  # offered domains described one by one; the rest are counted


class Offer(Protocol):
    """What one domain can do for the group (``webhook.domain.placement.placement.Offer``), as read here."""

    @property
    def domain(self) -> str: ...

    @property
    def pods(self) -> int: ...

    @property
    def attaches(self) -> int: ...

    @property
    def ceiling(self) -> int: ...

    @property
    def ruled_out(self) -> tuple[tuple[str, int], ...]: ...

    @property
    def offered(self) -> int: ...

    def shortfall(self, remaining: int, one_pod_per_node: bool) -> str: ...


def no_room(what: str, remaining: int, placed: int, placed_domains: Sequence[str], offers: Sequence[Offer],
            one_pod_per_node: bool) -> tuple[str, bool]:
    """(the reason, whether a domain could host the group once running pods finish), for ``offers`` of which
    none hosts ``remaining`` members of the group ``what`` describes."""
    sent = [o for o in offers if o.offered]
    largest = max(sent or offers, key=lambda o: (o.pods, -o.attaches, o.domain))
    biggest_ever = max(offers, key=lambda o: (o.ceiling, o.domain))
    # Which constraints ran out in the domain with most room, when anything but GPUs did.
    short = largest.shortfall(remaining, one_pod_per_node) if largest.ruled_out else ""
    if placed_domains:
        reason = (f"{what} already has {placed} pods in domain {placed_domains[0]}, which has room for only "
                  f"{largest.pods} of the {remaining} still to place" + (f" ({short})" if short else ""))
    elif not sent:
        reason = (f"no domain can host {remaining} pods of {what}: the scheduler offered no node of any domain "
                  f"({len(offers)} domains checked)")
    elif len(sent) < len(offers):
        ranked = sorted(sent, key=lambda o: (-o.pods, o.domain))
        shown = "; ".join(o.shortfall(remaining, one_pod_per_node) for o in ranked[:SHOWN])
        more = f"; {len(ranked) - SHOWN} more offered" if len(ranked) > SHOWN else ""
        reason = (f"no domain can host {remaining} pods of {what}: the scheduler offered nodes in {len(sent)} of "
                  f"the {len(offers)} domains checked: {shown}{more}")
    else:
        reason = (f"no domain can host {remaining} pods of {what}: the largest free capacity is "
                  f"{largest.pods} pods (domain {largest.domain}, {len(offers)} domains checked"
                  + (f"; {short})" if short else ")"))
    later = biggest_ever.ceiling >= remaining
    if later:
        reason += f"; domain {biggest_ever.domain} could once running pods finish"
    else:
        reason += f"; even empty, the largest domain holds {biggest_ever.ceiling} such pods"
    return reason, later
