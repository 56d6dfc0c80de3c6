"""Triton's latency histograms of one model version (`--metrics-config histogram_latencies=true`):
the time to a request's first response in milliseconds (core #464: every model, decoupled or
not) and the five phases of a successful request in microseconds (the names of core PR #474),
each over the buckets the config's `model_metrics` sets for its family, else Triton's defaults.

Observing is a bisect into a preallocated list of counts; the metrics thread reads them when
scraped. Request, queue and first response are observed per request; the three compute phases
once per execution, weighted by its requests (all of which have its compute times).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
from dataclasses import dataclass, field

from batching import ExecutionRecord
from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError

_log = logging.getLogger(__name__)

FIRST_RESPONSE = "nv_inference_first_response_histogram_ms"
REQUEST = "nv_inference_request_duration_histogram_us"
QUEUE = "nv_inference_queue_duration_histogram_us"
COMPUTE_INPUT = "nv_inference_compute_input_duration_histogram_us"
COMPUTE_INFER = "nv_inference_compute_infer_duration_histogram_us"
COMPUTE_OUTPUT = "nv_inference_compute_output_duration_histogram_us"

# Triton's default upper bounds per family (core src/metric_model_reporter.h; PR #474).
DEFAULT_BUCKETS: dict[str, tuple[float, ...]] = {
    FIRST_RESPONSE: (100, 500, 2000, 5000),
    REQUEST: (1000, 5000, 25000, 50000, 100000),
    QUEUE: (100, 1000, 5000, 10000, 50000),
    COMPUTE_INPUT: (100, 500, 1000, 5000, 10000),
    COMPUTE_INFER: (1000, 5000, 25000, 50000, 100000),
    COMPUTE_OUTPUT: (100, 500, 1000, 5000, 10000),
}

_NS_PER_MS = 1_000_000


@dataclass(slots=True)
class Histogram:
    """Counts per bucket (the last one is +Inf) and the sum of what was observed."""

    bounds: tuple[float, ...]  # ascending upper bounds, +Inf implied after the last
    counts: list[int] = field(default_factory=list)  # not cumulative; len(bounds) + 1
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value


def histogram_buckets(config: mc.ModelConfig) -> dict[str, tuple[float, ...]]:
    """Each family's upper bounds: `model_metrics.metric_control` entries over the defaults (a
    later entry for the same family wins). Bounds must be finite and strictly ascending; a family
    this server does not know is logged and ignored, as Triton does."""
    buckets = dict(DEFAULT_BUCKETS)
    for control in config.model_metrics.metric_control:
        family = control.metric_identifier.family
        if family not in buckets:
            _log.warning(
                "model '%s': metric family '%s' in model_metrics is not a histogram this "
                "server can configure (%s); ignored",
                config.name,
                family,
                ", ".join(DEFAULT_BUCKETS),
            )
            continue
        bounds = tuple(control.histogram_options.buckets)
        if not all(math.isfinite(b) for b in bounds) or any(
            low >= high for low, high in itertools.pairwise(bounds)
        ):
            raise ConfigError(
                f"model '{config.name}': model_metrics buckets of '{family}' must be finite "
                f"and strictly ascending, got {list(bounds)}"
            )
        buckets[family] = bounds
    return buckets


@dataclass(slots=True)
class LatencyHistograms:
    """One version's six histograms. A model that answers once per request (not decoupled) has
    its first response when it succeeds or fails; a decoupled model's stream records its own."""

    first_response_ms: Histogram  # whole milliseconds from arrival in the core, as Triton's
    request_us: Histogram  # successful requests, end to end in the core
    queue_us: Histogram
    compute_input_us: Histogram
    compute_infer_us: Histogram
    compute_output_us: Histogram
    first_on_answer: bool  # not decoupled: the one answer is the first response

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> LatencyHistograms:
        buckets = histogram_buckets(config)
        return cls(
            Histogram(buckets[FIRST_RESPONSE]),
            Histogram(buckets[REQUEST]),
            Histogram(buckets[QUEUE]),
            Histogram(buckets[COMPUTE_INPUT]),
            Histogram(buckets[COMPUTE_INFER]),
            Histogram(buckets[COMPUTE_OUTPUT]),
            first_on_answer=not config.model_transaction_policy.decoupled,
        )

    # The request path: each observation written out (a bisect into the bounds, one count, the
    # sum), which costs a third of a call to Histogram.observe per family.

    def record_success(self, request_ns: int, queue_ns: int) -> None:
        """A successful request's duration and queue time (and, answering once, its first
        response)."""
        find = bisect.bisect_left
        value = request_ns / 1000
        histogram = self.request_us
        histogram.counts[find(histogram.bounds, value)] += 1
        histogram.total += value
        value = queue_ns / 1000
        histogram = self.queue_us
        histogram.counts[find(histogram.bounds, value)] += 1
        histogram.total += value
        if self.first_on_answer:
            value = request_ns // _NS_PER_MS
            histogram = self.first_response_ms
            histogram.counts[find(histogram.bounds, value)] += 1
            histogram.total += value

    def record_execution(self, record: ExecutionRecord) -> None:
        """A successful execution's compute input, infer and output, once per batch and counted
        for each request it ran: every request of a batch has the batch's compute times."""
        find, weight = bisect.bisect_left, record.request_count
        for histogram, ns in (
            (self.compute_input_us, record.compute_input_ns),
            (self.compute_infer_us, record.compute_infer_ns),
            (self.compute_output_us, record.compute_output_ns),
        ):
            value = ns / 1000
            histogram.counts[find(histogram.bounds, value)] += weight
            histogram.total += value * weight

    def record_answer(self, request_ns: int) -> None:
        """An answer with no phases of its own (a cache hit, an error response)."""
        if self.first_on_answer:
            self.first_response_ms.observe(request_ns // _NS_PER_MS)

    def record_first_response(self, elapsed_ns: int) -> None:
        """A decoupled request's first response (or its error), `elapsed_ns` after arrival."""
        self.first_response_ms.observe(elapsed_ns // _NS_PER_MS)

    def family(self, name: str) -> Histogram:
        """The histogram of a family named as in DEFAULT_BUCKETS."""
        return {
            FIRST_RESPONSE: self.first_response_ms,
            REQUEST: self.request_us,
            QUEUE: self.queue_us,
            COMPUTE_INPUT: self.compute_input_us,
            COMPUTE_INFER: self.compute_infer_us,
            COMPUTE_OUTPUT: self.compute_output_us,
        }[name]
