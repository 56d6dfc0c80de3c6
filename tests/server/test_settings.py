"""`--frontend-workers auto`: which machines get workers, and how many."""

import pytest

from server.settings import auto_workers


@pytest.mark.parametrize(
    ("cores", "workers"), [(1, 0), (2, 0), (3, 1), (4, 2), (8, 4), (16, 4), (64, 4)]
)
def test_auto_workers_keep_small_machines_in_process_and_grow_with_cores(
    cores: int, workers: int
) -> None:
    assert auto_workers(cores) == workers
