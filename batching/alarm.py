"""`Alarm`: what a batcher's loop sleeps on: woken by a change (an arrival, a free instance, a
grant) or at the nearest of its deadlines. Event-loop owned."""

from __future__ import annotations

import asyncio


class Alarm:
    """An event with at most one timer; `set` wakes the sleeper, `sleep` waits for the next."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    def set(self) -> None:
        self._event.set()

    async def sleep(self, now_ns: int, *deadlines_ns: int | None) -> None:
        """Until `set` or the nearest deadline (monotonic ns; None: no deadline)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        due = [d for d in deadlines_ns if d is not None]
        self._event.clear()
        if due:
            delay_s = max(min(due) - now_ns, 0) / 1e9
            self._timer = asyncio.get_running_loop().call_later(delay_s, self._event.set)
        await self._event.wait()
