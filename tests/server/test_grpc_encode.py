"""Answers serialized straight from their outputs' bytes parse as the messages would."""

import numpy as np
import pytest

from proto import grpc_service_pb2 as pb
from server.contract.datatypes import BY_WIRE
from server.contract.model_io import TensorSpec
from server.contract.responses import InferOutput, InferResponse
from server.frontend.grpc.encode import (
    encode_response,
    encode_response_bytes,
    encode_stream_response_bytes,
)
from server.frontend.grpc.stream import stream_message


def _output(name: str, wire: str, array: np.ndarray | None, shape: tuple[int, ...]) -> InferOutput:
    return InferOutput(TensorSpec(name, BY_WIRE[wire], shape[1:], False), shape, array)


LARGE = np.arange(4096, dtype=np.float32).reshape(1, 4096)


def _mixed_response(parameters: dict[str, int | bool] | None = None) -> InferResponse:
    """Every output in order: one past a varint byte of length, one in shared memory, BYTES, an
    empty one."""
    return InferResponse(
        "model",
        3,
        [
            _output("A", "FP32", LARGE, (1, 4096)),
            _output("B", "INT64", None, (1, 2)),
            _output("C", "BYTES", np.array([[b"x", b""]], dtype=object), (1, 2)),
            _output("D", "FP16", np.zeros((0, 2), np.float16), (0, 2)),
        ],
        parameters,
    )


@pytest.mark.parametrize("request_id", ["", "id-1", "x" * 300])
def test_response_bytes_parse_as_the_message_would(request_id: str) -> None:
    """The serialized answer built without a message holds what the message holds: every output
    in order, one in shared memory as an empty entry, BYTES, lengths over one varint byte."""
    response = _mixed_response()
    expected = encode_response(response, request_id)
    parsed = pb.ModelInferResponse.FromString(encode_response_bytes(response, request_id))
    assert parsed == expected
    assert parsed.raw_output_contents[0] == LARGE.tobytes()
    assert parsed.raw_output_contents[1] == b""


def test_response_bytes_with_parameters_carry_them() -> None:
    response = InferResponse(
        "model", 1, [_output("A", "FP32", np.ones((1, 1), np.float32), (1, 1))], {"k": 1}
    )
    parsed = pb.ModelInferResponse.FromString(encode_response_bytes(response, "r"))
    assert parsed == encode_response(response, "r")
    assert parsed.parameters["k"].int64_param == 1


@pytest.mark.parametrize("final", [True, False])
@pytest.mark.parametrize("request_id", ["", "id-1", "x" * 300])
@pytest.mark.parametrize("parameters", [None, {"k": 1, "triton_final_response": False}])
def test_stream_response_bytes_parse_as_the_stream_message_would(
    final: bool, request_id: str, parameters: dict[str, int | bool] | None
) -> None:
    """A stream's answer built as its bytes holds what `stream_message` builds: the response,
    its parameters, and the final flag, which wins over a parameter of the same name (the
    message sets it last), past one varint byte of length."""
    response = _mixed_response(parameters)
    request = pb.ModelInferRequest(model_name="model", id=request_id)
    data = encode_stream_response_bytes(response, request_id, final)
    parsed = pb.ModelStreamInferResponse.FromString(data)
    assert parsed == stream_message(request, response, final)
    assert parsed.infer_response.parameters["triton_final_response"].bool_param is final
    assert not parsed.error_message
