"""The core: one process owns the model repository, the per-model queues and batchers, the
instances (and so the GPU), shared memory regions, statistics, metrics and traces. Its
sub-packages: `repository` (what is loaded), `serving` (one request through a version),
`shared_memory` (registered regions), `observability` (statistics, metrics, traces)."""

__all__: list[str] = []
