"""The tools' percentiles (webhook/tools/stats.py): nearest rank, as every tool reports them."""

from __future__ import annotations

from webhook.tools import stats


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert stats.percentile(values, 50) == 50.0
    assert stats.percentile(values, 99) == 99.0
    assert stats.percentile(values, 100) == 100.0
    assert stats.percentile([], 50) == 0.0
