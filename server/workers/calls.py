"""The control calls between a front-end worker and the core: each `Core` method but inference
travels as a CALL message (`server.workers.messages`) with its arguments, and comes back as
RESULT or REFUSED, as plain values: protobuf messages serialized, a model's inputs and outputs
as tuples."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf.message import Message as ProtoMessage

from proto import grpc_service_pb2 as pb
from proto import model_config_pb2 as mc
from server.contract.datatypes import BY_WIRE
from server.contract.model_io import ModelIO, TensorSpec

# Methods whose result is a protobuf message, by its type.
_PROTO_RESULTS: dict[str, type[ProtoMessage]] = {
    "model_metadata": pb.ModelMetadataResponse,
    "model_config": mc.ModelConfig,
    "model_statistics": pb.ModelStatisticsResponse,
    "repository_index": pb.RepositoryIndexResponse,
    "system_shm_status": pb.SystemSharedMemoryStatusResponse,
    "cuda_shm_status": pb.CudaSharedMemoryStatusResponse,
}
CALLS = frozenset(
    {
        *_PROTO_RESULTS,
        "server_ready",
        "model_ready",
        "check_model",
        "model_io",
        "load_model",
        "unload_model",
        "system_shm_register",
        "system_shm_unregister",
        "cuda_shm_register",
        "cuda_shm_unregister",
        "log_settings",
    }
)


def encode_args(method: str, args: Sequence[Any]) -> tuple[Any, ...]:
    if method == "load_model":
        name, config, files = args
        return name, None if config is None else config.SerializeToString(), dict(files)
    if method == "log_settings":
        return (dict(args[0]),)
    return tuple(args)


def decode_args(method: str, args: Sequence[Any]) -> tuple[Any, ...]:
    if method == "load_model":
        name, config, files = args
        return name, None if config is None else mc.ModelConfig.FromString(config), files
    return tuple(args)


def encode_result(method: str, value: Any) -> Any:
    if method in _PROTO_RESULTS:
        return value.SerializeToString()
    if method == "model_io":
        return _encode_io(value)
    return value


def decode_result(method: str, value: Any) -> Any:
    proto = _PROTO_RESULTS.get(method)
    if proto is not None:
        return proto.FromString(value)
    if method == "model_io":
        return _decode_io(value)
    return value


def _encode_io(io: ModelIO) -> tuple[Any, ...]:
    def specs(tensors: Mapping[str, TensorSpec]) -> tuple[Any, ...]:
        return tuple((t.name, t.datatype.wire, t.dims, t.optional) for t in tensors.values())

    return io.model, io.max_batch_size, specs(io.inputs), specs(io.outputs)


def _decode_io(value: tuple[Any, ...]) -> ModelIO:
    model, max_batch_size, inputs, outputs = value

    def specs(rows: Iterable[tuple[Any, ...]]) -> dict[str, TensorSpec]:
        return {
            name: TensorSpec(name, BY_WIRE[wire], tuple(dims), optional)
            for name, wire, dims, optional in rows
        }

    return ModelIO(model, max_batch_size, specs(inputs), specs(outputs))
