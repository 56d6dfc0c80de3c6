"""`Core`: everything a front end asks of the core, one method per Triton RPC of either
protocol. `LocalCore` serves it in the front end's own process; a front-end worker process
reaches the core process through a client of the same shape. Every method raises only
`ServerError`s."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from proto import grpc_service_pb2 as pb
from proto import model_config_pb2 as mc
from server.contract.errors import ServerError
from server.contract.model_io import ModelIO
from server.contract.requests import InferRequest
from server.contract.responses import InferResponse

LogValue = bool | int | str  # one of Triton's log settings
NO_CUDA_SHM = (
    "CUDA shared memory needs a CUDA device and Convoy's gpu extra (onnxruntime-gpu with "
    "CUDAExecutionProvider, cupy-cuda13x); this server has no usable GPU"
)
# One response of a streamed request (None: a final flag alone; an error: in-band) and whether
# it is the request's last.
StreamItem = tuple[InferResponse | ServerError | None, bool]


@dataclass(frozen=True, slots=True)
class CoreInfo:
    """What a front end knows of its core for the core's whole life."""

    tracing: bool  # requests may be traced: front ends pass their trace headers
    cuda_shared_memory: bool  # CUDA regions can be registered (a GPU serves them)


class Core(Protocol):
    """The core as the gRPC and HTTP front ends see it."""

    @property
    def info(self) -> CoreInfo: ...

    async def server_ready(self) -> bool: ...

    async def model_ready(self, name: str, version: str) -> bool: ...

    async def check_model(self, name: str) -> None:
        """NOT_FOUND (`ModelNotFoundError`) for a model no repository holds."""
        ...

    async def model_metadata(self, name: str, version: str) -> pb.ModelMetadataResponse: ...

    async def model_config(self, name: str, version: str) -> mc.ModelConfig: ...

    async def model_io(self, name: str, version: str) -> ModelIO:
        """The tensors a request to the model maps onto (an evicted model's, from its config)."""
        ...

    async def model_statistics(self, name: str, version: str) -> pb.ModelStatisticsResponse: ...

    async def repository_index(self, ready_only: bool) -> pb.RepositoryIndexResponse: ...

    async def load_model(
        self, name: str, config: mc.ModelConfig | None, files: Mapping[str, bytes]
    ) -> None: ...

    async def unload_model(self, name: str, unload_dependents: bool) -> None: ...

    async def system_shm_status(self, name: str) -> pb.SystemSharedMemoryStatusResponse: ...

    async def system_shm_register(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None: ...

    async def system_shm_unregister(self, name: str) -> None: ...

    async def cuda_shm_status(self, name: str) -> pb.CudaSharedMemoryStatusResponse: ...

    async def cuda_shm_register(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None: ...

    async def cuda_shm_unregister(self, name: str) -> None: ...

    async def log_settings(self, changes: Mapping[str, LogValue]) -> dict[str, LogValue]:
        """Apply `changes` (none: only read) and answer every setting."""
        ...

    async def infer(self, request: InferRequest) -> InferResponse: ...

    def infer_stream(self, request: InferRequest) -> AsyncIterator[StreamItem]:
        """A decoupled model's every response, any other model's one."""
        ...

    async def infer_streamed(
        self, request: InferRequest
    ) -> InferResponse | AsyncIterator[StreamItem]:
        """What `infer_stream` gives, for a stream's request served at its cost: the response
        itself when the model answers once (as `infer`), else the iterator of its responses."""
        ...
