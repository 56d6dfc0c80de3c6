"""`FrontEnd`: one process's gRPC server (Triton's service, health, reflection) and HTTP/REST
routes over a `Core`; started, told the server's health, and stopped by its owner."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from proto import grpc_service_pb2, model_config_pb2
from server.contract.core import Core
from server.contract.ports import probe_port
from server.contract.settings import FrontEndSettings, GrpcTls
from server.frontend.grpc import (
    GenericOnly,
    InferenceServicer,
    close_connections,
    inference_handler,
    quiet_finished_calls,
    stop_listening,
)
from server.frontend.http import HttpFrontEnd
from server.frontend.serialized import SerializedInfer

_log = logging.getLogger(__name__)

INFERENCE_SERVICE = "inference.GRPCInferenceService"
_POLL_S = 0.01  # how often a stop looks for the calls still being served
# After the last call's handler returned, what its answer needs to be written out (grpc sends it
# after the handler) before the connections close.
_SETTLE_S = 0.05
CONNECTION_AGE_MS = 20_000  # with shared ports: a connection's life before it is re-dealt
# Triton's --grpc-infer-response-compression-level: responses are compressed with gzip at any
# level but none (gRPC's levels pick among the algorithms the client accepts; Python's server
# takes the algorithm).
COMPRESSION = {
    "none": grpc.Compression.NoCompression,
    "low": grpc.Compression.Gzip,
    "medium": grpc.Compression.Gzip,
    "high": grpc.Compression.Gzip,
}


class FrontEnd:
    """Serves gRPC (and HTTP, if allowed) for one process; the ports bound are known once
    `start` returns."""

    def __init__(
        self, core: Core, settings: FrontEndSettings, forward: SerializedInfer | None = None
    ) -> None:
        """`forward`: where unary ModelInfer calls go as their bytes (a front-end worker's
        core; see server.frontend.grpc.forward); None: every call is decoded here."""
        self._core = core
        self._forward = forward
        self._settings = settings
        self.grpc_port = settings.grpc_port
        self.http_port = settings.http_port
        self._http: HttpFrontEnd | None = None
        self._server: grpc.aio.Server | None = None
        self._servicer: InferenceServicer | None = None
        self._health: health_aio.HealthServicer | None = None
        self._draining = False

    async def start(self) -> None:
        settings = self._settings
        if settings.allow_grpc:
            self._health = health_aio.HealthServicer()
            self._server = self._build_grpc_server(self._health)
            self.grpc_port = self._bind_grpc(self._server)
            await self._server.start()
        if settings.allow_http:
            self._http = HttpFrontEnd(
                self._core,
                settings.version,
                settings.model_control,
                settings.http_max_input_bytes,
                trace=settings.trace,
                restricted=settings.http_restricted,
                name=settings.server_name,
                forward_pattern=settings.http_forward_pattern,
                share_header=settings.fair_share_header,
                forward=self._forward,
            )
            self.http_port = await self._http.start(
                settings.http_address,
                settings.http_port,
                reuse_port=settings.reuse_port or settings.reuse_http_port,
                # Workers on one port: as gRPC's GOAWAY, so that an unlucky deal does not last.
                max_connection_age_s=CONNECTION_AGE_MS / 1000 if settings.reuse_port else None,
            )

    def _bind_grpc(self, server: grpc.aio.Server) -> int:
        settings = self._settings
        host = settings.grpc_address
        address = (
            f"[{host}]:{settings.grpc_port}" if ":" in host else f"{host}:{settings.grpc_port}"
        )
        tls = settings.grpc.tls
        if settings.grpc_port and not (settings.reuse_port or settings.reuse_grpc_port):
            probe_port(host, settings.grpc_port)  # before grpc logs its own bind failure
        try:
            if tls is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, server_credentials(tls))
        except RuntimeError:  # grpc's way of saying the bind failed (the port is in use)
            port = 0
        if port == 0:
            raise OSError(f"cannot bind gRPC to {address}: the address is in use or unavailable")
        return int(port)

    async def set_health(self, serving: bool) -> None:
        """What grpc.health.v1 answers for the server and Triton's service."""
        if self._health is None:
            return
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("", INFERENCE_SERVICE):
            await self._health.set(service, status)

    async def drain(self) -> None:
        """The first step of a stop: readiness false, new connections refused (clients and
        balancers retry those elsewhere); the open ones go on. An HTTP connection closes after its
        current answer, a gRPC stream ends after the answers of the requests it has."""
        if self._draining:
            return
        self._draining = True
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._http is not None:
            self._http.drain()
        if self._server is not None and stop_listening(self.grpc_port):
            # grpc then logs, as an error, that its acceptor closed: that is this.
            _log.info("draining: gRPC port %d no longer accepts connections", self.grpc_port)
        if self._servicer is not None:
            self._servicer.drain()

    async def wait_calls(self, timeout_s: float) -> bool:
        """Wait (bounded) until no gRPC call or HTTP request is being served; True if none is."""
        deadline_s = time.monotonic() + timeout_s
        while self._calls() and time.monotonic() < deadline_s:
            await asyncio.sleep(_POLL_S)
        return not self._calls()

    def _calls(self) -> int:
        grpc_calls = 0 if self._servicer is None else self._servicer.calls
        return grpc_calls + (0 if self._http is None else self._http.answering)

    async def stop(self, grace_s: float = 1.0) -> None:
        """Drain; calls still running get `grace_s` to finish; then the gRPC connections are
        closed (a call sent meanwhile fails as UNAVAILABLE, never CANCELLED) and both servers
        stop."""
        await self.drain()
        idle = await self.wait_calls(grace_s)
        if self._server is not None:
            if idle:
                await asyncio.sleep(_SETTLE_S)
                close_connections(self.grpc_port)
            await self._server.stop(grace=None)  # what is left is cut (CANCELLED)
        if self._http is not None:
            await self._http.stop(grace_s=0.0)

    def _build_grpc_server(self, health: health_aio.HealthServicer) -> grpc.aio.Server:
        settings = self._settings
        options = server_options(settings)
        quiet_finished_calls()
        server = grpc.aio.server(
            options=options, compression=COMPRESSION[settings.grpc.compression]
        )
        servicer = InferenceServicer(
            self._core,
            settings.version,
            settings.model_control,
            settings.restricted,
            settings.trace,
            name=settings.server_name,
            forward_pattern=settings.grpc_forward_pattern,
            share_header=settings.fair_share_header,
            forward=self._forward,
        )
        self._servicer = servicer
        # Generic handlers only: grpc.aio then waits on one future per accepted call, not
        # one per method (see server.frontend.grpc.registration).
        server.add_generic_rpc_handlers((inference_handler(servicer),))
        registrar = GenericOnly(server)
        health_pb2_grpc.add_HealthServicer_to_server(health, registrar)
        services: Sequence[str] = (
            INFERENCE_SERVICE,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        )
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
            reflection.aio.ReflectionServicer(services, pool=_reflection_pool()), registrar
        )
        return server


def server_options(settings: FrontEndSettings) -> list[tuple[str, int]]:
    """The gRPC server's channel arguments: message limits, Triton's keepalive and connection
    age options, and SO_REUSEPORT where the port is shared."""
    grpc_options = settings.grpc
    limit = settings.max_message_bytes
    options: list[tuple[str, int]] = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.so_reuseport", 1 if settings.reuse_port or settings.reuse_grpc_port else 0),
        ("grpc.keepalive_time_ms", grpc_options.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", grpc_options.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(grpc_options.keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", grpc_options.http2_max_pings_without_data),
        (
            "grpc.http2.min_ping_interval_without_data_ms",
            grpc_options.http2_min_recv_ping_interval_without_data_ms,
        ),
        ("grpc.http2.max_ping_strikes", grpc_options.http2_max_ping_strikes),
    ]
    age_ms = grpc_options.max_connection_age_ms
    if age_ms is None and settings.reuse_port:
        # The kernel hashes each connection to one of the processes on the port, and an
        # HTTP/2 connection carries all of a client's calls: a GOAWAY after an age makes
        # clients take their next calls to a new connection (dealt again) while the calls
        # in flight, long streams included, finish on the old one (no grace limit).
        age_ms = CONNECTION_AGE_MS
    if age_ms is not None:
        options.append(("grpc.max_connection_age_ms", age_ms))
    if grpc_options.max_connection_age_grace_ms is not None:
        grace_ms = grpc_options.max_connection_age_grace_ms
        options.append(("grpc.max_connection_age_grace_ms", grace_ms))
    return options


def server_credentials(tls: GrpcTls) -> grpc.ServerCredentials:
    """The certificate the server presents, and in mutual mode the roots a client's
    certificate must chain to (a client without one is refused during the handshake)."""
    key, chain = Path(tls.server_key).read_bytes(), Path(tls.server_cert).read_bytes()
    roots = Path(tls.root_cert).read_bytes() if tls.root_cert else None
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=roots, require_client_auth=tls.mutual
    )


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
