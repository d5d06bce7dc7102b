"""``--backfill-walltimes enforced`` (``Policy.backfill_enforced_only``): a tenant may understate the advisory
``imex-webhook.io/max-runtime`` to backfill into a domain held for another tenant, and nothing ends its job when
it overruns; with this setting only a walltime Kubernetes enforces (``activeDeadlineSeconds``, Kueue's maximum
execution time) lets a group backfill under a hold, and the group refused for it is told why."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.domain.test_holds import T0, _group
from tests.engine.test_holds import POLICY, _cluster, _delete, _pod
from webhook.domain.jobs import held_out, holds
from webhook.domain.model import Group, GroupKind, Reservation, Walltime

A = "aaaa-1111.7"
HOLD = Reservation("cd:big", "big", "ml", A, 4, 4, True, T0, expected_start=T0 + 3600)
ADVISORY = Walltime(600.0, "ComputeDomain ml/quick's annotation imex-webhook.io/max-runtime", False)
ENFORCED = Walltime(600.0, "the pod's activeDeadlineSeconds", True)


def _quick(bound: Walltime | None) -> Group:
    return Group("cd:quick", GroupKind.COMPUTE_DOMAIN, "ml", "quick", "quick", True, walltime=bound)


@pytest.mark.parametrize(("bound", "enforced_only", "backfills"), [
    (ADVISORY, False, True), (ENFORCED, False, True),
    (ADVISORY, True, False), (ENFORCED, True, True),
    (None, False, False), (None, True, False),
], ids=["advisory, any", "enforced, any", "advisory, enforced only", "enforced, enforced only",
        "none, any", "none, enforced only"])
def test_which_walltimes_backfill_under_a_hold(bound: Walltime | None, enforced_only: bool, backfills: bool) -> None:
    kept = holds.visible({"cd:big": HOLD}, _quick(bound), T0 + 1200, enforced_only)
    assert ("cd:big" not in kept) is backfills


def test_a_group_refused_for_an_advisory_walltime_is_told_what_would_let_it_backfill() -> None:
    text = held_out.note(HOLD, ADVISORY, T0 + 1200, enforced_only=True)
    assert "is only stated" in text and "activeDeadlineSeconds" in text and "cannot backfill" in text


def _with_deadline(objects: list[dict[str, Any]], seconds: int) -> list[dict[str, Any]]:
    """The group's pods with ``activeDeadlineSeconds``: a walltime the kubelet enforces."""
    return [{**o, "spec": {**o["spec"], "activeDeadlineSeconds": seconds}} if o["kind"] == "Pod" else o
            for o in objects]


def test_only_the_enforced_walltime_backfills_through_the_engine_when_so_set() -> None:
    big = _group("big", 4, created=T0)
    stated = _group("stated", 2, runtime="10m", created=T0 + 1900)
    enforced = _with_deadline(_group("enforced", 2, created=T0 + 1900), 600)
    engine, backend, clock, _ = _cluster(big, stated, enforced, policy=replace(POLICY, backfill_enforced_only=True))
    engine.plan_holds()
    _delete(backend, _group("short", 2, runtime="30m", nodes=["a-00", "a-01"]))  # a-00, a-01 free
    clock.now = T0 + 1900
    nodes = sorted(engine.snapshot().nodes)
    assert not engine.filter(_pod(stated, "stated-0"), nodes).passed, "10 minutes only stated: kept out"
    assert set(engine.filter(_pod(enforced, "enforced-0"), nodes).passed) == {"a-00", "a-01"}
