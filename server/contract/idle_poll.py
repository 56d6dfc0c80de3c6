"""`IdlePoll`: a serving process's event loop keeps polling, instead of sleeping, for a short
window after its last request in flight is answered.

An event loop with nothing to do blocks in `epoll_wait`, and its CPU goes idle. On a virtual
machine whose guest halts an idle CPU at once (Linux's `haltpoll` cpuidle driver with
`guest_halt_poll_ns` at 0, as on the 2-core machine Convoy is measured on), waking that CPU
again takes a trip through the hypervisor, and each request at low concurrency pays it: the
next request arrives while the loop's CPU is halted. Measured there with perf_analyzer at
c = 1 against the bare grpc.aio server (`scripts/canned_grpc.py --work-us N`): a handler that
holds the loop for 100 us, busy or asleep, raised the p50 by 230-300 us, not 100, and the time
between one answer and the next request's arrival went from 163 to 290-350 us. With the loop
polling for 300 us after each answer, that time stayed at 150 us and the 100 us handler cost
its 100 us.

The window starts when nothing is left in flight and ends at its length or as soon as a request
is in flight again: a loop that has work never polls, and a busy server (many requests in
flight, the loop rarely idle) never does either. What it costs: up to the window's length of
one core's time per quiet spell, taken only after an answer; a server with no traffic polls
nothing. `--idle-poll-us 0` turns it off.

Each turn of the poll yields the CPU first (`sched_yield`), so that any thread waiting for that
CPU runs before it: pinned to one core, without the yield gRPC's threads (under SCHED_BATCH,
`server.contract.scheduling`) waited behind the poll, and mlp at c = 1 answered in 472 us with
it against 228 us without; with the yield, 231-260 us. It gains nothing there either, so the core
process polls only on two or more usable cores, and not with front-end workers, where a request
crosses two processes' loops: polling in both took the p50 from 437-473 to 330-408 us at 1.3x the
CPU per request, and workers are there for throughput per core (`poll_window_us`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

DEFAULT_WINDOW_US = 300  # above the ~150 us from one answer to the next request at c = 1


def poll_window_us(asked_us: int, usable_cores: int, frontend_workers: int) -> int:
    """The window the core process's loop polls for: `asked_us` (--idle-poll-us), or 0 where
    polling costs more than it saves: on fewer than two usable cores, or with front-end
    workers."""
    return asked_us if usable_cores >= 2 and not frontend_workers else 0


class IdlePoll:
    """Polls the running event loop for `window_us` after `idle()`, while `busy()` is false.
    Owned by the event loop's thread; a window of 0 makes `idle()` a no-op."""

    def __init__(self, window_us: int, busy: Callable[[], bool]) -> None:
        if window_us < 0:
            raise ValueError(f"an idle poll window of {window_us} us")
        self._window_ns = window_us * 1000
        self._busy = busy
        self._until_ns = 0
        # Kept from the first poll: under CPython 3.11 each `asyncio.get_running_loop()` makes a
        # getpid system call, and at c = 1 a poll starts after every answer.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._polling = False

    @property
    def polling(self) -> bool:
        return self._polling

    def idle(self) -> None:
        """Nothing is in flight now: poll for the window from now on."""
        if not self._window_ns:
            return
        self._until_ns = time.monotonic_ns() + self._window_ns
        if not self._polling:
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._polling = True
            self._loop.call_soon(self._poll)

    def _poll(self) -> None:
        # A ready callback makes the loop's next wait for I/O a poll that returns at once; each
        # turn first yields the CPU to any thread waiting for it there (a busy machine's own
        # work goes first: pinned to one core, gRPC's threads waited behind the poll without it).
        if not self._busy() and time.monotonic_ns() < self._until_ns:
            os.sched_yield()
            assert self._loop is not None  # set by `idle` before the first turn
            self._loop.call_soon(self._poll)
        else:
            self._polling = False
