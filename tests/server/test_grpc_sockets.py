"""server.frontend.grpc.sockets on a real grpc.aio server (the health service) and real clients:
its listening socket shut leaves the open connections serving and refuses new ones; its
connections closed make a call fail as UNAVAILABLE, never CANCELLED."""

from __future__ import annotations

import asyncio
import socket

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from server.frontend.grpc import close_connections, stop_listening

OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except ConnectionRefusedError:
        return True
    return False


async def _check(channel: grpc.aio.Channel) -> grpc.StatusCode:
    try:
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_listening_stops_first_then_the_connections_close() -> None:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health_aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=OWN_CONNECTION)
    # A socket of this process on another port, both ends: never touched.
    other = await asyncio.start_server(lambda _reader, _writer: None, "127.0.0.1", 0)
    _, writer = await asyncio.open_connection("127.0.0.1", other.sockets[0].getsockname()[1])
    try:
        assert await _check(channel) == grpc.StatusCode.OK
        assert stop_listening(port) >= 1
        assert _refused(port)
        assert await _check(channel) == grpc.StatusCode.OK  # the open connection serves on
        assert stop_listening(port) == 0  # nothing listens any more
        assert close_connections(port) == 1
        # The connection is gone and no new one is taken: UNAVAILABLE, retryable.
        assert await _check(channel) == grpc.StatusCode.UNAVAILABLE
        writer.write(b"still open")
        await writer.drain()
    finally:
        writer.close()
        other.close()
        await channel.close()
        await server.stop(None)
