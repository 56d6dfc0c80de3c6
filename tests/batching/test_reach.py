"""The adaptive delay's reach and its probes' schedule, with time passed in explicitly."""

from batching.reach import (
    PROBE_EVERY_NS,
    PROBE_INTERVALS_MOST,
    PROBES_REMEMBERED,
    Reach,
    next_probe_interval,
    next_reach,
)

MS = 1_000_000  # nanoseconds


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
    reach.probed(4, start)
    assert reach.known(start + PROBE_EVERY_NS) == 4
    assert reach.known(start + PROBE_EVERY_NS + 1) is None  # the base interval ran out


def test_the_base_interval_is_twenty_delays_where_that_is_longer_than_100_ms() -> None:
    reach = Reach(10 * MS)  # 20 delays: 200 ms
    reach.probed(3, 0)
    assert reach.known(200 * MS) == 3
    assert reach.known(200 * MS + 1) is None


def test_confirming_probes_stretch_the_schedule_and_a_change_resets_it() -> None:
    reach, now = Reach(2 * MS), 0
    reach.probed(4, now)
    for interval in (1, 2, 4, PROBE_INTERVALS_MOST, PROBE_INTERVALS_MOST):
        # The last probe confirmed the reach: the next one is due `interval` base intervals on.
        now += PROBE_EVERY_NS
        assert reach.known(now) == 4
        now += (interval - 1) * PROBE_EVERY_NS
        assert reach.known(now) == 4
        now += 1
        assert reach.known(now) is None
        reach.probed(4, now)
    reach.probed(6, now + 1)  # more clients: the reach rises, probes come at the base again
    assert reach.known(now + 1 + PROBE_EVERY_NS) == 6
    assert reach.known(now + 2 + PROBE_EVERY_NS) is None


def test_a_probe_long_after_the_last_starts_the_reach_anew() -> None:
    reach = Reach(2 * MS)
    reach.probed(8, 0)
    reach.probed(1, PROBES_REMEMBERED * PROBE_EVERY_NS)  # remembered: halfway down
    assert reach.known(PROBES_REMEMBERED * PROBE_EVERY_NS) == 4
    later = 3 * PROBES_REMEMBERED * PROBE_EVERY_NS
    reach.probed(1, later)  # forgotten: the probe's own size
    assert reach.known(later) == 1
