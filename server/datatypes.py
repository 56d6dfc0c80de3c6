"""Tensor data types in their three spellings: config enum, wire string and NumPy dtype."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proto import model_config_pb2 as mc


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


def wire_name(config_type: int) -> str:
    """The wire string of a config data type ("FP32" for TYPE_FP32), "INVALID" if unknown."""
    found = BY_CONFIG.get(config_type)
    return found.wire if found is not None else "INVALID"
