"""The recent latencies of one model version, for Triton's summary metrics (`--metrics-config
summary_latencies=true`): each latency's observations of the last minute, from which a scrape
computes its quantiles."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

MAX_AGE_NS = 60 * 1_000_000_000  # Triton's summaries cover the last minute (prometheus-cpp)
MAX_SAMPLES = 4096  # per latency; past it the oldest observations go first


class LatencyWindow:
    """Observations in microseconds with their time; appended on the event loop, read by the
    metrics thread (deque appends and copies hold the GIL throughout)."""

    def __init__(self) -> None:
        self._samples: deque[tuple[int, float]] = deque(maxlen=MAX_SAMPLES)

    def observe(self, now_ns: int, value_us: float) -> None:
        self._samples.append((now_ns, value_us))

    def quantiles(self, wanted: Sequence[float], now_ns: int) -> list[float]:
        """The value at each quantile of the last minute's observations (NaN: none)."""
        values = sorted(v for t, v in self._samples.copy() if now_ns - t <= MAX_AGE_NS)
        if not values:
            return [math.nan] * len(wanted)
        last = len(values) - 1
        return [values[min(last, max(0, math.ceil(q * len(values)) - 1))] for q in wanted]


class LatencyWindows:
    """The five latencies Triton summarises: request, queue, compute input, infer, output."""

    def __init__(self) -> None:
        self.request = LatencyWindow()
        self.queue = LatencyWindow()
        self.compute_input = LatencyWindow()
        self.compute_infer = LatencyWindow()
        self.compute_output = LatencyWindow()

    def record(self, now_ns: int, request_ns: int, durations_ns: Sequence[int]) -> None:
        """One successful request: its duration, then queue, compute input, infer, output."""
        self.request.observe(now_ns, request_ns / 1000)
        for window, ns in zip(
            (self.queue, self.compute_input, self.compute_infer, self.compute_output),
            durations_ns,
            strict=True,
        ):
            window.observe(now_ns, ns / 1000)
