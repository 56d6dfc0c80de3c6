"""The one table from every error class to its gRPC status code, as Triton maps its own."""

from __future__ import annotations

import grpc

from backends import BackendError, ExecutionError, InvalidTensorError, ModelLoadError
from batching import (
    BatcherClosedError,
    BatchingError,
    ExecutorContractError,
    PolicyError,
    QueueFullError,
    RequestTimeoutError,
)
from server.contract.errors import (
    AlreadyExistsError,
    ConfigError,
    InvalidInputError,
    ModelControlDisabledError,
    ModelLoadFailedError,
    ModelNotFoundError,
    ModelNotReadyError,
    RegionNotFoundError,
    RestrictedError,
    ServerError,
    ServerStoppingError,
    UnsupportedError,
)

# Every leaf error class of every package; a test walks the class trees to prove it.
STATUS_CODES: dict[type[Exception], grpc.StatusCode] = {
    ServerStoppingError: grpc.StatusCode.UNAVAILABLE,
    ModelNotFoundError: grpc.StatusCode.NOT_FOUND,
    ModelNotReadyError: grpc.StatusCode.UNAVAILABLE,
    ConfigError: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidInputError: grpc.StatusCode.INVALID_ARGUMENT,
    UnsupportedError: grpc.StatusCode.UNIMPLEMENTED,
    ModelControlDisabledError: grpc.StatusCode.UNAVAILABLE,
    ModelLoadFailedError: grpc.StatusCode.INVALID_ARGUMENT,
    RestrictedError: grpc.StatusCode.UNAVAILABLE,
    AlreadyExistsError: grpc.StatusCode.ALREADY_EXISTS,
    RegionNotFoundError: grpc.StatusCode.NOT_FOUND,
    ModelLoadError: grpc.StatusCode.INTERNAL,
    ExecutionError: grpc.StatusCode.INTERNAL,
    InvalidTensorError: grpc.StatusCode.INVALID_ARGUMENT,
    BatcherClosedError: grpc.StatusCode.UNAVAILABLE,
    QueueFullError: grpc.StatusCode.UNAVAILABLE,
    RequestTimeoutError: grpc.StatusCode.UNAVAILABLE,
    PolicyError: grpc.StatusCode.INVALID_ARGUMENT,
    ExecutorContractError: grpc.StatusCode.INTERNAL,
}

# The bases whose leaves must all appear above.
ERROR_BASES: tuple[type[Exception], ...] = (ServerError, BackendError, BatchingError)


def status_for(error: Exception) -> grpc.StatusCode:
    """The status code of a known error (its nearest mapped class), else INTERNAL."""
    for cls in type(error).__mro__:
        code = STATUS_CODES.get(cls)
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL
