"""The memory budget: footprints and which idle models LRU eviction picks."""

import pytest

from server.contract.errors import ModelLoadFailedError
from server.core.repository import (
    MemoryBudget,
    Resident,
    auto_limit_bytes,
    choose_evictions,
    footprint_bytes,
    parse_config,
    plan_room,
)


def test_footprint_is_weights_plus_a_full_batch_per_instance() -> None:
    config = parse_config(
        'name: "m" max_batch_size: 8 '
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ] '
        'output [ { name: "y" data_type: TYPE_INT64 dims: [ -1, 2 ] } ]',
        "inline",
    )
    # (1000 bytes of weights + 8 x 16 x 4 + 8 x 1 x 2 x 8) x 2 instances
    assert footprint_bytes(config, 1000, 2) == (1000 + 512 + 128) * 2


def resident(name: str, size: int, last_used_ms: int, idle: bool = True) -> Resident:
    return Resident(name, size, last_used_ms, idle)


def test_nothing_is_evicted_when_the_load_fits() -> None:
    assert choose_evictions([resident("a", 10, 1)], needed_bytes=5, free_bytes=5) == []


def test_least_recently_used_idle_models_go_first_until_it_fits() -> None:
    residents = [resident("new", 10, 300), resident("old", 10, 100), resident("mid", 10, 200)]
    chosen = choose_evictions(residents, needed_bytes=25, free_bytes=10)
    assert [r.name for r in chosen or []] == ["old", "mid"]


def test_busy_models_are_never_evicted() -> None:
    residents = [resident("busy", 100, 1, idle=False), resident("idle", 5, 2)]
    assert choose_evictions(residents, needed_bytes=50, free_bytes=10) is None
    chosen = choose_evictions(residents, needed_bytes=12, free_bytes=10)
    assert [r.name for r in chosen or []] == ["idle"]


def test_the_auto_budget_is_half_the_gpus_memory_where_there_are_gpus() -> None:
    assert auto_limit_bytes(cuda_total_bytes=80 * 2**30) == 40 * 2**30
    ram_share = auto_limit_bytes(cuda_total_bytes=0)  # no GPU: a share of the RAM
    assert 0 < ram_share < 2**50


def test_room_is_made_by_evicting_only_where_the_budget_allows_it() -> None:
    residents = [resident("old", 40, 1), resident("new", 40, 2)]
    evicting = MemoryBudget(limit_bytes=100, evict_lru=True)
    assert plan_room("m", evicting, residents, used_bytes=80, needed_bytes=20) == []
    assert plan_room("m", evicting, residents, used_bytes=80, needed_bytes=50) == [residents[0]]
    with pytest.raises(ModelLoadFailedError, match="60 of the 100-byte memory budget"):
        plan_room("m", MemoryBudget(limit_bytes=100), residents, used_bytes=40, needed_bytes=70)


def test_a_load_that_cannot_fit_names_what_it_needs_and_what_is_free() -> None:
    busy = [resident("busy", 90, 1, idle=False)]
    with pytest.raises(ModelLoadFailedError) as raised:
        plan_room("m", MemoryBudget(100, evict_lru=True), busy, used_bytes=90, needed_bytes=20)
    message = str(raised.value)
    assert "'m'" in message and "needs 20 bytes" in message and "only 10 of the" in message
    assert "no idle model can be evicted to make room" in message
