"""`App`, the composition root: builds the repository, engine and front ends; starts, stops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Coroutine
from dataclasses import asdict, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from backends import cuda_available, usable_cores
from batching import PolicyError, RateLimiter, parse_explicit
from server.contract.errors import ConfigError, ModelLoadFailedError, ServerError
from server.contract.idle_poll import poll_window_us
from server.contract.logs import LogControl
from server.contract.settings import FrontEndSettings
from server.core.cache import open_cache, parse_cache_config
from server.core.engine import Engine
from server.core.heap import HeapFreezer
from server.core.local import LocalCore
from server.core.metrics import MetricsOptions, MetricsServer, StatsCollector
from server.core.observability import RequestTracer
from server.core.repository import KeepAlive, MemoryBudget, Repository
from server.core.shared_memory import CudaSharedMemoryRegistry, SharedMemory, SharedMemoryRegistry
from server.core.storage import CloudRepositories, Mirror, StorageError, is_cloud
from server.frontend.process import FrontEnd
from server.settings import ModelControlMode, ServerSettings
from server.workers import WorkerOptions, WorkerPool, reserve_port

_log = logging.getLogger(__name__)

# At a stop, the least time the models' unloads (finalize) get, however much of the exit timeout
# the requests in flight took.
UNLOAD_FLOOR_S = 1.0


def convoy_version() -> str:
    try:
        return metadata.version("convoy")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class App:
    """One server process: load models, serve gRPC, HTTP, health, reflection and metrics; stop
    cleanly."""

    def __init__(self, settings: ServerSettings, logs: LogControl | None = None) -> None:
        self.settings = settings
        self._logs = logs
        budget = (
            None
            if settings.memory_budget_bytes is None
            else MemoryBudget(settings.memory_budget_bytes, settings.evict_lru)
        )
        self.cache = open_cache(parse_cache_config(settings.cache_config))
        # Cloud repositories are served from local copies, removed at stop.
        self._cloud = CloudRepositories(os.environ)
        roots: list[Path | Mirror] = []
        try:
            for root in settings.model_repositories:
                roots.append(self._cloud.mirror(root) if is_cloud(root) else Path(root))
        except StorageError as exc:  # a malformed URL, unreadable credentials, no library
            self._cloud.close()
            raise ConfigError(str(exc)) from exc
        self.repository = Repository(
            roots,
            settings.model_load_threads,
            budget,
            completion=settings.auto_complete,
            cache=self.cache,
            limiter=rate_limiter(settings),
            config_name=settings.model_config_name,
            backend_directory=Path(settings.backend_directory),
            load_retries=settings.model_load_retries,
            latency_histograms=settings.latency_histograms and settings.allow_metrics,
            requests_classified=settings.fair_share_header is not None,
            explicit_model_control=settings.model_control_mode is ModelControlMode.EXPLICIT,
        )
        self.tracer = RequestTracer(settings.trace) if settings.trace.enabled else None
        self.engine = Engine(
            self.repository,
            settings.strict_readiness,
            settings.lazy_load_timeout_s,
            self.tracer,
            cold_start_timeout_s=settings.cold_start_timeout_s,
            idle_poll_us=poll_window_us(
                settings.idle_poll_us, usable_cores(), settings.frontend_workers
            ),
        )
        # Explicit mode: models idle past their keep-alive are unloaded (loaded again on demand).
        self._keep_alive = (
            KeepAlive(
                self.repository.entries,
                self.repository.unload_idle,
                settings.keep_alive_s,
                self.repository.composing,
            )
            if settings.model_control_mode is ModelControlMode.EXPLICIT
            else None
        )
        # One set of regions for both front ends. Without a usable GPU, CUDA shared memory is
        # refused (UNIMPLEMENTED over gRPC, 501 over HTTP).
        self.shared_memory = SharedMemory(
            SharedMemoryRegistry(), CudaSharedMemoryRegistry() if cuda_available() else None
        )
        self.grpc_port = settings.grpc_port
        self.metrics_port = settings.metrics_port
        self.http_port = settings.http_port
        self._front_end: FrontEnd | None = None
        self._workers: WorkerPool | None = None
        # Frozen once serving, again after the loaded models change (`server.core.heap`).
        self._heap = HeapFreezer(lambda: self.repository.changes)
        self._reserved: list[socket.socket] = []

    async def start(self) -> None:
        if self.cache is not None:
            await self.cache.start()
        await self._load_initial_models()
        if self._keep_alive is not None:
            await self._keep_alive.start()
        _log.info("models:\n%s", model_table(self.repository))
        if self.settings.exit_on_error:
            await self._exit_on_failed_loads()
        settings = self.settings
        core = LocalCore(
            self.engine, self.shared_memory, self._logs, client_shm=settings.allow_client_shm
        )
        if settings.frontend_workers > 0:
            await self._start_workers(core)
        else:
            self._front_end = FrontEnd(core, front_end_settings(settings))
            await self._front_end.start()
            self.grpc_port = self._front_end.grpc_port
            self.http_port = self._front_end.http_port
        self._metrics_server: MetricsServer | None = None
        if settings.allow_metrics:
            options = MetricsOptions(
                counter_latencies=settings.counter_latencies,
                histograms=settings.histogram_metrics,
                latency_histograms=settings.latency_histograms,
                cpu=settings.allow_cpu_metrics,
                gpu=settings.allow_gpu_metrics,
                interval_ms=settings.metrics_interval_ms,
                summaries=settings.summary_latencies,
                quantiles=settings.summary_quantiles,
            )
            self._metrics_server = MetricsServer(
                StatsCollector(self.repository, options, self.cache),
                settings.metrics_address,
                settings.metrics_port,
            )
            self._metrics_server.start()
            self.metrics_port = self._metrics_server.port
        await self._set_health()
        self._poller: asyncio.Task[None] | None = None
        if settings.model_control_mode is ModelControlMode.POLL:
            self._poller = asyncio.create_task(self._poll(), name="repository-poll")
        workers = settings.frontend_workers
        _log.info(
            "%s%s%s%s",
            f"serving gRPC on {settings.grpc_address}:{self.grpc_port}"
            if settings.allow_grpc
            else "serving without gRPC",
            f", metrics on :{self.metrics_port}/metrics" if self._metrics_server else "",
            f", HTTP on :{self.http_port}" if settings.allow_http else "",
            f" ({workers} front-end workers)" if workers else "",
        )
        self._heap.start()

    async def _start_workers(self, core: LocalCore) -> None:
        """Front ends in worker processes on shared ports; the ports are held here first, so
        that port 0 means one free port for all of them."""
        settings = self.settings
        grpc_port, http_port = settings.grpc_port, settings.http_port
        if settings.allow_grpc:
            grpc_port = self._reserve(settings.grpc_address, grpc_port, settings.reuse_grpc_port)
        if settings.allow_http:
            http_port = self._reserve(settings.http_address, http_port, settings.reuse_http_port)
        front = replace(
            front_end_settings(settings), grpc_port=grpc_port, http_port=http_port, reuse_port=True
        )
        state = self._logs.state if self._logs is not None else settings.log
        self._workers = WorkerPool(
            core,
            WorkerOptions(
                count=settings.frontend_workers,
                arena_bytes=settings.worker_arena_bytes,
                settings=front.plain(),
                log_settings=asdict(state),
                stop_timeout_s=settings.exit_timeout_s,
                silent_timeout_s=settings.frontend_worker_timeout_s,
            ),
        )
        self.grpc_port, self.http_port = await self._workers.start()

    def _reserve(self, host: str, port: int, shared: bool) -> int:
        reserved = reserve_port(host, port, shared=shared)
        self._reserved.append(reserved)
        return int(reserved.getsockname()[1])

    async def _set_health(self) -> None:
        ready = self.engine.ready()
        if self._workers is not None:
            self._workers.set_health(ready)
        elif self._front_end is not None:
            await self._front_end.set_health(ready)

    async def stop(self, force: asyncio.Event | None = None) -> None:
        """The drain: readiness goes false and new connections are refused at once; a request
        on a connection already open gets UNAVAILABLE; those in flight finish (bounded by
        --exit-timeout-secs); then the front ends close their connections and everything stops.
        `force` set (a second signal) cuts the waits short. The models' unloads (their
        finalize) get what is left of --exit-timeout-secs, at least `UNLOAD_FLOOR_S`, as Triton
        bounds its wait for live models; one still running then is left behind."""
        timeout_s = self.settings.exit_timeout_s
        ends_s = time.monotonic() + timeout_s
        forced = force or asyncio.Event()
        if self._keep_alive is not None:
            await self._keep_alive.stop()
        await self._heap.stop()
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        if self._workers is not None:
            await _unless(forced, self._workers.stop_accepting(timeout_s))
        self.engine.stop_accepting()
        await self._set_health()
        if self._front_end is not None:
            await self._front_end.drain()
        if not await _unless(forced, self.engine.wait_idle(timeout_s)) and not forced.is_set():
            _log.warning("requests still in flight after %.1f s; stopping anyway", timeout_s)
        if self._front_end is not None:
            await self._front_end.stop(grace_s=0.0 if forced.is_set() else 1.0)
        if self._workers is not None:
            await _unless(forced, self._workers.stop())
            if forced.is_set():
                await self._workers.kill()
        for reserved in self._reserved:
            reserved.close()
        # Forced, or past the exit timeout, an execute or finalize still running is not waited
        # for (a model's own process sees the server gone and exits).
        left_s = max(ends_s - time.monotonic(), UNLOAD_FLOOR_S)
        unloaded = _within(self.repository.unload_all(timeout_s=1.0), left_s)
        if not await _unless(forced, unloaded) and not forced.is_set():
            _log.warning("models still unloading after %.1f s more; stopping anyway", left_s)
        self._cloud.close()
        if self.cache is not None:
            await self.cache.close()
        self.shared_memory.close()
        if self._metrics_server is not None:
            self._metrics_server.stop()
        if self.tracer is not None:
            await self.tracer.shutdown()
        _log.info("stopped")

    async def _load_initial_models(self) -> None:
        mode = self.settings.model_control_mode
        if mode is not ModelControlMode.EXPLICIT or "*" in self.settings.load_models:
            await self.repository.load_many()
        else:
            self.repository.scan()  # a bad repository (or a duplicate name) fails the start
            await self.repository.load_many(self.settings.load_models)

    async def _exit_on_failed_loads(self) -> None:
        """--exit-on-error: a model that failed to load at start, or a cloud repository that
        could not be read, stops the server, as Triton's default does; what did load is
        unloaded first."""
        reasons = [reason for _, reason in self.repository.unavailable()]
        failed = [f"'{name}': {reason}" for name, reason in self.repository.failures()]
        if failed:
            reasons.append("model(s) failed to load: " + "; ".join(failed))
        if reasons:
            await self.repository.unload_all(timeout_s=1.0)
            self._cloud.close()
            raise ModelLoadFailedError("--exit-on-error: " + "; ".join(reasons))

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.repository_poll_s)
            try:
                await self.repository.poll()
            except ServerError as exc:  # e.g. a repository directory gone: try again later
                _log.error("repository poll failed: %s", exc)
            await self._set_health()


async def _within(step: Coroutine[Any, Any, None], timeout_s: float) -> bool:
    """Whether `step` finished within `timeout_s`; past it, the step is cancelled."""
    try:
        await asyncio.wait_for(step, timeout_s)
    except TimeoutError:
        return False
    return True


async def _unless(force: asyncio.Event, step: Coroutine[Any, Any, bool | None]) -> bool:
    """Run `step` unless `force` is set first; whether the step finished and said yes (None
    counts as yes). Forced, the step is cancelled and not waited for: a thread it waits on
    (a model's execute) may not end soon."""
    if force.is_set():
        step.close()
        return False
    task = asyncio.ensure_future(step)
    forced = asyncio.ensure_future(force.wait())
    await asyncio.wait({task, forced}, return_when=asyncio.FIRST_COMPLETED)
    forced.cancel()
    if not task.done():
        task.cancel()
        return False
    return task.result() is not False


def rate_limiter(settings: ServerSettings) -> RateLimiter | None:
    """The rate limiter `--rate-limit execution_count` asks for (None: off)."""
    if settings.rate_limit not in ("off", "execution_count"):
        raise ConfigError(f"--rate-limit {settings.rate_limit}: expected off or execution_count")
    try:
        explicit = [parse_explicit(text) for text in settings.rate_limit_resources]
    except PolicyError as exc:
        raise ConfigError(str(exc)) from None
    return RateLimiter(explicit) if settings.rate_limit == "execution_count" else None


def front_end_settings(settings: ServerSettings) -> FrontEndSettings:
    """What a front end needs of the server's settings."""
    return FrontEndSettings(
        grpc_address=settings.grpc_address,
        http_address=settings.http_address,
        grpc_port=settings.grpc_port,
        http_port=settings.http_port,
        allow_http=settings.allow_http,
        max_message_bytes=settings.max_message_bytes,
        model_control=settings.model_control_mode is ModelControlMode.EXPLICIT,
        restricted=settings.restricted,
        http_restricted=settings.http_restricted,
        trace=settings.trace,
        version=convoy_version(),
        server_name=settings.server_id,
        allow_grpc=settings.allow_grpc,
        grpc=settings.grpc,
        http_max_input_bytes=settings.http_max_input_bytes,
        grpc_forward_pattern=settings.grpc_forward_pattern,
        http_forward_pattern=settings.http_forward_pattern,
        fair_share_header=settings.fair_share_header,
        reuse_grpc_port=settings.reuse_grpc_port,
        reuse_http_port=settings.reuse_http_port,
    )


def model_table(repository: Repository) -> str:
    """The model / version / status table Triton logs at start."""
    rows = [
        (
            name,
            "" if s.version is None else str(s.version),
            s.state.value + (f": {s.reason}" if s.reason else ""),
        )
        for name, s in repository.index()
    ]
    headers = ("Model", "Version", "Status")
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: tuple[str, ...]) -> str:
        return "|" + "|".join(f" {c:<{w}} " for c, w in zip(cells, widths, strict=True)) + "|"

    return "\n".join([rule, line(headers), rule, *(line(r) for r in rows), rule])
