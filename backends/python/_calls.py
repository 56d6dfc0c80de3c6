"""`Questions`: what a python model asks the server while its batch runs, answered on the way.

`exec` runs a request on another model (on the event loop, through the `ModelCaller`) and
answers its outputs; a decoupled `exec` opens a `CallStream` instead, whose responses the model
pulls one by one ("next") and may cancel ("cancel"): cancelling ends the called request's
stream, so the called model's `request.is_cancelled()` turns true. `is_cancelled` answers
whether a request of the running batch was cancelled by its caller. Each answer is the worker's
("called", call, ...) reply. A worker's plain `exec` calls run side by side (`call_aside`), and
its decoupled calls' streams are pulled side by side (`next_aside`): each is answered when it
finishes or its response comes, while the batch's other messages are read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Protocol

import numpy as np

from backends.base import response_parameters
from backends.errors import MODEL_ERROR_CODES, ModelError
from backends.python._local import LocalWorker
from backends.python._process import WorkerProcess
from backends.python._server_channel import WorkerFailure

# One response of a called model's stream: (outputs or None, its error or None, final).
Streamed = tuple[dict[str, Any] | None, ModelError | None, bool]
_CANCELLED = "the request was cancelled by its caller"
_NO_CALLS = "this server does not serve calls to other models from this model"
# The messages of a running batch that are the model's questions (the rest are its replies).
QUESTIONS = frozenset({"call", "next", "cancel", "is_cancelled"})
LATE_ANSWER_S = 60.0  # how long a call's answer may take to reach a worker busy reading it


# The model loading API (`pb_utils.load_model`, `unload_model`, `is_model_ready`): a request
# (op, model, ...) -> {"value": ...} or {"error": message}; blocking, for a model's threads.
ModelControl = Callable[[dict[str, Any]], dict[str, Any]]


class ModelCaller(Protocol):
    """How a model's `InferenceRequest.exec` reaches another model: (model, version "" =
    newest, inputs, output names, parameters). Both run on the event loop."""

    def __call__(
        self,
        model: str,
        version: str,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        parameters: dict[str, Any],
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """The outputs of the model's one response; raises with the reason it failed: a
        `ModelError` with the code the caller's `TritonError` takes (any other: INTERNAL)."""
        ...

    def stream(
        self,
        model: str,
        version: str,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        parameters: dict[str, Any],
    ) -> AsyncIterator[Streamed]:
        """Each response as the model sends it, the last one final; raises with the reason
        the request could not run (a `ModelError`, as `__call__` does)."""
        ...


def payload_of(outputs: dict[str, Any]) -> Any:
    """Outputs as a worker's payload: the arrays, paired with the response parameters (a JSON
    object string) when the called model set any."""
    parameters = response_parameters(outputs)
    plain = dict(outputs)
    return plain if parameters is None else (plain, json.dumps(dict(parameters)))


def error_payload(error: Exception) -> tuple[str, int]:
    """A call's error as the caller's `TritonError` is made: its message, and the code the
    `ModelCaller` gave it (`ModelError`; any other failure is INTERNAL)."""
    code = error.code if isinstance(error, ModelError) else "INTERNAL"
    return str(error), MODEL_ERROR_CODES.index(code)


class CallStream:
    """One decoupled `exec`: a task on the event loop takes the called model's responses and
    queues them for the thread that answers the model's "next", or hands the next one to the
    answer that waits for it (`next_or_later`)."""

    def __init__(self, source: AsyncIterator[Streamed], loop: asyncio.AbstractEventLoop) -> None:
        self._items: queue.SimpleQueue[tuple[Any, bool]] = queue.SimpleQueue()
        self._lock = threading.Lock()  # the pump (on the loop) and the answering thread
        self._later: Callable[[tuple[Any, bool]], None] | None = None
        self._task = asyncio.run_coroutine_threadsafe(self._pump(source), loop)

    async def _pump(self, source: AsyncIterator[Streamed]) -> None:
        try:
            async for outputs, error, final in source:
                if outputs is not None:
                    await self._put((payload_of(outputs), final))
                else:
                    await self._put((None if error is None else error_payload(error), final))
                if final:
                    return
            await self._put(("the called model ended its stream without a final response", True))
        except asyncio.CancelledError:
            await asyncio.shield(self._put((_CANCELLED, True)))
            raise
        except Exception as exc:  # the request could not run (queue full, model not ready ...)
            await self._put((error_payload(exc), True))
        finally:
            # A cancel that lands while a response is handed over (not in the source's own
            # wait) leaves the source suspended: close it, so that the called request ends
            # now and its model sees is_cancelled(), not whenever the source is collected.
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _put(self, item: tuple[Any, bool]) -> None:
        with self._lock:
            later, self._later = self._later, None
            if later is None:
                self._items.put(item)
        if later is not None:  # an answer waits for it: sent off the loop
            await asyncio.to_thread(later, item)

    def next(self, deadline_ns: int) -> tuple[Any, bool]:
        """The next response's payload and whether it is the final one."""
        try:
            return self._items.get(timeout=max(deadline_ns - time.monotonic_ns(), 0) / 1e9)
        except queue.Empty:
            raise WorkerFailure("did not return in time", timed_out=True) from None

    def next_or_later(self, later: Callable[[tuple[Any, bool]], None]) -> tuple[Any, bool] | None:
        """The next response now if it came already; else None, and `later` gets it when it
        comes (one waits at a time: the model pulls a stream's responses in order)."""
        with self._lock:
            try:
                return self._items.get_nowait()
            except queue.Empty:
                self._later = later
                return None

    def cancel(self) -> None:
        """End the called request (its stream's consumer goes away); thread-safe."""
        self._task.cancel()


class Questions:
    """Answers one instance's model; used by the thread that runs its batch (and, in process,
    by the model's own threads), one question at a time."""

    def __init__(self, caller: ModelCaller | None) -> None:
        self._caller = caller  # None: `exec` answers with an error response
        self.loop: asyncio.AbstractEventLoop | None = None  # where the caller runs
        self._batch: int | None = None  # the running batch, while one runs
        # Whether request i of the running batch was cancelled by its caller (None: unknown).
        self._cancelled: Callable[[int], bool] | None = None
        self._streams: dict[int, CallStream] = {}  # the running batch's open streams, by call
        # The running batch's calls running aside (`call_aside`), until they are answered.
        self._aside: set[concurrent.futures.Future[None]] = set()

    def answer(self, question: tuple[Any, ...], deadline_ns: int) -> tuple[Any, ...]:
        """The reply to ("call" | "next" | "cancel" | "is_cancelled", batch, call, ...); raises
        WorkerFailure when the deadline passes first."""
        kind, _, call = question[:3]
        if kind == "call":
            if question[8]:
                return ("called", call, self._open(call, question))
            return ("called", call, self._call(question, deadline_ns))
        if kind == "next":
            stream = self._streams.get(call)
            if stream is None:
                return ("called", call, "the call's stream has ended", True)
            payload, final = stream.next(deadline_ns)
            if final:
                del self._streams[call]
            return ("called", call, payload, final)
        if kind == "cancel":  # what the stream still yields ends with an error saying so
            stream = self._streams.get(call)
            if stream is not None:
                stream.cancel()
            return ("called", call, None)
        return ("called", call, self.cancelled_in(int(question[1]), int(question[3])))

    def running(self, batch: int, cancelled: Callable[[int], bool] | None) -> None:
        """`batch` runs now; `cancelled(i)` says whether its request i was cancelled."""
        self._batch, self._cancelled = batch, cancelled

    def cancelled_in(self, batch: int, index: int) -> bool:
        """Whether request `index` of `batch` was cancelled by its caller (False once the batch
        is over); thread-safe."""
        cancelled = self._cancelled
        return batch == self._batch and cancelled is not None and cancelled(index)

    def next_aside(
        self, question: tuple[Any, ...], send: Callable[[tuple[Any, ...]], None]
    ) -> None:
        """A ("next", batch, call) question of a worker: answered now when the stream's next
        response came already, else by `send` when it comes (the caller reads the batch's next
        messages meanwhile, so that streams are pulled side by side)."""
        call = question[2]
        stream = self._streams.get(call)
        if stream is None:
            send(("called", call, "the call's stream has ended", True))
            return

        def answer(item: tuple[Any, bool]) -> None:
            if item[1]:
                self._streams.pop(call, None)
            send(("called", call, *item))

        item = stream.next_or_later(answer)
        if item is not None:
            answer(item)

    def call_aside(
        self, question: tuple[Any, ...], send: Callable[[tuple[Any, ...]], None]
    ) -> None:
        """Run a plain ("call", ...) question's `exec` on the event loop without waiting; its
        ("called", call, ...) answer goes to `send` once it finished, from a thread of the
        loop's executor (the caller reads the batch's next messages meanwhile)."""
        call = question[2]
        if self._caller is None or self.loop is None:
            send(("called", call, _NO_CALLS))
            return
        caller, arguments = self._caller, self._arguments(question)

        async def run() -> None:
            try:
                payload = payload_of(await caller(*arguments))
            except Exception as exc:  # the called model's error, as Triton returns it to the caller
                payload = error_payload(exc)
            await asyncio.to_thread(send, ("called", call, payload))

        future = asyncio.run_coroutine_threadsafe(run(), self.loop)
        self._aside.add(future)
        future.add_done_callback(self._aside.discard)

    def replies(
        self, worker: WorkerProcess | LocalWorker, batch: int, deadline_ns: int
    ) -> Iterator[tuple[Any, ...]]:
        """The batch's replies from `worker`; the model's questions (calls to other models,
        whether a request was cancelled) are answered on the way."""
        for reply in worker.replies(batch, deadline_ns):
            if reply[0] in QUESTIONS:
                self.answer_in(worker, reply, deadline_ns)
            else:
                yield reply

    def answer_in(
        self, worker: WorkerProcess | LocalWorker, question: tuple[Any, ...], deadline_ns: int
    ) -> None:
        """Answer one of `worker`'s questions: a plain call runs aside and a stream's next
        response is sent when it comes (calls go side by side), the rest at once."""
        if question[0] == "call" and not question[8]:
            self.call_aside(question, lambda answer: _send_late(worker, answer))
        elif question[0] == "next":
            self.next_aside(question, lambda answer: _send_late(worker, answer))
        else:
            worker.send(self.answer(question, deadline_ns), deadline_ns)

    def end_batch(self) -> None:
        """Cancel the streams the batch left open and the calls still running aside (their
        callers are gone)."""
        for stream in self._streams.values():
            stream.cancel()
        self._streams.clear()
        for future in list(self._aside):
            future.cancel()
        self._batch, self._cancelled = None, None

    def _arguments(self, question: tuple[Any, ...]) -> tuple[Any, ...]:
        _, _, _, model, version, inputs, output_names, parameters = question[:8]
        version_text = "" if int(version) < 0 else str(version)
        return str(model), version_text, inputs, list(output_names), dict(parameters)

    def _open(self, call: int, question: tuple[Any, ...]) -> Any:
        if self._caller is None or self.loop is None:
            return _NO_CALLS
        self._streams[call] = CallStream(self._caller.stream(*self._arguments(question)), self.loop)
        return True  # opened: the model pulls its responses

    def _call(self, question: tuple[Any, ...], deadline_ns: int) -> Any:
        """Run one `exec` on the event loop and wait (within the batch's deadline): the outputs,
        or the reason it failed, for the model's error response."""
        if self._caller is None or self.loop is None:
            return _NO_CALLS
        future: concurrent.futures.Future[dict[str, Any]] = asyncio.run_coroutine_threadsafe(
            self._caller(*self._arguments(question)), self.loop
        )
        try:
            outputs = future.result(timeout=max(deadline_ns - time.monotonic_ns(), 0) / 1e9)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise WorkerFailure("did not return in time", timed_out=True) from None
        except Exception as exc:  # the called model's error, as Triton returns it to the caller
            return error_payload(exc)
        return payload_of(outputs)


def _send_late(worker: WorkerProcess | LocalWorker, answer: tuple[Any, ...]) -> None:
    """A call's answer, sent once it finished: a worker that has gone meanwhile (its batch
    failed, and the failure is the batch's to report) or that no longer takes it is left."""
    with contextlib.suppress(WorkerFailure):
        worker.send(answer, time.monotonic_ns() + int(LATE_ANSWER_S * 1e9))
