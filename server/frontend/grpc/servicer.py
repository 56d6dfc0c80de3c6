"""`InferenceServicer`: Triton's inference service; thin: protobuf -> domain call -> protobuf."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc

from backends import BackendError
from batching import BatchingError
from proto import grpc_service_pb2 as pb
from proto import grpc_service_pb2_grpc as pb_grpc
from server.contract.errors import (
    InvalidInputError,
    ModelControlDisabledError,
    RestrictedError,
    ServerError,
    UnsupportedError,
)
from server.contract.logs import LogControl
from server.contract.requests import InferRequest
from server.contract.settings import TRACE_HEADERS, RestrictedProtocol, TraceSettings
from server.core.catalog import index_entries, model_metadata, model_statistics, statistics_targets
from server.core.engine import Engine
from server.core.shared_memory.regions import SharedMemory
from server.frontend.common import EXTENSIONS, load_parameters, server_metadata
from server.frontend.grpc.codec import (
    decode_inputs,
    encode_response,
    infer_options,
    output_locations,
    requested_outputs,
)
from server.frontend.grpc.status import status_for

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


def _edge(method: _Handler[_Req, _Resp]) -> _Handler[_Req, _Resp]:
    """Check restrictions, then turn domain errors into their status codes; anything
    unexpected is INTERNAL and logged."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: _Req, context: grpc.aio.ServicerContext) -> _Resp:
        try:
            if self._restricted:
                self._check_restricted(RPC_GROUPS[method.__name__], context)
            return await method(self, request, context)
        except (ServerError, BackendError, BatchingError) as exc:
            code, message = status_for(exc), str(exc)
        except Exception as exc:
            _log.exception("%s failed unexpectedly", method.__name__)
            code, message = grpc.StatusCode.INTERNAL, f"internal error: {exc}"
        await context.abort(code, message)
        raise AssertionError("context.abort returned")  # abort always raises

    return wrapper


def _stream_error(request: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    # In-band, as Triton: the stream goes on; the id tells the client which request failed.
    return pb.ModelStreamInferResponse(
        error_message=message,
        infer_response=pb.ModelInferResponse(
            model_name=request.model_name, model_version=request.model_version, id=request.id
        ),
    )


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
        engine: Engine,
        version: str,
        model_control: bool = False,
        restricted: Sequence[RestrictedProtocol] = (),
        trace: TraceSettings | None = None,
        logs: LogControl | None = None,
        *,
        shared_memory: SharedMemory,
    ) -> None:
        self._engine = engine
        self._repository = engine.repository
        self._version = version
        self._model_control = model_control  # explicit mode: load and unload are allowed
        self._restricted = tuple(restricted)
        self._trace = trace or TraceSettings()
        self._logs = logs
        self._shared_memory = shared_memory  # the HTTP front end's too: one set of regions

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
        return pb.ServerReadyResponse(ready=self._engine.ready())

    @_edge
    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Any
    ) -> pb.ModelReadyResponse:
        ready = not self._engine.stopping and self._repository.is_ready(
            request.name, request.version
        )
        return pb.ModelReadyResponse(ready=ready)

    @_edge
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Any
    ) -> pb.ServerMetadataResponse:
        return server_metadata(self._version, EXTENSIONS, self._shared_memory.serves_cuda)

    @_edge
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Any
    ) -> pb.ModelMetadataResponse:
        target = self._repository.get(request.name, request.version)
        # As Triton: a named version lists only itself, an empty one every ready version.
        versions = (
            [target.version]
            if request.version
            else sorted(self._repository.entry(request.name).ready)
        )
        return model_metadata(target, versions)

    @_edge
    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Any
    ) -> pb.ModelConfigResponse:
        target = self._repository.get(request.name, request.version)
        return pb.ModelConfigResponse(config=target.config)

    @_edge
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Any
    ) -> pb.ModelStatisticsResponse:
        versions = statistics_targets(self._repository, request.name, request.version)
        return pb.ModelStatisticsResponse(model_stats=[model_statistics(v) for v in versions])

    @_edge
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Any
    ) -> pb.RepositoryIndexResponse:
        return pb.RepositoryIndexResponse(
            models=index_entries(self._repository.index(), ready_only=request.ready)
        )

    @_edge
    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: Any
    ) -> pb.ModelInferResponse:
        locations = output_locations(request)
        response = await self._engine.infer(self._decoded(request, context))
        return encode_response(response, request.id, locations, self._shared_memory)

    def _decoded(self, request: pb.ModelInferRequest, context: Any) -> InferRequest:
        """The engine's request: tensors decoded (shared memory read), parameters parsed."""
        return InferRequest(
            request.model_name,
            request.model_version,
            decode_inputs(request, self._shared_memory),
            requested_outputs(request),
            infer_options(request),
            request.id,
            _trace_headers(context) if self._engine.tracing else None,
        )

    async def _stream_one(
        self, request: pb.ModelInferRequest, context: Any
    ) -> AsyncIterator[tuple[pb.ModelInferResponse | BackendError, bool]]:
        """A stream request's responses; a decoupled model's final flag without a response
        becomes an empty response only if the request enables it, as Triton's."""
        locations = output_locations(request)
        empty_final = request.parameters.get("triton_enable_empty_final_response")
        async for response, final in self._engine.infer_stream(self._decoded(request, context)):
            if isinstance(response, BackendError):
                yield response, final
            elif response is not None:
                yield (
                    encode_response(response, request.id, locations, self._shared_memory),
                    final,
                )
            elif final and empty_final is not None and empty_final.bool_param:
                yield (
                    pb.ModelInferResponse(
                        model_name=request.model_name,
                        model_version=request.model_version,
                        id=request.id,
                    ),
                    final,
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
        answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()

        async def answer(request: pb.ModelInferRequest) -> None:
            try:
                async for response, final in self._stream_one(request, context):
                    if isinstance(response, BackendError):
                        message = _stream_error(request, str(response))
                    else:
                        message = pb.ModelStreamInferResponse(infer_response=response)
                    # Every streamed response says whether it is its request's last one.
                    message.infer_response.parameters["triton_final_response"].bool_param = final
                    answers.put_nowait(message)
                return
            except (ServerError, BackendError, BatchingError) as exc:
                message = _stream_error(request, str(exc))
            except Exception as exc:  # one request's fault never ends the stream
                _log.exception("stream request '%s' failed unexpectedly", request.id)
                message = _stream_error(request, f"internal error: {exc}")
            answers.put_nowait(message)

        async def read() -> None:
            async for request in request_iterator:
                task = asyncio.create_task(answer(request))
                running.add(task)
                task.add_done_callback(running.discard)
            await asyncio.gather(*running)
            answers.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (message := await answers.get()) is not None:
                yield message
            await reader  # surfaces a failure of the request stream itself
        finally:
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
        await self._repository.load(request.model_name, override, files)
        return pb.RepositoryModelLoadResponse()

    @_edge
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Any
    ) -> pb.RepositoryModelUnloadResponse:
        if not self._model_control:
            raise ModelControlDisabledError()
        dependents = request.parameters.get("unload_dependents")
        await self._repository.unload(
            request.model_name, unload_dependents=dependents is not None and dependents.bool_param
        )
        return pb.RepositoryModelUnloadResponse()

    @_edge
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Any
    ) -> pb.SystemSharedMemoryStatusResponse:
        status = pb.SystemSharedMemoryStatusResponse
        return status(
            regions={
                region.name: status.RegionStatus(
                    name=region.name,
                    key=region.key,
                    offset=region.offset,
                    byte_size=region.byte_size,
                )
                for region in self._shared_memory.system.status(request.name)
            }
        )

    @_edge
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Any
    ) -> pb.SystemSharedMemoryRegisterResponse:
        self._shared_memory.system.register(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @_edge
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Any
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        self._shared_memory.system.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @_edge
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Any
    ) -> pb.CudaSharedMemoryStatusResponse:
        status = pb.CudaSharedMemoryStatusResponse
        return status(
            regions={
                region.name: status.RegionStatus(
                    name=region.name, device_id=region.device_id, byte_size=region.byte_size
                )
                for region in self._shared_memory.cuda_status(request.name)
            }
        )

    @_edge
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Any
    ) -> pb.CudaSharedMemoryRegisterResponse:
        self._shared_memory.cuda.register(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    @_edge
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Any
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        # Unregistering every region succeeds without a GPU: there is none (perf_analyzer and
        # tritonclient clean up both kinds of shared memory this way).
        self._shared_memory.cuda_unregister(request.name)
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
            self._repository.entry(request.model_name)  # NOT_FOUND for an unknown model
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
        if self._logs is None:
            raise UnsupportedError("log settings are not available in this process")
        if request.settings:
            changes: dict[str, bool | int | str] = {}
            for key, value in request.settings.items():
                choice = value.WhichOneof("parameter_choice")
                if choice is None:
                    raise InvalidInputError(f"log setting '{key}' has no value")
                changes[key] = getattr(value, choice)
            self._logs.update(changes)
        return pb.LogSettingsResponse(
            settings={key: _log_value(value) for key, value in self._logs.settings().items()}
        )
