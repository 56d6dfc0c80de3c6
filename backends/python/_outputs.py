"""Checking one response's outputs against the config: names, presence and data types."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from backends.errors import ExecutionError
from backends.python._config import OutputSpec
from proto import model_config_pb2 as mc


def check_outputs(
    model: str, specs: tuple[OutputSpec, ...], produced: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray] | ExecutionError:
    """The response's arrays in the config's dtypes, or why this one request fails.

    Numeric arrays are cast only where NumPy calls it safe (int32 -> int64, not float -> int);
    BYTES outputs become object arrays of bytes.
    """
    if len(produced) == len(specs):  # every declared output, each of a usable type: no extras
        outputs: dict[str, np.ndarray] = {}
        for spec in specs:
            array = produced.get(spec.name)
            converted = None if array is None else _convert(spec, array)
            if converted is None:
                break
            outputs[spec.name] = converted
        else:
            return outputs
    return _refusal(model, specs, produced)


def _refusal(
    model: str, specs: tuple[OutputSpec, ...], produced: Mapping[str, np.ndarray]
) -> ExecutionError:
    """Why a response's outputs do not match the config: an undeclared output first, then a
    missing one, then one whose type does not convert."""
    declared = {spec.name for spec in specs}
    for name in produced:
        if name not in declared:
            return ExecutionError(
                f"model '{model}': the response has output '{name}', which the config does not "
                f"declare (declared: {', '.join(sorted(declared))})"
            )
    for spec in specs:
        array = produced.get(spec.name)
        if array is None:
            return ExecutionError(
                f"model '{model}': the response is missing output '{spec.name}', which the "
                "config declares"
            )
        if _convert(spec, array) is None:
            return ExecutionError(
                f"model '{model}': output '{spec.name}' has numpy dtype {array.dtype}, but the "
                f"config declares {mc.DataType.Name(spec.data_type)} ({spec.dtype}) and "
                f"{array.dtype} does not convert to it safely"
            )
    raise AssertionError("outputs that match the config were refused")


def _convert(spec: OutputSpec, array: np.ndarray) -> np.ndarray | None:
    if spec.data_type == mc.TYPE_STRING:
        return _as_bytes(array)
    if array.dtype == spec.dtype:
        return array
    if array.dtype.kind in "biuf" and np.can_cast(array.dtype, spec.dtype, casting="safe"):
        return array.astype(spec.dtype)
    return None


def _as_bytes(array: np.ndarray) -> np.ndarray | None:
    if array.dtype.kind == "S":
        items: list[Any] = [bytes(item) for item in array.flat]
    elif array.dtype.kind == "U":
        items = [str(item).encode("utf-8") for item in array.flat]
    elif array.dtype == object:
        # The worker already turned str items into UTF-8; anything else is not a BYTES item.
        if not all(isinstance(item, bytes) for item in array.flat):
            return None
        return array
    else:
        return None
    return np.fromiter(items, dtype=object, count=len(items)).reshape(array.shape)
