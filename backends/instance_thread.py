"""`InstanceThread`: the one thread an instance's batches run on, in order.

The event loop hands each call over through a queue and awaits a plain asyncio future that the
thread settles with `call_soon_threadsafe`. That is what `run_in_executor` does, without its
concurrent future, condition variable and the callbacks that chain one future to the other:
measured on the 2-core machine, a round trip costs about 25 us of CPU instead of 75.

With an `InlineRule`, a call whose size has measured fast (`backends.inline`) runs inline on
the event loop instead, while the thread is idle, so calls still run one at a time and in order.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from backends.inline import BatchTimes, InlineRule

_T = TypeVar("_T")
_STOP = None  # the queue's last item: the thread returns


class InstanceClosedError(RuntimeError):
    """A call after `close`, or one still queued when `close(cancel_pending=True)` ran."""


class InstanceThread:
    """A daemon thread running the calls given to `run`, one at a time, in arrival order."""

    def __init__(self, name: str, inline: InlineRule | None = None) -> None:
        # None: every call on the thread (calls that wait on I/O, such as a Python model's).
        self._times = None if inline is None else BatchTimes(inline)
        self._busy = 0  # calls given to the thread that it has not reported done
        self._running_inline = False
        self._calls: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._closed = False
        self._cancel_pending = False  # set by close(cancel_pending=True): queued calls fail
        # Daemon, so that a thread blocked on its queue never holds the interpreter's exit; and
        # closed at exit, before the interpreter stops daemon threads, so that a batch running
        # then finishes instead of its thread being stopped inside the framework's code.
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()
        atexit.register(self._close_at_exit)

    @property
    def name(self) -> str:
        return self._thread.name

    @property
    def running_inline(self) -> bool:
        """Whether a call runs inline on the event loop now (the loop waits for it)."""
        return self._running_inline

    async def run(self, function: Callable[..., _T], *args: Any, size: int = 1) -> _T:
        """`function(*args)` on this thread; its result or its exception, here. A caller
        cancelled before the thread takes the call skips it; one cancelled while it runs drops
        the result. `size` (a batch's rows) keys the inline rule's measurements; a call of
        size 0 always runs on the thread and is not measured."""
        if self._closed:
            raise InstanceClosedError(f"thread '{self.name}' is closed")
        times = self._times
        if times is not None and size and not self._busy and times.inline(size):
            start_ns = time.monotonic_ns()
            self._running_inline = True
            try:
                return function(*args)
            finally:
                self._running_inline = False
                times.record_inline(size, time.monotonic_ns() - start_ns)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._busy += 1
        self._calls.put((loop, future, function, args, size))
        return await future

    def keep_on_thread(self) -> None:
        """Run every call on the thread from now on, whatever the inline rule measured."""
        self._times = None

    def close(self, *, cancel_pending: bool = False) -> None:
        """Stop taking calls and wait for the thread: queued calls still run, or, with
        `cancel_pending`, fail with InstanceClosedError; the running one always finishes."""
        atexit.unregister(self._close_at_exit)
        self._closed = True
        self._cancel_pending = cancel_pending
        self._calls.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _close_at_exit(self) -> None:
        self.close(cancel_pending=True)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not _STOP:
            self._one(*call)
            del call  # the batch's arrays go before the next wait, not after it

    def _one(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        function: Callable[..., Any],
        args: tuple[Any, ...],
        size: int,
    ) -> None:
        result: Any = None
        error: BaseException | None = None
        timed: tuple[int, int] | None = None
        if future.done():  # cancelled while queued (a read of a flag the loop sets)
            pass
        elif self._cancel_pending:
            error = InstanceClosedError(f"thread '{self.name}' closed before the call ran")
        else:
            cpu_ns, wall_ns = time.thread_time_ns(), time.monotonic_ns()
            try:
                result = function(*args)
            except BaseException as exc:  # the caller gets every exception, as it would inline
                error = exc
            timed = (time.thread_time_ns() - cpu_ns, time.monotonic_ns() - wall_ns)
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
            loop.call_soon_threadsafe(self._settle, future, result, error, size, timed)

    def _settle(
        self,
        future: asyncio.Future[Any],
        result: Any,
        error: BaseException | None,
        size: int,
        timed: tuple[int, int] | None,
    ) -> None:
        # On the loop, once the thread is done with the call (even one its caller left).
        self._busy -= 1
        if self._times is not None and size and timed is not None and error is None:
            self._times.record_threaded(size, *timed)
        if future.done():  # the caller was cancelled
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
