"""Every error of the lower packages becomes a contract error, with its status and message."""

import grpc

from backends import ExecutionError
from batching import QueueFullError
from server.contract.errors import InternalError, UnavailableError
from server.core.errors import CONTRACT_ERRORS, LOWER_ERROR_BASES, contract_error
from server.frontend.grpc import status_for


def _leaves(cls: type[Exception]) -> list[type[Exception]]:
    children = cls.__subclasses__()
    if not children:
        return [cls]
    return [leaf for child in children for leaf in _leaves(child)]


def test_every_lower_leaf_error_is_mapped() -> None:
    leaves = {leaf for base in LOWER_ERROR_BASES for leaf in _leaves(base)}
    assert leaves, "the error trees are empty"
    assert leaves - set(CONTRACT_ERRORS) == set()


def test_the_message_is_kept_and_the_status_follows_triton() -> None:
    full = contract_error(QueueFullError("Exceeds maximum queue size"))
    assert isinstance(full, UnavailableError) and str(full) == "Exceeds maximum queue size"
    assert status_for(full) == grpc.StatusCode.UNAVAILABLE
    failed = contract_error(ExecutionError("model 'm' failed"))
    assert isinstance(failed, InternalError)
    assert status_for(failed) == grpc.StatusCode.INTERNAL
