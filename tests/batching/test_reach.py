"""The adaptive delay's reach and its probes' schedule, with time passed in explicitly."""

from batching.reach import (
    LEAVE_AFTER,
    LOOP_BUSY,
    PROBE_EVERY_NS,
    PROBE_INTERVALS_MOST,
    PROBES_REMEMBERED,
    Reach,
    delay_bound,
    next_probe_interval,
    next_reach,
    still_growing,
)

MS = 1_000_000  # nanoseconds


def _probe(reach: Reach, size: int, now_ns: int) -> None:
    """A probe that stopped growing before its end (every client in), measured or not."""
    reach.probed(size, now_ns, growing=False, busy=None)


def test_the_reach_rises_at_once_and_comes_down_to_a_lone_clients_in_a_few_probes() -> None:
    assert next_reach(None, 4) == 4
    assert next_reach(4, 6) == 6  # more clients
    reaches = [8]
    for _ in range(3):  # the load drops to one client
        reaches.append(next_reach(reaches[-1], 1))
    assert reaches == [8, 4, 2, 1]
    assert next_reach(8, 7) == 7


def test_probes_come_less_often_while_they_confirm_the_reach() -> None:
    base = 100 * MS
    intervals = [base]
    for _ in range(5):  # a steady load: every probe finds the same reach
        intervals.append(next_probe_interval(intervals[-1], base, confirmed=True))
    assert intervals == [base, 2 * base, 4 * base, 8 * base, 8 * base, 8 * base]
    assert next_probe_interval(8 * base, base, confirmed=False) == base  # the load changed


def test_a_reach_is_known_only_between_probes() -> None:
    start = 10 * PROBE_EVERY_NS  # a monotonic clock long past zero
    reach = Reach(2 * MS)
    assert reach.known(start) is None  # never probed: the first batch waits as Triton's
    _probe(reach, 4, start)
    assert reach.known(start + PROBE_EVERY_NS) == 4
    assert reach.known(start + PROBE_EVERY_NS + 1) is None  # the base interval ran out


def test_the_base_interval_is_twenty_delays_where_that_is_longer_than_100_ms() -> None:
    reach = Reach(10 * MS)  # 20 delays: 200 ms
    _probe(reach, 3, 0)
    assert reach.known(200 * MS) == 3
    assert reach.known(200 * MS + 1) is None


def test_confirming_probes_stretch_the_schedule_and_a_change_resets_it() -> None:
    reach, now = Reach(2 * MS), 0
    _probe(reach, 4, now)
    for interval in (1, 2, 4, PROBE_INTERVALS_MOST, PROBE_INTERVALS_MOST):
        # The last probe confirmed the reach: the next one is due `interval` base intervals on.
        now += PROBE_EVERY_NS
        assert reach.known(now) == 4
        now += (interval - 1) * PROBE_EVERY_NS
        assert reach.known(now) == 4
        now += 1
        assert reach.known(now) is None
        _probe(reach, 4, now)
    _probe(reach, 6, now + 1)  # more clients: the reach rises, probes come at the base again
    assert reach.known(now + 1 + PROBE_EVERY_NS) == 6
    assert reach.known(now + 2 + PROBE_EVERY_NS) is None


def test_a_probe_long_after_the_last_starts_the_reach_anew() -> None:
    reach = Reach(2 * MS)
    _probe(reach, 8, 0)
    _probe(reach, 1, PROBES_REMEMBERED * PROBE_EVERY_NS)  # remembered: halfway down
    assert reach.known(PROBES_REMEMBERED * PROBE_EVERY_NS) == 4
    later = 3 * PROBES_REMEMBERED * PROBE_EVERY_NS
    _probe(reach, 1, later)  # forgotten: the probe's own size
    assert reach.known(later) == 1


def test_a_probe_is_still_growing_when_its_newest_request_came_in_the_last_eighth() -> None:
    assert still_growing(2 * MS, 10 * MS, 10 * MS - 249_000)
    assert not still_growing(2 * MS, 10 * MS, 10 * MS - 250_000)
    assert not still_growing(2 * MS, 10 * MS, 8 * MS)  # a lone client: only its own request


def test_no_reach_holds_when_a_probe_grows_to_its_end_on_a_busy_loop() -> None:
    assert delay_bound(growing=True, busy=LOOP_BUSY)
    assert delay_bound(growing=True, busy=1.0)
    assert not delay_bound(growing=True, busy=0.3)  # a light random load: growth by chance
    assert not delay_bound(growing=False, busy=1.0)  # a busy loop, every client in
    assert not delay_bound(growing=True, busy=None)  # the batch never waited: not measured


def test_a_delay_bound_reach_makes_every_batch_a_probe_until_growth_stops() -> None:
    reach, now = Reach(2 * MS), 0
    _probe(reach, 12, now)
    assert reach.known(now + 1) == 12
    # 32 clients on a saturated loop: the next probe was still growing when its delay ended.
    now += PROBE_EVERY_NS + 1
    reach.probed(16, now, growing=True, busy=0.95)
    assert reach.bound
    assert reach.known(now + 1) is None  # the next batch waits out the delay, and probes
    # Stragglers' batches (not growing) now and then leave it delay-bound, busy loop or not.
    for growing, busy in [(False, 0.5), (True, None), (False, 0.2), (False, None), (True, 0.9)]:
        now += 3 * MS
        reach.probed(5, now, growing=growing, busy=busy)
        assert reach.bound
        assert reach.known(now + 1) is None
    # The load drops to 8 clients, all in each batch: LEAVE_AFTER probes in a row stop growing,
    # and the last one's size is the reach again.
    for i in range(LEAVE_AFTER):
        assert reach.bound
        now += 3 * MS
        reach.probed(8, now, growing=False, busy=1.0 if i % 2 else 0.1)
    assert not reach.bound
    assert reach.known(now + PROBE_EVERY_NS) == 8
    assert reach.known(now + PROBE_EVERY_NS + 1) is None  # probes at the base interval again


def test_growth_on_a_loop_with_time_to_spare_keeps_the_reach() -> None:
    reach = Reach(2 * MS)
    reach.probed(4, 0, growing=True, busy=0.2)
    assert not reach.bound
    assert reach.known(1) == 4
