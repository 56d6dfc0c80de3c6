"""`CoreClient`: the `Core` of a front-end worker process, served by the core process over one
channel (`server.workers.messages`). Inputs are written once into this worker's input arena;
outputs are copied out of its output arena, whose blocks go back to the core right away."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proto import grpc_service_pb2 as pb
from proto import model_config_pb2 as mc
from server.contract.core import CoreInfo, LogValue, StreamItem
from server.contract.datatypes import BY_WIRE
from server.contract.errors import (
    SERVER_STOPPING,
    ServerError,
    ServerStoppingError,
    UnavailableError,
)
from server.contract.model_io import ModelIO
from server.contract.requests import InferInput, InferRequest
from server.contract.responses import InferResponse
from server.frontend import SerializedAnswer
from server.workers import calls, messages
from server.workers.arena import Allocator, Arena
from server.workers.frames import Channel, Message

_log = logging.getLogger(__name__)

CORE_GONE = "the core process is gone; this front-end worker is stopping"


@dataclass(slots=True)
class _Pending:
    """One request in flight: where its answers go, and its input blocks to free at the end."""

    answers: asyncio.Queue[Message] | asyncio.Future[Message]
    inputs: list[int] = field(default_factory=list)  # offsets in the input arena
    abandoned: bool = False  # its caller went away: answers only give their blocks back


class CoreClient:
    """The core as a worker's front ends call it; `welcome` must be awaited first."""

    def __init__(self, inputs: Arena, outputs: Arena) -> None:
        self._inputs = inputs
        self._allocator = Allocator(inputs.size_bytes)
        self._outputs = outputs
        self.channel = Channel(self._on_message, self._on_lost)
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._calls: dict[int, asyncio.Future[Message]] = {}
        self._released: list[int] = []  # output blocks to give back with the next message
        self._stopping = False  # the server stops: requests not sent yet are refused here
        # Kept: under CPython 3.11 each `asyncio.get_running_loop()` makes a getpid system call.
        self._loop = asyncio.get_running_loop()
        self._welcome: asyncio.Future[Message] = self._loop.create_future()
        self.lost: asyncio.Future[None] = self._loop.create_future()
        self.info = CoreInfo(tracing=False, cuda_shared_memory=False)
        self.on_health: Callable[[bool], object] = lambda serving: None
        self.on_logs: Callable[[dict[str, LogValue]], object] = lambda settings: None
        self.on_stopping: Callable[[], object] = lambda: None  # the server drains

    async def welcome(self) -> Message:
        """The core's first message: the front end's settings and what the core serves."""
        message = await self._welcome
        self.info = CoreInfo(tracing=message[2], cuda_shared_memory=message[3])
        return message

    def ready(self, grpc_port: int, http_port: int) -> None:
        self.channel.send((messages.READY, grpc_port, http_port))

    # --- inference ---

    async def infer(self, request: InferRequest) -> InferResponse:
        future: asyncio.Future[Message] = self._loop.create_future()
        message = await self._answer(self._send(request, False, future), future)
        response = messages.decode_answer(message, self._outputs, self._release_output)
        assert response is not None  # a unary answer always has outputs
        return response

    async def infer_serialized(
        self, data: bytes, deadline_ns: int, load_report: bool
    ) -> SerializedAnswer:
        """A unary ModelInfer as its client sent it, decoded and answered by the core
        (`server.frontend.grpc.forward`)."""
        future: asyncio.Future[Message] = self._loop.create_future()
        rid = self._send_serialized(
            data,
            future,
            lambda rid, placement: messages.encode_infer_serialized(
                rid, deadline_ns, load_report, placement
            ),
        )
        message = await self._answer(rid, future)
        return messages.decode_serialized(message, self._outputs, self._release_output)

    async def infer_http(
        self,
        model: str,
        version: str,
        body: bytes,
        header_length: str | None,
        load_report: bool,
    ) -> SerializedAnswer:
        """An HTTP infer request's body as its client sent it, decoded and answered by the
        core (`server.frontend.http.forward`)."""
        future: asyncio.Future[Message] = self._loop.create_future()
        rid = self._send_serialized(
            body,
            future,
            lambda rid, placement: messages.encode_http_serialized(
                rid, model, version, header_length, load_report, placement
            ),
        )
        message = await self._answer(rid, future)
        return messages.decode_serialized(message, self._outputs, self._release_output)

    async def infer_serialized_stream(
        self, data: bytes, deadline_ns: int, load_format: str | None
    ) -> AsyncIterator[bytes]:
        """One request of a ModelStreamInfer as its client sent it; its responses as the core
        serialized them (`server.frontend.grpc.forward`)."""
        answers: asyncio.Queue[Message] = asyncio.Queue()
        rid = self._send_serialized(
            data,
            answers,
            lambda rid, placement: messages.encode_stream_serialized(
                rid, deadline_ns, load_format, placement
            ),
        )
        try:
            # The core sends a failure in-band serialized, as any response.
            while (message := _streamed(await answers.get(), False)) is not None:
                yield messages.decode_serialized(message, self._outputs, self._release_output).data
                if message[2]:
                    return
        finally:
            self._abandon(rid)

    def _send_serialized(
        self,
        data: bytes,
        answers: asyncio.Queue[Message] | asyncio.Future[Message],
        encode: Callable[[int, messages.Placement], Message],
    ) -> int:
        """Send a request as its client sent it (`encode` makes its message from its id and
        where its bytes are: the input arena, freed when its final answer comes, else inline);
        its id."""
        rid, pending = self._pending_request(answers)
        placement = messages.place_bytes(data, self._inputs, self._allocator)
        if placement[0] == messages.ARENA:
            pending.inputs.append(placement[1])
        self._pending[rid] = pending
        self.channel.send(encode(rid, placement))
        return rid

    async def _answer(self, rid: int, future: asyncio.Future[Message]) -> Message:
        """Request `rid`'s one answer; its error raised, the core told if the caller leaves."""
        try:
            message = await future
        except asyncio.CancelledError:
            self._abandon(rid)
            raise
        if message[0] == messages.FAILED:
            raise messages.failed_error(message)
        return message

    async def infer_streamed(
        self, request: InferRequest
    ) -> InferResponse | AsyncIterator[StreamItem]:
        # Whether the model answers once is the core's to know: its answers come as a stream.
        return self.infer_stream(request)

    async def infer_stream(self, request: InferRequest) -> AsyncIterator[StreamItem]:
        answers: asyncio.Queue[Message] = asyncio.Queue()
        rid = self._send(request, True, answers)
        try:
            while (message := _streamed(await answers.get(), True)) is not None:
                yield messages.stream_item(message, self._outputs, self._release_output)
                if message[2]:
                    return
        finally:
            self._abandon(rid)

    def _abandon(self, rid: int) -> None:
        """The caller of request `rid` went away: the core is told, its answers are dropped."""
        pending = self._pending.get(rid)
        if pending is not None and not pending.abandoned:
            pending.abandoned = True
            self.channel.send((messages.CANCEL, rid))

    def _send(
        self,
        request: InferRequest,
        stream: bool,
        answers: asyncio.Queue[Message] | asyncio.Future[Message],
    ) -> int:
        rid, pending = self._pending_request(answers)
        placements = [self._place(tensor, pending) for tensor in request.inputs]
        self._pending[rid] = pending
        self.channel.send(messages.encode_infer(rid, stream, request, placements))
        return rid

    def _pending_request(
        self, answers: asyncio.Queue[Message] | asyncio.Future[Message]
    ) -> tuple[int, _Pending]:
        """A new request's id and its entry (kept once its message is made), where its answers
        go; refused when the core is gone or the server stops."""
        if self.lost.done():
            raise UnavailableError(CORE_GONE)
        if self._stopping:
            raise ServerStoppingError(SERVER_STOPPING)
        return next(self._ids), _Pending(answers)

    def _place(self, tensor: InferInput, pending: _Pending) -> messages.Placement:
        """Where one input's bytes go: its shared memory region, or the input arena (freed when
        the request's final answer comes), else inline."""
        if tensor.location is not None:
            return (messages.SHARED, tensor.location)
        datatype = BY_WIRE[tensor.datatype]
        placement = messages.place(tensor.array, datatype, self._inputs, self._allocator)
        if placement[0] == messages.ARENA:
            pending.inputs.append(placement[1])
        return placement

    def _release_output(self, offset: int) -> None:
        """Give an output block back; one message carries a loop iteration's releases."""
        if not self._released:
            self._loop.call_soon(self._send_releases)
        self._released.append(offset)

    def _send_releases(self) -> None:
        released, self._released = self._released, []
        if not self.lost.done():
            self.channel.send((messages.RELEASE, tuple(released)))

    # --- control calls ---

    async def _call(self, method: str, *args: Any) -> Any:
        if self.lost.done():
            raise UnavailableError(CORE_GONE)
        cid = next(self._ids)
        future: asyncio.Future[Message] = self._loop.create_future()
        self._calls[cid] = future
        self.channel.send((messages.CALL, cid, method, calls.encode_args(method, args)))
        try:
            message = await future
        finally:
            self._calls.pop(cid, None)
        if message[0] == messages.REFUSED:
            raise messages.error_of(message[2], message[3])
        return calls.decode_result(method, message[2])

    async def server_ready(self) -> bool:
        return bool(await self._call("server_ready"))

    async def model_ready(self, name: str, version: str) -> bool:
        return bool(await self._call("model_ready", name, version))

    async def check_model(self, name: str) -> None:
        await self._call("check_model", name)

    async def model_metadata(self, name: str, version: str) -> pb.ModelMetadataResponse:
        result: pb.ModelMetadataResponse = await self._call("model_metadata", name, version)
        return result

    async def model_config(self, name: str, version: str) -> mc.ModelConfig:
        result: mc.ModelConfig = await self._call("model_config", name, version)
        return result

    async def model_io(self, name: str, version: str) -> ModelIO:
        result: ModelIO = await self._call("model_io", name, version)
        return result

    async def model_statistics(self, name: str, version: str) -> pb.ModelStatisticsResponse:
        result: pb.ModelStatisticsResponse = await self._call("model_statistics", name, version)
        return result

    async def repository_index(self, ready_only: bool) -> pb.RepositoryIndexResponse:
        result: pb.RepositoryIndexResponse = await self._call("repository_index", ready_only)
        return result

    async def load_model(
        self, name: str, config: mc.ModelConfig | None, files: Mapping[str, bytes]
    ) -> None:
        await self._call("load_model", name, config, files)

    async def unload_model(self, name: str, unload_dependents: bool) -> None:
        await self._call("unload_model", name, unload_dependents)

    async def system_shm_status(self, name: str) -> pb.SystemSharedMemoryStatusResponse:
        result: pb.SystemSharedMemoryStatusResponse = await self._call("system_shm_status", name)
        return result

    async def system_shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        await self._call("system_shm_register", name, key, offset, byte_size)

    async def system_shm_unregister(self, name: str) -> None:
        await self._call("system_shm_unregister", name)

    async def cuda_shm_status(self, name: str) -> pb.CudaSharedMemoryStatusResponse:
        result: pb.CudaSharedMemoryStatusResponse = await self._call("cuda_shm_status", name)
        return result

    async def cuda_shm_register(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        await self._call("cuda_shm_register", name, raw_handle, device_id, byte_size)

    async def cuda_shm_unregister(self, name: str) -> None:
        await self._call("cuda_shm_unregister", name)

    async def log_settings(self, changes: Mapping[str, LogValue]) -> dict[str, LogValue]:
        result: dict[str, LogValue] = await self._call("log_settings", changes)
        return result

    # --- messages from the core ---

    def _on_message(self, message: Message) -> None:
        kind = message[0]
        if (
            kind == messages.SERIALIZED
            or kind == messages.ANSWER
            or kind == messages.FAILED
            or kind == messages.DONE
        ):
            rid = message[1]
            pending = self._pending.get(rid)
            if pending is None:
                return
            if kind == messages.DONE or message[2]:  # final: its inputs are no longer read
                del self._pending[rid]
                for offset in pending.inputs:
                    self._allocator.release(offset)
            if pending.abandoned:  # its output blocks go back
                if kind == messages.SERIALIZED:
                    messages.decode_serialized(message, self._outputs, self._release_output)
                elif kind == messages.ANSWER:
                    messages.decode_answer(message, self._outputs, self._release_output)
                return
            answers = pending.answers
            if isinstance(answers, asyncio.Queue):
                answers.put_nowait(message)
            elif not answers.done():
                answers.set_result(message)
        elif kind == messages.RESULT or kind == messages.REFUSED:
            future = self._calls.get(message[1])
            if future is not None and not future.done():
                future.set_result(message)
        elif kind == messages.PING:
            self.channel.send((messages.PONG,))
        elif kind == messages.HEALTH:
            self.on_health(message[1])
        elif kind == messages.LOGS:
            self.on_logs(message[1])
        elif kind == messages.STOPPING:
            # Every request sent before this answer reaches the core ahead of it, and is served.
            self._stopping = True
            self.channel.send((messages.STOPPED,))
            self.on_stopping()
        elif kind == messages.WELCOME:
            self._welcome.set_result(message)

    def _on_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            _log.error("lost the core process: %s", exc)
        gone = messages.encode_failed(0, UnavailableError(CORE_GONE))
        for pending in self._pending.values():
            if isinstance(pending.answers, asyncio.Queue):
                pending.answers.put_nowait(gone)
            elif not pending.answers.done():
                pending.answers.set_result(gone)
        self._pending.clear()
        for future in self._calls.values():
            if not future.done():
                future.set_result((messages.REFUSED, 0, UnavailableError.__name__, CORE_GONE))
        if not self._welcome.done():
            self._welcome.set_exception(ServerError(CORE_GONE))
        if not self.lost.done():
            self.lost.set_result(None)


def _streamed(message: Message, in_band: bool) -> Message | None:
    """A stream's next message from the core: None once the stream is done; a refusal or a
    failure of the request as a whole raised (`in_band`: a FAILED message may instead be one
    response's failure, which the stream carries)."""
    kind = message[0]
    if kind == messages.DONE:
        return None
    if kind == messages.FAILED and not (in_band and message[5]):
        raise messages.failed_error(message)
    return message
