"""Convoy's rate-limiter families: per model version, how often and how long its instances
waited for their resources with a batch ready (that time is also in the requests' queue time)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import Metric

from server.core.repository import ModelVersion


def resource_wait_families(versions: Sequence[ModelVersion]) -> Iterator[Metric]:
    """Nothing when the rate limiter is off (no version has a resource wait)."""
    limited = [(v, v.resource_wait) for v in versions if v.resource_wait is not None]
    if not limited:
        return
    count = Metric(
        "convoy_rate_limiter_waits",
        "Times an instance of the model waited for rate-limiter resources (Convoy's addition)",
        "counter",
    )
    duration = Metric(
        "convoy_rate_limiter_wait_duration_us",
        "Cumulative time instances of the model waited for rate-limiter resources with a batch "
        "ready, in microseconds (Convoy's addition)",
        "counter",
    )
    for version, wait in limited:
        labels = {"model": version.name, "version": str(version.version)}
        count.add_sample(count.name, labels, wait.count)
        duration.add_sample(duration.name, labels, wait.total_ns // 1000)
    yield count
    yield duration
