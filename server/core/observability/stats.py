"""Per model version statistics, in the shape of Triton's ModelStatistics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from batching import ExecutionRecord, RequestResult
from server.core.observability.histograms import Histogram, LatencyHistograms
from server.core.observability.windows import LatencyWindows


@dataclass(slots=True)
class Duration:
    """A count and the total nanoseconds spent over it."""

    count: int = 0
    total_ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.total_ns += ns


# Convoy's histogram buckets (upper bounds): request latency in microseconds, batch sizes.
LATENCY_BUCKETS_US = (
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
)  # fmt: skip
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(slots=True)
class BatchDurations:
    """Compute time of the executions of one batch size."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ModelStats:
    """Counters of one model version; updated on the event loop only."""

    inference_count: int = 0  # inferences: a request of batch n counts n
    execution_count: int = 0  # executions: a batch counts 1
    last_inference_ms: int = 0  # wall-clock ms since the epoch of the last finished request
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)  # hits and their lookup time
    cache_miss: Duration = field(default_factory=Duration)  # misses: lookup and insertion time
    batches: dict[int, BatchDurations] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)  # by Triton's reason label
    # Convoy's, apart from Triton's failure reasons that also count them: requests that reached
    # their deadline unexecuted, and requests refused on arrival to keep the latency target.
    deadline_exceeded: int = 0
    target_refused: int = 0
    batch_sizes: Histogram = field(default_factory=lambda: Histogram(BATCH_SIZE_BUCKETS))
    request_us: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_US))
    # Recent latencies for Triton's summaries; the metrics collector sets them when summaries
    # are on (None: nothing is kept).
    windows: LatencyWindows | None = None
    # Triton's latency histograms; the repository sets them at load when the server exports
    # them (--metrics-config histogram_latencies=true; None: nothing is observed).
    latency: LatencyHistograms | None = None

    def record_execution(self, record: ExecutionRecord) -> None:
        if not record.succeeded:
            return
        self.execution_count += 1
        self.inference_count += record.batch_size
        self.batch_sizes.observe(record.batch_size)
        durations = self.batches.get(record.batch_size)
        if durations is None:
            durations = self.batches[record.batch_size] = BatchDurations()
        durations.compute_input.add(record.compute_input_ns)
        durations.compute_infer.add(record.compute_infer_ns)
        durations.compute_output.add(record.compute_output_ns)
        if self.latency is not None:
            self.latency.record_execution(record)

    def record_success(self, result: RequestResult, request_ns: int) -> None:
        # The sums in place, not through Duration.add: five method calls on every request.
        success, queue = self.success, self.queue
        success.count += 1
        success.total_ns += request_ns
        queue.count += 1
        queue.total_ns += result.queue_ns
        compute_input, compute_infer, compute_output = (
            self.compute_input,
            self.compute_infer,
            self.compute_output,
        )
        compute_input.count += 1
        compute_input.total_ns += result.compute_input_ns
        compute_infer.count += 1
        compute_infer.total_ns += result.compute_infer_ns
        compute_output.count += 1
        compute_output.total_ns += result.compute_output_ns
        self.request_us.observe(request_ns / 1000)
        self.last_inference_ms = time.time_ns() // 1_000_000
        if self.latency is not None:
            self.latency.record_success(request_ns, result.queue_ns)
        if self.windows is not None:
            durations = (
                result.queue_ns,
                result.compute_input_ns,
                result.compute_infer_ns,
                result.compute_output_ns,
            )
            self.windows.record(time.monotonic_ns(), request_ns, durations)

    def record_cache_hit(self, request_ns: int, lookup_ns: int) -> None:
        """A request answered from the response cache: a success with no queue or compute
        time and no execution, as Triton counts one."""
        self.success.add(request_ns)
        self.request_us.observe(request_ns / 1000)
        self.queue.add(0)
        self.cache_hit.add(lookup_ns)
        self.last_inference_ms = time.time_ns() // 1_000_000
        if self.latency is not None:
            self.latency.record_answer(request_ns)

    def record_failure(self, request_ns: int, reason: str) -> None:
        """A failed request; `reason` is REJECTED, CANCELED, BACKEND or OTHER, as Triton's."""
        self.fail.add(request_ns)
        self.failures[reason] = self.failures.get(reason, 0) + 1
        self.last_inference_ms = time.time_ns() // 1_000_000
        if self.latency is not None and reason != "CANCELED":  # a cancelled one gets no answer
            self.latency.record_answer(request_ns)
