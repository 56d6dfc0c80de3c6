"""`App`, the composition root: builds the repository, engine and front ends; starts, stops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from importlib import metadata

import grpc
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection, reflection_pb2

from backends import cuda_available
from proto import grpc_service_pb2, grpc_service_pb2_grpc, model_config_pb2
from server.contract.errors import ModelLoadFailedError, ServerError
from server.contract.logs import LogControl
from server.core.engine import Engine
from server.core.metrics.prometheus import MetricsOptions, MetricsServer, StatsCollector
from server.core.observability.tracing import RequestTracer
from server.core.repository import MemoryBudget, Repository
from server.core.shared_memory.cuda import CudaSharedMemoryRegistry
from server.core.shared_memory.regions import SharedMemory
from server.core.shared_memory.system import SharedMemoryRegistry
from server.frontend.grpc import InferenceServicer
from server.frontend.http import HttpFrontEnd
from server.settings import ModelControlMode, ServerSettings

_log = logging.getLogger(__name__)

INFERENCE_SERVICE = "inference.GRPCInferenceService"


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
        self.repository = Repository(
            settings.model_repositories,
            settings.model_load_threads,
            budget,
            completion=settings.auto_complete,
        )
        self.tracer = RequestTracer(settings.trace) if settings.trace.enabled else None
        self.engine = Engine(
            self.repository, settings.strict_readiness, settings.lazy_load_timeout_s, self.tracer
        )
        # One set of regions for both front ends. Without a usable GPU, CUDA shared memory is
        # refused (UNIMPLEMENTED over gRPC, 501 over HTTP).
        self.shared_memory = SharedMemory(
            SharedMemoryRegistry(), CudaSharedMemoryRegistry() if cuda_available() else None
        )
        self.grpc_port = settings.grpc_port
        self.metrics_port = settings.metrics_port
        self.http_port = settings.http_port
        self._http: HttpFrontEnd | None = None

    async def start(self) -> None:
        await self.engine.start()
        await self._load_initial_models()
        _log.info("models:\n%s", model_table(self.repository))
        if self.settings.exit_on_error:
            await self._exit_on_failed_loads()
        self._health = health_aio.HealthServicer()
        self._server = self._build_grpc_server()
        self.grpc_port = self._server.add_insecure_port(
            f"{self.settings.host}:{self.settings.grpc_port}"
        )
        if self.grpc_port == 0:
            raise OSError(f"cannot bind gRPC to {self.settings.host}:{self.settings.grpc_port}")
        await self._server.start()
        if self.settings.allow_http:
            self._http = HttpFrontEnd(
                self.engine,
                convoy_version(),
                self.settings.model_control_mode is ModelControlMode.EXPLICIT,
                self.settings.max_message_bytes,
                shared_memory=self.shared_memory,
                logs=self._logs,
                trace=self.settings.trace,
                restricted=self.settings.http_restricted,
            )
            self.http_port = await self._http.start(self.settings.host, self.settings.http_port)
        self._metrics_server: MetricsServer | None = None
        if self.settings.allow_metrics:
            options = MetricsOptions(
                counter_latencies=self.settings.counter_latencies,
                histograms=self.settings.histogram_metrics,
                cpu=self.settings.allow_cpu_metrics,
                gpu=self.settings.allow_gpu_metrics,
            )
            self._metrics_server = MetricsServer(
                StatsCollector(self.repository, options),
                self.settings.host,
                self.settings.metrics_port,
            )
            self._metrics_server.start()
            self.metrics_port = self._metrics_server.port
        await self._set_health()
        self._poller: asyncio.Task[None] | None = None
        if self.settings.model_control_mode is ModelControlMode.POLL:
            self._poller = asyncio.create_task(self._poll(), name="repository-poll")
        _log.info(
            "serving gRPC on %s:%d%s%s",
            self.settings.host,
            self.grpc_port,
            f", metrics on :{self.metrics_port}/metrics" if self._metrics_server else "",
            f", HTTP on :{self.http_port}" if self._http else "",
        )

    async def stop(self) -> None:
        """Readiness goes false, new requests get UNAVAILABLE, in-flight ones finish (bounded)."""
        timeout_s = self.settings.exit_timeout_s
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        self.engine.stop_accepting()
        await self._set_health()
        if not await self.engine.wait_idle(timeout_s):
            _log.warning("requests still in flight after %.1f s; stopping anyway", timeout_s)
        if self._http is not None:
            await self._http.stop()
        await self._server.stop(grace=1.0)
        await self.repository.unload_all(timeout_s=1.0)
        self.shared_memory.close()
        if self._metrics_server is not None:
            self._metrics_server.stop()
        if self.tracer is not None:
            await asyncio.to_thread(self.tracer.shutdown)
        _log.info("stopped")

    async def _load_initial_models(self) -> None:
        mode = self.settings.model_control_mode
        if mode is not ModelControlMode.EXPLICIT or "*" in self.settings.load_models:
            await self.repository.load_many()
        else:
            self.repository.scan()  # a bad repository (or a duplicate name) fails the start
            await self.repository.load_many(self.settings.load_models)

    async def _exit_on_failed_loads(self) -> None:
        """--exit-on-error: a model that failed to load at start stops the server, as Triton's
        default does; what did load is unloaded first."""
        failed = [f"'{name}': {reason}" for name, reason in self.repository.failures()]
        if failed:
            await self.repository.unload_all(timeout_s=1.0)
            raise ModelLoadFailedError(
                "--exit-on-error: model(s) failed to load: " + "; ".join(failed)
            )

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.repository_poll_s)
            try:
                await self.repository.poll()
            except ServerError as exc:  # e.g. a repository directory gone: try again later
                _log.error("repository poll failed: %s", exc)
            await self._set_health()

    def _build_grpc_server(self) -> grpc.aio.Server:
        limit = self.settings.max_message_bytes
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
            ]
        )
        servicer = InferenceServicer(
            self.engine,
            convoy_version(),
            self.settings.model_control_mode is ModelControlMode.EXPLICIT,
            self.settings.restricted,
            self.settings.trace,
            self._logs,
            shared_memory=self.shared_memory,
        )
        grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            servicer, server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        services = (
            INFERENCE_SERVICE,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(services, server, pool=_reflection_pool())
        return server

    async def _set_health(self) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.engine.ready()
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("", INFERENCE_SERVICE):
            await self._health.set(service, status)


def _reflection_pool() -> DescriptorPool:
    # Convoy's descriptors live in a private pool (see proto._pool); reflection also needs
    # health's and its own, which live in the default pool, so it gets a pool holding all four.
    pool = DescriptorPool()
    for file in (
        model_config_pb2.DESCRIPTOR,
        grpc_service_pb2.DESCRIPTOR,
        health_pb2.DESCRIPTOR,
        reflection_pb2.DESCRIPTOR,
    ):
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        pool.Add(proto)  # type: ignore[no-untyped-call]
    return pool


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
