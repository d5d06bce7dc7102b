"""``serve --client-subject`` and ``--inspect-subject``: who may call the extender verbs and read the map
(webhook.serving.callers). Defaults, repetition, and one line naming the flag for a subject no certificate
can carry."""

from __future__ import annotations

import pytest

from webhook import cli, errors
from webhook.service import settings
from webhook.service.settings import OPERATOR_SUBJECT, SCHEDULER_SUBJECT
from webhook.serving import callers


def _from(argv: list[str]) -> settings.Settings:
    return settings.from_args(cli.parser().parse_args(["serve", *argv]))


def test_by_default_the_scheduler_calls_the_verbs_and_operators_read_the_map() -> None:
    got = _from([])
    assert got.tls.client_subjects == (SCHEDULER_SUBJECT,) == ("imex-scheduler",)
    assert got.tls.inspect_subjects == (OPERATOR_SUBJECT,) == ("imex-operator",)


def test_the_servers_own_defaults_are_the_flags_defaults() -> None:
    """The HTTP server names the two subjects itself (it imports no settings): the same two."""
    allowed, got = callers.Allowed(), _from([])
    assert (callers.SCHEDULER_SUBJECT, callers.OPERATOR_SUBJECT) == (SCHEDULER_SUBJECT, OPERATOR_SUBJECT)
    assert (allowed.extender, allowed.inspect) == (frozenset(got.tls.client_subjects),
                                                   frozenset(got.tls.inspect_subjects))


def test_each_flag_repeats_and_a_repeated_subject_counts_once() -> None:
    got = _from(["--client-subject", "a", "--client-subject", "spiffe://cluster.local/ns/x/sa/y",
                 "--client-subject", "a", "--inspect-subject", "alice"])
    assert got.tls.client_subjects == ("a", "spiffe://cluster.local/ns/x/sa/y")
    assert got.tls.inspect_subjects == ("alice",)


@pytest.mark.parametrize("flag", ["--client-subject", "--inspect-subject"])
@pytest.mark.parametrize("value", ["", "two words", "tab\there", "x" * 254, "nul\x00", "line\nbreak"])
def test_a_subject_no_certificate_can_carry_is_refused_in_one_line_naming_the_flag(flag: str, value: str) -> None:
    with pytest.raises(errors.SettingsError) as refused:
        _from([flag, value])
    message = str(refused.value)
    assert message.startswith(f"{flag} ") and "\n" not in message and "expected a certificate subject" in message


def test_the_longest_subject_a_san_may_be_is_accepted() -> None:
    assert _from(["--client-subject", "x" * 253]).tls.client_subjects == ("x" * 253,)
