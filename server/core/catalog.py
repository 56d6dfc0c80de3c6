"""The API's protobuf answers about models: metadata, statistics and the repository index
(the HTTP front end renders them as JSON)."""

from __future__ import annotations

from collections.abc import Iterable

from proto import grpc_service_pb2 as pb
from server.contract.errors import InvalidInputError
from server.contract.model_io import ModelIO, TensorSpec
from server.core.observability.stats import Duration, ModelStats
from server.core.repository import ModelState, ModelVersion, Repository, VersionStatus


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
            cache_hit=_duration(stats.cache_hit),
            cache_miss=_duration(stats.cache_miss),
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
