"""`Alarm`: what a batcher's loop sleeps on: woken by a change (an arrival, a free instance, a
grant) or at the nearest of its deadlines. Event-loop owned.

One plain future per sleep rather than an `asyncio.Event`, whose `wait` adds a waiter list
entry and a try/finally around its own future: the batcher sleeps about once per request.

The deadline rings on time. The event loop's own timers count whole milliseconds (uvloop rounds
a delay to the nearest one, asyncio's selector waits at least one), so a batch waiting out a
2 ms queue delay would leave 0-1 ms late, or, woken early, sleep again on a timer rounded to
nothing and spin the loop until it is due. On Linux an alarm rings through a timerfd of its own
(nanoseconds, read by the loop like a socket); elsewhere it falls back to the loop's timers.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import sys
import weakref
from collections.abc import Callable


class Alarm:
    """At most one sleeper and one timer; `set` wakes the sleeper. A `set` while nobody sleeps
    is dropped: the sleeper looks at the state it is woken for before it sleeps again. `close`
    gives its timer back (once its owner stops)."""

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None
        # The sleeper's, kept from its first sleep: under CPython 3.11 each
        # `asyncio.get_running_loop()` makes a getpid system call.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._clock: _TimerFd | None = None  # opened at the first sleep with a deadline
        self._armed = False

    def set(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def sleep(self, now_ns: int, *deadlines_ns: int | None) -> None:
        """Until `set` or the nearest deadline (monotonic ns; None: no deadline)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        due_ns = min((d for d in deadlines_ns if d is not None), default=None)
        if due_ns is not None:
            if self._clock is None:
                self._clock = _TimerFd.open(loop, self._rang)
            if self._clock is not None:
                self._clock.arm(due_ns)
                self._armed = True
            else:
                self._timer = loop.call_later(max(due_ns - now_ns, 0) / 1e9, self.set)
        elif self._armed and self._clock is not None:
            self._clock.arm(0)
            self._armed = False
        try:
            await waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._clock is not None:
            self._clock.close()
            self._clock = None

    def _rang(self) -> None:
        self._armed = False
        self.set()


_CLOCK_MONOTONIC = 1  # time.monotonic_ns's clock on Linux
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    """libc, its calls made holding the GIL (`PyDLL`): a timerfd call never blocks, and one
    that let the GIL go would hand it to a waiting thread (gRPC's poller) and wait for it back,
    on the event loop's thread, about once a batch."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.PyDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        ]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


class _TimerFd:
    """A timerfd on CLOCK_MONOTONIC that the event loop watches; `arm(0)` disarms it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop = loop
        self._fd = fd
        self._spec = _Itimerspec()
        self._closed = weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls, loop: asyncio.AbstractEventLoop, rang: Callable[[], None]) -> _TimerFd | None:
        """A timer calling `rang()` on the loop when it rings; None where there is none."""
        if _LIBC is None:
            return None
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        timer = cls(loop, fd)
        loop.add_reader(fd, timer._read, rang)
        return timer

    def arm(self, due_ns: int) -> None:
        """Ring at `due_ns` (monotonic), at once if it has passed; 0: never. Re-arming forgets
        a ring not yet read."""
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(max(due_ns, 1), 1_000_000_000) if due_ns else (0, 0)
        assert _LIBC is not None  # opened only with it
        _LIBC.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None)

    def close(self) -> None:
        if self._closed.alive:
            with contextlib.suppress(RuntimeError):  # the loop closed first: nothing to remove
                self._loop.remove_reader(self._fd)
            self._closed()

    def _read(self, rang: Callable[[], None]) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # re-armed after it rang: nothing to read any more
            return
        rang()
