"""`WorkerLink`: the core's side of one front-end worker's channel. It decodes each message
(`server.workers.messages`), serves it with the core's own `Core`, and answers: outputs go into
the worker's output arena, errors keep their class and message."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from server.contract.core import Core
from server.contract.errors import InternalError, ServerError, UnavailableError
from server.contract.responses import InferResponse
from server.frontend import SerializedAnswer
from server.frontend.grpc import serve_serialized, serve_serialized_stream
from server.frontend.http import serve_http
from server.workers import calls, messages
from server.workers.arena import Allocator, Arena
from server.workers.frames import Channel, Message

_log = logging.getLogger(__name__)

CANCELLED = "the request was cancelled by its client"


class WorkerLink:
    """The core's side of one worker's channel."""

    def __init__(
        self,
        core: Core,
        inputs: Arena,
        outputs: Arena,
        on_logs: Callable[[dict[str, Any]], None],
    ) -> None:
        self._core = core
        self._inputs = inputs  # the worker writes requests' inputs here
        self._outputs = outputs  # the core writes responses' outputs here
        self._allocator = Allocator(outputs.size_bytes)
        self._on_logs = on_logs
        self._tasks: dict[int, asyncio.Task[None]] = {}
        # Kept: under CPython 3.11 each `asyncio.get_running_loop()` makes a getpid system call.
        self._loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[tuple[int, int]] = self._loop.create_future()
        self.stopped: asyncio.Future[None] = self._loop.create_future()
        self.lost: asyncio.Future[None] = self._loop.create_future()
        self.answered_s = 0.0  # when the worker's last PONG came (monotonic; 0: none yet)
        self.channel = Channel(self._on_message, self._on_lost)

    def send(self, message: Message) -> None:
        if not self.lost.done():
            self.channel.send(message)

    def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        self._inputs.close()  # unmapped once the last view of it (a queued request's) is gone
        self._outputs.close()

    def _on_message(self, message: Message) -> None:
        kind = message[0]
        if kind == messages.INFER_SERIALIZED:
            _, rid, deadline_ns, load_report = message[:4]
            serve: Coroutine[Any, Any, None] = self._serve_once(
                rid,
                message[4:],
                lambda data: serve_serialized(self._core, data, deadline_ns, load_report),
            )
            self._tasks[rid] = self._loop.create_task(serve)
        elif kind == messages.HTTP_SERIALIZED:
            _, rid, model, version, header_length, load_report = message[:6]
            serve = self._serve_once(
                rid,
                message[6:],
                lambda body: serve_http(
                    self._core, model, version, body, header_length, load_report
                ),
            )
            self._tasks[rid] = self._loop.create_task(serve)
        elif kind == messages.STREAM_SERIALIZED:
            rid = message[1]
            serve = self._serve_serialized_stream(rid, message)
            self._tasks[rid] = self._loop.create_task(serve)
        elif kind == messages.INFER:
            rid, stream, request = messages.decode_infer(message, self._inputs)
            serve = self._serve_stream(rid, request) if stream else self._serve(rid, request)
            self._tasks[rid] = self._loop.create_task(serve)
        elif kind == messages.RELEASE:
            for offset in message[1]:
                self._allocator.release(offset)
        elif kind == messages.CANCEL:
            task = self._tasks.get(message[1])
            if task is not None:
                task.cancel()
        elif kind == messages.CALL:
            self._loop.create_task(self._call(*message[1:]))
        elif kind == messages.READY and not self.ready.done():
            self.ready.set_result((message[1], message[2]))
        elif kind == messages.STOPPED and not self.stopped.done():
            self.stopped.set_result(None)
        elif kind == messages.PONG:
            self.answered_s = time.monotonic()

    def _on_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            _log.warning("front-end worker channel failed: %s", exc)
        if not self.lost.done():
            self.lost.set_result(None)
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("the worker closed its channel at start"))

    async def _serve(self, rid: int, request: Any) -> None:
        try:
            response = await self._core.infer(request)
            self.send(messages.encode_answer(rid, True, response, self._place(response)))
        except BaseException as exc:
            self._fail(rid, exc, request)
        finally:
            del self._tasks[rid]

    async def _serve_once(
        self,
        rid: int,
        placement: Message,
        serve: Callable[[bytes | memoryview], Awaitable[SerializedAnswer]],
    ) -> None:
        """A request its worker passed on as it came (its bytes at `placement`), answered once."""
        try:
            self._answer_serialized(
                rid, await serve(messages.placed_bytes(placement, self._inputs))
            )
        except BaseException as exc:
            self._fail(rid, exc)
        finally:
            del self._tasks[rid]

    def _answer_serialized(self, rid: int, answer: SerializedAnswer, final: bool = True) -> None:
        placement = messages.place_bytes(answer.data, self._outputs, self._allocator)
        self.send(messages.encode_serialized(rid, answer, placement, final))

    async def _serve_serialized_stream(self, rid: int, message: Message) -> None:
        _, _, deadline_ns, load_format = message[:4]
        ended = False  # the request's last response was sent

        def put(answer: bytes, final: bool) -> None:
            nonlocal ended
            self._answer_serialized(rid, SerializedAnswer(answer), final)
            ended = final

        try:
            data = messages.placed_bytes(message[4:], self._inputs)
            await serve_serialized_stream(self._core, data, deadline_ns, load_format, put)
            if not ended:  # its final flag came alone, with nothing to send
                self.send((messages.DONE, rid))
        except BaseException as exc:
            self._fail(rid, exc)
        finally:
            del self._tasks[rid]

    async def _serve_stream(self, rid: int, request: Any) -> None:
        final = False
        try:
            outcome = await self._core.infer_streamed(request)
            if isinstance(outcome, InferResponse):  # the model answers once
                self.send(messages.encode_answer(rid, True, outcome, self._place(outcome)))
                return
            async for item, final in outcome:
                if isinstance(item, ServerError):
                    self.send(messages.encode_failed(rid, item, final, in_band=True))
                else:
                    placements = () if item is None else self._place(item)
                    self.send(messages.encode_answer(rid, final, item, placements))
            if not final:
                self.send((messages.DONE, rid))
        except BaseException as exc:
            self._fail(rid, exc, request)
        finally:
            del self._tasks[rid]

    def _fail(self, rid: int, exc: BaseException, request: Any = None) -> None:
        """Request `rid` (`request`, when it was decoded here) failed as a whole: its worker gets
        the error (and frees its inputs). A cancellation is the worker's own (its client left)
        or the core's shutdown."""
        if isinstance(exc, ServerError):
            error: ServerError = exc
        elif isinstance(exc, asyncio.CancelledError):
            error = UnavailableError(CANCELLED)
        elif isinstance(exc, Exception):
            if request is None:  # a serialized one
                _log.exception("a request passed on by a front-end worker failed")
            else:
                _log.exception(
                    "request '%s' for model '%s' failed", request.request_id, request.model
                )
            error = InternalError(f"internal error: {exc}")
        else:  # KeyboardInterrupt, SystemExit: not the request's to report
            raise exc
        self.send(messages.encode_failed(rid, error))

    def _place(self, response: InferResponse) -> list[messages.Placement]:
        """Each output into the worker's output arena (freed when the worker says so), else
        inline; one the core wrote to a shared memory region carries nothing."""
        return [
            (messages.SHARED, None)
            if output.array is None
            else messages.place(output.array, output.spec.datatype, self._outputs, self._allocator)
            for output in response.outputs
        ]

    async def _call(self, cid: int, method: str, args: Any) -> None:
        try:
            if method not in calls.CALLS:
                raise InternalError(f"unknown core call '{method}'")
            value = await getattr(self._core, method)(*calls.decode_args(method, args))
            self.send((messages.RESULT, cid, calls.encode_result(method, value)))
            if method == "log_settings" and args[0]:
                self._on_logs(value)
        except ServerError as exc:
            self.send((messages.REFUSED, cid, *messages.error_message(exc)))
        except Exception as exc:
            _log.exception("core call '%s' failed", method)
            self.send((messages.REFUSED, cid, InternalError.__name__, f"internal error: {exc}"))
