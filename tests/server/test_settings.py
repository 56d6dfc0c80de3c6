"""`--frontend-workers auto`: which machines get workers, and how many."""

import pytest

from server.contract.errors import ConfigError
from server.contract.settings import TraceSettings
from server.settings import auto_workers


@pytest.mark.parametrize(
    ("cores", "workers"), [(1, 0), (2, 0), (3, 1), (4, 2), (8, 4), (16, 4), (64, 4)]
)
def test_auto_workers_keep_small_machines_in_process_and_grow_with_cores(
    cores: int, workers: int
) -> None:
    assert auto_workers(cores) == workers


@pytest.mark.parametrize("entry", ["rate=\u0661", "count=1_0", "bsp_max_queue_size=\u0664"])
def test_trace_numbers_take_ascii_digits_only(entry: str) -> None:
    with pytest.raises(ConfigError, match="expected an integer"):
        TraceSettings.parse([entry], {})
