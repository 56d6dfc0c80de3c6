"""Answers from NumPy to the wire: a ModelInferResponse as a message, or serialized straight
from the outputs' bytes, alone or inside a stream's response."""

from __future__ import annotations

import functools
from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np
import numpy.typing as npt

from proto import grpc_service_pb2 as pb
from server.contract.datatypes import DataType, encode_raw
from server.contract.responses import InferResponse


def encode_response(
    response: InferResponse, request_id: str, message: pb.ModelInferResponse | None = None
) -> pb.ModelInferResponse:
    """Outputs in raw_output_contents, as Triton's gRPC front end always answers; an output
    the core wrote to shared memory keeps an empty entry (indexes stay aligned). `message`: an
    empty message to fill (a stream response's), else a new one."""
    if message is None:
        message = pb.ModelInferResponse()
    message.model_name = response.model
    message.model_version = str(response.version)
    message.id = request_id
    if response.parameters:
        set_parameters(message.parameters, response.parameters)
    for output in response.outputs:
        datatype = output.spec.datatype
        tensor = message.outputs.add()
        tensor.name = output.spec.name
        tensor.datatype = datatype.wire
        tensor.shape.extend(output.shape)
        array = output.array
        message.raw_output_contents.append(b"" if array is None else encode_raw(datatype, array))
    return message


# ModelInferResponse's field tags on the wire (field number << 3 | 2, length-delimited).
_ID_TAG = b"\x1a"  # id = 3
_RAW_OUTPUT_TAG = b"\x32"  # raw_output_contents = 6
_HEADERS = 256  # response headers kept: (model, version, outputs' names, types, shapes)


def encode_response_bytes(response: InferResponse, request_id: str) -> bytes:
    """`encode_response`, serialized, built without a message: a serialized message is the
    concatenation of its fields, so the part every response of a model, version and output
    shapes shares (names, types, shapes) is serialized once, and each response adds its id and
    its outputs' bytes. A response with parameters goes through the message."""
    if response.parameters:
        return encode_response(response, request_id).SerializeToString()
    outputs = response.outputs
    described = []  # a loop: a generator costs more on every request
    for output in outputs:
        spec = output.spec
        described.append((spec.name, spec.datatype.wire, output.shape))
    parts: list[bytes | memoryview] = [_header(response.model, response.version, (*described,))]
    if request_id:
        encoded = request_id.encode()
        parts += (_ID_TAG, _varint(len(encoded)), encoded)
    for output in outputs:
        data = _raw_view(output.spec.datatype, output.array)
        parts += (_RAW_OUTPUT_TAG, _varint(data.nbytes), data)
    return b"".join(parts)


# ModelStreamInferResponse's infer_response (field 2), and the triton_final_response parameter
# (ModelInferResponse's parameters, field 4) a stream response carries, serialized once each way.
_INFER_RESPONSE_TAG = b"\x12"


def _final_parameter(final: bool) -> bytes:
    message = pb.ModelInferResponse()
    message.parameters["triton_final_response"].bool_param = final
    return message.SerializeToString()


_FINAL_PARAMETER = {final: _final_parameter(final) for final in (False, True)}


def encode_stream_response_bytes(response: InferResponse, request_id: str, final: bool) -> bytes:
    """A ModelStreamInferResponse holding `encode_response_bytes`' answer, marked final or not,
    serialized without a message: a message's fields may come in any order and a map's entries
    add up (the last of a key wins), so the final flag's parameter simply follows the rest, as
    `stream.stream_message` sets it last."""
    answer, flag = encode_response_bytes(response, request_id), _FINAL_PARAMETER[final]
    # One join: the answer's bytes (its outputs may be large) are copied once.
    return b"".join((_INFER_RESPONSE_TAG, _varint(len(answer) + len(flag)), answer, flag))


def _raw_view(datatype: DataType, array: npt.NDArray[Any] | None) -> memoryview:
    """An output's raw bytes for the join, which copies them once: a fixed-size type's array as
    it is (made contiguous and little-endian only when it is not), BYTES encoded."""
    if array is None:
        return memoryview(b"")
    if datatype.item_size_bytes == 0:
        return memoryview(encode_raw(datatype, array))
    return np.ascontiguousarray(array, dtype=datatype.numpy).data


@functools.lru_cache(maxsize=_HEADERS)
def _header(
    model: str, version: int, outputs: tuple[tuple[str, str, tuple[int, ...]], ...]
) -> bytes:
    message = pb.ModelInferResponse(model_name=model, model_version=str(version))
    for name, datatype, shape in outputs:
        message.outputs.add(name=name, datatype=datatype, shape=shape)
    return message.SerializeToString()


def _varint(value: int) -> bytes:
    """A length on the wire: 7 bits a byte, low first, the high bit set on all but the last."""
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = tuple(bytes((value,)) for value in range(0x80))


def set_parameters(
    into: MutableMapping[str, pb.InferParameter], parameters: Mapping[str, bool | int | float | str]
) -> None:
    """Response parameters as InferParameter values (Triton's bool, int64 and string ones)."""
    for key, value in parameters.items():
        if isinstance(value, bool):
            into[key].bool_param = value
        elif isinstance(value, int):
            into[key].int64_param = value
        elif isinstance(value, float):
            into[key].double_param = value
        else:
            into[key].string_param = value
