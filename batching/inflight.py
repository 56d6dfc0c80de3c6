"""`InFlight`: how many requests were accepted and not yet answered, and a wait for none left
(the graceful drain of a batcher, an ensemble, or the whole server). Event-loop owned."""

from __future__ import annotations

import asyncio


class InFlight:
    """A counter with an idle event; `start()` makes the event on the running loop."""

    def __init__(self) -> None:
        self.count = 0  # requests inside `counted()`

    def start(self) -> None:
        self._idle = asyncio.Event()
        self._idle.set()

    def counted(self) -> InFlight:
        """One request in flight for as long as the `with` block runs (the tracker is its own
        context manager: a generator-based one costs microseconds on every request)."""
        return self

    def __enter__(self) -> None:
        self.count += 1
        if self.count == 1:
            self._idle.clear()

    def __exit__(self, *exc_info: object) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait (bounded) until nothing is in flight; True if that happened in time."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
