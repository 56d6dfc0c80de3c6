"""What one measurement gives: one point of a configuration's latency-throughput curve."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from server.tools._measured import MeasuredExecution
from server.tools.profile._space import Variant


@dataclass(frozen=True, slots=True)
class Point:
    """One configuration at one concurrency, measured over one window."""

    variant: Variant
    concurrency: int  # requests kept in flight (closed loop, batch 1 each)
    where: str  # "in process", or the URL of the server measured over gRPC
    infer_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    average_batch: float  # inferences per execution over the window (0: not known)
    cpu_percent: float | None  # this process's CPU time over the window (100: one core busy)
    gpu_percent: float | None  # the instances' GPUs' utilization, when they run on GPUs
    execution: MeasuredExecution | None  # the mean execution of the most frequent batch

    @property
    def curve(self) -> str:
        """The curve the point belongs to: its configuration, and where it was measured."""
        return self.variant.label if self.where == "in process" else f"{self.where} (gRPC)"


def percentile_ms(latencies_ns: Sequence[int], percent: float) -> float:
    """The nearest-rank percentile (perf_analyzer's way) in milliseconds; 0 for no samples."""
    if not latencies_ns:
        return 0.0
    ordered = sorted(latencies_ns)
    rank = max(math.ceil(percent / 100 * len(ordered)), 1)
    return ordered[rank - 1] / 1e6
