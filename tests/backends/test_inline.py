"""The inline rule: a pure function of measured batch times, and the per-size record that
applies it (where each batch size runs, and the back-off after a slow inline batch)."""

from __future__ import annotations

from backends.inline import (
    MOST_NEEDED,
    SPIKE_FACTOR,
    WAIT_FACTOR,
    WINDOW,
    BatchTimes,
    InlineRule,
    runs_inline,
)

RULE = InlineRule(limit_ns=100_000, window=4)
FAST = (20_000, 30_000)  # (CPU, wall) of a threaded batch well within the limit


def test_a_size_stays_on_the_thread_until_its_window_is_measured() -> None:
    assert not runs_inline(RULE, [FAST] * 3, [], inline_now=False, needed=4)
    assert runs_inline(RULE, [FAST] * 4, [], inline_now=False, needed=4)


def test_the_fastest_threaded_batch_is_the_estimate() -> None:
    # GIL waits inflate most threaded batches; one uncontended batch shows the model's time.
    slow = (900_000, 5_000_000)
    assert runs_inline(RULE, [slow, slow, slow, FAST], [], inline_now=False, needed=4)
    assert not runs_inline(RULE, [slow] * 4, [], inline_now=False, needed=4)


def test_cpu_time_within_the_limit_with_a_long_wait_stays_on_the_thread() -> None:
    # A framework that computes on threads of its own: the calling thread's CPU is small, its
    # wall time long even at its fastest.
    waiting = (10_000, WAIT_FACTOR * RULE.limit_ns + 1)
    assert not runs_inline(RULE, [waiting] * 4, [], inline_now=False, needed=4)


def test_inline_keeps_going_while_its_median_is_within_the_limit() -> None:
    assert runs_inline(RULE, [], [], inline_now=True, needed=4)
    assert runs_inline(RULE, [], [50_000, 150_000, 60_000], inline_now=True, needed=4)
    assert not runs_inline(RULE, [], [150_000, 150_000, 60_000], inline_now=True, needed=4)


def test_one_inline_spike_sends_the_size_back() -> None:
    spike = SPIKE_FACTOR * RULE.limit_ns + 1
    assert not runs_inline(RULE, [], [50_000, 50_000, spike], inline_now=True, needed=4)


def test_a_zero_limit_never_runs_inline() -> None:
    rule = InlineRule(limit_ns=0)
    assert not runs_inline(rule, [FAST] * 100, [], inline_now=False, needed=1)
    assert not runs_inline(rule, [], [1], inline_now=True, needed=1)


def test_batch_times_decide_per_size() -> None:
    times = BatchTimes(RULE)
    for _ in range(4):
        assert not times.inline(8)
        times.record_threaded(8, *FAST)
    assert times.inline(8)
    assert not times.inline(16)  # another size is measured on its own


def test_a_slow_inline_batch_doubles_the_threaded_batches_needed() -> None:
    times = BatchTimes(RULE)
    for _ in range(4):
        times.record_threaded(1, *FAST)
    times.record_inline(1, SPIKE_FACTOR * RULE.limit_ns + 1)
    assert not times.inline(1)
    for _ in range(7):
        times.record_threaded(1, *FAST)
    assert not times.inline(1)  # 8 needed now, not 4
    times.record_threaded(1, *FAST)
    assert times.inline(1)


def test_the_back_off_is_bounded() -> None:
    times = BatchTimes(InlineRule(limit_ns=100_000, window=MOST_NEEDED))
    for _ in range(MOST_NEEDED):
        times.record_threaded(2, *FAST)
    times.record_inline(2, 10 * SPIKE_FACTOR * 100_000)
    for _ in range(MOST_NEEDED):
        times.record_threaded(2, *FAST)
    assert times.inline(2)


def test_inline_batches_slower_than_the_limit_go_back_after_a_window() -> None:
    times = BatchTimes(RULE)
    for _ in range(4):
        times.record_threaded(4, *FAST)
    for _ in range(3):
        times.record_inline(4, 2 * RULE.limit_ns)  # slow, but no spike: judged per window
        assert times.inline(4)
    times.record_inline(4, 2 * RULE.limit_ns)
    assert not times.inline(4)


def test_the_default_bound_keeps_batches_of_a_few_hundred_us_inline() -> None:
    # mlp's batches under load on 2 cores: 100-250 us of the thread's CPU, then 120-300 us
    # inline, with slow spells; the bound must not send such a size back to the thread.
    times = BatchTimes(InlineRule())
    for _ in range(WINDOW):
        times.record_threaded(8, 250_000, 1_500_000)
    assert times.inline(8)
    for wall_ns in [240_000, 300_000, 210_000, 600_000] * 4:
        times.record_inline(8, wall_ns)
    assert times.inline(8)
