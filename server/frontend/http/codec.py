"""Tensors between Triton's HTTP/REST JSON and NumPy, with the binary tensor data extension (a
JSON header of `Inference-Header-Content-Length` bytes, then each binary tensor in order) and
shared memory, system or CUDA (`shared_memory_region` / `_offset` / `_byte_size` parameters)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from server.contract.datatypes import BY_WIRE, DataType, array_from_values, decode_raw, encode_raw
from server.contract.errors import (
    CLASSIFICATION_IN_SHM_HTTP,
    CLASSIFICATION_NOT_POSITIVE,
    InvalidInputError,
)
from server.contract.numbers import is_digits
from server.contract.requests import (
    InferInput,
    InferOptions,
    Location,
    SequenceFlags,
    model_parameters,
)
from server.contract.responses import InferResponse
from server.contract.settings import TRACE_HEADERS

HEADER_LENGTH = "Inference-Header-Content-Length"
# Triton's limit on how deeply a tensor's JSON `data` nests, and its words (server #8172, 2.58);
# a body nested past what the JSON parser itself takes is refused with them too.
MAX_JSON_DEPTH = 100
JSON_TOO_DEEP = f"JSON nesting depth exceeds maximum allowed limit ({MAX_JSON_DEPTH})"

JsonObject = dict[str, Any]


def split_body(body: bytes, header_length: str | None) -> tuple[JsonObject, bytes]:
    """The request's JSON header and the binary tensor data after it (empty without one)."""
    if header_length is None:
        length = len(body)
    else:
        digits = header_length.strip()
        if not is_digits(digits):
            raise InvalidInputError(
                f"{HEADER_LENGTH} must be a number of bytes, got '{header_length}'"
            )
        length = int(digits)
        if not 0 <= length <= len(body):
            raise InvalidInputError(
                f"{HEADER_LENGTH} is {length}, but the body holds {len(body)} bytes"
            )
    return parse_json(body[:length]), body[length:]


def trace_carrier(headers: Mapping[str, str]) -> dict[str, str]:
    """The request's W3C trace context headers."""
    return {key: headers[key] for key in TRACE_HEADERS if key in headers}


def parse_json(data: bytes) -> JsonObject:
    """A JSON object, or an empty one for an empty body."""
    if not data.strip():
        return {}
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"the request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidInputError(JSON_TOO_DEEP) from exc
    if not isinstance(parsed, dict):
        raise InvalidInputError(f"the request body must be a JSON object, got {parsed!r:.80}")
    return parsed


def _field(holder: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = holder.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidInputError(f"{where}: '{key}' must be a {kind.__name__}, got {value!r:.80}")
    return value


def parameters_of(holder: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """A tensor's (or body's) `parameters` object, empty when absent."""
    parameters = holder.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidInputError(f"{where}: 'parameters' must be a JSON object")
    return parameters


def _shm_location(parameters: Mapping[str, Any], where: str) -> Location | None:
    """(region, offset, byte_size) when a tensor's parameters place it in shared memory."""
    if "shared_memory_region" not in parameters:
        return None
    region = _field(parameters, "shared_memory_region", str, where)
    if "shared_memory_byte_size" not in parameters:
        raise InvalidInputError(
            f"{where} names shared memory region '{region}' without shared_memory_byte_size"
        )
    values = []
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        value = _field(parameters, key, int, where) if key in parameters else 0
        if value < 0:
            raise InvalidInputError(f"{where}: '{key}' must be >= 0, got {value}")
        values.append(value)
    return region, values[0], values[1]


def decode_inputs(request: JsonObject, binary: bytes, model: str) -> list[InferInput]:
    """The request's input tensors as arrays; binary ones take their bytes in order, shared
    memory ones carry their location (the core reads them from their region)."""
    tensors = request.get("inputs")
    if not isinstance(tensors, list) or not all(isinstance(t, dict) for t in tensors):
        raise InvalidInputError(f"request for model '{model}': 'inputs' must be a list of objects")
    decoded = []
    offset = 0
    for tensor in tensors:
        name = _field(tensor, "name", str, f"an input of model '{model}'")
        where = f"input '{name}' of model '{model}'"
        wire = _field(tensor, "datatype", str, where)
        datatype = BY_WIRE.get(wire)
        if datatype is None:
            raise InvalidInputError(
                f"{where} has unknown datatype '{wire}' (expected one of {sorted(BY_WIRE)})"
            )
        dims = _field(tensor, "shape", list, where)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
            raise InvalidInputError(f"{where}: 'shape' must list dimensions >= 0, got {dims}")
        shape = tuple(dims)
        parameters = parameters_of(tensor, where)
        sources = [
            key
            for key, present in (
                ("'data'", "data" in tensor),
                ("'binary_data_size'", "binary_data_size" in parameters),
                ("'shared_memory_region'", "shared_memory_region" in parameters),
            )
            if present
        ]
        if len(sources) != 1:  # Triton's rule: exactly one place holds an input's data
            raise InvalidInputError(
                f"{where} must set exactly one of 'data', 'binary_data_size' or "
                f"'shared_memory_region', but sets {' and '.join(sources) or 'none'}"
            )
        location = _shm_location(parameters, where)
        if location is not None:
            decoded.append(InferInput(name, wire, shape, None, location))
            continue
        if "binary_data_size" in parameters:
            size = _field(parameters, "binary_data_size", int, where)
            if size < 0 or offset + size > len(binary):
                raise InvalidInputError(
                    f"{where}: binary_data_size {size} runs past the {len(binary) - offset} "
                    "binary bytes left in the request"
                )
            array = decode_raw(name, datatype, shape, binary[offset : offset + size])
            offset += size
        else:
            array = decode_json_data(tensor["data"], datatype, shape, where)
        decoded.append(InferInput(name, wire, shape, array))
    if offset != len(binary):
        raise InvalidInputError(
            f"request for model '{model}': {len(binary) - offset} binary bytes left over after "
            "the inputs' binary_data_size"
        )
    return decoded


def _flatten(data: Any, into: list[Any], depth: int) -> list[Any]:
    if isinstance(data, list):
        if depth >= MAX_JSON_DEPTH:
            raise InvalidInputError(JSON_TOO_DEEP)
        for item in data:
            _flatten(item, into, depth + 1)
    else:
        into.append(data)
    return into


def decode_json_data(
    data: Any, datatype: DataType, shape: tuple[int, ...], where: str
) -> npt.NDArray[Any]:
    """JSON values (a scalar, or lists nested in any way) as an array of `shape`."""
    values = _flatten(data, [], 0)
    if datatype.wire == "BYTES":
        if not all(isinstance(v, str) for v in values):
            raise InvalidInputError(f"{where}: BYTES values in 'data' must be strings")
        values = [v.encode("utf-8") for v in values]
    elif datatype.wire == "BF16":
        raise InvalidInputError(f"{where}: BF16 travels only as binary data over HTTP")
    else:
        if datatype.wire == "BOOL":
            kinds: tuple[type, ...] = (bool,)
        elif datatype.numpy.kind in "iu":
            kinds = (int,)
        else:
            kinds = (int, float)
        if not all(
            isinstance(v, kinds) and (bool in kinds or not isinstance(v, bool)) for v in values
        ):
            raise InvalidInputError(f"{where}: 'data' holds a value that is not {datatype.wire}")
    return array_from_values(values, datatype, shape, where, "'data'")


def requested_outputs(request: JsonObject) -> tuple[list[str], frozenset[str] | None]:
    """Names of the outputs asked for (empty: every output) and which of them go binary
    (None: all of them, as the request-level `binary_data_output` asks when none is named)."""
    default = _request_parameters(request).get("binary_data_output", False) is True
    outputs = request.get("outputs", [])
    if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        raise InvalidInputError("'outputs' must be a list of objects")
    if not outputs:
        return [], None if default else frozenset()
    names, binary = [], set()
    for output in outputs:
        name = _field(output, "name", str, "a requested output")
        names.append(name)
        if parameters_of(output, f"output '{name}'").get("binary_data", default) is True:
            binary.add(name)
    return names, frozenset(binary)


def classification(request: JsonObject) -> dict[str, int]:
    """Outputs asked for as their top classes (`"parameters": {"classification": k}`), with
    how many classes each."""
    found = {}
    for output in request.get("outputs", []):
        name = output["name"]  # requested_outputs checked the list's shape
        parameters = parameters_of(output, f"output '{name}'")
        if "classification" not in parameters:
            continue
        count = parameters["classification"]
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            raise InvalidInputError(
                f"{CLASSIFICATION_NOT_POSITIVE.text} (the number of classes of output "
                f"'{name}'), got {count!r:.80}"
            )
        if "shared_memory_region" in parameters:
            raise CLASSIFICATION_IN_SHM_HTTP()  # the classes are made from the output's values
        found[name] = count
    return found


def output_locations(request: JsonObject) -> dict[str, Location]:
    """Requested outputs to be written to shared memory, by name (Triton refuses an output
    that asks for both shared memory and binary data)."""
    found = {}
    for output in request.get("outputs", []):
        name = output["name"]  # requested_outputs checked the list's shape
        where = f"output '{name}'"
        parameters = parameters_of(output, where)
        location = _shm_location(parameters, where)
        if location is None:
            continue
        if parameters.get("binary_data") is True:
            raise InvalidInputError(
                f"{where} can't set both 'shared_memory_region' and 'binary_data'"
            )
        found[name] = location
    return found


def _request_parameters(request: JsonObject) -> Mapping[str, Any]:
    parameters = request.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidInputError("request 'parameters' must be a JSON object")
    return parameters


def infer_options(request: JsonObject) -> InferOptions:
    """The scheduling parameters Triton reserves (`priority`, `timeout` in microseconds), and
    the others, for the model. Answers are taken in turn (`InferOptions.in_turn`): an HTTP
    answer is written as soon as it is handed over."""
    parameters = _request_parameters(request)
    values = {}
    for key in ("priority", "timeout"):
        if key in parameters:
            value = _field(parameters, key, int, "request parameters")
            if value < 0:
                raise InvalidInputError(f"request parameter '{key}' must be >= 0, got {value}")
            values[key] = value
    return InferOptions(
        priority=values.get("priority", 0),
        timeout_us=values.get("timeout", 0),
        parameters=model_parameters(parameters.items()),
        sequence=_sequence(parameters),
        in_turn=True,
    )


def _sequence(parameters: Mapping[str, Any]) -> SequenceFlags | None:
    """The request's sequence parameters (None: no sequence id, or 0 or "")."""
    sequence_id = parameters.get("sequence_id", 0)
    if isinstance(sequence_id, bool) or not isinstance(sequence_id, int | str):
        raise InvalidInputError(
            f"request parameter 'sequence_id' must be an integer or a string, got "
            f"{sequence_id!r:.80}"
        )
    if isinstance(sequence_id, int) and sequence_id < 0:
        raise InvalidInputError(f"request parameter 'sequence_id' must be >= 0, got {sequence_id}")
    if not sequence_id:
        return None
    flags = []
    for key in ("sequence_start", "sequence_end"):
        value = parameters.get(key, False)
        if not isinstance(value, bool):
            raise InvalidInputError(
                f"request parameter '{key}' must be a boolean, got {value!r:.80}"
            )
        flags.append(value)
    return SequenceFlags(sequence_id, *flags)


def encode_response(
    response: InferResponse,
    request_id: str,
    binary: frozenset[str] | None,
) -> tuple[bytes, int | None]:
    """The response body and, when some output is binary, the length of its JSON header;
    `binary` names the outputs sent as binary data (None: every output). An output the core
    wrote to shared memory answers, as Triton's, only its name, type and shape."""
    outputs: list[JsonObject] = []
    chunks: list[bytes] = []
    for output in response.outputs:
        spec = output.spec
        tensor: JsonObject = {
            "name": spec.name,
            "datatype": spec.datatype.wire,
            "shape": list(output.shape),
        }
        array = output.array
        if array is None:
            pass
        elif binary is None or spec.name in binary:
            data = encode_raw(spec.datatype, array)
            tensor["parameters"] = {"binary_data_size": len(data)}
            chunks.append(data)
        else:
            tensor["data"] = json_data(spec.datatype, array)
        outputs.append(tensor)
    header: JsonObject = {"model_name": response.model, "model_version": str(response.version)}
    if request_id:
        header["id"] = request_id
    if response.parameters:
        header["parameters"] = dict(response.parameters)
    header["outputs"] = outputs
    encoded = json.dumps(header).encode("utf-8")
    if not chunks:
        return encoded, None
    return encoded + b"".join(chunks), len(encoded)


def json_data(datatype: DataType, array: npt.NDArray[Any]) -> list[Any]:
    """An array's values, flat, as JSON numbers, booleans or (BYTES) text."""
    if datatype.wire == "BYTES":
        return [
            item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
            for item in array.flat
        ]
    if datatype.wire == "BF16":  # bfloat16 bits are the top half of a float32's
        widened = np.ascontiguousarray(array, dtype=np.uint16).astype(np.uint32) << 16
        return widened.view(np.float32).ravel().tolist()
    flat = np.ascontiguousarray(array, dtype=datatype.numpy).ravel()
    return flat.tolist()
