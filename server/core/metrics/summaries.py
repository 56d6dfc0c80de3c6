"""Triton's summary families (`--metrics-config summary_latencies=true`): per model version, the
quantiles of the last minute's request, queue and compute latencies in microseconds, with the
cumulative count and sum of each."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.metrics_core import Metric

from server.core.observability.stats import Duration, ModelStats
from server.core.observability.windows import LatencyWindow, LatencyWindows
from server.core.repository import ModelVersion

# Triton's default summary_quantiles: (quantile, allowed error).
DEFAULT_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
)

_Pick = Callable[[LatencyWindows], LatencyWindow]
_Total = Callable[[ModelStats], Duration]
# (name, help, the window, the cumulative duration it adds to)
_FAMILIES: tuple[tuple[str, str, _Pick, _Total], ...] = (
    (
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds",
        lambda w: w.request,
        lambda s: s.success,
    ),
    (
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds",
        lambda w: w.queue,
        lambda s: s.queue,
    ),
    (
        "nv_inference_compute_input_summary_us",
        "Summary of compute input duration in microseconds",
        lambda w: w.compute_input,
        lambda s: s.compute_input,
    ),
    (
        "nv_inference_compute_infer_summary_us",
        "Summary of compute inference duration in microseconds",
        lambda w: w.compute_infer,
        lambda s: s.compute_infer,
    ),
    (
        "nv_inference_compute_output_summary_us",
        "Summary of compute output duration in microseconds",
        lambda w: w.compute_output,
        lambda s: s.compute_output,
    ),
)


def summary_families(
    versions: Sequence[ModelVersion], quantiles: Sequence[tuple[float, float]]
) -> Iterator[Metric]:
    """The five summaries; a version's window starts at its first scrape (before it, nothing
    is kept), its count and sum cover every successful request since it loaded."""
    now_ns = time.monotonic_ns()
    wanted = [q for q, _ in quantiles]
    for version in versions:
        if version.stats.windows is None:
            version.stats.windows = LatencyWindows()
    for name, documentation, pick, total in _FAMILIES:
        family = Metric(name, documentation, "summary")
        for version in versions:
            labels = {"model": version.name, "version": str(version.version)}
            windows = version.stats.windows
            assert windows is not None  # set above
            for quantile, value in zip(
                wanted, pick(windows).quantiles(wanted, now_ns), strict=True
            ):
                family.add_sample(name, {**labels, "quantile": repr(quantile)}, value)
            duration = total(version.stats)
            family.add_sample(f"{name}_count", labels, duration.count)
            family.add_sample(f"{name}_sum", labels, duration.total_ns / 1000)
        yield family
