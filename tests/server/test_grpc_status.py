"""Every error class of every package maps to a gRPC status code, as Triton's do."""

import grpc

from server.contract.errors import ModelNotFoundError, ServerStoppingError
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
