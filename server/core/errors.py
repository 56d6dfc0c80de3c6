"""The one table from the lower packages' errors (`backends`, `batching`) to the contract's, so
that a front end, in this process or another, sees only `ServerError`s; the message is kept."""

from __future__ import annotations

import math

from backends import (
    BackendError,
    ExecutionError,
    InvalidTensorError,
    ModelError,
    ModelLoadError,
)
from batching import (
    BatcherClosedError,
    BatcherFaultError,
    BatchingError,
    DeadlineExceededError,
    ExecutorContractError,
    LatencyTargetError,
    PolicyError,
    QueueFullError,
    RefusedError,
    RequestTimeoutError,
    SequenceError,
)
from server.contract import errors as contract

# Every leaf error class of `backends` and `batching`; a test walks the class trees to prove it.
CONTRACT_ERRORS: dict[type[Exception], type[contract.ServerError]] = {
    ModelLoadError: contract.InternalError,
    ExecutionError: contract.InternalError,
    ModelError: contract.InternalError,  # as its code says (`MODEL_ERRORS`); this is the default
    InvalidTensorError: contract.InvalidInputError,
    BatcherClosedError: contract.UnavailableError,
    QueueFullError: contract.UnavailableError,
    RequestTimeoutError: contract.UnavailableError,
    DeadlineExceededError: contract.DeadlineExceededError,
    LatencyTargetError: contract.UnavailableError,
    PolicyError: contract.InvalidInputError,
    ExecutorContractError: contract.InternalError,
    BatcherFaultError: contract.InternalError,
    SequenceError: contract.InvalidInputError,
}

# A model's own error by its Triton code, as Triton's front ends answer each code.
MODEL_ERRORS: dict[str, type[contract.ServerError]] = {
    "UNKNOWN": contract.UnknownError,
    "INTERNAL": contract.InternalError,
    "NOT_FOUND": contract.NotFoundError,
    "INVALID_ARG": contract.InvalidInputError,
    "UNAVAILABLE": contract.UnavailableError,
    "UNSUPPORTED": contract.UnsupportedError,
    "ALREADY_EXISTS": contract.AlreadyExistsError,
    "CANCELLED": contract.RequestCancelledError,
}

# The bases whose leaves must all appear above.
LOWER_ERROR_BASES: tuple[type[Exception], ...] = (BackendError, BatchingError)


def contract_error(error: BackendError | BatchingError) -> contract.ServerError:
    """The contract's error for a lower package's (its nearest mapped class; else internal)."""
    if isinstance(error, RefusedError) and error.retry_after_ns:
        # A refusal that says when to come back.
        return contract.UnavailableError(str(error), math.ceil(error.retry_after_ns / 1e6))
    if isinstance(error, ModelError):
        return MODEL_ERRORS.get(error.code, contract.InternalError)(str(error))
    for cls in type(error).__mro__:
        kind = CONTRACT_ERRORS.get(cls)
        if kind is not None:
            return kind(str(error))
    return contract.InternalError(str(error))
