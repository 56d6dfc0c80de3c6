"""`IdlePoll`: the event loop polls for its window after the last answer, and no longer than
that or than the next request's arrival."""

import asyncio
import time

import pytest

from server.contract.idle_poll import IdlePoll, poll_window_us


class _Load:
    """The requests in flight as the poll sees them, and how often it looked."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.looks = 0

    def busy(self) -> bool:
        self.looks += 1
        return self.in_flight > 0


async def test_the_loop_polls_through_the_window_then_sleeps() -> None:
    load = _Load()
    poll = IdlePoll(20_000, load.busy)  # 20 ms
    started_s = time.monotonic()
    poll.idle()
    assert poll.polling
    while poll.polling:
        await asyncio.sleep(0.005)  # the loop sleeps in select unless something polls
    polled_s = time.monotonic() - started_s
    assert 0.019 <= polled_s < 1.0
    # A look per turn of the loop: far more turns than the four sleeps of 5 ms would make.
    assert load.looks > 20
    looks = load.looks
    await asyncio.sleep(0.03)
    assert load.looks == looks  # asleep: nothing polls after the window


async def test_a_request_in_flight_ends_the_poll_at_once() -> None:
    load = _Load()
    poll = IdlePoll(10_000_000, load.busy)  # 10 s: only the request can end it
    poll.idle()
    await asyncio.sleep(0)
    assert poll.polling
    load.in_flight = 1
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not poll.polling


async def test_idle_again_while_polling_extends_the_window_with_one_poller() -> None:
    load = _Load()
    poll = IdlePoll(30_000, load.busy)
    poll.idle()
    await asyncio.sleep(0.02)
    poll.idle()  # the window now ends 30 ms from here
    turns_before = load.looks
    await asyncio.sleep(0.02)
    assert poll.polling
    # One poller: a second idle() starts no second chain of polls (two would look twice a turn).
    looks = load.looks
    for _ in range(10):
        await asyncio.sleep(0)
    assert 5 <= load.looks - looks <= 12 and looks > turns_before
    while poll.polling:
        await asyncio.sleep(0.005)


async def test_a_window_of_zero_never_polls() -> None:
    load = _Load()
    poll = IdlePoll(0, load.busy)
    poll.idle()
    assert not poll.polling
    await asyncio.sleep(0.01)
    assert load.looks == 0


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="-1 us"):
        IdlePoll(-1, lambda: False)


@pytest.mark.parametrize(
    ("cores", "workers", "window_us"),
    [(2, 0, 300), (16, 0, 300), (1, 0, 0), (2, 1, 0), (16, 4, 0)],
)
def test_the_core_process_polls_only_beside_a_free_core_and_without_workers(
    cores: int, workers: int, window_us: int
) -> None:
    assert poll_window_us(300, cores, workers) == window_us
    assert poll_window_us(0, cores, workers) == 0
