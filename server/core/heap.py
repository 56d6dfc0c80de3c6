"""`HeapFreezer`: the garbage collector's full passes, kept off the server's long-lived heap.

Every gRPC call leaves a small reference cycle behind (grpc.aio's lookup of the call's method
handler: the call's details and a closure), so under load the collector runs all the time, and
every tenth of its middle passes is a full one, which walks every object it tracks: about 56,000
on a server holding the mlp examples, 16 ms of the event loop's time each, about once a second
at 32 requests in flight (measured with `gc.callbacks`). Objects frozen with `gc.freeze()` are
left out of every pass, so a full one then takes a fraction of a millisecond.

The heap is frozen once the server serves (its imports, configs and loaded models), and again
whenever the loaded models have changed: first a full collection with nothing frozen, so that
what an unloaded model left in reference cycles is reclaimed, then everything alive is frozen.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable

CHECK_S = 5.0  # how often the loaded models are checked for a change


class HeapFreezer:
    """Freezes the heap at start and after each change of `changes()` (a counter the repository
    advances when the loaded models change); on the event loop."""

    def __init__(self, changes: Callable[[], int], check_s: float = CHECK_S) -> None:
        self._changes = changes
        self._check_s = check_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        settle()
        self._task = asyncio.create_task(self._watch(self._changes()), name="heap-freezer")

    async def stop(self) -> None:
        """Stop watching and give the collector the whole heap back."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        gc.unfreeze()

    async def _watch(self, seen: int) -> None:
        while True:
            await asyncio.sleep(self._check_s)
            now = self._changes()
            if now != seen:
                seen = now
                settle()


def settle() -> None:
    """A full collection over the whole heap, then everything that survived it frozen."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
