"""What scripts/bench.py measures: rows, ceilings, the Triton 2.51 figures issue 13 quotes,
and a lookup of throughput by what was measured. Data only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

CONVOY, FASTAPI, CANNED, TRITON = "convoy", "fastapi", "grpc.aio", "triton"
SYSTEMS = (CONVOY, TRITON, CANNED, FASTAPI)  # rows in table order
# Convoy's `wait` is `on` with Triton's wait; `adaptive` names the opt-in of runs before 2026-12-06.
BATCHINGS = ("off", "on", "wait", "adaptive", "async", "def", "none")  # fastapi: handler form
FRONT_ENDS = ("grpc", "stream", "http", "http-wrk")  # the last: HTTP driven by wrk
FASTAPI_FORMS = ("async", "def")  # the naive handler forms scripts/fastapi_baseline.py routes


@dataclass(frozen=True, slots=True)
class Measurement:
    """Closed-loop throughput and latency of one run at one concurrency."""

    infer_per_s: float
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One measurement; `measured` is None when it failed (printed as `-`)."""

    system: str  # CONVOY, FASTAPI, CANNED or TRITON
    model: str
    batching: str  # off, on, wait, adaptive (Convoy, Triton); async or def (FastAPI); none
    front_end: str  # one of FRONT_ENDS
    workers: int | None  # Convoy's --frontend-workers (0: in-process); None for the others
    concurrency: int  # requests in flight
    measured: Measurement | None = None
    avg_batch: float | None = None  # inferences per execution, from ModelStatistics
    server_cpu: float | None = None  # server process tree's CPU time / wall time (1.0: a core)
    gpu_utilization: float | None = None  # mean over the run, 0.0 - 1.0; None without --nvml


@dataclass(frozen=True, slots=True)
class Ceiling:
    """In-process ONNX Runtime: one default `InferenceSession(path)`, run back to back."""

    model: str
    infer_per_s_by_batch: dict[int, float]

    @property
    def best_batch(self) -> int:
        return max(self.infer_per_s_by_batch, key=self.infer_per_s_by_batch.__getitem__)

    @property
    def best_infer_per_s(self) -> float:
        return self.infer_per_s_by_batch[self.best_batch]


@dataclass(frozen=True, slots=True)
class Quoted:
    """A Triton 2.51 figure quoted in issue 13 (this machine, perf_analyzer as bench.py runs
    it); a range where the issue gives one. Ratios use `high`, the harder bar."""

    low: float  # infer/s
    high: float  # infer/s, >= low

    def text(self) -> str:
        return f"{self.low:g}" if self.low == self.high else f"{self.low:g}-{self.high:g}"


TRITON_QUOTED: dict[tuple[str, str, int], Quoted] = {
    ("mlp", "grpc", 8): Quoted(6400, 6400),
    ("mlp", "grpc", 32): Quoted(6500, 7200),
    ("mlp", "stream", 8): Quoted(5500, 5500),
    ("mlp", "http", 8): Quoted(6800, 6800),
    ("resnet18", "grpc", 1): Quoted(42.8, 42.8),
    ("resnet18", "grpc", 8): Quoted(48.3, 48.3),
    ("resnet18", "grpc", 32): Quoted(50.9, 50.9),
}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


class Lookup:
    """Throughput by what was measured; None where a measurement failed or did not run."""

    def __init__(self, rows: Iterable[Row], ceilings: Iterable[Ceiling]) -> None:
        self.rows = list(rows)
        self._rate = {
            (r.system, r.model, r.batching, r.front_end, r.workers, r.concurrency): r.measured
            for r in self.rows
        }
        self._ceiling = {c.model: c.best_infer_per_s for c in ceilings}

    def measured(
        self, system: str, model: str, batching: str, front_end: str, workers: int | None, c: int
    ) -> Measurement | None:
        return self._rate.get((system, model, batching, front_end, workers, c))

    def rate(
        self, system: str, model: str, batching: str, front_end: str, workers: int | None, c: int
    ) -> float | None:
        m = self.measured(system, model, batching, front_end, workers, c)
        return m.infer_per_s if m else None

    def convoy(self, model: str, front_end: str, workers: int, c: int) -> float | None:
        """Convoy's batching (`on`) variant."""
        return self.rate(CONVOY, model, "on", front_end, workers, c)

    def fastapi(self, model: str, c: int) -> float | None:
        """The faster of the two naive handler forms."""
        rates = [self.rate(FASTAPI, model, form, "http-wrk", None, c) for form in FASTAPI_FORMS]
        return max((r for r in rates if r is not None), default=None)

    def ceiling(self, model: str) -> float | None:
        return self._ceiling.get(model)

    def workers(self) -> list[int]:
        return sorted(
            {r.workers for r in self.rows if r.system == CONVOY and r.workers is not None}
        )
