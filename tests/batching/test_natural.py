"""Natural batching's rule, with explicit clocks: when a batcher without a queue delay waits for
batch-mates."""

from batching import BatchPolicy
from batching.natural import (
    NATURAL_DELAY_NS,
    RECHECK_WINDOWS,
    SATURATED,
    SMALL_BATCH,
    UNSATURATED,
    WINDOW_NS,
    NaturalBatching,
    natural_policy,
    waits,
)
from server.core.repository import parse_config

POLICY = BatchPolicy.from_config(
    parse_config('name: "m" max_batch_size: 8 dynamic_batching { }', "inline")
)


def test_waits_start_on_a_saturated_loop_whose_batches_are_small() -> None:
    assert waits(SATURATED, 1.0, 0)
    assert not waits(SATURATED - 0.01, 1.0, 0)  # the loop has time to spare
    assert not waits(1.0, SMALL_BATCH, 0)  # its front end already hands over batches


def test_waits_go_on_until_the_loop_has_time_or_a_window_without_them_is_due() -> None:
    assert waits(UNSATURATED, 6.0, 1)  # batching freed the loop: large batches, less busy
    assert not waits(UNSATURATED - 0.01, 6.0, 1)
    assert waits(1.0, 6.0, RECHECK_WINDOWS - 1)
    assert not waits(1.0, 6.0, RECHECK_WINDOWS)


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
    natural.sent(1)
    cpu.ns += WINDOW_NS // 2
    assert natural.forming(1_000 + WINDOW_NS - 1) is None  # not a whole window yet
    cpu.ns += WINDOW_NS // 2
    forming = natural.forming(1_000 + WINDOW_NS)  # busy all the window, batches of one
    assert forming is not None and forming.max_queue_delay_ns == NATURAL_DELAY_NS
    assert natural.waiting == 1
    start_ns = 1_000 + WINDOW_NS
    for window in range(1, RECHECK_WINDOWS):  # saturated on: the policy stays
        natural.sent(8)
        cpu.ns += WINDOW_NS
        assert natural.forming(start_ns + window * WINDOW_NS) is None
    cpu.ns += WINDOW_NS
    assert natural.forming(start_ns + RECHECK_WINDOWS * WINDOW_NS) is POLICY  # one window off
    assert natural.waiting == 0


def test_an_idle_loop_never_waits() -> None:
    cpu = Clock()
    natural = NaturalBatching(POLICY, cpu)
    for window in range(5):
        natural.sent(1)
        cpu.ns += WINDOW_NS // 10
        assert natural.forming(window * WINDOW_NS + 1) is None
    assert natural.waiting == 0
