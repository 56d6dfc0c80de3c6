"""The API's protobuf messages for metadata, statistics and the repository, shared by the
gRPC and HTTP front ends (HTTP renders them as JSON)."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf import json_format

from proto import grpc_service_pb2 as pb
from proto import model_config_pb2 as mc
from server.errors import InvalidInputError
from server.inference import ModelIO, TensorSpec
from server.repository import ModelState, ModelVersion, Repository, VersionStatus
from server.stats import Duration, ModelStats

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


def model_metadata(target: ModelVersion, ready_versions: Iterable[int]) -> pb.ModelMetadataResponse:
    """Name, ready versions, platform and tensors (batching models show a -1 batch dim)."""
    return pb.ModelMetadataResponse(
        name=target.name,
        versions=[str(v) for v in ready_versions],
        platform=target.config.platform or target.config.backend,
        inputs=[_tensor(spec, target.io) for spec in target.io.inputs.values()],
        outputs=[_tensor(spec, target.io) for spec in target.io.outputs.values()],
    )


def _tensor(spec: TensorSpec, io: ModelIO) -> pb.ModelMetadataResponse.TensorMetadata:
    shape = [-1, *spec.dims] if io.max_batch_size > 0 else list(spec.dims)
    return pb.ModelMetadataResponse.TensorMetadata(
        name=spec.name, datatype=spec.datatype.wire, shape=shape
    )


def statistics_targets(repository: Repository, name: str, version: str) -> list[ModelVersion]:
    """The versions a statistics request covers: one version, a model's ready versions, or
    (no name) every ready version of every model."""
    if not name:
        return [entry.ready[v] for entry in repository.entries() for v in sorted(entry.ready)]
    # As Triton: statistics of a model (or version) that is not serving are an error.
    if not repository.is_ready(name, version):
        raise InvalidInputError(f"requested model '{name}' is not available")
    if version:
        return [repository.get(name, version)]
    entry = repository.entry(name)
    return [entry.ready[v] for v in sorted(entry.ready)]


def model_statistics(target: ModelVersion) -> pb.ModelStatistics:
    stats: ModelStats = target.stats
    return pb.ModelStatistics(
        name=target.name,
        version=str(target.version),
        last_inference=stats.last_inference_ms,
        inference_count=stats.inference_count,
        execution_count=stats.execution_count,
        inference_stats=pb.InferStatistics(
            success=_duration(stats.success),
            fail=_duration(stats.fail),
            queue=_duration(stats.queue),
            compute_input=_duration(stats.compute_input),
            compute_infer=_duration(stats.compute_infer),
            compute_output=_duration(stats.compute_output),
            cache_hit=pb.StatisticDuration(),
            cache_miss=pb.StatisticDuration(),
        ),
        batch_stats=[
            pb.InferBatchStatistics(
                batch_size=size,
                compute_input=_duration(durations.compute_input),
                compute_infer=_duration(durations.compute_infer),
                compute_output=_duration(durations.compute_output),
            )
            for size, durations in sorted(stats.batches.items())
        ],
        memory_usage=[pb.MemoryUsage(type="CPU", id=0, byte_size=target.memory_bytes)],
    )


def _duration(duration: Duration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=duration.count, ns=duration.total_ns)


def index_entries(
    statuses: Iterable[tuple[str, VersionStatus]], ready_only: bool
) -> list[pb.RepositoryIndexResponse.ModelIndex]:
    return [
        pb.RepositoryIndexResponse.ModelIndex(
            name=name,
            version="" if status.version is None else str(status.version),
            state=status.state.value,
            reason=status.reason,
        )
        for name, status in statuses
        if not ready_only or status.state is ModelState.READY
    ]


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
