"""`AdminRpcs`: the RPCs of Triton's inference service besides health and inference (none on a
request's path): metadata, model config, statistics, the model repository, shared memory, trace
and logging settings."""

from __future__ import annotations

from typing import Any

from proto import grpc_service_pb2 as pb
from server.contract.core import Core, LogValue
from server.contract.errors import InvalidInputError, ModelControlDisabledError, UnsupportedError
from server.contract.settings import TraceSettings
from server.frontend.common import EXTENSIONS, load_parameters, server_metadata
from server.frontend.grpc.edge import edge


class AdminRpcs:
    """`InferenceServicer`'s administrative RPCs; it sets and explains the state they read."""

    _core: Core
    _name: str
    _version: str
    _model_control: bool
    _trace: TraceSettings

    @edge
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Any
    ) -> pb.ServerMetadataResponse:
        return server_metadata(
            self._name, self._version, EXTENSIONS, self._core.info.cuda_shared_memory
        )

    @edge
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Any
    ) -> pb.ModelMetadataResponse:
        return await self._core.model_metadata(request.name, request.version)

    @edge
    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Any
    ) -> pb.ModelConfigResponse:
        config = await self._core.model_config(request.name, request.version)
        return pb.ModelConfigResponse(config=config)

    @edge
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Any
    ) -> pb.ModelStatisticsResponse:
        return await self._core.model_statistics(request.name, request.version)

    @edge
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Any
    ) -> pb.RepositoryIndexResponse:
        return await self._core.repository_index(request.ready)

    @edge
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Any
    ) -> pb.RepositoryModelLoadResponse:
        if not self._model_control:
            raise ModelControlDisabledError()
        override, files = load_parameters(request)
        await self._core.load_model(request.model_name, override, files)
        return pb.RepositoryModelLoadResponse()

    @edge
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

    @edge
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Any
    ) -> pb.SystemSharedMemoryStatusResponse:
        return await self._core.system_shm_status(request.name)

    @edge
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Any
    ) -> pb.SystemSharedMemoryRegisterResponse:
        await self._core.system_shm_register(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @edge
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Any
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        await self._core.system_shm_unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @edge
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Any
    ) -> pb.CudaSharedMemoryStatusResponse:
        return await self._core.cuda_shm_status(request.name)

    @edge
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Any
    ) -> pb.CudaSharedMemoryRegisterResponse:
        await self._core.cuda_shm_register(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    @edge
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Any
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        await self._core.cuda_shm_unregister(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    @edge
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

    @edge
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


def _log_value(value: bool | int | str) -> pb.LogSettingsResponse.SettingValue:
    if isinstance(value, bool):
        return pb.LogSettingsResponse.SettingValue(bool_param=value)
    if isinstance(value, int):
        return pb.LogSettingsResponse.SettingValue(uint32_param=value)
    return pb.LogSettingsResponse.SettingValue(string_param=value)
