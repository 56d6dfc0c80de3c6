"""The tables from the lower packages' errors (`backends`, `batching`) to the contract's, so
that a front end, in this process or another, sees only `ServerError`s (the message kept; a
Python model's own error by its Triton code), and from the contract's back to Triton's codes,
for a Python model's failed call to another model."""

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
    SequenceLostError,
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
    SequenceLostError: contract.InternalError,  # as the request that ran when its worker died
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

# The Triton code a Python model's call to another model (BLS) answers each contract error with,
# as Triton's calls carry its own errors' codes: the codes above, and for the rest the code of
# their gRPC status (a request dropped at its deadline: UNAVAILABLE, as Triton's queue timeout).
TRITON_CODES: dict[type[contract.ServerError], str] = {
    **{kind: code for code, kind in MODEL_ERRORS.items()},
    contract.ServerStoppingError: "UNAVAILABLE",
    contract.ModelNotFoundError: "NOT_FOUND",
    contract.ModelNotReadyError: "UNAVAILABLE",
    contract.ConfigError: "INVALID_ARG",
    contract.ModelControlDisabledError: "UNAVAILABLE",
    contract.ModelLoadFailedError: "INVALID_ARG",
    contract.RestrictedError: "UNAVAILABLE",
    contract.RegionNotFoundError: "NOT_FOUND",
    contract.DeadlineExceededError: "UNAVAILABLE",
}

# The bases whose leaves must all appear above.
LOWER_ERROR_BASES: tuple[type[Exception], ...] = (BackendError, BatchingError)


def contract_error(error: BackendError | BatchingError) -> contract.ServerError:
    """The contract's error for a lower package's (its nearest mapped class; else internal)."""
    if isinstance(error, RefusedError) and error.retry_after_ns:
        # A refusal that says when to come back.
        return contract.UnavailableError(str(error), math.ceil(error.retry_after_ns / 1e6))
    if isinstance(error, ModelError):
        return MODEL_ERRORS[error.code](str(error))  # a ModelError's code is always a known one
    for cls in type(error).__mro__:
        kind = CONTRACT_ERRORS.get(cls)
        if kind is not None:
            return kind(str(error))
    return contract.InternalError(str(error))


def model_error(error: contract.ServerError | BackendError | BatchingError) -> ModelError:
    """A failed call to a model as the calling Python model sees it: the message, with the
    Triton code of its contract error (`TRITON_CODES`; INTERNAL where none is mapped)."""
    if isinstance(error, ModelError):
        return error
    answered = error if isinstance(error, contract.ServerError) else contract_error(error)
    for cls in type(answered).__mro__:
        code = TRITON_CODES.get(cls)
        if code is not None:
            return ModelError(str(answered), code)
    return ModelError(str(answered))
