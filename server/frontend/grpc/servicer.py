"""`InferenceServicer`: Triton's inference service; thin: protobuf -> domain call -> protobuf."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc

from proto import grpc_service_pb2 as pb
from proto import grpc_service_pb2_grpc as pb_grpc
from server.contract.core import Core
from server.contract.errors import SERVER_STOPPING, RestrictedError, ServerError
from server.contract.requests import InferOptions, InferRequest
from server.contract.settings import TRACE_HEADERS, RestrictedProtocol, TraceSettings
from server.frontend.forwarding import HeaderForwarding
from server.frontend.grpc.admin import AdminRpcs
from server.frontend.grpc.codec import decode_request
from server.frontend.grpc.edge import edge
from server.frontend.grpc.encode import encode_response_bytes
from server.frontend.grpc.forward import parse_request
from server.frontend.grpc.status import status_for
from server.frontend.grpc.stream import Outbox, stream_answers, stream_error
from server.frontend.orca import metadata_format, report_headers
from server.frontend.serialized import SerializedInfer

_log = logging.getLogger(__name__)


# The queue drops a request this long before its gRPC deadline, so that it is answered (and
# counted) as expired rather than cancelled by gRPC at the same instant; an answer that late
# could not reach the client in time anyway.
_DEADLINE_MARGIN_NS = 1_000_000


def deadline_ns(context: grpc.aio.ServicerContext) -> int:
    """When the queue drops the call's request (`time.monotonic_ns()`): its client's deadline,
    less the margin; 0: the client set none."""
    remaining_s = context.time_remaining()
    if remaining_s is None:
        return 0
    return time.monotonic_ns() + int(remaining_s * 1e9) - _DEADLINE_MARGIN_NS


def _for_error(data: bytes) -> pb.ModelInferRequest:
    """What a stream's in-band error names of a request: its model, version and id, when its
    bytes are a request at all."""
    try:
        return parse_request(data)
    except ServerError:
        return pb.ModelInferRequest()


def _trace_headers(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {
        key: value
        for key, value in (context.invocation_metadata() or ())
        if key in TRACE_HEADERS and isinstance(value, str)
    }


class InferenceServicer(AdminRpcs, pb_grpc.GRPCInferenceServiceServicer):
    """Every RPC of inference.GRPCInferenceService: health and inference here, the rest in
    `AdminRpcs`."""

    def __init__(
        self,
        core: Core,
        version: str,
        model_control: bool = False,
        restricted: Sequence[RestrictedProtocol] = (),
        trace: TraceSettings | None = None,
        *,
        name: str = "convoy",
        forward_pattern: str | None = None,
        share_header: str | None = None,
        forward: SerializedInfer | None = None,
    ) -> None:
        self._core = core
        # A front-end worker's way to pass unary ModelInfer calls on as their bytes.
        self._forward = forward
        self._name = name  # what server metadata reports (Triton's --id)
        self._version = version
        self._forwarding = HeaderForwarding(forward_pattern, share_header)
        self._model_control = model_control  # explicit mode: load and unload are allowed
        self._restricted = tuple(restricted)
        self._trace = trace or TraceSettings()
        # Calls begun before the drain and still being served, streams included; those begun
        # since are refused, and a stop does not wait for them.
        self.calls = 0
        self._draining = False
        self._readers: set[asyncio.Task[None]] = set()  # streams' readers of requests

    def drain(self) -> None:
        """The server stops: each open stream reads no more requests, sends the answers of those
        it has, then ends (OK); a stream opened from now on is refused (UNAVAILABLE)."""
        self._draining = True
        for reader in list(self._readers):
            reader.cancel()

    def _check_restricted(self, group: str, context: grpc.aio.ServicerContext) -> None:
        rules = [rule for rule in self._restricted if group in rule.groups]
        if not rules:
            return
        metadata = {key.lower(): value for key, value in (context.invocation_metadata() or ())}
        for rule in rules:
            if metadata.get(rule.header) != rule.value:
                raise RestrictedError(f"This API is restricted, expecting header '{rule.header}'")

    @edge
    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: Any
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    @edge
    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: Any
    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await self._core.server_ready())

    @edge
    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Any
    ) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(
            ready=await self._core.model_ready(request.name, request.version)
        )

    @edge
    async def ModelInfer(self, request: bytes, context: Any, form: str | None = None) -> bytes:
        """The request comes as its client sent it, and the answer goes serialized
        (`encode_response_bytes`; `inference_handler` registers both so). `form`: the format
        of the load report a balancer asks for in the call's metadata (None: none), which
        `inference_handler` reads as it looks the call's handler up. Where the servicer passes
        calls on (`forward`), the bytes go to the core as they are, unless the call's metadata
        must reach the request (tracing, forwarded headers)."""
        forward = self._forward
        if forward is not None and not self._core.info.tracing and not self._forwarding.active:
            answer = await forward.infer_serialized(request, deadline_ns(context), form is not None)
            if trailers := report_headers(answer.load, form):
                context.set_trailing_metadata(trailers)
            return answer.data
        parsed = parse_request(request)
        response = await self._core.infer(self._decoded(parsed, context, form is not None))
        if trailers := report_headers(response.load, form):
            context.set_trailing_metadata(trailers)
        return encode_response_bytes(response, parsed.id)

    def _decoded(
        self, request: pb.ModelInferRequest, context: Any, load_report: bool = False
    ) -> InferRequest:
        """The engine's request (`decode_request`): when the core traces, with its trace headers
        and when its decoding began and ended; with the headers forwarded to the model, when
        forwarding is on; `load_report`: the response is to carry the model's load."""
        tracing = self._core.info.tracing
        return decode_request(
            request,
            deadline_ns(context),
            load_report=load_report,
            adjust=self._forwarded_headers(context) if self._forwarding.active else None,
            carrier=_trace_headers(context) if tracing else None,
            traced_since_ns=time.monotonic_ns() if tracing else None,
        )

    def _forwarded_headers(self, context: Any) -> Callable[[InferOptions], InferOptions]:
        return lambda options: self._forwarding.apply(options, context.invocation_metadata() or ())

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[bytes], context: Any
    ) -> AsyncIterator[pb.ModelStreamInferResponse | bytes]:
        """Many requests in flight per stream; each answer (or error, in-band) as it is ready.
        Requests come as their client sent them (`inference_handler` registers the method so);
        where the servicer passes calls on (`forward`), each goes to the core as its bytes and
        its answers come back serialized, as ModelInfer's do."""
        if self._restricted:
            try:
                self._check_restricted("inference", context)
            except RestrictedError as exc:
                await context.abort(status_for(exc), str(exc))
        if self._draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, SERVER_STOPPING)
        # Looked up once: under CPython 3.11 each `asyncio.get_running_loop()` (and each
        # `asyncio.create_task`) makes a getpid system call, here once per request.
        loop = asyncio.get_running_loop()
        answers = Outbox(loop)
        running: set[asyncio.Task[None]] = set()
        # A balancer's ask, read once as the stream opens: each response then carries the load.
        form = metadata_format(context.invocation_metadata())
        forward = self._forward
        if self._core.info.tracing or self._forwarding.active:
            forward = None  # the call's metadata must reach each request

        def put(message: pb.ModelStreamInferResponse | bytes, final: bool) -> None:
            answers.put(message)

        async def answer(data: bytes) -> None:
            try:
                if forward is not None:
                    async for serialized in forward.infer_serialized_stream(
                        data, deadline_ns(context), form
                    ):
                        answers.put(serialized)
                    return
                request = parse_request(data)
                decoded = self._decoded(request, context, form is not None)
            except ServerError as exc:  # refused here, or the core went away
                answers.put(stream_error(_for_error(data), str(exc)))
                return
            except Exception as exc:  # one request's fault never ends the stream
                _log.exception("a stream request failed unexpectedly")
                answers.put(stream_error(_for_error(data), f"internal error: {exc}"))
                return
            await stream_answers(self._core, request, decoded, put, form)

        async def read() -> None:
            try:
                async for data in request_iterator:
                    task = loop.create_task(answer(data))
                    running.add(task)
                    task.add_done_callback(running.discard)
            except asyncio.CancelledError:
                if not self._draining:
                    raise
            finally:
                self._readers.discard(reader)  # `drain` never cancels what follows
            await asyncio.gather(*running)

        self.calls += 1
        reader = loop.create_task(read())
        self._readers.add(reader)
        # The stream ends once the reader has (a drain may cancel it before it ever ran).
        reader.add_done_callback(lambda _: answers.put(None))
        try:
            while (message := await answers.get()) is not None:
                yield message
            if not reader.cancelled():
                reader.result()  # surfaces a failure of the request stream itself
        finally:
            self.calls -= 1
            self._readers.discard(reader)
            reader.cancel()
            for task in list(running):
                task.cancel()
