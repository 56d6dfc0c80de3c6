"""The event loop's thread first: in each of Convoy's serving processes, every thread but the one
that runs the event loop (gRPC's I/O threads, executors, model instances' threads, ONNX Runtime's
pools) runs under Linux's SCHED_BATCH policy, and so do the Python model processes it starts.

The event loop's thread is a serving process's one serial resource: every request's decode,
batching and answer runs on it. gRPC's core hands it each message through threads of its own,
which wake thousands of times a second; under SCHED_OTHER a thread that wakes on the core where
the loop runs may take that core at once (wake-up preemption), and the loop waits, runnable.
Measured on 2 cores with the load generator beside the server (mlp, gRPC streaming at c = 32):
the loop's thread was switched out against its will 6,240 times a second. SCHED_BATCH is the
scheduler's policy for threads that need their share of CPU but not a core at the instant they
wake: a woken SCHED_BATCH thread waits for a free core or the end of the running thread's slice
instead of preempting it. Its share of CPU (its nice value and weight) stays what it was.

What it costs: when every core is busy, a helper thread that wakes waits a few milliseconds at
most instead of running at once. On a machine with an idle core nothing changes: a woken thread
runs there either way.

`loop_first` (on the event loop's thread, around what the process serves) puts every other
thread of the process under SCHED_BATCH, and again every `SWEEP_S` for threads started since (a
thread that the loop's thread starts inherits its policy). A Python model's worker process puts
itself under SCHED_BATCH as it starts (its threads inherit it). The environment's own choice
rules: a process started under a policy other than SCHED_OTHER (`chrt`, a container runtime's)
is left as it is, and `CONVOY_LOOP_FIRST=0` leaves every policy alone. Off Linux there is no
SCHED_BATCH and nothing changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterator, Mapping

SWEEP_S = 2.0  # how often the threads started since the last sweep are put under SCHED_BATCH
SWITCH = "CONVOY_LOOP_FIRST"  # "0": leave every thread's policy as it is
_TASKS = "/proc/self/task"


class LoopFirst:
    """Keeps the event loop's thread under SCHED_OTHER and the process's other threads under
    SCHED_BATCH; made on the loop's thread."""

    def __init__(self) -> None:
        self._loop_thread = threading.get_native_id()

    @classmethod
    def begin(cls, environ: Mapping[str, str]) -> LoopFirst | None:
        """On the event loop's thread: every other thread of the process under SCHED_BATCH
        now; None, changing nothing, when `environ` turns it off, the OS has no SCHED_BATCH or
        the loop's thread runs under another policy than SCHED_OTHER."""
        if environ.get(SWITCH, "1").strip() == "0" or not hasattr(os, "SCHED_BATCH"):
            return None
        try:
            if os.sched_getscheduler(0) != os.SCHED_OTHER:
                return None
        except OSError:
            return None
        first = cls()
        first.sweep()
        return first

    def sweep(self) -> int:
        """Put each thread of the process but the loop's that runs under SCHED_OTHER under
        SCHED_BATCH; how many were."""
        moved = 0
        for name in os.listdir(_TASKS):
            thread = int(name)
            if thread == self._loop_thread:
                continue
            try:
                if os.sched_getscheduler(thread) == os.SCHED_OTHER:
                    os.sched_setscheduler(thread, os.SCHED_BATCH, os.sched_param(0))
                    moved += 1
            except OSError:  # it ended meanwhile
                continue
        return moved

    async def keep(self) -> None:
        """Sweep every `SWEEP_S`, until cancelled."""
        while True:
            await asyncio.sleep(SWEEP_S)
            self.sweep()


@contextlib.contextmanager
def loop_first(environ: Mapping[str, str]) -> Iterator[None]:
    """While it is entered, on the event loop's thread: every other thread of the process under
    SCHED_BATCH, now and every `SWEEP_S` (nothing when `LoopFirst.begin` declines)."""
    first = LoopFirst.begin(environ)
    sweeps = None if first is None else asyncio.get_running_loop().create_task(first.keep())
    try:
        yield
    finally:
        if sweeps is not None:
            sweeps.cancel()
