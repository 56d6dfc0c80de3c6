"""The one table from every error class to its gRPC status code, as Triton maps its own."""

from __future__ import annotations

import grpc

from server.contract.errors import (
    AlreadyExistsError,
    ConfigError,
    DeadlineExceededError,
    InternalError,
    InvalidInputError,
    ModelControlDisabledError,
    ModelLoadFailedError,
    ModelNotFoundError,
    ModelNotReadyError,
    NotFoundError,
    RegionNotFoundError,
    RequestCancelledError,
    RestrictedError,
    ServerError,
    ServerStoppingError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)

# Every leaf error class of the contract (the core turns the lower packages' errors into these:
# `server.core.errors`); a test walks the class tree to prove it.
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
    UnavailableError: grpc.StatusCode.UNAVAILABLE,
    DeadlineExceededError: grpc.StatusCode.DEADLINE_EXCEEDED,
    InternalError: grpc.StatusCode.INTERNAL,
    NotFoundError: grpc.StatusCode.NOT_FOUND,
    RequestCancelledError: grpc.StatusCode.CANCELLED,
    UnknownError: grpc.StatusCode.UNKNOWN,
}

# The bases whose leaves must all appear above.
ERROR_BASES: tuple[type[Exception], ...] = (ServerError,)


def status_for(error: Exception) -> grpc.StatusCode:
    """The status code of a known error (its nearest mapped class), else INTERNAL."""
    for cls in type(error).__mro__:
        code = STATUS_CODES.get(cls)
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL


# gRPC's trailer telling a client with a retry policy how long to wait before its next attempt
# (gRPC's retry design, A6); without a policy a client ignores it.
RETRY_PUSHBACK = "grpc-retry-pushback-ms"


def retry_pushback(error: ServerError) -> tuple[tuple[str, str], ...]:
    """The trailers of a refusal that knows when to come back (an UnavailableError's retry
    hint); none for any other error."""
    if isinstance(error, UnavailableError) and error.retry_after_ms is not None:
        return ((RETRY_PUSHBACK, str(error.retry_after_ms)),)
    return ()
