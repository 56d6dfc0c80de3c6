"""Every error class of every package maps to a gRPC status code, as Triton's do: the contract's
directly, the lower packages' (backends, batching) through the contract error the core turns
them into, message kept."""

import grpc

from backends import MODEL_ERROR_CODES, ExecutionError, ModelError
from batching import QueueFullError
from server.contract.errors import (
    DeadlineExceededError,
    InternalError,
    ModelNotFoundError,
    ServerStoppingError,
    UnavailableError,
)
from server.core.errors import (
    CONTRACT_ERRORS,
    LOWER_ERROR_BASES,
    MODEL_ERRORS,
    TRITON_CODES,
    contract_error,
    model_error,
)
from server.frontend.grpc import ERROR_BASES, STATUS_CODES, status_for


def _leaves(cls: type[Exception]) -> list[type[Exception]]:
    children = cls.__subclasses__()
    if not children:
        return [cls]
    return [leaf for child in children for leaf in _leaves(child)]


def test_every_leaf_error_is_mapped() -> None:
    leaves = {leaf for base in ERROR_BASES for leaf in _leaves(base)}
    assert leaves, "the error trees are empty"
    assert leaves - set(STATUS_CODES) == set()


def test_codes_follow_triton() -> None:
    assert status_for(ModelNotFoundError("x")) == grpc.StatusCode.NOT_FOUND
    assert status_for(ServerStoppingError("x")) == grpc.StatusCode.UNAVAILABLE
    assert status_for(RuntimeError("x")) == grpc.StatusCode.INTERNAL


def test_every_lower_leaf_error_becomes_a_contract_error() -> None:
    leaves = {leaf for base in LOWER_ERROR_BASES for leaf in _leaves(base)}
    assert leaves, "the error trees are empty"
    assert leaves - set(CONTRACT_ERRORS) == set()


def test_a_lower_error_keeps_its_message_and_triton_status() -> None:
    full = contract_error(QueueFullError("Exceeds maximum queue size"))
    assert isinstance(full, UnavailableError) and str(full) == "Exceeds maximum queue size"
    assert status_for(full) == grpc.StatusCode.UNAVAILABLE
    failed = contract_error(ExecutionError("model 'm' failed"))
    assert isinstance(failed, InternalError)
    assert status_for(failed) == grpc.StatusCode.INTERNAL


def test_a_models_own_error_takes_the_status_its_code_names() -> None:
    assert set(MODEL_ERRORS) == set(MODEL_ERROR_CODES)
    expected = {
        "UNKNOWN": grpc.StatusCode.UNKNOWN,
        "INTERNAL": grpc.StatusCode.INTERNAL,
        "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
        "INVALID_ARG": grpc.StatusCode.INVALID_ARGUMENT,
        "UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
        "UNSUPPORTED": grpc.StatusCode.UNIMPLEMENTED,
        "ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
        "CANCELLED": grpc.StatusCode.CANCELLED,
    }
    for code, status in expected.items():
        error = contract_error(ModelError(f"error code: {code}", code))
        assert status_for(error) == status and str(error) == f"error code: {code}"
    assert status_for(contract_error(ModelError("x", "NO_SUCH_CODE"))) == grpc.StatusCode.INTERNAL


def test_a_failed_call_from_a_python_model_carries_the_code_of_its_status() -> None:
    leaves = {leaf for base in ERROR_BASES for leaf in _leaves(base)}
    assert leaves - set(TRITON_CODES) == set()
    for kind, code in TRITON_CODES.items():
        answered = contract_error(ModelError("x", code))  # back the way the caller's goes out
        if kind is not DeadlineExceededError:  # Triton has no code of its own for that one
            assert status_for(answered) == STATUS_CODES[kind], kind
    assert model_error(QueueFullError("full")).code == "UNAVAILABLE"
    assert model_error(ModelNotFoundError("gone")).code == "NOT_FOUND"
    called = ModelError("no", "INVALID_ARG")
    assert model_error(called) is called
