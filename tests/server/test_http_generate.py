"""Triton's generate extension: JSON values onto tensors shaped from the model, and back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from server.contract.datatypes import BY_WIRE
from server.contract.errors import InvalidInputError
from server.contract.model_io import ModelIO, TensorSpec
from server.contract.responses import InferOutput, InferResponse
from server.frontend.http.generate import event, generate_answer, generate_inputs, tensor_shape


def _io(max_batch_size: int, **inputs: tuple[str, tuple[int, ...]]) -> ModelIO:
    specs = {
        name: TensorSpec(name, BY_WIRE[wire], dims, False) for name, (wire, dims) in inputs.items()
    }
    return ModelIO("m", max_batch_size, specs, {})


@pytest.mark.parametrize(
    "dims, count, expected",
    [
        ((-1, 16), 16, (1, 16)),  # a batching model's row
        ((-1, 1), 1, (1, 1)),  # a scalar for a batching model
        ((-1, -1), 5, (1, 5)),  # the innermost variable dim takes the values
        ((2, 4), 8, (2, 4)),
        ((-1,), 3, (3,)),
        ((), 1, ()),
        ((-1, 16), 8, None),  # cannot fill a fixed dim
        ((2, 4), 16, None),  # too many for a fixed shape
    ],
)
def test_tensor_shape_follows_triton(
    dims: tuple[int, ...], count: int, expected: tuple[int, ...] | None
) -> None:
    assert tensor_shape(dims, count) == expected


def test_inputs_become_tensors_and_other_keys_parameters() -> None:
    io = _io(8, INPUT0=("FP32", (16,)), TEXT=("BYTES", (-1,)))
    body = {
        "id": "g-1",
        "INPUT0": list(range(16)),
        "TEXT": "naïve",
        "max_tokens": 20,
        "parameters": {"temperature": 0.5, "stream": False},
    }
    (row, text), request_id, parameters = generate_inputs(body, io)
    assert request_id == "g-1"
    assert parameters == {"max_tokens": 20, "temperature": 0.5, "stream": False}
    assert row.shape == (1, 16) and row.array.dtype == np.float32
    np.testing.assert_array_equal(row.array[0], np.arange(16, dtype=np.float32))
    assert text.shape == (1, 1) and text.array[0, 0] == "naïve".encode()


@pytest.mark.parametrize(
    "body, expected",
    [
        ({"INPUT0": [1.0, 2.0]}, "cannot fill a tensor of shape"),
        ({"INPUT0": ["a"] * 16}, "not FP32"),
        ({"NOT_AN_INPUT": [1, 2]}, "parameter 'NOT_AN_INPUT' has invalid type"),
        ({"parameters": {"nested": {"a": 1}}}, "parameter 'nested' has invalid type"),
        ({"parameters": [1]}, "must be a JSON object"),
        ({"id": 7}, "'id' must be a string"),
    ],
)
def test_bad_generate_requests_are_invalid(body: dict[str, object], expected: str) -> None:
    with pytest.raises(InvalidInputError, match=expected):
        generate_inputs(body, _io(8, INPUT0=("FP32", (16,))))


def test_answer_has_one_key_per_output_and_single_values_unwrapped() -> None:
    row = TensorSpec("OUTPUT0", BY_WIRE["INT32"], (3,), False)
    word = TensorSpec("TEXT", BY_WIRE["BYTES"], (1,), False)
    response = InferResponse(
        "m",
        2,
        [
            InferOutput(row, (1, 3), np.array([[1, 2, 3]], np.int32)),
            InferOutput(word, (1, 1), np.array([[b"hi"]], dtype=object)),
        ],
    )
    answer = generate_answer(response, "g-1")
    assert answer == {
        "model_name": "m",
        "model_version": "2",
        "id": "g-1",
        "OUTPUT0": [1, 2, 3],
        "TEXT": "hi",
    }
    assert "id" not in generate_answer(response, "")
    assert event({"a": 1}) == b'data: {"a": 1}\n\n'
    assert json.loads(event(answer)[len(b"data: ") :]) == answer
