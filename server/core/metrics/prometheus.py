"""Prometheus metrics under Triton's names, read from the model statistics at scrape time.

The request path only updates `ModelStats` (counters and two histogram buckets, about a
microsecond); the collector walks the statistics when scraped, and asks `samplers` for
the CPU and GPU figures. Counters keep Triton's exact names in samples and in HELP/TYPE lines
(prometheus_client's text exposition would name the family `<name>_total`), so the page is
rendered here.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from backends import FamilySnapshot
from server.core.cache import ResponseCache
from server.core.metrics.admission import admission_families
from server.core.metrics.cache import CACHE_FAMILIES, ENTRY_FAMILIES, PER_MODEL_FAMILIES
from server.core.metrics.histograms import add_buckets, add_histogram, latency_families, number
from server.core.metrics.keep_alive import keep_alive_families
from server.core.metrics.limiter import resource_wait_families
from server.core.metrics.load import load_families
from server.core.metrics.samplers import CpuSampler, GpuSampler
from server.core.metrics.summaries import DEFAULT_QUANTILES, summary_families
from server.core.observability.histograms import Histogram
from server.core.repository import ModelVersion, Repository

# (name, type, help, value of one model version)
_FAMILIES: tuple[tuple[str, str, str, Callable[[ModelVersion], float]], ...] = (
    (
        "nv_inference_request_success",
        "counter",
        "Number of successful inference requests",
        lambda v: v.stats.success.count,
    ),
    (
        "nv_inference_count",
        "counter",
        "Number of inferences performed (a batch of n counts n)",
        lambda v: v.stats.inference_count,
    ),
    (
        "nv_inference_exec_count",
        "counter",
        "Number of model executions performed",
        lambda v: v.stats.execution_count,
    ),
    (
        "nv_inference_request_duration_us",
        "counter",
        "Cumulative inference request duration",
        lambda v: (v.stats.success.total_ns + v.stats.fail.total_ns) // 1000,
    ),
    (
        "nv_inference_queue_duration_us",
        "counter",
        "Cumulative inference queuing duration",
        lambda v: v.stats.queue.total_ns // 1000,
    ),
    (
        "nv_inference_compute_input_duration_us",
        "counter",
        "Cumulative compute input duration",
        lambda v: v.stats.compute_input.total_ns // 1000,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "counter",
        "Cumulative compute inference duration",
        lambda v: v.stats.compute_infer.total_ns // 1000,
    ),
    (
        "nv_inference_compute_output_duration_us",
        "counter",
        "Cumulative compute output duration",
        lambda v: v.stats.compute_output.total_ns // 1000,
    ),
    (
        "nv_inference_pending_request_count",
        "gauge",
        "Requests received and not yet executing",
        lambda v: v.scheduler.queue_depth,
    ),
)


_LATENCY_FAMILIES = {  # the counters --metrics-config counter_latencies=false turns off
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
}
_FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


@dataclass(frozen=True, slots=True)
class MetricsOptions:
    """Which groups of metrics are exported."""

    counter_latencies: bool = True  # Triton's cumulative *_duration_us counters
    histograms: bool = True  # Convoy's batch-size and request-latency histograms
    latency_histograms: bool = False  # Triton's nv_inference_*_histogram_* (versions observe)
    cpu: bool = True  # nv_cpu_utilization and nv_cpu_memory_*_bytes
    gpu: bool = True  # nv_gpu_* through NVML, where a driver and nvidia-ml-py are present
    interval_ms: int = 2000  # CPU and GPU samples are taken again only after this long
    summaries: bool = False  # Triton's nv_inference_*_summary_us families
    quantiles: tuple[tuple[float, float], ...] = ()  # (quantile, error); (): Triton's default


class StatsCollector(Collector):
    """Triton's per-model metrics, computed from each ready version's statistics."""

    def __init__(
        self,
        repository: Repository,
        options: MetricsOptions | None = None,
        cache: ResponseCache | None = None,
    ) -> None:
        self._repository = repository
        self._options = options or MetricsOptions()
        self._cache = cache  # the response cache's families appear when there is one
        self._cpu = CpuSampler()
        self._gpu = GpuSampler() if self._options.gpu else None
        self._machine: list[Metric] = []  # the last CPU and GPU samples
        self._sampled_ns: int | None = None  # when they were taken

    def collect(self) -> Iterator[Metric]:
        # Runs on the metrics thread: take a snapshot of the versions before walking them.
        versions = [v for entry in self._repository.entries() for v in list(entry.ready.values())]
        yield from self._model_families(versions)
        yield from resource_wait_families(versions)
        yield from admission_families(versions)
        yield from keep_alive_families(self._repository.entries())
        yield from load_families(versions)
        if self._cache is not None:
            yield from self._cache_families(versions, self._cache)
        if self._options.histograms:
            yield _histogram(
                "convoy_inference_batch_size",
                "Batch sizes executed (Convoy's addition)",
                versions,
                lambda v: v.stats.batch_sizes,
            )
            yield _histogram(
                "convoy_inference_request_duration_us",
                "End-to-end duration of successful requests in microseconds (Convoy's addition)",
                versions,
                lambda v: v.stats.request_us,
            )
        if self._options.latency_histograms:
            yield from latency_families(versions)
        if self._options.summaries:
            yield from summary_families(versions, self._options.quantiles or DEFAULT_QUANTILES)
        yield from self._machine_families()
        yield from custom_families(self._repository.custom_metrics.snapshot())

    def _machine_families(self) -> list[Metric]:
        """CPU and GPU samples, taken again once --metrics-interval-ms has passed (Triton
        refreshes them on that period; a scrape in between sees the same values)."""
        now_ns = time.monotonic_ns()
        interval_ns = self._options.interval_ms * 1_000_000
        if self._sampled_ns is None or now_ns - self._sampled_ns >= interval_ns:
            machine: list[Metric] = []
            if self._options.cpu:
                machine.extend(self._cpu.families())
            if self._gpu is not None:
                machine.extend(self._gpu.families())
            self._machine, self._sampled_ns = machine, now_ns
        return self._machine

    def _model_families(self, versions: list[ModelVersion]) -> Iterator[Metric]:
        for name, kind, documentation, value in _FAMILIES:
            if name in _LATENCY_FAMILIES and not self._options.counter_latencies:
                continue
            family = Metric(name, documentation, kind)
            for version in versions:
                family.add_sample(name, _labels(version), value(version))
            yield family
        failure = Metric("nv_inference_request_failure", "Number of failed requests", "counter")
        for version in versions:
            for reason in _FAILURE_REASONS:
                labels = {**_labels(version), "reason": reason}
                failure.add_sample(failure.name, labels, version.stats.failures.get(reason, 0))
        yield failure
        load = Metric("nv_model_load_duration_secs", "Model load time in seconds", "gauge")
        for version in versions:
            load.add_sample(load.name, _labels(version), version.load_s)
        yield load

    def _cache_families(
        self, versions: list[ModelVersion], cache: ResponseCache
    ) -> Iterator[Metric]:
        cached = [v for v in versions if v.cache is not None]
        for name, documentation, value, duration in PER_MODEL_FAMILIES:
            if duration and not self._options.counter_latencies:
                continue
            family = Metric(name, documentation, "counter")
            for version in cached:
                family.add_sample(name, _labels(version), value(version))
            yield family
        counters = cache.counters
        for name, documentation, total in CACHE_FAMILIES:
            if name in ENTRY_FAMILIES and not counters.counts_entries:
                continue
            family = Metric(name, documentation, "gauge")
            family.add_sample(name, {}, total(counters))
            yield family


def custom_families(snapshots: Iterable[FamilySnapshot]) -> Iterator[Metric]:
    """The families Python models registered (`pb_utils.MetricFamily`), as they named them."""
    for snapshot in snapshots:
        family = Metric(snapshot.name, snapshot.description, snapshot.kind)
        for labels, series in snapshot.series:
            if snapshot.kind == "histogram":
                add_buckets(family, labels, series.bounds, series.counts, series.value)
            else:
                family.add_sample(snapshot.name, labels, series.value)
        yield family


def _histogram(
    name: str,
    documentation: str,
    versions: list[ModelVersion],
    histogram_of: Callable[[ModelVersion], Histogram],
) -> Metric:
    family = Metric(name, documentation, "histogram")
    for version in versions:
        add_histogram(family, _labels(version), histogram_of(version))
    return family


def _labels(version: ModelVersion) -> dict[str, str]:
    return {"model": version.name, "version": str(version.version)}


def render(families: Iterable[Metric]) -> str:
    """The Prometheus text format, with each family's own name on its HELP and TYPE lines."""
    lines = []
    for family in families:
        documentation = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        lines.append(f"# HELP {family.name} {documentation}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items()))
            selector = f"{{{labels}}}" if labels else ""
            lines.append(f"{sample.name}{selector} {number(sample.value)}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


IDLE_TIMEOUT_S = 10.0  # how long the metrics endpoint waits for a connection's request


class MetricsServer:
    """`GET /metrics` on its own thread; scrapes only read counters the event loop updates."""

    def __init__(
        self, collector: Collector, host: str, port: int, idle_timeout_s: float = IDLE_TIMEOUT_S
    ) -> None:
        # A connection that sends no whole request within `idle_timeout_s` is closed: each one
        # holds a thread, and 200 idle connections held 200 threads for as long as they liked.
        handler = type(
            "MetricsHandler", (_Handler,), {"collector": collector, "timeout": idle_timeout_s}
        )
        server = _Http6Server if ":" in host else ThreadingHTTPServer  # an IPv6 address
        self._httpd = server((host, port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_port
        # serve_forever checks for shutdown between polls: its default 0.5 s would be half a
        # second of every stop.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="metrics", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _Http6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    collector: Collector

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404, "only /metrics is served here")
            return
        body = render(self.collector.collect()).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # scrapes every few seconds would flood the log
