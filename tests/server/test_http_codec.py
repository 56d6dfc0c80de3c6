"""Triton's HTTP JSON and binary tensor data, both ways, with real NumPy arrays."""

from __future__ import annotations

import json
from collections.abc import Iterator
from multiprocessing import shared_memory

import numpy as np
import pytest

from proto import grpc_service_pb2 as pb
from proto import message_json
from server.contract.datatypes import BY_WIRE, encode_raw
from server.contract.errors import (
    InvalidInputError,
    ModelNotFoundError,
    RegionNotFoundError,
    RestrictedError,
    ServerStoppingError,
    UnsupportedError,
)
from server.contract.model_io import TensorSpec
from server.contract.responses import InferOutput, InferResponse
from server.core.shared_memory.regions import SharedMemory
from server.core.shared_memory.system import SharedMemoryRegistry
from server.frontend.http import http_status_for
from server.frontend.http.codec import (
    decode_inputs,
    encode_response,
    infer_options,
    output_locations,
    requested_outputs,
    split_body,
)


def _fp32(name: str, shape: list[int], **extra: object) -> dict[str, object]:
    return {"name": name, "datatype": "FP32", "shape": shape, **extra}


def test_json_data_may_be_nested_or_flat() -> None:
    request = {
        "inputs": [
            _fp32("A", [2, 2], data=[[1, 2.5], [3, 4]]),
            _fp32("B", [2, 2], data=[1, 2, 3, 4]),
        ]
    }
    a, b = decode_inputs(request, b"", "m")
    np.testing.assert_array_equal(a.array, np.array([[1, 2.5], [3, 4]], dtype=np.float32))
    assert b.array.dtype == np.float32 and b.shape == (2, 2)


def test_binary_inputs_take_their_bytes_in_order() -> None:
    first = np.arange(4, dtype=np.float32)
    words = np.array([b"ab", b""], dtype=object)
    binary = encode_raw(BY_WIRE["FP32"], first) + encode_raw(BY_WIRE["BYTES"], words)
    header = {
        "inputs": [
            _fp32("A", [4], parameters={"binary_data_size": 16}),
            {
                "name": "S",
                "datatype": "BYTES",
                "shape": [2],
                "parameters": {"binary_data_size": len(binary) - 16},
            },
        ]
    }
    text = json.dumps(header).encode()
    body, tail = split_body(text + binary, str(len(text)))
    a, s = decode_inputs(body, tail, "m")
    np.testing.assert_array_equal(a.array, first)
    assert list(s.array) == [b"ab", b""]


@pytest.mark.parametrize(
    "tensor, binary, expected",
    [
        (_fp32("A", [3], data=[1, 2]), b"", "shape [3] holds 3"),
        ({"name": "A", "datatype": "INT8", "shape": [1], "data": [300]}, b"", "INT8"),
        ({"name": "A", "datatype": "INT32", "shape": [1], "data": [1.5]}, b"", "not INT32"),
        ({"name": "A", "datatype": "NOPE", "shape": [1], "data": [1]}, b"", "NOPE"),
        (_fp32("A", [1], parameters={"binary_data_size": 4}), b"\0" * 8, "left over"),
        (_fp32("A", [1], parameters={"binary_data_size": 8}), b"\0" * 4, "runs past"),
        (_fp32("A", [-1], data=[]), b"", "dimensions >= 0"),
    ],
)
def test_bad_inputs_are_invalid(tensor: dict[str, object], binary: bytes, expected: str) -> None:
    with pytest.raises(InvalidInputError, match=expected.replace("[", r"\[")):
        decode_inputs({"inputs": [tensor]}, binary, "m")


@pytest.mark.parametrize(
    "extra, parameters, expected",
    [
        ({"data": [1.0]}, {"shared_memory_region": "r"}, "sets 'data' and 'shared_memory_region'"),
        ({}, {}, "sets none"),
        ({}, {"shared_memory_region": "r"}, "without shared_memory_byte_size"),
        ({}, {"shared_memory_region": 3, "shared_memory_byte_size": 4}, "must be a str"),
        (
            {},
            {"shared_memory_region": "r", "shared_memory_byte_size": 4, "shared_memory_offset": -4},
            "must be >= 0",
        ),
    ],
)
def test_an_input_has_exactly_one_source(
    extra: dict[str, object], parameters: dict[str, object], expected: str
) -> None:
    tensor = _fp32("A", [1], parameters=parameters, **extra)
    with pytest.raises(InvalidInputError, match=expected):
        decode_inputs({"inputs": [tensor]}, b"", "m")


def test_output_locations_name_the_outputs_in_shared_memory() -> None:
    request = {
        "outputs": [
            {"name": "A", "parameters": {"binary_data": True}},
            {
                "name": "B",
                "parameters": {
                    "binary_data": False,
                    "shared_memory_region": "out",
                    "shared_memory_byte_size": 64,
                    "shared_memory_offset": 16,
                },
            },
        ]
    }
    assert output_locations(request) == {"B": ("out", 16, 64)}
    both = {"outputs": [{"name": "B", "parameters": {**request["outputs"][1]["parameters"]}}]}
    both["outputs"][0]["parameters"]["binary_data"] = True
    with pytest.raises(InvalidInputError, match="both 'shared_memory_region' and 'binary_data'"):
        output_locations(both)


@pytest.mark.parametrize("length", ["\u0662", "1_0", "-1", "2.0", ""])
def test_header_length_is_ascii_digits(length: str) -> None:
    with pytest.raises(InvalidInputError, match="must be a number of bytes"):
        split_body(b"{}", length)
    assert split_body(b"{}", " 2 ") == ({}, b"")


def test_header_length_must_fit_the_body() -> None:
    with pytest.raises(InvalidInputError, match="holds 2 bytes"):
        split_body(b"{}", "10")


def test_binary_outputs_follow_the_json_header() -> None:
    spec = TensorSpec("OUT", BY_WIRE["FP32"], (2,), False)
    other = TensorSpec("JSON", BY_WIRE["INT32"], (2,), False)
    array = np.array([[1.5, -2.0]], dtype=np.float32)
    response = InferResponse(
        "m",
        3,
        [
            InferOutput(spec, (1, 2), array),
            InferOutput(other, (1, 2), np.array([[7, 8]], np.int32)),
        ],
    )
    names, binary = requested_outputs(
        {"outputs": [{"name": "OUT", "parameters": {"binary_data": True}}, {"name": "JSON"}]}
    )
    assert names == ["OUT", "JSON"] and binary == frozenset({"OUT"})
    body, length = encode_response(response, "id-1", binary)
    assert length is not None
    header = json.loads(body[:length])
    assert header["id"] == "id-1" and header["model_version"] == "3"
    out, plain = header["outputs"]
    assert out["parameters"]["binary_data_size"] == 8 and "data" not in out
    assert plain["data"] == [7, 8] and plain["shape"] == [1, 2]
    np.testing.assert_array_equal(np.frombuffer(body[length:], np.float32), array.ravel())


def test_request_level_binary_output_covers_every_output() -> None:
    assert requested_outputs({"parameters": {"binary_data_output": True}}) == ([], None)
    assert requested_outputs({}) == ([], frozenset())


def test_priority_and_timeout_are_integers() -> None:
    options = infer_options({"parameters": {"priority": 2, "timeout": 500}})
    assert (options.priority, options.timeout_us) == (2, 500)
    with pytest.raises(InvalidInputError, match="timeout"):
        infer_options({"parameters": {"timeout": "soon"}})


def test_http_answers_are_taken_in_turn() -> None:
    # An HTTP answer is written as soon as the batcher hands it over (gRPC's are not).
    assert infer_options({}).in_turn


def test_message_json_keeps_64_bit_integers_numbers() -> None:
    stats = pb.ModelStatistics(
        name="m",
        inference_count=5,
        inference_stats=pb.InferStatistics(success=pb.StatisticDuration(count=2)),
    )
    printed = message_json(stats)
    assert printed["inference_count"] == 5
    assert printed["inference_stats"]["success"] == {"count": 2, "ns": 0}  # zeros printed too


def test_http_status_follows_the_grpc_table() -> None:
    assert http_status_for(ModelNotFoundError("x")) == 404
    assert http_status_for(ServerStoppingError("x")) == 503
    assert http_status_for(UnsupportedError("x")) == 501
    assert http_status_for(InvalidInputError("x")) == 400
    assert http_status_for(RuntimeError("x")) == 500


def test_http_status_differs_where_triton_http_does() -> None:
    assert http_status_for(RestrictedError("x")) == 403  # gRPC: UNAVAILABLE
    assert http_status_for(RegionNotFoundError("x")) == 400  # gRPC: NOT_FOUND


@pytest.fixture
def region() -> Iterator[SharedMemory]:
    """Shared memory holding system region 'r': 32 bytes from offset 8 of a real POSIX shm
    object, and no CUDA registry (as without a GPU)."""
    memory = shared_memory.SharedMemory(create=True, size=64)
    registry = SharedMemoryRegistry()
    try:
        registry.register("r", memory.name, 8, 32)
        memory.buf[8:24] = np.arange(4, dtype=np.float32).tobytes()
        yield SharedMemory(registry)
    finally:
        registry.unregister()
        memory.close()
        memory.unlink()


def test_shared_memory_inputs_and_outputs_carry_no_data(region: SharedMemory) -> None:
    parameters = {"shared_memory_region": "r", "shared_memory_byte_size": 16}
    (a,) = decode_inputs({"inputs": [_fp32("A", [4], parameters=parameters)]}, b"", "m")
    assert a.array is None and a.location == ("r", 0, 16)
    fp32 = BY_WIRE["FP32"]
    np.testing.assert_array_equal(
        region.read("A", fp32, (4,), a.location), np.arange(4, dtype=np.float32)
    )
    spec = TensorSpec("OUT", fp32, (4,), False)
    response = InferResponse("m", 1, [InferOutput(spec, (4,), None)])  # the core wrote it
    body, length = encode_response(response, "", None)
    assert length is None  # nothing binary left in the body
    (out,) = json.loads(body)["outputs"]
    assert out == {"name": "OUT", "datatype": "FP32", "shape": [4]}


def test_the_facade_reads_and_writes_system_regions(region: SharedMemory) -> None:
    fp32, text = BY_WIRE["FP32"], BY_WIRE["BYTES"]
    words = np.array([b"ab", b"c"], dtype=object)
    encoded = encode_raw(text, words)  # BYTES travel length-prefixed, as on the wire
    region.write(("r", 0, 32), text, words)
    assert region.system.read("r", 0, len(encoded)) == encoded
    assert list(region.read("S", text, (2,), ("r", 0, len(encoded)))) == [b"ab", b"c"]
    halves = np.array([0.5, -1.5], np.float32)
    region.write(("r", 24, 8), fp32, halves)
    np.testing.assert_array_equal(region.read("H", fp32, (2,), ("r", 24, 8)), halves)
    with pytest.raises(InvalidInputError, match="needs 12 bytes, but only 8 were given"):
        region.write(("r", 24, 8), fp32, np.zeros(3, np.float32))
    unknown = "Unable to find shared memory region: 'nope'"
    with pytest.raises(RegionNotFoundError, match=unknown):
        region.read("H", fp32, (2,), ("nope", 0, 8))
    with pytest.raises(RegionNotFoundError, match=unknown):
        region.write(("nope", 0, 8), fp32, halves)


def test_shared_memory_reads_stay_inside_the_region(region: SharedMemory) -> None:
    parameters = {
        "shared_memory_region": "r",
        "shared_memory_byte_size": 16,
        "shared_memory_offset": 20,
    }
    (a,) = decode_inputs({"inputs": [_fp32("A", [4], parameters=parameters)]}, b"", "m")
    assert a.location is not None
    with pytest.raises(InvalidInputError, match="fall outside"):
        region.read("A", BY_WIRE["FP32"], (4,), a.location)
