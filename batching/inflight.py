"""`InFlight`: how many requests were accepted and not yet answered, and a wait for none left
(the graceful drain of a batcher, an ensemble, or the whole server). Event-loop owned."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class InFlight:
    """A counter, and a future that a wait for it to reach zero makes and its last request
    settles: counting costs no more than the count when nobody waits, as on every request."""

    def __init__(self, on_idle: Callable[[], object] | None = None) -> None:
        self.count = 0  # requests inside `counted()`
        self._idle: asyncio.Future[None] | None = None  # while something waits for zero
        self._on_idle = on_idle  # called each time the count falls to zero

    def start(self) -> None:
        """Kept for the owners' start(): the future is made on the loop by the first wait."""

    def counted(self) -> InFlight:
        """One request in flight for as long as the `with` block runs (the tracker is its own
        context manager: a generator-based one costs microseconds on every request)."""
        return self

    def __enter__(self) -> None:
        self.count += 1

    def __exit__(self, *exc_info: object) -> None:
        self.count -= 1
        if self.count == 0:
            if self._on_idle is not None:
                self._on_idle()
            if self._idle is not None:
                if not self._idle.done():
                    self._idle.set_result(None)
                self._idle = None

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait (bounded) until nothing is in flight; True if that happened in time."""
        if self.count == 0:
            return True
        if self._idle is None:
            self._idle = asyncio.get_running_loop().create_future()
        try:
            # Shielded: one waiter's timeout leaves the future to the others.
            await asyncio.wait_for(asyncio.shield(self._idle), timeout_s)
        except TimeoutError:
            return False
        return True
