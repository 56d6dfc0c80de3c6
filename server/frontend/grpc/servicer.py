"""`InferenceServicer`: Triton's inference service; thin: protobuf -> domain call -> protobuf."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
import msgspec

from proto import grpc_service_pb2 as pb
from proto import grpc_service_pb2_grpc as pb_grpc
from server.contract.core import Core, LogValue
from server.contract.errors import (
    SERVER_STOPPING,
    InvalidInputError,
    ModelControlDisabledError,
    RestrictedError,
    ServerError,
    UnsupportedError,
)
from server.contract.requests import InferRequest, Received
from server.contract.responses import InferResponse
from server.contract.settings import TRACE_HEADERS, RestrictedProtocol, TraceSettings
from server.frontend.common import EXTENSIONS, load_parameters, server_metadata
from server.frontend.forwarding import HeaderForwarding
from server.frontend.grpc.codec import (
    decode_inputs,
    decode_outputs,
    encode_response_bytes,
    infer_options,
)
from server.frontend.grpc.status import retry_pushback, status_for
from server.frontend.grpc.stream import Outbox, stream_error, stream_message
from server.frontend.orca import metadata_format, report_headers

_log = logging.getLogger(__name__)


_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Handler = Callable[[Any, _Req, grpc.aio.ServicerContext], Awaitable[_Resp]]


# Triton's protocol groups, which --grpc-restricted-protocol can put behind a header.
RPC_GROUPS: dict[str, str] = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}
RESTRICTABLE_GROUPS = frozenset(RPC_GROUPS.values())


# The queue drops a request this long before its gRPC deadline, so that it is answered (and
# counted) as expired rather than cancelled by gRPC at the same instant; an answer that late
# could not reach the client in time anyway.
_DEADLINE_MARGIN_NS = 1_000_000


def _edge(method: _Handler[_Req, _Resp]) -> _Handler[_Req, _Resp]:
    """Check restrictions, then turn domain errors into their status codes; anything
    unexpected is INTERNAL and logged."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: _Req, context: grpc.aio.ServicerContext) -> _Resp:
        counted = not self._draining
        self.calls += counted
        try:
            try:
                if self._restricted:
                    self._check_restricted(RPC_GROUPS[method.__name__], context)
                return await method(self, request, context)
            except ServerError as exc:
                code, message, trailers = status_for(exc), str(exc), retry_pushback(exc)
            except Exception as exc:
                _log.exception("%s failed unexpectedly", method.__name__)
                code, message = grpc.StatusCode.INTERNAL, f"internal error: {exc}"
                trailers = ()
            await context.abort(code, message, trailers)
            raise AssertionError("context.abort returned")  # abort always raises
        finally:
            self.calls -= counted

    return wrapper


def _log_value(value: bool | int | str) -> pb.LogSettingsResponse.SettingValue:
    if isinstance(value, bool):
        return pb.LogSettingsResponse.SettingValue(bool_param=value)
    if isinstance(value, int):
        return pb.LogSettingsResponse.SettingValue(uint32_param=value)
    return pb.LogSettingsResponse.SettingValue(string_param=value)


def _trace_headers(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {
        key: value
        for key, value in (context.invocation_metadata() or ())
        if key in TRACE_HEADERS and isinstance(value, str)
    }


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """Every RPC of inference.GRPCInferenceService."""

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
    ) -> None:
        self._core = core
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

    @_edge
    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: Any
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    @_edge
    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: Any
    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await self._core.server_ready())

    @_edge
    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Any
    ) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(
            ready=await self._core.model_ready(request.name, request.version)
        )

    @_edge
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Any
    ) -> pb.ServerMetadataResponse:
        return server_metadata(
            self._name, self._version, EXTENSIONS, self._core.info.cuda_shared_memory
        )

    @_edge
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Any
    ) -> pb.ModelMetadataResponse:
        return await self._core.model_metadata(request.name, request.version)

    @_edge
    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Any
    ) -> pb.ModelConfigResponse:
        config = await self._core.model_config(request.name, request.version)
        return pb.ModelConfigResponse(config=config)

    @_edge
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Any
    ) -> pb.ModelStatisticsResponse:
        return await self._core.model_statistics(request.name, request.version)

    @_edge
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Any
    ) -> pb.RepositoryIndexResponse:
        return await self._core.repository_index(request.ready)

    @_edge
    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> bytes:
        """The answer comes serialized (`encode_response_bytes`); the service's handler
        (`inference_handler`) sends bytes as they are."""
        form = metadata_format(context.invocation_metadata())  # a balancer's load report
        response = await self._core.infer(self._decoded(request, context, form is not None))
        if trailers := report_headers(response.load, form):
            context.set_trailing_metadata(trailers)
        return encode_response_bytes(response, request.id)

    def _decoded(
        self, request: pb.ModelInferRequest, context: Any, load_report: bool = False
    ) -> InferRequest:
        """The engine's request: tensors decoded (shared memory read), parameters parsed; when
        the core traces, with its trace headers and when its decoding began and ended;
        `load_report`: the response is to carry the model's load."""
        tracing = self._core.info.tracing
        started_ns = time.monotonic_ns() if tracing else 0
        inputs = decode_inputs(request)
        outputs, locations, classes = decode_outputs(request)
        options = infer_options(request)
        if self._forwarding.active:  # reading the metadata costs every request otherwise
            options = self._forwarding.apply(options, context.invocation_metadata() or ())
        remaining_s = context.time_remaining()
        if remaining_s is not None:  # the client's deadline: never executed after it
            deadline_ns = time.monotonic_ns() + int(remaining_s * 1e9) - _DEADLINE_MARGIN_NS
            options = msgspec.structs.replace(options, deadline_ns=deadline_ns)
        return InferRequest(
            request.model_name,
            request.model_version,
            inputs,
            outputs,
            options,
            request.id,
            _trace_headers(context) if tracing else None,
            locations,
            classes,
            Received("GRPC", started_ns, time.monotonic_ns()) if tracing else None,
            load_report=load_report,
        )

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Any
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Many requests in flight per stream; each answer (or error, in-band) as it is ready."""
        if self._restricted:
            try:
                self._check_restricted("inference", context)
            except RestrictedError as exc:
                await context.abort(status_for(exc), str(exc))
        if self._draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, SERVER_STOPPING)
        answers = Outbox()
        running: set[asyncio.Task[None]] = set()
        # A balancer's ask, read once as the stream opens: each response then carries the load.
        form = metadata_format(context.invocation_metadata())

        async def answer(request: pb.ModelInferRequest) -> None:
            try:
                decoded = self._decoded(request, context, form is not None)
                outcome = await self._core.infer_streamed(decoded)
                if isinstance(outcome, InferResponse):  # the model answers once
                    answers.put(stream_message(request, outcome, True, form))
                    return
                async for item, final in outcome:
                    answer = stream_message(request, item, final, form)
                    if answer is not None:
                        answers.put(answer)
                return
            except ServerError as exc:
                message = stream_error(request, str(exc))
            except Exception as exc:  # one request's fault never ends the stream
                _log.exception("stream request '%s' failed unexpectedly", request.id)
                message = stream_error(request, f"internal error: {exc}")
            answers.put(message)

        async def read() -> None:
            try:
                async for request in request_iterator:
                    task = asyncio.create_task(answer(request))
                    running.add(task)
                    task.add_done_callback(running.discard)
            except asyncio.CancelledError:
                if not self._draining:
                    raise
            finally:
                self._readers.discard(reader)  # `drain` never cancels what follows
            await asyncio.gather(*running)

        self.calls += 1
        reader = asyncio.create_task(read())
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

    @_edge
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Any
    ) -> pb.RepositoryModelLoadResponse:
        if not self._model_control:
            raise ModelControlDisabledError()
        override, files = load_parameters(request)
        await self._core.load_model(request.model_name, override, files)
        return pb.RepositoryModelLoadResponse()

    @_edge
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Any
    ) -> pb.RepositoryModelUnloadResponse:
        if not self._model_control:
            raise ModelControlDisabledError()
        dependents = request.parameters.get("unload_dependents")
        await self._core.unload_model(
            request.model_name, dependents is not None and dependents.bool_param
        )
        return pb.RepositoryModelUnloadResponse()

    @_edge
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Any
    ) -> pb.SystemSharedMemoryStatusResponse:
        return await self._core.system_shm_status(request.name)

    @_edge
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Any
    ) -> pb.SystemSharedMemoryRegisterResponse:
        await self._core.system_shm_register(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @_edge
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Any
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        await self._core.system_shm_unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @_edge
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Any
    ) -> pb.CudaSharedMemoryStatusResponse:
        return await self._core.cuda_shm_status(request.name)

    @_edge
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Any
    ) -> pb.CudaSharedMemoryRegisterResponse:
        await self._core.cuda_shm_register(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    @_edge
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Any
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        await self._core.cuda_shm_unregister(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    @_edge
    async def TraceSetting(
        self, request: pb.TraceSettingRequest, context: Any
    ) -> pb.TraceSettingResponse:
        # As Triton in OpenTelemetry mode: the settings are fixed at start, and only read here.
        if request.settings:
            raise UnsupportedError(
                "trace settings cannot be changed in OpenTelemetry mode; set them with "
                "--trace-config at start"
            )
        if request.model_name:
            await self._core.check_model(request.model_name)
        values = {
            "trace_mode": ["opentelemetry"],
            "trace_level": [self._trace.level],
            "trace_rate": [str(self._trace.rate)],
            "trace_count": [str(self._trace.count)],
        }
        return pb.TraceSettingResponse(
            settings={
                key: pb.TraceSettingResponse.SettingValue(value=value)
                for key, value in values.items()
            }
        )

    @_edge
    async def LogSettings(
        self, request: pb.LogSettingsRequest, context: Any
    ) -> pb.LogSettingsResponse:
        changes: dict[str, LogValue] = {}
        for key, value in request.settings.items():
            choice = value.WhichOneof("parameter_choice")
            if choice is None:
                raise InvalidInputError(f"log setting '{key}' has no value")
            changes[key] = getattr(value, choice)
        settings = await self._core.log_settings(changes)
        return pb.LogSettingsResponse(
            settings={key: _log_value(value) for key, value in settings.items()}
        )
