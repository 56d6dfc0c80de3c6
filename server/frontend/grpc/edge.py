"""The edge every unary RPC passes (`edge`): its protocol group's restriction checked
(--grpc-restricted-protocol), then domain errors turned into their status codes; and what
grpc.aio logs of an answer that came after its call ended (`quiet_finished_calls`)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from server.contract.errors import ServerError
from server.frontend.grpc.status import retry_pushback, status_for

_log = logging.getLogger(__name__)
GRPC_AIO_LOGGER = "grpc._cython.cygrpc"  # where grpc.aio's server logs its handlers' failures

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


class FinishedCallFilter(logging.Filter):
    """For grpc.aio's logger: an answer (or error status) whose send failed because gRPC's core
    had already ended the call (its deadline passed, or its client left, while the handler ran)
    is logged by grpc.aio as a server error with a traceback whenever grpc.aio had not yet seen
    the end, and ignored when it had; the client has its status from the core either way. Such
    a record becomes one debug line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if type(error).__name__ != "ExecuteBatchError":
            return True
        record.msg = f"{record.getMessage()}: the call had already ended"
        record.args, record.exc_info = (), None
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger().isEnabledFor(logging.DEBUG)


def quiet_finished_calls() -> None:
    """Give grpc.aio's logger a `FinishedCallFilter` (once per process)."""
    grpc_log = logging.getLogger(GRPC_AIO_LOGGER)
    if not any(isinstance(f, FinishedCallFilter) for f in grpc_log.filters):
        grpc_log.addFilter(FinishedCallFilter())


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
            await context.abort(code, message, trailers)
            raise AssertionError("context.abort returned")  # abort always raises
        finally:
            self.calls -= counted

    return wrapper
