"""A batch loop that a fault of its own does not stop.

A batcher's loop runs for the life of its model version; a bug in it (not in a batch: an
executor's error fails that batch's requests only) would end it, and leave every request queued
then or later waiting for good. `supervise` runs it again instead: it logs the fault, has the
batcher fail the requests it held (they were never executed), pauses `FAULT_PAUSE_S` (a fault
that recurs at once cannot spin the event loop), and starts the loop anew.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

_log = logging.getLogger(__name__)

FAULT_PAUSE_S = 0.1


async def supervise(
    name: str, run: Callable[[], Coroutine[Any, Any, None]], fail_held: Callable[[], None]
) -> None:
    """Run `run()` until it returns or is cancelled; after each fault, `fail_held()`, pause,
    and run it again. `name` names the model in the log."""
    while True:
        try:
            await run()
            return
        except Exception:
            _log.exception(
                "model '%s': the batch loop failed; the requests it held fail, and it starts "
                "again in %.1f s",
                name,
                FAULT_PAUSE_S,
            )
            fail_held()
            await asyncio.sleep(FAULT_PAUSE_S)
