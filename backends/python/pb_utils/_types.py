"""Triton's numbers as a model uses them: the TRITONSERVER_ flags and memory types, and the
data types (config names and TRITONSERVER_DataType numbers) as NumPy types."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
# TRITONSERVER_MemoryType values, for `PreferredMemory`.
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2


# Config type names -> NumPy types, as Triton spells them (TYPE_BOOL is Python's `bool` there).
TRITON_STRING_TO_NUMPY: Mapping[str, type] = MappingProxyType(
    {
        "TYPE_BOOL": bool,
        "TYPE_UINT8": np.uint8,
        "TYPE_UINT16": np.uint16,
        "TYPE_UINT32": np.uint32,
        "TYPE_UINT64": np.uint64,
        "TYPE_INT8": np.int8,
        "TYPE_INT16": np.int16,
        "TYPE_INT32": np.int32,
        "TYPE_INT64": np.int64,
        "TYPE_FP16": np.float16,
        "TYPE_FP32": np.float32,
        "TYPE_FP64": np.float64,
        "TYPE_STRING": np.object_,
    }
)

# TRITONSERVER_DataType values (the same numbers as the config's DataType) <-> NumPy types.
_TRITON_TO_NUMPY: Mapping[int, type[np.generic]] = MappingProxyType(
    {
        1: np.bool_,
        2: np.uint8,
        3: np.uint16,
        4: np.uint32,
        5: np.uint64,
        6: np.int8,
        7: np.int16,
        8: np.int32,
        9: np.int64,
        10: np.float16,
        11: np.float32,
        12: np.float64,
        13: np.object_,
    }
)
_NUMPY_TO_TRITON: Mapping[type[np.generic], int] = MappingProxyType(
    {**{numpy_type: code for code, numpy_type in _TRITON_TO_NUMPY.items()}, np.bytes_: 13}
)
# The same by native dtype, which an array's `dtype` is almost always: one lookup per tensor.
_DTYPE_TO_TRITON: Mapping[np.dtype[Any], int] = MappingProxyType(
    {np.dtype(numpy_type): code for numpy_type, code in _NUMPY_TO_TRITON.items()}
)


def triton_to_numpy_type(data_type: int) -> type[np.generic] | None:
    """The NumPy type of a Triton data type number (11 -> np.float32); None when unknown."""
    return _TRITON_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """The Triton data type number of a NumPy dtype or type (np.float32 -> 11); None when none."""
    try:
        return _NUMPY_TO_TRITON.get(np.dtype(data_type).type)
    except TypeError:
        return None


def triton_string_to_numpy(triton_type_string: str) -> type:
    """ "TYPE_FP32" -> np.float32; like Triton, only the full TYPE_ names (KeyError otherwise)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]
