"""Tensors between protobuf and NumPy: raw and typed contents, BYTES length prefixes."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from proto import grpc_service_pb2 as pb
from server.contract.datatypes import BY_WIRE, DataType, array_from_values, decode_raw, encode_raw
from server.contract.errors import (
    CLASSIFICATION_IN_SHM_GRPC,
    CLASSIFICATION_NOT_INT64,
    CLASSIFICATION_NOT_POSITIVE,
    CONTENTS_WITH_RAW,
    InvalidInputError,
)
from server.contract.requests import (
    InferInput,
    InferOptions,
    InferRequest,
    Location,
    Received,
    SequenceFlags,
    model_parameters,
)
from server.contract.responses import InferResponse

_NO_OPTIONS = InferOptions()

# Which typed `contents` field carries each wire data type (FP16 and BF16 only travel raw).
_CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def decode_request(
    request: pb.ModelInferRequest,
    deadline_ns: int = 0,
    *,
    load_report: bool = False,
    adjust: Callable[[InferOptions], InferOptions] | None = None,
    carrier: Mapping[str, str] | None = None,
    traced_since_ns: int | None = None,
) -> InferRequest:
    """The engine's request: tensors decoded, parameters parsed. `deadline_ns`: when its
    client stops waiting (0: never); `load_report`: the response is to carry the model's load;
    `adjust`: a change to its options (the headers forwarded to the model); `carrier`: its
    trace headers; `traced_since_ns`: when its decoding began, for its trace (None: untraced)."""
    inputs = decode_inputs(request)
    outputs, locations, classes = decode_outputs(request)
    options = infer_options(request)
    if adjust is not None:
        options = adjust(options)
    if deadline_ns:  # never executed after it
        options = msgspec.structs.replace(options, deadline_ns=deadline_ns)
    return InferRequest(
        request.model_name,
        request.model_version,
        inputs,
        outputs,
        options,
        request.id,
        carrier,
        locations,
        classes,
        None if traced_since_ns is None else Received("GRPC", traced_since_ns, time.monotonic_ns()),
        load_report=load_report,
    )


def decode_inputs(request: pb.ModelInferRequest) -> list[InferInput]:
    """The request's input tensors as arrays; wire-level mistakes are INVALID_ARGUMENT.

    An input whose parameters name a shared memory region carries its location (the core reads
    it from the region) and no data; raw_input_contents then holds one entry per other input, in
    order.
    """
    raw = request.raw_input_contents
    # Each pass over a repeated field builds its elements anew; a slice takes them in one call
    # (iterating one ends in an IndexError raised and formatted inside protobuf, each time).
    tensors = request.inputs[:]
    regions = [
        shm_location(parameters, tensor.name) if (parameters := tensor.parameters) else None
        for tensor in tensors
    ]
    if raw:
        for tensor in tensors:  # before the count, as Triton checks them (clients look for it)
            if tensor.HasField("contents"):
                raise CONTENTS_WITH_RAW(input=tensor.name, model=request.model_name)
        in_band = regions.count(None)
        if len(raw) != in_band:
            raise InvalidInputError(
                f"expected {in_band} raw input contents, one per input not in shared memory, "
                f"but got {len(raw)} for model '{request.model_name}'"
            )
    decoded = []
    raw_index = 0
    for tensor, region in zip(tensors, regions, strict=True):
        name = tensor.name
        datatype = _datatype(tensor.datatype, name)
        shape = tuple(tensor.shape[:])  # a slice, not iteration: as the inputs above
        if shape and min(shape) < 0:
            raise InvalidInputError(f"input '{name}' has a negative dimension: {list(shape)}")
        if region is not None:
            decoded.append(InferInput(name, datatype.wire, shape, None, region))
            continue
        if raw:
            array = decode_raw(name, datatype, shape, raw[raw_index])
            raw_index += 1
        elif tensor.HasField("contents"):
            array = _decode_typed(tensor, datatype, shape)
        else:
            raise InvalidInputError(
                f"input '{name}' for model '{request.model_name}' carries no data: set "
                "raw_input_contents or contents"
            )
        decoded.append(InferInput(name, datatype.wire, shape, array))
    return decoded


def shm_location(parameters: Mapping[str, pb.InferParameter], tensor: str) -> Location | None:
    """(region, offset, byte_size) when a tensor's parameters place it in shared memory."""
    # Most tensors have no parameters: an empty map is told apart before any key is looked up.
    if not parameters or "shared_memory_region" not in parameters:
        return None
    region = parameters["shared_memory_region"].string_param
    if "shared_memory_byte_size" not in parameters:
        raise InvalidInputError(
            f"tensor '{tensor}' names shared memory region '{region}' without "
            "shared_memory_byte_size"
        )
    return (
        region,
        _int_of(parameters, "shared_memory_offset"),
        _int_of(parameters, "shared_memory_byte_size"),
    )


def _int_of(parameters: Mapping[str, pb.InferParameter], key: str) -> int:
    if key not in parameters:
        return 0
    parameter = parameters[key]
    choice = parameter.WhichOneof("parameter_choice")
    if choice not in ("int64_param", "uint64_param"):
        raise InvalidInputError(f"parameter '{key}' must be an integer")
    value = int(getattr(parameter, choice))
    if value < 0:
        raise InvalidInputError(f"parameter '{key}' must be >= 0, got {value}")
    return value


def decode_outputs(
    request: pb.ModelInferRequest,
) -> tuple[list[str], dict[str, Location], dict[str, int]]:
    """The outputs asked for (empty: every output of the model), in one pass: their names,
    those to be written to shared memory (system or CUDA) with where, and those asked for as
    their top classes (the `classification` output parameter) with how many classes each."""
    names: list[str] = []
    locations: dict[str, Location] = {}
    classes: dict[str, int] = {}
    for output in request.outputs[:]:  # a slice, not iteration: as in decode_inputs
        name = output.name
        names.append(name)
        parameters = output.parameters
        if not parameters:  # most outputs have none; reading into them costs on every request
            continue
        location = shm_location(parameters, name)
        if location is not None:
            locations[name] = location
        if "classification" in parameters:
            classes[name] = _class_count(parameters)
    return names, locations, classes


def _class_count(parameters: Mapping[str, pb.InferParameter]) -> int:
    parameter = parameters["classification"]
    choice = parameter.WhichOneof("parameter_choice")
    if choice not in ("int64_param", "uint64_param"):
        raise CLASSIFICATION_NOT_INT64()
    count = int(getattr(parameter, choice))
    if count <= 0:
        raise CLASSIFICATION_NOT_POSITIVE()
    if "shared_memory_region" in parameters:
        raise CLASSIFICATION_IN_SHM_GRPC()  # the classes are made from the output's values
    return count


def infer_options(request: pb.ModelInferRequest) -> InferOptions:
    """The scheduling parameters Triton reserves (`priority`, `timeout` in microseconds), and
    the others, for the model."""
    parameters = request.parameters
    for key in parameters:  # a loop: a generator costs more on every request
        if not key.startswith("triton_"):
            break
    else:
        # None, or Triton's own flags only, which are never the model's or the scheduler's;
        # perf_analyzer and tritonclient send triton_enable_empty_final_response every time.
        return _NO_OPTIONS
    return InferOptions(
        priority=_int_parameter(request, "priority"),
        timeout_us=_int_parameter(request, "timeout"),
        parameters=model_parameters(
            (key, getattr(value, value.WhichOneof("parameter_choice") or "string_param"))
            for key, value in request.parameters.items()
        ),
        sequence=_sequence(request),
    )


def _sequence(request: pb.ModelInferRequest) -> SequenceFlags | None:
    """The request's sequence parameters (None: no sequence id, or 0 or "")."""
    parameters = request.parameters
    if "sequence_id" not in parameters:
        return None
    parameter = parameters["sequence_id"]
    choice = parameter.WhichOneof("parameter_choice")
    if choice not in ("int64_param", "uint64_param", "string_param"):
        raise InvalidInputError(
            "invalid value type for 'sequence_id' parameter, expected int64_param, "
            "uint64_param or string_param"
        )
    sequence_id = getattr(parameter, choice)
    if choice == "int64_param" and sequence_id < 0:
        raise InvalidInputError(f"'sequence_id' must be >= 0, got {sequence_id}")
    if not sequence_id:
        return None
    return SequenceFlags(
        sequence_id,
        _bool_parameter(request, "sequence_start"),
        _bool_parameter(request, "sequence_end"),
    )


def _bool_parameter(request: pb.ModelInferRequest, key: str) -> bool:
    if key not in request.parameters:
        return False
    parameter = request.parameters[key]
    if parameter.WhichOneof("parameter_choice") != "bool_param":
        raise InvalidInputError(f"invalid value type for '{key}' parameter, expected bool_param")
    return bool(parameter.bool_param)


def _int_parameter(request: pb.ModelInferRequest, key: str) -> int:
    if key not in request.parameters:
        return 0
    parameter = request.parameters[key]
    choice = parameter.WhichOneof("parameter_choice")
    if choice == "int64_param":
        value = parameter.int64_param
    elif choice == "uint64_param":
        value = parameter.uint64_param
    else:
        raise InvalidInputError(
            f"request parameter '{key}' for model '{request.model_name}' must be an integer, "
            f"got {choice or 'nothing'}"
        )
    if value < 0:
        raise InvalidInputError(
            f"request parameter '{key}' for model '{request.model_name}' must be >= 0, got {value}"
        )
    return value


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


def _decode_typed(
    tensor: pb.ModelInferRequest.InferInputTensor, datatype: DataType, shape: tuple[int, ...]
) -> npt.NDArray[Any]:
    field = _CONTENTS_FIELD.get(datatype.wire)
    if field is None:
        raise InvalidInputError(
            f"input '{tensor.name}': {datatype.wire} has no typed contents field; send it in "
            "raw_input_contents"
        )
    values: Sequence[Any] = getattr(tensor.contents, field)
    return array_from_values(values, datatype, shape, f"input '{tensor.name}'", "contents")


def _datatype(wire: str, name: str) -> DataType:
    datatype = BY_WIRE.get(wire)
    if datatype is None:
        raise InvalidInputError(
            f"input '{name}' has unknown datatype '{wire}' (expected one of {sorted(BY_WIRE)})"
        )
    return datatype
