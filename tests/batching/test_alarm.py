"""The batcher's alarm: woken by `set` or at its deadline, never before it, under asyncio's loop
and uvloop (whose own timers count whole milliseconds: the alarm keeps a timer of its own)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from batching.alarm import Alarm

Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    return asyncio.run if request.param == "asyncio" else uvloop.run  # type: ignore[return-value]


def test_it_rings_at_its_deadline_and_never_before(run: Run) -> None:
    async def main() -> None:
        alarm = Alarm()
        for delay_ns in (300_000, 1_300_000, 2_000_000, 2_700_000):
            now_ns = time.monotonic_ns()
            await alarm.sleep(now_ns, None, now_ns + delay_ns, now_ns + 10 * delay_ns)
            assert time.monotonic_ns() - now_ns >= delay_ns
        alarm.close()

    run(main())


def test_set_wakes_it_and_a_deadline_it_woke_before_rings_no_more(run: Run) -> None:
    async def main() -> None:
        alarm = Alarm()
        loop = asyncio.get_running_loop()
        now_ns = time.monotonic_ns()
        loop.call_later(0.001, alarm.set)
        await alarm.sleep(now_ns, now_ns + 5_000_000_000)
        assert time.monotonic_ns() - now_ns < 4_000_000_000
        now_ns = time.monotonic_ns()
        loop.call_later(0.001, alarm.set)
        await alarm.sleep(now_ns, now_ns + 20_000_000)  # woken after 1 ms
        now_ns = time.monotonic_ns()
        loop.call_later(0.06, alarm.set)
        await alarm.sleep(now_ns)  # no deadline: the 20 ms one must not wake it
        assert time.monotonic_ns() - now_ns >= 50_000_000
        alarm.close()

    run(main())


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
def test_close_gives_its_timer_back(run: Run) -> None:
    async def main() -> None:
        before = len(os.listdir("/proc/self/fd"))
        alarms = [Alarm() for _ in range(20)]
        for alarm in alarms:
            now_ns = time.monotonic_ns()
            await alarm.sleep(now_ns, now_ns + 100_000)
        for alarm in alarms:
            alarm.close()
        assert len(os.listdir("/proc/self/fd")) <= before

    run(main())
