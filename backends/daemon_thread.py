"""`on_daemon_thread`: blocking work awaited from the event loop on a daemon thread of its own.

For work that may block on something outside the server (a cloud store that stops answering, a
model's initialize, is_ready or finalize that hangs): asyncio's executor threads are joined as
the process exits, so a server stopped while one waited did not exit until the wait ended,
minutes later (or never: a model's process waits for the server to be gone before it exits); a
daemon thread is left behind instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


async def on_daemon_thread(function: Callable[..., _T], *args: object, name: str) -> _T:
    """`function(*args)` on a new daemon thread called `name`, in the caller's context (as
    `asyncio.to_thread` runs it), awaited; its outcome is dropped when the caller has left, or
    the loop has closed, by the time it ends."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    outcome: asyncio.Future[_T] = loop.create_future()

    def succeed(result: _T) -> None:
        if not outcome.done():  # else the caller was cancelled
            outcome.set_result(result)

    def fail(error: BaseException) -> None:
        if not outcome.done():
            outcome.set_exception(error)

    def run() -> None:
        try:
            result = context.run(function, *args)
        except BaseException as exc:  # handed to the caller, whatever it is
            deliver: Callable[[], None] = functools.partial(fail, exc)
        else:
            deliver = functools.partial(succeed, result)
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
            loop.call_soon_threadsafe(deliver)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await outcome
