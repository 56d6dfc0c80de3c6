"""The tensor codec: raw and typed contents, BYTES length prefixes, wire-level errors."""

import struct

import numpy as np
import pytest

from proto import grpc_service_pb2 as pb
from server.contract.datatypes import BY_WIRE, decode_raw, encode_bytes, encode_raw
from server.contract.errors import InvalidInputError
from server.contract.requests import InferOptions
from server.frontend.grpc.codec import (
    decode_inputs,
    decode_outputs,
    infer_options,
)

FIXED_TYPES = {
    "BOOL": np.array([[True, False], [False, True]]),
    "UINT8": np.array([[0, 255], [1, 2]], np.uint8),
    "UINT16": np.array([[0, 65535], [1, 2]], np.uint16),
    "UINT32": np.array([[0, 2**32 - 1], [1, 2]], np.uint32),
    "UINT64": np.array([[0, 2**64 - 1], [1, 2]], np.uint64),
    "INT8": np.array([[-128, 127], [1, 2]], np.int8),
    "INT16": np.array([[-(2**15), 2**15 - 1], [1, 2]], np.int16),
    "INT32": np.array([[-(2**31), 2**31 - 1], [1, 2]], np.int32),
    "INT64": np.array([[-(2**63), 2**63 - 1], [1, 2]], np.int64),
    "FP16": np.array([[0.5, -1.5], [65504, 2]], np.float16),
    "FP32": np.array([[0.5, -1.5], [3.25, 2]], np.float32),
    "FP64": np.array([[0.5, -1.5], [1e300, 2]], np.float64),
    "BF16": np.array([[0x3F80, 0xC000], [0, 1]], np.uint16),  # bfloat16 bits
}


@pytest.mark.parametrize("wire", sorted(FIXED_TYPES))
def test_raw_round_trip_for_every_fixed_size_type(wire: str) -> None:
    array = FIXED_TYPES[wire]
    data = encode_raw(BY_WIRE[wire], array)
    assert len(data) == array.size * BY_WIRE[wire].item_size_bytes
    decoded = decode_raw("x", BY_WIRE[wire], array.shape, data)
    np.testing.assert_array_equal(decoded, array)


def test_bytes_round_trip_with_empty_and_binary_elements() -> None:
    items = np.array([[b"", b"\x00\xffbinary"], [b"text", "é".encode()]], dtype=object)
    data = encode_bytes(items)
    assert data[:4] == struct.pack("<I", 0)
    decoded = decode_raw("x", BY_WIRE["BYTES"], (2, 2), data)
    assert decoded.tolist() == items.tolist()


@pytest.mark.parametrize(
    ("data", "count", "expected"),
    [
        (b"\x05\x00", 1, "2 bytes cannot hold 1 BYTES elements"),  # before allocating
        (struct.pack("<I", 5) + b"abcde" + b"\x00\x00", 2, "no room for the 4-byte length"),
        (struct.pack("<I", 10) + b"abc", 1, "declares 10 bytes"),
        (struct.pack("<I", 1) + b"a" + struct.pack("<I", 1) + b"bc", 1, "left over"),
    ],
)
def test_malformed_bytes_are_rejected(data: bytes, count: int, expected: str) -> None:
    with pytest.raises(InvalidInputError, match=expected):
        decode_raw("x", BY_WIRE["BYTES"], (count,), data)


def test_raw_byte_size_must_match_shape_and_type() -> None:
    with pytest.raises(InvalidInputError, match=r"unexpected total byte size 12 .* expecting 16"):
        decode_raw("x", BY_WIRE["FP32"], (2, 2), b"\x00" * 12)


def _request(*tensors: pb.ModelInferRequest.InferInputTensor, raw: list[bytes] | None = None):
    return pb.ModelInferRequest(model_name="m", inputs=list(tensors), raw_input_contents=raw or [])


def test_typed_contents_decode_to_arrays() -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="x", datatype="INT16", shape=[2, 2])
    tensor.contents.int_contents.extend([1, -2, 3, 4])
    (decoded,) = decode_inputs(_request(tensor))
    assert decoded.array.dtype == np.int16
    assert decoded.array.tolist() == [[1, -2], [3, 4]]


def test_typed_contents_out_of_range_is_rejected() -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="x", datatype="INT8", shape=[1])
    tensor.contents.int_contents.append(300)
    with pytest.raises(InvalidInputError, match="does not fit in INT8"):
        decode_inputs(_request(tensor))


def test_typed_contents_count_must_match_shape() -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[3])
    tensor.contents.fp32_contents.extend([1.0, 2.0])
    with pytest.raises(InvalidInputError, match="2 FP32 values"):
        decode_inputs(_request(tensor))


@pytest.mark.parametrize("wire", ["FP16", "BF16"])
def test_half_types_have_no_typed_contents(wire: str) -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="x", datatype=wire, shape=[1])
    tensor.contents.fp32_contents.append(1.0)
    with pytest.raises(InvalidInputError, match="raw_input_contents"):
        decode_inputs(_request(tensor))


def test_mixing_raw_and_contents_is_rejected() -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1])
    tensor.contents.fp32_contents.append(1.0)
    with pytest.raises(InvalidInputError, match="contents field must not be specified"):
        decode_inputs(_request(tensor, raw=[b"\x00" * 4]))


def test_more_raw_buffers_than_inputs_is_rejected() -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1])
    with pytest.raises(InvalidInputError, match="expected 1 raw input contents"):
        decode_inputs(_request(tensor, raw=[b"\x00" * 4, b"\x00" * 4]))


def test_unknown_datatype_and_missing_data_are_rejected() -> None:
    odd = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FLOAT", shape=[1])
    with pytest.raises(InvalidInputError, match="unknown datatype 'FLOAT'"):
        decode_inputs(_request(odd))
    empty = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1])
    with pytest.raises(InvalidInputError, match="carries no data"):
        decode_inputs(_request(empty))


def test_decode_outputs_reads_names_shared_memory_and_classes_in_one_pass() -> None:
    request = pb.ModelInferRequest()
    request.outputs.add(name="PLAIN")
    placed = request.outputs.add(name="PLACED")
    placed.parameters["shared_memory_region"].string_param = "out"
    placed.parameters["shared_memory_offset"].uint64_param = 16
    placed.parameters["shared_memory_byte_size"].int64_param = 64
    request.outputs.add(name="CLASSES").parameters["classification"].int64_param = 3
    assert decode_outputs(request) == (
        ["PLAIN", "PLACED", "CLASSES"],
        {"PLACED": ("out", 16, 64)},
        {"CLASSES": 3},
    )
    assert decode_outputs(pb.ModelInferRequest()) == ([], {}, {})


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({"classification": pb.InferParameter(string_param="3")}, "expected int64_param"),
        ({"classification": pb.InferParameter(int64_param=0)}, "expected >= 0"),
        (
            {
                "classification": pb.InferParameter(int64_param=2),
                "shared_memory_region": pb.InferParameter(string_param="out"),
                "shared_memory_byte_size": pb.InferParameter(int64_param=8),
            },
            "both 'shared_memory_region' and 'classification'",
        ),
    ],
)
def test_decode_outputs_refuses_a_bad_classification(
    parameters: dict[str, pb.InferParameter], expected: str
) -> None:
    request = pb.ModelInferRequest()
    output = request.outputs.add(name="OUT")
    for key, value in parameters.items():
        output.parameters[key].CopyFrom(value)
    with pytest.raises(InvalidInputError, match=expected):
        decode_outputs(request)


def test_triton_flags_alone_leave_the_default_options_and_others_still_count() -> None:
    flagged = pb.ModelInferRequest()
    flagged.parameters["triton_enable_empty_final_response"].bool_param = True
    assert infer_options(flagged) == InferOptions()
    flagged.parameters["priority"].uint64_param = 2
    flagged.parameters["color"].string_param = "red"
    assert infer_options(flagged) == InferOptions(priority=2, parameters={"color": "red"})
