"""Reservations outlive kube-scheduler's gang wait at Permit (5 minutes in 1.35+, ``PERMIT_MAX_WAIT``).

Covered: the default reservation and proposal TTLs are long enough; a shorter ``--reservation-ttl`` is
refused at start-up with a message that names the flag, the minimum and why; the minimum is accepted.
"""

from __future__ import annotations

import argparse

import pytest

from webhook.domain.policy import MIN_TTL, PERMIT_MAX_WAIT, Policy
from webhook.service import settings


def _parse(*argv: str) -> settings.Settings:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return settings.from_args(parser.parse_args(list(argv)))


def test_the_defaults_outlive_the_permit_wait() -> None:
    policy = Policy()
    assert PERMIT_MAX_WAIT == 300.0 and MIN_TTL > PERMIT_MAX_WAIT
    assert policy.reservation_ttl >= MIN_TTL and policy.proposal_ttl >= MIN_TTL
    assert policy.ttl_problems() == []
    assert _parse().policy.reservation_ttl == 600.0


def test_a_reservation_ttl_below_the_permit_wait_is_refused_with_the_reason() -> None:
    with pytest.raises(settings.SettingsError) as raised:
        _parse("--reservation-ttl", "120")
    message = str(raised.value)
    assert message.startswith("--reservation-ttl 120: reservation TTL 120s is shorter than 360s")
    assert "Permit up to 300s (kube-scheduler 1.35+)" in message


def test_the_minimum_is_accepted() -> None:
    assert _parse("--reservation-ttl", str(MIN_TTL)).policy.reservation_ttl == MIN_TTL


def test_a_proposal_ttl_below_the_permit_wait_is_a_problem() -> None:
    (problem,) = Policy(proposal_ttl=60).ttl_problems()
    assert problem.startswith("proposal TTL 60s is shorter than 360s")
