"""`InFlight`: the count of requests in flight and the bounded wait for none."""

import asyncio

from batching import InFlight


async def test_wait_idle_returns_when_the_last_request_leaves_and_is_bounded() -> None:
    tracker = InFlight()
    assert await tracker.wait_idle(0.01)  # nothing in flight

    async def request(delay_s: float) -> None:
        with tracker.counted():
            await asyncio.sleep(delay_s)

    running = [asyncio.create_task(request(d)) for d in (0.02, 0.05)]
    await asyncio.sleep(0)
    assert tracker.count == 2
    assert not await tracker.wait_idle(0.01)  # bounded: both still run
    assert await tracker.wait_idle(1.0)
    assert tracker.count == 0
    await asyncio.gather(*running)


async def test_a_failing_request_still_leaves() -> None:
    tracker = InFlight()
    try:
        with tracker.counted():
            raise ValueError("boom")
    except ValueError:
        pass
    assert tracker.count == 0 and await tracker.wait_idle(0.01)


async def test_a_waiter_that_gives_up_leaves_the_others_waiting() -> None:
    tracker = InFlight()
    done = asyncio.Event()

    async def request() -> None:
        with tracker.counted():
            await done.wait()

    running = asyncio.create_task(request())
    await asyncio.sleep(0)
    patient = asyncio.create_task(tracker.wait_idle(1.0))
    assert not await tracker.wait_idle(0.01)  # gives up while the other still waits
    done.set()
    assert await patient
    await running
    assert await tracker.wait_idle(0.01)  # and a later drain starts afresh


def test_on_idle_is_called_each_time_the_count_falls_to_zero() -> None:
    calls: list[int] = []
    tracker = InFlight(on_idle=lambda: calls.append(tracker.count))
    with tracker.counted():
        with tracker.counted():
            pass
        assert calls == []  # one still in flight
    assert calls == [0]
    try:
        with tracker.counted():
            raise ValueError("boom")
    except ValueError:
        pass
    assert calls == [0, 0]  # a failed request leaves too
