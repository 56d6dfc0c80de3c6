"""What both front ends answer alike: the extensions they implement, server metadata, and the
parameters of a repository load request."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf import json_format

from proto import grpc_service_pb2 as pb
from proto import model_config_pb2 as mc
from server.contract.errors import InvalidInputError

# The protocol extensions both front ends always implement (server metadata advertises them, with
# HTTP's binary tensor data, and CUDA shared memory where a GPU serves it).
EXTENSIONS = (
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "parameters",
    "statistics",
    "system_shared_memory",
    "trace",
    "logging",
)


def server_metadata(
    version: str, extensions: Iterable[str], cuda_shared_memory: bool
) -> pb.ServerMetadataResponse:
    """Name, version and the extensions a front end implements; CUDA shared memory by the one
    rule both front ends follow: where a GPU serves it."""
    cuda = ["cuda_shared_memory"] if cuda_shared_memory else []
    return pb.ServerMetadataResponse(
        name="convoy", version=version, extensions=[*extensions, *cuda]
    )


def load_parameters(
    request: pb.RepositoryModelLoadRequest,
) -> tuple[mc.ModelConfig | None, dict[str, bytes]]:
    """RepositoryModelLoad's `config` (JSON ModelConfig) and `file:<version>/<name>` bytes."""
    override = None
    files: dict[str, bytes] = {}
    for key, value in request.parameters.items():
        if key == "config":
            if value.WhichOneof("parameter_choice") != "string_param":
                raise InvalidInputError("load parameter 'config' must be a string of JSON")
            try:
                override = json_format.Parse(value.string_param, mc.ModelConfig())
            except json_format.ParseError as exc:
                raise InvalidInputError(
                    f"load parameter 'config' of model '{request.model_name}' is not a valid "
                    f"JSON ModelConfig: {exc}"
                ) from exc
        elif key.startswith("file:"):
            if value.WhichOneof("parameter_choice") != "bytes_param":
                raise InvalidInputError(f"load parameter '{key}' must carry bytes")
            files[key.removeprefix("file:")] = value.bytes_param
    return override, files
