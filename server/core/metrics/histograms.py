"""Histogram families in the Prometheus text format: one version's buckets as cumulative
`_bucket` samples with their `le`, then `_count` and `_sum`; and Triton's latency histograms
(`nv_inference_first_response_histogram_ms` and the five phase families) of every version that
observes them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.metrics_core import Metric

from server.core.observability.histograms import (
    COMPUTE_INFER,
    COMPUTE_INPUT,
    COMPUTE_OUTPUT,
    FIRST_RESPONSE,
    QUEUE,
    REQUEST,
    Histogram,
)
from server.core.repository import ModelVersion

_LATENCY_FAMILIES = (
    (FIRST_RESPONSE, "Duration from request to first response in milliseconds"),
    (REQUEST, "Histogram of end-to-end inference request duration in microseconds"),
    (QUEUE, "Histogram of inference queuing duration in microseconds"),
    (COMPUTE_INPUT, "Histogram of compute input duration in microseconds"),
    (COMPUTE_INFER, "Histogram of compute inference duration in microseconds"),
    (COMPUTE_OUTPUT, "Histogram of compute output duration in microseconds"),
)


def number(value: float) -> str:
    """Counts stay exact integers; everything else in Python's shortest round-trip form."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def add_histogram(family: Metric, labels: dict[str, str], histogram: Histogram) -> None:
    """One labelled histogram's samples, from a snapshot of its counts (the event loop may
    observe while the metrics thread reads)."""
    add_buckets(family, labels, histogram.bounds, list(histogram.counts), histogram.total)


def add_buckets(
    family: Metric,
    labels: dict[str, str],
    bounds: Sequence[float],
    counts: Sequence[int],
    total: float,
) -> None:
    """A histogram's samples from its upper bounds and its counts per bucket (one more than
    the bounds: the last is past them) and the sum of what it observed."""
    name = family.name
    cumulative = 0
    for bound, count in zip([*bounds, math.inf], counts, strict=True):
        cumulative += count
        le = "+Inf" if bound == math.inf else number(bound)
        family.add_sample(f"{name}_bucket", {**labels, "le": le}, cumulative)
    family.add_sample(f"{name}_count", labels, cumulative)
    family.add_sample(f"{name}_sum", labels, total)


def latency_families(versions: Iterable[ModelVersion]) -> Iterator[Metric]:
    """The six families over the versions that observe them. The request histogram leaves out a
    version with a response cache, as Triton's request summary does (a hit is not a request)."""
    observed = [v for v in versions if v.stats.latency is not None]
    for name, documentation in _LATENCY_FAMILIES:
        family = Metric(name, documentation, "histogram")
        for version in observed:
            if name == REQUEST and version.cache is not None:
                continue
            latency = version.stats.latency
            assert latency is not None  # filtered above
            labels = {"model": version.name, "version": str(version.version)}
            add_histogram(family, labels, latency.family(name))
        yield family
