"""The python backend's contract with model.py, as a worker or the server's process checks it:
`ContractError`, a response as the payload it travels as, and the log a model's errors go to.
Runs in the worker too, so it imports nothing from Convoy.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

import numpy as np

UTILS_MODULE = "triton_python_backend_utils"

# A response as it travels: its outputs, with its parameters (a JSON object string) when it has
# any; its error, as (message, code: Triton's numeric error code); None: a final flag alone.
Payload = dict[str, np.ndarray] | tuple[dict[str, np.ndarray], str] | tuple[str, int] | None


class ContractError(Exception):
    """The model broke the python backend's contract (wrong return value, not a Tensor...)."""


def response_payload(pb: ModuleType, response: Any, copy_outputs: bool) -> Payload:
    """A model's InferenceResponse as its payload (`pb`: the model's pb_utils); `copy_outputs`:
    copies of its output arrays, which the model may reuse (see `ModelServer`)."""
    if not isinstance(response, pb.InferenceResponse):
        raise ContractError(
            f"a response must be a pb_utils.InferenceResponse, not {type(response).__name__}"
        )
    if response.has_error():
        error = response.error()
        code = error.code()
        return str(error.message()), code if type(code) is int else 1  # 1: INTERNAL
    outputs: dict[str, np.ndarray] = {}
    for tensor in response.output_tensors():
        if not isinstance(tensor, pb.Tensor):
            raise ContractError(
                f"output_tensors must hold pb_utils.Tensor objects, not {type(tensor).__name__}"
            )
        array = wire_array(tensor.as_numpy())
        outputs[tensor.name()] = array.copy() if copy_outputs else array
    parameters = response.parameters()
    return outputs if parameters == "{}" else (outputs, parameters)


def wire_array(array: np.ndarray) -> np.ndarray:
    """A plain ndarray; object items as bytes (str as UTF-8), so the server unpickles no objects."""
    if array.dtype != object:
        return np.asarray(array)
    items = [_item_bytes(item) for item in array.flat]
    return np.fromiter(items, dtype=object, count=len(items)).reshape(array.shape)


def _item_bytes(item: object) -> bytes:
    if isinstance(item, bytes):
        return bytes(item)
    if isinstance(item, str):
        return item.encode("utf-8")
    # Triton serializes any other object of a BYTES tensor through str() as well.
    return str(item).encode("utf-8")


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def model_log() -> logging.Logger:
    return logging.getLogger(UTILS_MODULE)
