"""Prometheus metrics under Triton's names, read from the model statistics at scrape time.

Nothing is counted on the request path: the collector walks the statistics when scraped.
Counters keep Triton's exact names (no `_total` suffix), so existing dashboards work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from server.repository import ModelVersion, Repository

# (name, type, help, value of one model version)
_FAMILIES: tuple[tuple[str, str, str, Callable[[ModelVersion], float]], ...] = (
    (
        "nv_inference_request_success",
        "counter",
        "Number of successful inference requests",
        lambda v: v.stats.success.count,
    ),
    (
        "nv_inference_count",
        "counter",
        "Number of inferences performed (a batch of n counts n)",
        lambda v: v.stats.inference_count,
    ),
    (
        "nv_inference_exec_count",
        "counter",
        "Number of model executions performed",
        lambda v: v.stats.execution_count,
    ),
    (
        "nv_inference_request_duration_us",
        "counter",
        "Cumulative inference request duration",
        lambda v: (v.stats.success.total_ns + v.stats.fail.total_ns) // 1000,
    ),
    (
        "nv_inference_queue_duration_us",
        "counter",
        "Cumulative inference queuing duration",
        lambda v: v.stats.queue.total_ns // 1000,
    ),
    (
        "nv_inference_compute_input_duration_us",
        "counter",
        "Cumulative compute input duration",
        lambda v: v.stats.compute_input.total_ns // 1000,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "counter",
        "Cumulative compute inference duration",
        lambda v: v.stats.compute_infer.total_ns // 1000,
    ),
    (
        "nv_inference_compute_output_duration_us",
        "counter",
        "Cumulative compute output duration",
        lambda v: v.stats.compute_output.total_ns // 1000,
    ),
    (
        "nv_inference_pending_request_count",
        "gauge",
        "Requests received and not yet executing",
        lambda v: v.batcher.queue_depth,
    ),
)


_FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


class StatsCollector(Collector):
    """Triton's per-model metrics, computed from each ready version's statistics."""

    def __init__(self, repository: Repository) -> None:
        self._repository = repository

    def collect(self) -> Iterator[Metric]:
        versions = [v for entry in self._repository.entries() for v in entry.ready.values()]
        for name, kind, documentation, value in _FAMILIES:
            family = Metric(name, documentation, kind)
            for version in versions:
                family.add_sample(name, _labels(version), value(version))
            yield family
        failure = Metric("nv_inference_request_failure", "Number of failed requests", "counter")
        for version in versions:
            for reason in _FAILURE_REASONS:
                labels = {**_labels(version), "reason": reason}
                failure.add_sample(failure.name, labels, version.stats.failures.get(reason, 0))
        yield failure


def _labels(version: ModelVersion) -> dict[str, str]:
    return {"model": version.name, "version": str(version.version)}
