"""Triton's summaries (quantiles of the last minute's latencies, by explicit `now_ns`) and the
metrics interval: CPU and GPU samples are taken again only once --metrics-interval-ms passed."""

from __future__ import annotations

import math

from server.core.metrics import MetricsOptions, StatsCollector
from server.core.observability.windows import MAX_AGE_NS, MAX_SAMPLES, LatencyWindow
from server.core.repository import Repository

SECOND_NS = 1_000_000_000


def test_quantiles_of_the_window() -> None:
    window = LatencyWindow()
    for value in range(1, 101):  # 1..100 us
        window.observe(10 * SECOND_NS, float(value))
    assert window.quantiles([0.5, 0.9, 0.99, 1.0], 10 * SECOND_NS) == [50.0, 90.0, 99.0, 100.0]


def test_observations_older_than_a_minute_leave_the_window() -> None:
    window = LatencyWindow()
    window.observe(0, 1000.0)
    window.observe(MAX_AGE_NS, 1.0)
    assert window.quantiles([1.0], MAX_AGE_NS) == [1000.0]  # both within the minute
    assert window.quantiles([1.0], MAX_AGE_NS + 1) == [1.0]
    assert all(math.isnan(q) for q in window.quantiles([0.5, 0.9], 3 * MAX_AGE_NS))


def test_the_window_keeps_the_newest_observations() -> None:
    window = LatencyWindow()
    for value in range(MAX_SAMPLES + 10):
        window.observe(0, float(value))
    assert window.quantiles([0.0], 0) == [10.0]


def _cpu_family(collector: StatsCollector) -> object:
    (family,) = [f for f in collector.collect() if f.name == "nv_cpu_utilization"]
    return family


def test_machine_samples_are_reused_within_the_interval() -> None:
    repository = Repository([])
    steady = StatsCollector(repository, MetricsOptions(gpu=False, interval_ms=3_600_000))
    assert _cpu_family(steady) is _cpu_family(steady)
    every_scrape = StatsCollector(repository, MetricsOptions(gpu=False, interval_ms=0))
    assert _cpu_family(every_scrape) is not _cpu_family(every_scrape)
