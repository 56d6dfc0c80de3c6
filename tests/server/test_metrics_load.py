"""`load_ratio`: the most loaded version's in flight over its capacity."""

from __future__ import annotations

from server.core.metrics.load import load_ratio


def test_nothing_loaded_or_nothing_in_flight_reads_zero() -> None:
    assert load_ratio([]) == 0.0
    assert load_ratio([(0, 4), (0, 8)]) == 0.0


def test_idle_versions_do_not_dilute_a_busy_one() -> None:
    busy = (8, 4)  # twice what its instances run at once
    assert load_ratio([busy]) == 2.0
    assert load_ratio([busy, (0, 8), (0, 16), (0, 1)]) == 2.0


def test_the_most_loaded_version_wins() -> None:
    assert load_ratio([(3, 4), (2, 1), (16, 16)]) == 2.0


def test_a_version_without_capacity_is_skipped() -> None:
    assert load_ratio([(5, 0), (1, 4)]) == 0.25
