"""Requests from protobuf to NumPy: raw and typed contents, BYTES length prefixes, shared-memory
locations, requested outputs and the options a request carries."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
import numpy.typing as npt

from proto import grpc_service_pb2 as pb
from server.contract.datatypes import BY_WIRE, DataType, array_from_values, decode_raw
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
