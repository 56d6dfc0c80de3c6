"""What a python model's config declares: its signature, output types and Triton's JSON of it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.base import ModelSignature, TensorSignature
from backends.errors import ModelLoadError
from proto import message_json
from proto import model_config_pb2 as mc

# Config data types the python backend serves -> the NumPy dtype its arrays have (BYTES: object).
_NUMPY_DTYPES: dict[int, np.dtype[Any]] = {
    mc.TYPE_BOOL: np.dtype(np.bool_),
    mc.TYPE_UINT8: np.dtype(np.uint8),
    mc.TYPE_UINT16: np.dtype(np.uint16),
    mc.TYPE_UINT32: np.dtype(np.uint32),
    mc.TYPE_UINT64: np.dtype(np.uint64),
    mc.TYPE_INT8: np.dtype(np.int8),
    mc.TYPE_INT16: np.dtype(np.int16),
    mc.TYPE_INT32: np.dtype(np.int32),
    mc.TYPE_INT64: np.dtype(np.int64),
    mc.TYPE_FP16: np.dtype(np.float16),
    mc.TYPE_FP32: np.dtype(np.float32),
    mc.TYPE_FP64: np.dtype(np.float64),
    mc.TYPE_STRING: np.dtype(np.object_),
}


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """One declared output and the dtype every response's array for it must end up with."""

    name: str
    data_type: int  # a config DataType; TYPE_STRING means object arrays of bytes
    dtype: np.dtype[Any]


def model_signature(config: mc.ModelConfig) -> ModelSignature:
    """The config's inputs and outputs; a leading -1 batch dimension when the model batches."""
    batch = (-1,) if config.max_batch_size > 0 else ()

    def tensors(entries: Iterable[mc.ModelInput | mc.ModelOutput]) -> tuple[TensorSignature, ...]:
        return tuple(TensorSignature(t.name, t.data_type, (*batch, *t.dims)) for t in entries)

    for entry in config.input:
        _numpy_dtype(config.name, entry.name, entry.data_type)
    output_specs(config)  # the same check for the outputs
    return ModelSignature(inputs=tensors(config.input), outputs=tensors(config.output))


def output_specs(config: mc.ModelConfig) -> tuple[OutputSpec, ...]:
    return tuple(
        OutputSpec(o.name, o.data_type, _numpy_dtype(config.name, o.name, o.data_type))
        for o in config.output
    )


def is_decoupled(config: mc.ModelConfig) -> bool:
    return config.model_transaction_policy.decoupled


def config_json(config: mc.ModelConfig) -> str:
    """The config as Triton hands it to initialize() in args['model_config'].

    Like Triton: field names as in the proto, fields at their defaults included, and 64-bit
    integers (dims, for one) as JSON numbers rather than proto3 JSON's strings, so that model code
    such as `np.zeros(output_config["dims"])` runs unchanged.
    """
    return json.dumps(message_json(config))


def _numpy_dtype(model: str, tensor: str, data_type: int) -> np.dtype[Any]:
    dtype = _NUMPY_DTYPES.get(data_type)
    if dtype is None:
        name = mc.DataType.Name(data_type) if data_type in mc.DataType.values() else data_type
        raise ModelLoadError(
            f"model '{model}': tensor '{tensor}' has data type {name}, which the python "
            "backend does not support (BF16 has no NumPy type)"
        )
    return dtype
