"""Tensor data types in their three spellings (config enum, wire string, NumPy dtype) and the
raw little-endian layout tensors travel in (BYTES: a 4-byte length before each element)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from proto import model_config_pb2 as mc
from server.contract.errors import InvalidInputError

_LENGTH = struct.Struct("<I")
MAX_DIMS = 64  # NumPy's limit on an array's dimensions
_MAX_ELEMENTS = 2**48  # far beyond any tensor a request carries, well inside NumPy's limit


@dataclass(frozen=True, slots=True)
class DataType:
    """One data type; BYTES elements have no fixed size, BF16 is carried as uint16 bits."""

    config: int  # model_config_pb2.DataType value
    wire: str  # the string in ModelInferRequest / ModelMetadataResponse, e.g. "FP32"
    numpy: np.dtype  # the array dtype Convoy holds values in
    item_size_bytes: int  # 0 for BYTES


def _dt(config: int, wire: str, dtype: str | type, size: int) -> DataType:
    return DataType(config, wire, np.dtype(dtype), size)


_ALL = (
    _dt(mc.TYPE_BOOL, "BOOL", np.bool_, 1),
    _dt(mc.TYPE_UINT8, "UINT8", np.uint8, 1),
    _dt(mc.TYPE_UINT16, "UINT16", np.uint16, 2),
    _dt(mc.TYPE_UINT32, "UINT32", np.uint32, 4),
    _dt(mc.TYPE_UINT64, "UINT64", np.uint64, 8),
    _dt(mc.TYPE_INT8, "INT8", np.int8, 1),
    _dt(mc.TYPE_INT16, "INT16", np.int16, 2),
    _dt(mc.TYPE_INT32, "INT32", np.int32, 4),
    _dt(mc.TYPE_INT64, "INT64", np.int64, 8),
    _dt(mc.TYPE_FP16, "FP16", "<f2", 2),
    _dt(mc.TYPE_FP32, "FP32", "<f4", 4),
    _dt(mc.TYPE_FP64, "FP64", "<f8", 8),
    _dt(mc.TYPE_STRING, "BYTES", object, 0),
    _dt(mc.TYPE_BF16, "BF16", np.uint16, 2),
)

BY_CONFIG: dict[int, DataType] = {dt.config: dt for dt in _ALL}
BY_WIRE: dict[str, DataType] = {dt.wire: dt for dt in _ALL}


def wire_of(dtype: np.dtype, declared: DataType | None = None) -> str:
    """The wire name of arrays of `dtype` built in the server (an ensemble's tensors, a Python
    model's calls): the declared type where it holds such arrays (BF16 and UINT16 share uint16),
    else the first type that does, else the dtype itself (which no model accepts)."""
    if declared is not None and declared.numpy == dtype:
        return declared.wire
    return next((dt.wire for dt in _ALL if dt.numpy == dtype), str(dtype))


def wire_name(config_type: int) -> str:
    """The wire string of a config data type ("FP32" for TYPE_FP32), "INVALID" if unknown."""
    found = BY_CONFIG.get(config_type)
    return found.wire if found is not None else "INVALID"


def decode_raw(
    name: str, datatype: DataType, shape: tuple[int, ...], data: bytes
) -> npt.NDArray[Any]:
    """A raw buffer as an array of `shape`; fixed-size types are zero-copy views."""
    count = _checked_count(shape, "input", name)
    if datatype.wire == "BYTES":
        return _decode_bytes(name, data, count).reshape(shape)
    expected = count * datatype.item_size_bytes
    if len(data) != expected:
        raise InvalidInputError(
            f"unexpected total byte size {len(data)} for input '{name}', expecting {expected} "
            f"({datatype.wire} {list(shape)})"
        )
    return np.ndarray(shape, datatype.numpy, data)  # a view of the buffer, shaped at once


def encode_raw(datatype: DataType, array: npt.NDArray[Any]) -> bytes:
    if datatype.wire == "BYTES":
        return encode_bytes(array)
    return np.ascontiguousarray(array, dtype=datatype.numpy).tobytes()


def encode_bytes(array: npt.NDArray[Any]) -> bytes:
    """BYTES elements, each a 4-byte little-endian length and then the bytes."""
    parts = []
    for item in array.flat:
        data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def _decode_bytes(name: str, data: bytes, count: int) -> npt.NDArray[Any]:
    if count * _LENGTH.size > len(data):  # before allocating: the shape may claim anything
        raise InvalidInputError(
            f"input '{name}': {len(data)} bytes cannot hold {count} BYTES elements (each takes "
            f"at least {_LENGTH.size} bytes for its length)"
        )
    items = np.empty(count, dtype=object)
    offset = 0
    for index in range(count):
        if offset + 4 > len(data):
            raise InvalidInputError(
                f"input '{name}': BYTES data ends after {index} of {count} elements "
                f"(no room for the 4-byte length of element {index})"
            )
        (length,) = _LENGTH.unpack_from(data, offset)
        offset += 4
        if offset + length > len(data):
            raise InvalidInputError(
                f"input '{name}': BYTES element {index} declares {length} bytes, but only "
                f"{len(data) - offset} remain"
            )
        items[index] = data[offset : offset + length]
        offset += length
    if offset != len(data):
        raise InvalidInputError(
            f"input '{name}': {len(data) - offset} bytes left over after {count} BYTES elements"
        )
    return items


def array_from_values(
    values: Sequence[Any], datatype: DataType, shape: tuple[int, ...], where: str, source: str
) -> npt.NDArray[Any]:
    """Typed values (BYTES as bytes) as an array of `shape`; `where` and `source` name the
    tensor and the field they came from in errors."""
    count = _checked_count(shape, where)
    if len(values) != count:
        raise InvalidInputError(
            f"{where}: {len(values)} {datatype.wire} values in {source}, but shape "
            f"{list(shape)} holds {count}"
        )
    if datatype.wire == "BYTES":
        items = np.empty(count, dtype=object)
        items[:] = list(values)
        return items.reshape(shape)
    try:
        return np.array(list(values), dtype=datatype.numpy).reshape(shape)
    except (OverflowError, ValueError) as exc:
        raise InvalidInputError(f"{where}: a value does not fit in {datatype.wire}: {exc}") from exc


def _checked_count(shape: tuple[int, ...], where: str, name: str | None = None) -> int:
    """The elements of a shape NumPy can hold: at most 64 dimensions, and no more elements than
    an array can address even when a zero dimension leaves it empty (NumPy checks the other
    dims' product). Errors name `where` (with `name` quoted after it, when given: the message
    is only built for an error)."""
    if len(shape) > MAX_DIMS:
        raise InvalidInputError(
            f"{_where(where, name)} has {len(shape)} dimensions; at most {MAX_DIMS} are supported"
        )
    count = element_count(shape)
    span = count
    if count <= 0:  # empty (or a negative dimension): the other dimensions still count
        span = 1
        for dim in shape:
            span *= max(dim, 1)
    if span > _MAX_ELEMENTS:
        raise InvalidInputError(
            f"{_where(where, name)} has shape {list(shape)}, larger than any tensor can be"
        )
    return count


def _where(where: str, name: str | None) -> str:
    return where if name is None else f"{where} '{name}'"


def element_count(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count
