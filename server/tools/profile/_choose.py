"""The recommendation: the configuration with the highest throughput under the latency
objective (pure; the points are what the sweep measured)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from server.tools.profile._points import Point


@dataclass(frozen=True, slots=True)
class Choice:
    """The chosen point, and whether it meets the objective."""

    point: Point
    meets_objective: bool  # False: no point did; this one has the lowest p99


def choose(points: Sequence[Point], latency_p99_ms: float | None) -> Choice | None:
    """The in-process point with the most infer/s among those with p99 within the objective
    (any p99 without one), a lower p99 breaking ties; when none meets it, the lowest p99.
    None when nothing was measured in process."""
    local = [point for point in points if point.where == "in process" and point.infer_per_s > 0]
    if not local:
        return None
    within = [p for p in local if latency_p99_ms is None or p.p99_ms <= latency_p99_ms]
    if within:
        best = max(within, key=lambda p: (p.infer_per_s, -p.p99_ms, -p.concurrency))
        return Choice(best, True)
    return Choice(min(local, key=lambda p: (p.p99_ms, -p.infer_per_s)), False)
