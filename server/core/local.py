"""`LocalCore`: the `Core` a front end calls, served by this process's engine, repository, shared
memory regions and log control; lower packages' errors become the contract's here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import msgspec
import numpy as np

from backends import BackendError, on_host
from batching import BatchingError
from proto import grpc_service_pb2 as pb
from proto import model_config_pb2 as mc
from server.contract.core import CoreInfo, LogValue, StreamItem
from server.contract.datatypes import BY_WIRE
from server.contract.errors import ModelNotReadyError, UnavailableError, UnsupportedError
from server.contract.logs import LogControl
from server.contract.model_io import ModelIO
from server.contract.requests import InferInput, InferRequest, Location
from server.contract.responses import InferOutput, InferResponse
from server.core.catalog import (
    index_entries,
    model_metadata,
    model_statistics,
    statistics_targets,
)
from server.core.engine import Engine, Item
from server.core.errors import contract_error
from server.core.shared_memory import SharedMemory

NO_LOGS = "log settings are not available in this process"
# Triton's words when --allow-client-shm is false (UNAVAILABLE: the server does not offer it).
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)


class LocalCore:
    """Serves the `Core` protocol in process."""

    def __init__(
        self,
        engine: Engine,
        shared_memory: SharedMemory,
        logs: LogControl | None = None,
        *,
        client_shm: bool = True,
    ) -> None:
        self._engine = engine
        self._client_shm = client_shm  # clients may register and unregister regions
        self._repository = engine.repository
        self._shared_memory = shared_memory  # one set of regions for every front end
        self._logs = logs
        self.info = CoreInfo(tracing=engine.tracing, cuda_shared_memory=shared_memory.serves_cuda)

    async def server_ready(self) -> bool:
        return self._engine.ready()

    async def model_ready(self, name: str, version: str) -> bool:
        return not self._engine.stopping and await self._repository.check_ready(name, version)

    async def check_model(self, name: str) -> None:
        self._repository.entry(name)

    async def model_metadata(self, name: str, version: str) -> pb.ModelMetadataResponse:
        target = self._repository.get(name, version)
        # As Triton: a named version lists only itself, an empty one every ready version.
        versions = [target.version] if version else sorted(self._repository.entry(name).ready)
        return model_metadata(target, versions)

    async def model_config(self, name: str, version: str) -> mc.ModelConfig:
        return self._repository.get(name, version).config

    async def model_io(self, name: str, version: str) -> ModelIO:
        try:
            return self._repository.get(name, version).io
        except ModelNotReadyError:
            # An evicted model's tensors come from its config, so that lazy loading applies.
            config = self._repository.entry(name).config
            if not self._repository.is_evicted(name) or config is None:
                raise
            return ModelIO.from_config(config)

    async def model_statistics(self, name: str, version: str) -> pb.ModelStatisticsResponse:
        versions = statistics_targets(self._repository, name, version)
        return pb.ModelStatisticsResponse(model_stats=[model_statistics(v) for v in versions])

    async def repository_index(self, ready_only: bool) -> pb.RepositoryIndexResponse:
        return pb.RepositoryIndexResponse(
            models=index_entries(self._repository.index(), ready_only=ready_only)
        )

    async def load_model(
        self, name: str, config: mc.ModelConfig | None, files: Mapping[str, bytes]
    ) -> None:
        try:
            await self._repository.load(name, config, dict(files))
        except (BackendError, BatchingError) as exc:
            raise contract_error(exc) from exc

    async def unload_model(self, name: str, unload_dependents: bool) -> None:
        await self._repository.unload(name, unload_dependents=unload_dependents)

    async def system_shm_status(self, name: str) -> pb.SystemSharedMemoryStatusResponse:
        status = pb.SystemSharedMemoryStatusResponse
        return status(
            regions={
                region.name: status.RegionStatus(
                    name=region.name,
                    key=region.key,
                    offset=region.offset,
                    byte_size=region.byte_size,
                )
                for region in self._shared_memory.system.status(name)
            }
        )

    async def system_shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_client_shm()
        self._shared_memory.system.register(name, key, offset, byte_size)

    async def system_shm_unregister(self, name: str) -> None:
        self._check_client_shm()
        self._shared_memory.system.unregister(name)

    def _check_client_shm(self) -> None:
        if not self._client_shm:
            raise UnavailableError(CLIENT_SHM_DISABLED)

    async def cuda_shm_status(self, name: str) -> pb.CudaSharedMemoryStatusResponse:
        status = pb.CudaSharedMemoryStatusResponse
        return status(
            regions={
                region.name: status.RegionStatus(
                    name=region.name, device_id=region.device_id, byte_size=region.byte_size
                )
                for region in self._shared_memory.cuda_status(name)
            }
        )

    async def cuda_shm_register(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        self._check_client_shm()
        self._shared_memory.cuda.register(name, raw_handle, device_id, byte_size)

    async def cuda_shm_unregister(self, name: str) -> None:
        self._check_client_shm()
        # Unregistering every region succeeds without a GPU: there is none (perf_analyzer and
        # tritonclient clean up both kinds of shared memory this way).
        self._shared_memory.cuda_unregister(name)

    async def log_settings(self, changes: Mapping[str, LogValue]) -> dict[str, LogValue]:
        if self._logs is None:
            raise UnsupportedError(NO_LOGS)
        if changes:
            self._logs.update(dict(changes))
        return dict(self._logs.settings())

    async def infer(self, request: InferRequest) -> InferResponse:
        try:
            response = await self._engine.infer(self._read_inputs(request))
            return self._answer(response, request.output_locations)
        except (BackendError, BatchingError) as exc:
            raise contract_error(exc) from exc

    async def infer_streamed(
        self, request: InferRequest
    ) -> InferResponse | AsyncIterator[StreamItem]:
        try:
            outcome = await self._engine.infer_streamed(self._read_inputs(request))
        except (BackendError, BatchingError) as exc:
            raise contract_error(exc) from exc
        if isinstance(outcome, InferResponse):
            return self._answer(outcome, request.output_locations)
        return self._items(outcome, request.output_locations)

    async def infer_stream(self, request: InferRequest) -> AsyncIterator[StreamItem]:
        outcome = await self.infer_streamed(request)
        if isinstance(outcome, InferResponse):
            yield outcome, True
            return
        async for item in outcome:
            yield item

    async def _items(
        self, responses: AsyncIterator[Item], locations: Mapping[str, Location]
    ) -> AsyncIterator[StreamItem]:
        """A streaming model's responses for a front end: errors the contract's, outputs as
        `infer` answers them."""
        try:
            async for response, final in responses:
                if isinstance(response, BackendError):
                    yield contract_error(response), final
                elif response is None:
                    yield None, final
                else:
                    yield self._answer(response, locations), final
        except (BackendError, BatchingError) as exc:
            raise contract_error(exc) from exc

    def _read_inputs(self, request: InferRequest) -> InferRequest:
        """The request with its shared memory inputs read from their regions (NumPy arrays of
        system regions, CuPy views of CUDA ones)."""
        for tensor in request.inputs:  # a loop: a generator costs more on every request
            if tensor.location is not None:
                break
        else:
            return request
        inputs = [
            tensor
            if tensor.location is None
            else msgspec.structs.replace(tensor, array=self._read(tensor, tensor.location))
            for tensor in request.inputs
        ]
        return msgspec.structs.replace(request, inputs=inputs)

    def _read(self, tensor: InferInput, location: Location) -> object:
        datatype = BY_WIRE[tensor.datatype]  # the front end checked the name
        return self._shared_memory.read(tensor.name, datatype, tensor.shape, location)

    def _answer(self, response: InferResponse, locations: Mapping[str, Location]) -> InferResponse:
        """Outputs in host memory, or written to their shared memory regions (device arrays go
        to a CUDA region as they are)."""
        if not locations:
            for output in response.outputs:  # a loop: a generator costs more on every request
                if type(output.array) is not np.ndarray:
                    break
            else:
                return response  # the common case: nothing to move
        outputs = []
        for output in response.outputs:
            location = locations.get(output.spec.name)
            if location is not None:
                self._shared_memory.write(location, output.spec.datatype, output.array)
                outputs.append(InferOutput(output.spec, output.shape, None))
            else:
                outputs.append(msgspec.structs.replace(output, array=on_host(output.array)))
        return msgspec.structs.replace(response, outputs=outputs)
