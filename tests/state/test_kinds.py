"""Every kind the store holds has a row, and every row names a handler the store has."""

from __future__ import annotations

import pytest

from webhook.domain.policy import Policy
from webhook.state import kinds
from webhook.state.cluster import KINDS, ClusterStore


@pytest.mark.parametrize("kind", KINDS)
def test_every_watched_kind_has_a_row_with_a_handler_of_the_store(kind: str) -> None:
    row = kinds.row(kind)
    assert row.kind.label == kind
    assert callable(ClusterStore(Policy())._handlers[row.kind]), row.changed


def test_an_unknown_kind_is_named() -> None:
    with pytest.raises(ValueError, match="unknown kind Secret"):
        kinds.row("Secret")
