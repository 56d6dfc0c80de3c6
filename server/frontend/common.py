"""What both front ends answer alike: the extensions they implement, server metadata, and the
parameters of a repository load request."""

from __future__ import annotations

from collections.abc import Iterable

from proto import grpc_service_pb2 as pb
from proto import model_config_pb2 as mc
from server.contract.errors import LOAD_NOT_POLLED
from server.contract.model_load import FILE_PREFIX, config_override

# Every extension Convoy may advertise, in the order Triton's ServerMetadata lists them
# (core:src/server.cc).
TRITON_ORDER = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)
# The ones both front ends always implement (server metadata advertises them, with HTTP's binary
# tensor data, and CUDA shared memory where a GPU serves it).
EXTENSIONS = tuple(e for e in TRITON_ORDER if e not in ("cuda_shared_memory", "binary_tensor_data"))


def server_metadata(
    name: str, version: str, extensions: Iterable[str], cuda_shared_memory: bool
) -> pb.ServerMetadataResponse:
    """Name (Triton's --id), version and the extensions a front end implements; CUDA shared
    memory by the one rule both front ends follow: where a GPU serves it."""
    offered = {*extensions, *(["cuda_shared_memory"] if cuda_shared_memory else [])}
    return pb.ServerMetadataResponse(
        name=name, version=version, extensions=[e for e in TRITON_ORDER if e in offered]
    )


def load_parameters(
    request: pb.RepositoryModelLoadRequest,
) -> tuple[mc.ModelConfig | None, dict[str, bytes]]:
    """RepositoryModelLoad's `config` (JSON ModelConfig) and `file:<path>` bytes (a path in the
    model directory)."""
    override = None
    files: dict[str, bytes] = {}
    model = request.model_name
    for key, value in request.parameters.items():
        if key == "config":
            if value.WhichOneof("parameter_choice") != "string_param":
                raise LOAD_NOT_POLLED(
                    model=model, reason="load parameter 'config' must be a string of JSON"
                )
            override = config_override(model, value.string_param)
        elif key.startswith(FILE_PREFIX):
            if value.WhichOneof("parameter_choice") != "bytes_param":
                raise LOAD_NOT_POLLED(
                    model=model, reason=f"file parameter '{key}' must have bytes type for its value"
                )
            files[key.removeprefix(FILE_PREFIX)] = value.bytes_param
    return override, files
