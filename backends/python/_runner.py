"""`BatchRunner`: a python model instance's batches on their way to its worker and back, from the
event loop, on the instance's thread, or inline on the loop (in process, when they measure fast)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from backends.base import ExecutionResult, Parameters, Response, TensorMap
from backends.errors import ExecutionError
from backends.inline import InlineRule
from backends.instance_thread import InstanceClosedError, InstanceThread
from backends.python._calls import QUESTIONS, Questions
from backends.python._config import InstanceSpec
from backends.python._local import LocalWorker
from backends.python._process import WorkerProcess
from backends.python._replies import Replies, ResponseSend, Streamed, finish
from backends.python._server_channel import WorkerFailure
from backends.python._settings import PythonSettings
from backends.python._supervisor import Supervisor

_T = TypeVar("_T")


class BatchRunner:
    """One instance's batches, on the worker that `workers` keeps.

    A batch for a worker process runs from the event loop, which sends it and reads its answer
    (or, for a decoupled model, each response) without blocking (`WorkerProcess.send_async`,
    `receive_async`): no thread hand-off, no second Python thread taking turns with the loop
    for the GIL. The instance's one executor thread does what blocks: restarting a worker,
    answering the model's calls to the server (business logic scripting, `is_cancelled`) while
    it reads the rest of that batch, and an in-process model's execute.
    """

    def __init__(
        self,
        model: InstanceSpec,
        settings: PythonSettings,
        workers: Supervisor,
        questions: Questions,
        replies: Replies,
    ) -> None:
        self._model = model
        self._settings = settings
        self._workers = workers
        self._questions = questions
        self._replies = replies
        self._batches = itertools.count()
        # In process, a batch that measured fast may run on the event loop instead (opt-in,
        # `convoy_inline_execute`), by the rule and bound of ONNX Runtime's batches. Its execute
        # holds the GIL for its Python, and meanwhile the loop waits for the GIL whether execute
        # runs on the thread or inline: only what releases it (ONNX Runtime's run, NumPy) runs
        # beside the loop. Measured on the 2-core machine (mlp's Triton-style model.py, batches
        # of about 30 at c = 32, taking about 300 us): inline served 7,468-7,723 against
        # 6,449-6,716 infer/s over HTTP and 4,293-4,405 against 3,498-3,990 over unary gRPC.
        self._executor = InstanceThread(  # the instance's thread
            model.instance, InlineRule() if settings.inline_execute else None
        )

    @property
    def running_inline(self) -> bool:
        """Whether a batch runs inline on the event loop now (the loop waits for it)."""
        return self._executor.running_inline

    def keep_on_thread(self) -> None:
        """Run every batch on the instance's thread from now on, whatever the inline rule
        measured."""
        self._executor.keep_on_thread()

    def close(self) -> None:
        """Close the instance's thread: what waits for it fails, what it runs finishes."""
        self._executor.close(cancel_pending=True)

    async def execute(
        self, requests: Sequence[TensorMap], parameters: Sequence[Parameters]
    ) -> ExecutionResult:
        """A batch of a model that is not decoupled (`PythonInstance.execute`)."""
        if self._settings.in_process:
            return await self._submit(self._run, requests, parameters, size=len(requests))
        # A worker's batch runs on the event loop, which waits for the answer without a thread.
        return await _to_the_end(self._run_async(requests, parameters))

    async def execute_decoupled(
        self,
        requests: Sequence[TensorMap],
        send: ResponseSend,
        parameters: Sequence[Parameters],
        cancelled: Callable[[int], bool] | None,
    ) -> ExecutionResult:
        """A decoupled model's batch (`PythonInstance.execute_decoupled`)."""
        if self._settings.in_process:
            emit = _from_thread(send)
            return await self._submit(self._run_decoupled, requests, emit, parameters, cancelled)
        # From the event loop, as `execute` runs a worker's batch: each response reaches `send`
        # as the loop reads it.
        return await _to_the_end(self._run_decoupled_async(requests, send, parameters, cancelled))

    async def _submit(self, run: Callable[..., _T], *args: Any, size: int = 0) -> _T:
        """`run(*args)` on the instance's thread, or inline when `size` (a batch's requests; 0:
        never inline) has measured fast and the model asks for it (`convoy_inline_execute`)."""
        self._questions.loop = asyncio.get_running_loop()
        try:
            return await self._executor.run(run, *args, size=size)
        except InstanceClosedError as exc:  # close() closes the thread: its refusal says it
            raise ExecutionError(f"{self._model.where()}: the instance is closed") from exc

    async def _run_async(
        self, requests: Sequence[TensorMap], parameters: Sequence[Parameters]
    ) -> ExecutionResult:
        """A worker's batch from the event loop, one at a time; what blocks (restarting a
        worker, answering the model's calls to the server) runs on the instance's thread."""
        async with self._workers.channel() as worker:
            if worker is None:  # being replaced, gone or closing: the thread waits for it
                return await self._submit(self._run, requests, parameters)
            return await self._run_held(worker, requests, parameters)

    async def _run_held(
        self,
        worker: WorkerProcess,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters],
    ) -> ExecutionResult:
        batch = next(self._batches)
        start_ns = time.monotonic_ns()
        deadline_ns = deadline_ns_after(self._settings.execute_timeout_s)
        try:
            message = self._replies.execute_message(batch, requests, parameters)
            await worker.send_async(message, deadline_ns)
            sent_ns = time.monotonic_ns()
            reply = await worker.reply_async(batch, deadline_ns)
            if reply[0] in QUESTIONS:  # the model calls the server: the thread reads on
                reply = await self._submit(self._answered_from, worker, batch, deadline_ns, reply)
        except WorkerFailure as failure:
            raise await self._submit(self._workers.recover, worker, failure) from None
        return self._replies.outcome(requests, reply, start_ns, sent_ns)

    async def _run_decoupled_async(
        self,
        requests: Sequence[TensorMap],
        send: ResponseSend,
        parameters: Sequence[Parameters],
        cancelled: Callable[[int], bool] | None,
    ) -> ExecutionResult:
        async with self._workers.channel() as worker:
            if worker is None:  # being replaced, gone or closing: the thread waits for it
                emit = _from_thread(send)
                return await self._submit(
                    self._run_decoupled, requests, emit, parameters, cancelled
                )
            return await self._run_decoupled_held(worker, requests, send, parameters, cancelled)

    async def _run_decoupled_held(
        self,
        worker: WorkerProcess,
        requests: Sequence[TensorMap],
        send: ResponseSend,
        parameters: Sequence[Parameters],
        cancelled: Callable[[int], bool] | None,
    ) -> ExecutionResult:
        batch, deadline_ns, streamed = self._begin_stream(requests, cancelled)
        try:
            message = self._replies.execute_message(batch, requests, parameters)
            await worker.send_async(message, deadline_ns)
            streamed.sent_ns = time.monotonic_ns()
            while not streamed.over:
                reply = await worker.reply_async(batch, deadline_ns)
                if reply[0] in QUESTIONS:  # the model calls the server: the thread reads on
                    emit = _from_thread(send)
                    stream_on = self._stream_on
                    await self._submit(stream_on, worker, batch, deadline_ns, streamed, emit, reply)
                    break
                if not self._replies.take(reply, streamed, send):
                    break
        except WorkerFailure as failure:
            try:
                error = await self._submit(self._workers.recover, worker, failure)
            except ExecutionError as closed:  # the instance closed meanwhile
                error = closed
            finish(streamed.finished, send, str(error))
        except ExecutionError as closed:  # the thread that reads on closed with the instance
            finish(streamed.finished, send, str(closed))
        finally:
            self._questions.end_batch()
        return streamed.result()

    # Everything below runs on the instance's executor thread.

    def _run(
        self, requests: Sequence[TensorMap], parameters: Sequence[Parameters]
    ) -> ExecutionResult:
        worker = self._workers.running()
        batch = next(self._batches)
        start_ns = time.monotonic_ns()
        deadline_ns = deadline_ns_after(self._settings.execute_timeout_s)
        try:
            worker.send(self._replies.execute_message(batch, requests, parameters), deadline_ns)
            sent_ns = time.monotonic_ns()
            reply = next(self._questions.replies(worker, batch, deadline_ns))
        except WorkerFailure as failure:
            raise self._workers.recover(worker, failure) from None
        finally:
            self._questions.end_batch()
        return self._replies.outcome(requests, reply, start_ns, sent_ns)

    def _answered_from(
        self, worker: WorkerProcess, batch: int, deadline_ns: int, question: tuple[Any, ...]
    ) -> tuple[Any, ...]:
        """The batch's reply, read after the model's first question (which the event loop
        read), answering it and the others on the way."""
        try:
            self._questions.answer_in(worker, question, deadline_ns)
            return next(self._questions.replies(worker, batch, deadline_ns))
        finally:
            self._questions.end_batch()

    def _run_decoupled(
        self,
        requests: Sequence[TensorMap],
        emit: ResponseSend,
        parameters: Sequence[Parameters],
        cancelled: Callable[[int], bool] | None,
    ) -> ExecutionResult:
        worker = self._workers.running()
        batch, deadline_ns, streamed = self._begin_stream(requests, cancelled)
        try:
            worker.send(self._replies.execute_message(batch, requests, parameters), deadline_ns)
            streamed.sent_ns = time.monotonic_ns()
            self._stream_on(worker, batch, deadline_ns, streamed, emit)
        except WorkerFailure as failure:
            finish(streamed.finished, emit, str(self._workers.recover(worker, failure)))
        finally:
            self._questions.end_batch()
        return streamed.result()

    def _begin_stream(
        self, requests: Sequence[TensorMap], cancelled: Callable[[int], bool] | None
    ) -> tuple[int, int, Streamed]:
        """A decoupled batch begins: its number, its deadline, its progress."""
        batch = next(self._batches)
        self._questions.running(batch, cancelled)
        deadline_ns = deadline_ns_after(self._settings.execute_timeout_s)
        return batch, deadline_ns, Streamed([False] * len(requests), time.monotonic_ns())

    def _stream_on(
        self,
        worker: WorkerProcess | LocalWorker,
        batch: int,
        deadline_ns: int,
        streamed: Streamed,
        emit: ResponseSend,
        question: tuple[Any, ...] | None = None,
    ) -> None:
        """A decoupled batch's messages until it is over, answering the model's questions on
        the way (first `question`, which the event loop read)."""
        if question is not None:
            self._questions.answer_in(worker, question, deadline_ns)
        replies = self._questions.replies(worker, batch, deadline_ns)
        while not streamed.over and self._replies.take(next(replies), streamed, emit):
            pass


def deadline_ns_after(timeout_s: float) -> int:
    """The monotonic clock's reading `timeout_s` from now."""
    return time.monotonic_ns() + int(timeout_s * 1e9)


def _from_thread(send: ResponseSend) -> ResponseSend:
    """`send`, for a thread to call: each call runs on the event loop that is running now."""
    loop = asyncio.get_running_loop()

    def emit(index: int, response: Response | None, final: bool) -> None:
        loop.call_soon_threadsafe(send, index, response, final)

    return emit


async def _to_the_end(batch: Coroutine[Any, Any, _T]) -> _T:
    """A batch that keeps the worker's channel to its end even when its caller leaves (its
    answer must be read before the next batch's): the caller's cancellation does not reach it,
    and what it raises after the caller left is read, not logged as never retrieved."""
    task = asyncio.ensure_future(batch)
    task.add_done_callback(_retrieved)
    return await asyncio.shield(task)


def _retrieved(batch: asyncio.Future[Any]) -> None:
    if not batch.cancelled():
        batch.exception()
