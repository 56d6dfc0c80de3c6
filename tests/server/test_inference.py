"""Checking decoded requests against the model's declared tensors."""

import numpy as np
import pytest

from server.contract.errors import InvalidInputError
from server.contract.model_io import ModelIO, check_request
from server.contract.requests import InferInput, model_parameters
from server.core.repository import parse_config

BATCHING = ModelIO.from_config(
    parse_config(
        """
        name: "m" max_batch_size: 8
        input [ { name: "a" data_type: TYPE_FP32 dims: [ -1, 4 ] },
                { name: "b" data_type: TYPE_INT32 dims: [ 2 ] optional: true } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
        """,
        "inline",
    )
)
FIXED = ModelIO.from_config(
    parse_config('name: "f" input [ { name: "a" data_type: TYPE_FP32 dims: [ 2, 4 ] } ]', "inline")
)


def _input(name: str, datatype: str, shape: tuple[int, ...]) -> InferInput:
    return InferInput(name, datatype, shape, np.zeros(shape, np.float32))


def test_batch_size_comes_from_the_first_dimension() -> None:
    arrays, batch = check_request(BATCHING, [_input("a", "FP32", (3, 5, 4))], ["y"])
    assert batch == 3
    assert list(arrays) == ["a"]


def test_non_batching_model_has_batch_size_zero() -> None:
    _, batch = check_request(FIXED, [_input("a", "FP32", (2, 4))], [])
    assert batch == 0


@pytest.mark.parametrize(
    ("inputs", "outputs", "expected"),
    [
        ([_input("z", "FP32", (1, 1, 4))], [], "unexpected inference input 'z'"),
        (
            [_input("a", "INT32", (1, 1, 4))],
            [],
            "data-type is 'INT32', but model 'm' expects 'FP32'",
        ),
        ([_input("a", "FP32", (1, 1, 5))], [], r"Expected \[-1, -1, 4\], got \[1, 1, 5\]"),
        ([_input("a", "FP32", (9, 1, 4))], [], "batch-size must be <= 8"),
        ([_input("a", "FP32", (0, 1, 4))], [], "batch-size must be >= 1"),
        ([_input("a", "FP32", ())], [], "no batch dimension"),
        ([_input("a", "FP32", (1, 1, 4))], ["nope"], "unexpected inference output 'nope'"),
        (
            [_input("a", "FP32", (1, 1, 4)), _input("b", "INT32", (2, 2))],
            [],
            "batch size 2, but other inputs",
        ),
        ([_input("a", "FP32", (1, 1, 4)), _input("a", "FP32", (1, 1, 4))], [], "more than once"),
    ],
)
def test_bad_requests_are_invalid_input(
    inputs: list[InferInput], outputs: list[str], expected: str
) -> None:
    with pytest.raises(InvalidInputError, match=expected):
        check_request(BATCHING, inputs, outputs)


def test_missing_required_input_names_it() -> None:
    with pytest.raises(InvalidInputError, match=r"missing required input\(s\) \['a'\]"):
        check_request(BATCHING, [_input("b", "INT32", (1, 2))], [])


def test_model_parameters_leave_out_what_triton_reserves() -> None:
    chosen = model_parameters(
        [
            ("priority", 1),
            ("timeout", 10),
            ("binary_data_output", True),
            ("triton_enable_empty_final_response", True),
            ("temperature", 0.5),
            ("mode", "fast"),
        ]
    )
    assert chosen == {"temperature": 0.5, "mode": "fast"}
    with pytest.raises(InvalidInputError, match="'stop' must be a boolean, number or string"):
        model_parameters([("stop", ["\n"])])
