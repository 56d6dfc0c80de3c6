"""The edge every unary RPC passes (`edge`): its protocol group's restriction checked
(--grpc-restricted-protocol), then domain errors turned into their status codes."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from server.contract.errors import ServerError
from server.frontend.grpc.status import retry_pushback, status_for

_log = logging.getLogger(__name__)

_Resp = TypeVar("_Resp")
_Handler = Callable[..., Awaitable[_Resp]]


# Triton's protocol groups, which --grpc-restricted-protocol can put behind a header.
RPC_GROUPS: dict[str, str] = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}
RESTRICTABLE_GROUPS = frozenset(RPC_GROUPS.values())


def edge(method: _Handler[_Resp]) -> _Handler[_Resp]:
    """Check restrictions, then turn domain errors into their status codes; anything
    unexpected is INTERNAL and logged. Keyword arguments its registration binds (ModelInfer's
    `form`) pass through."""

    @functools.wraps(method)
    async def wrapper(
        self: Any, request: Any, context: grpc.aio.ServicerContext, **options: Any
    ) -> _Resp:
        counted = not self._draining
        self.calls += counted
        try:
            try:
                if self._restricted:
                    self._check_restricted(RPC_GROUPS[method.__name__], context)
                return await method(self, request, context, **options)
            except ServerError as exc:
                code, message, trailers = status_for(exc), str(exc), retry_pushback(exc)
            except Exception as exc:
                _log.exception("%s failed unexpectedly", method.__name__)
                code, message = grpc.StatusCode.INTERNAL, f"internal error: {exc}"
                trailers = ()
            try:
                await context.abort(code, message, trailers)
            except grpc.aio.InternalError:
                # gRPC's core ended the call first (its deadline passed before the answer, or
                # the client left), so no status can go out: end the handler as grpc.aio ends
                # a cancelled call, where the failed send would be logged as a server error.
                raise asyncio.CancelledError from None
            raise AssertionError("context.abort returned")  # abort always raises
        finally:
            self.calls -= counted

    return wrapper
