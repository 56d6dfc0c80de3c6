"""Natural batching's rule, with explicit clocks: when a batcher without a queue delay waits for
batch-mates."""

from batching import BatchPolicy
from batching.natural import (
    NATURAL_DELAY_NS,
    RECHECK_WINDOWS,
    SATURATED,
    SMALL_BATCH,
    START_WINDOWS,
    UNSATURATED,
    WINDOW_NS,
    NaturalBatching,
    Streak,
    natural_policy,
    next_streak,
)
from server.core.repository import parse_config

POLICY = BatchPolicy.from_config(
    parse_config('name: "m" max_batch_size: 8 dynamic_batching { }', "inline")
)


def test_waits_start_after_saturated_windows_in_a_row_whose_batches_are_small() -> None:
    streak = Streak()
    for count in range(1, START_WINDOWS):
        streak = next_streak(streak, SATURATED, 1.0, True)
        assert streak == Streak(saturated=count)
    assert next_streak(streak, SATURATED, 1.0, True) == Streak(waiting=1)
    # A window with time to spare, or with batches that are not small, starts the count again.
    assert next_streak(streak, SATURATED - 0.01, 1.0, True) == Streak()
    assert next_streak(streak, 1.0, SMALL_BATCH, True) == Streak()


def test_waits_go_on_until_the_loop_has_time_or_a_window_without_them_is_due() -> None:
    waiting = Streak(waiting=1)
    # Batching freed the loop, but not below the lower threshold: the waits go on.
    assert next_streak(waiting, UNSATURATED, 6.0, True) == Streak(waiting=2)
    assert next_streak(waiting, UNSATURATED - 0.01, 6.0, True) == Streak()
    assert (
        next_streak(Streak(waiting=RECHECK_WINDOWS - 1), 1.0, 6.0, True).waiting == RECHECK_WINDOWS
    )
    # Then one window without waits: if its batches are still small, the waits begin again.
    rechecking = next_streak(Streak(waiting=RECHECK_WINDOWS), 1.0, 6.0, True)
    assert rechecking == Streak(saturated=START_WINDOWS - 1)
    assert next_streak(rechecking, 1.0, 1.0, True) == Streak(waiting=1)
    assert next_streak(rechecking, 1.0, SMALL_BATCH, True) == Streak()


def test_the_natural_policy_waits_a_millisecond_up_to_the_reach() -> None:
    natural = natural_policy(POLICY)
    assert natural.max_queue_delay_ns == NATURAL_DELAY_NS
    assert natural.adaptive_delay
    assert natural.preferred_batch_sizes == POLICY.preferred_batch_sizes


class Clock:
    """The loop thread's CPU clock, moved by hand."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def test_windows_switch_the_policy_and_back() -> None:
    cpu = Clock()
    natural = NaturalBatching(POLICY, cpu)
    assert natural.forming(1_000) is None  # the first window begins
    now_ns = 1_000
    for _ in range(START_WINDOWS - 1):  # busy all the time, batches of one: counted
        natural.sent(1, 2)
        cpu.ns += WINDOW_NS // 2
        assert natural.forming(now_ns + WINDOW_NS - 1) is None  # not a whole window yet
        cpu.ns += WINDOW_NS // 2
        now_ns += WINDOW_NS
        assert natural.forming(now_ns) is None
    natural.sent(1, 2)
    cpu.ns += WINDOW_NS
    now_ns += WINDOW_NS
    forming = natural.forming(now_ns)
    assert forming is not None and forming.max_queue_delay_ns == NATURAL_DELAY_NS
    assert natural.streak == Streak(waiting=1)
    for _ in range(1, RECHECK_WINDOWS):  # saturated on: the policy stays
        natural.sent(8, 8)
        cpu.ns += WINDOW_NS
        now_ns += WINDOW_NS
        assert natural.forming(now_ns) is None
    natural.sent(8, 8)
    cpu.ns += WINDOW_NS
    assert natural.forming(now_ns + WINDOW_NS) is POLICY  # one window without waits
    assert natural.streak == Streak(saturated=START_WINDOWS - 1)


def test_an_idle_loop_never_waits() -> None:
    cpu = Clock()
    natural = NaturalBatching(POLICY, cpu)
    for window in range(5):
        natural.sent(1, 2)
        cpu.ns += WINDOW_NS // 10
        assert natural.forming(window * WINDOW_NS + 1) is None
    assert natural.streak == Streak()


def test_one_request_at_a_time_never_waits() -> None:
    """A lone client's batches have no batch-mates to wait for, however busy its loop reads (the
    idle poll keeps it busy between requests)."""
    streak = Streak()
    for _ in range(2 * START_WINDOWS):
        streak = next_streak(streak, 1.0, 1.0, False)
    assert streak == Streak()
    assert next_streak(Streak(waiting=3), 1.0, 1.0, False) == Streak()  # the waits end
    cpu = Clock()
    natural = NaturalBatching(POLICY, cpu)
    now_ns = 1_000
    natural.forming(now_ns)
    for _ in range(2 * START_WINDOWS):
        natural.sent(1, 1)
        cpu.ns += WINDOW_NS
        now_ns += WINDOW_NS
        assert natural.forming(now_ns) is None
    assert not natural.waiting
    natural.sent(1, 2)  # another request in flight once in the window: it counts
    cpu.ns += WINDOW_NS
    now_ns += WINDOW_NS
    natural.forming(now_ns)
    assert natural.streak == Streak(saturated=1)
