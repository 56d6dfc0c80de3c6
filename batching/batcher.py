"""`Batcher`: the one coroutine per model version that feeds queued requests to free instances.

The queue, the wake-up event and the idle-instance pool belong to the event loop, so no locks
are needed. Without a dynamic batcher each execution carries exactly one request, as in Triton.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from batching.errors import BatcherClosedError
from batching.messages import ExecutionRecord, Executor, RequestResult, TensorMap

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    inputs: TensorMap
    batch_size: int  # the request's own batch dimension; 1 for a non-batching model
    enqueue_ns: int
    future: asyncio.Future[RequestResult]


class Batcher:
    """Queues requests for one model version and runs them on the first free instance."""

    def __init__(
        self,
        name: str,
        executors: Sequence[Executor],
        observer: Callable[[ExecutionRecord], None] | None = None,
    ) -> None:
        if not executors:
            raise ValueError(f"batcher '{name}' needs at least one executor")
        self._name = name
        self._executors = tuple(executors)
        self._observer = observer
        self._closed = False
        self._in_flight = 0  # requests accepted and not yet answered

    async def start(self) -> None:
        self._queue: deque[_Pending] = deque()
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._idle: asyncio.Queue[Executor] = asyncio.Queue()
        for executor in self._executors:
            self._idle.put_nowait(executor)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task = asyncio.create_task(self._run(), name=f"batcher:{self._name}")

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    async def infer(self, inputs: TensorMap, batch_size: int) -> RequestResult:
        """Queue one request and wait for its result; cancelling the caller dequeues it."""
        if self._closed:
            raise BatcherClosedError(f"model '{self._name}' is no longer accepting requests")
        future: asyncio.Future[RequestResult] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(inputs, max(batch_size, 1), time.monotonic_ns(), future))
        self._in_flight += 1
        self._drained.clear()
        self._wake.set()
        try:
            return await future
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._drained.set()

    async def stop(self, timeout_s: float) -> None:
        """Refuse new requests, let accepted ones finish (bounded), then stop the loop."""
        self._closed = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drained.wait(), timeout_s)
        self._loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._loop_task
        for pending in self._queue:
            if not pending.future.done():
                pending.future.set_exception(
                    BatcherClosedError(f"model '{self._name}' stopped before the request ran")
                )
        self._queue.clear()

    async def _run(self) -> None:
        while True:
            while not self._queue:
                self._wake.clear()
                await self._wake.wait()
            executor = await self._idle.get()
            batch = self._take_batch()
            if not batch:
                self._idle.put_nowait(executor)
                continue
            task = asyncio.create_task(self._execute(executor, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take_batch(self) -> list[_Pending]:
        # Requests whose caller went away (cancelled RPC) are dropped here, unexecuted.
        while self._queue:
            pending = self._queue.popleft()
            if not pending.future.done():
                return [pending]
        return []

    async def _execute(self, executor: Executor, batch: list[_Pending]) -> None:
        start_ns = time.monotonic_ns()
        batch_size = sum(p.batch_size for p in batch)
        try:
            outcome = await executor.execute(batch[0].inputs)
        except Exception as exc:  # the batch loop never dies: fail only this batch
            _log.warning("model '%s': execution failed: %s", self._name, exc)
            self._report(ExecutionRecord(batch_size, len(batch), 0, 0, 0, succeeded=False))
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc)
            return
        finally:
            self._idle.put_nowait(executor)
        self._report(
            ExecutionRecord(
                batch_size,
                len(batch),
                outcome.compute_input_ns,
                outcome.compute_infer_ns,
                outcome.compute_output_ns,
                succeeded=True,
            )
        )
        for pending in batch:
            if not pending.future.done():  # a cancelled caller's result is dropped
                pending.future.set_result(
                    RequestResult(
                        outputs=outcome.outputs,
                        queue_ns=start_ns - pending.enqueue_ns,
                        compute_input_ns=outcome.compute_input_ns,
                        compute_infer_ns=outcome.compute_infer_ns,
                        compute_output_ns=outcome.compute_output_ns,
                    )
                )

    def _report(self, record: ExecutionRecord) -> None:
        if self._observer is not None:
            self._observer(record)
