"""`Alarm`: what a batcher's loop sleeps on: woken by a change (an arrival, a free instance, a
grant) or at the nearest of its deadlines. Event-loop owned.

One plain future per sleep rather than an `asyncio.Event`, whose `wait` adds a waiter list
entry and a try/finally around its own future: the batcher sleeps about once per request."""

from __future__ import annotations

import asyncio


class Alarm:
    """At most one sleeper and one timer; `set` wakes the sleeper. A `set` while nobody sleeps
    is dropped: the sleeper looks at the state it is woken for before it sleeps again."""

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def set(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def sleep(self, now_ns: int, *deadlines_ns: int | None) -> None:
        """Until `set` or the nearest deadline (monotonic ns; None: no deadline)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        due_ns = min((d for d in deadlines_ns if d is not None), default=None)
        if due_ns is not None:
            self._timer = loop.call_later(max(due_ns - now_ns, 0) / 1e9, self.set)
        try:
            await waiter
        finally:
            self._waiter = None
