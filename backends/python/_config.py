"""What a python model's config declares: its signature, output types and Triton's JSON of it,
and what an instance's worker is started with."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from backends.base import ModelSignature, TensorSignature
from backends.device import Device
from backends.errors import ModelLoadError
from proto import message_json
from proto import model_config_pb2 as mc

_DEFAULT_MODEL_FILENAME = "model.py"
_CPU = Device.cpu()

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


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """Who an instance is, and what its worker is started with."""

    name: str  # the model's name
    version: int
    instance: str  # this instance's name (Triton's model_instance_name)
    decoupled: bool  # model_transaction_policy { decoupled: true }
    worker_spec: dict[str, Any]  # the worker's ("initialize", spec) message; never mutated

    def where(self) -> str:
        return f"model '{self.name}' instance '{self.instance}'"


def worker_spec(
    name: str,
    model_dir: Path,
    version: int,
    config: mc.ModelConfig,
    backend_file: str = "",
    device: Device = _CPU,
) -> dict[str, Any]:
    """What a worker is started with: model.py's path (the version's, or a Python-based
    backend's), names, and Triton's initialize args, which name the instance's `device`."""
    model_path = (
        Path(backend_file)
        if backend_file
        else model_dir / str(version) / (config.default_model_filename or _DEFAULT_MODEL_FILENAME)
    )
    if not model_path.is_file():
        raise ModelLoadError(
            f"model '{config.name}' version {version}: '{model_path}' does not exist; the "
            "python backend needs it to define class TritonPythonModel"
        )
    args = {
        "model_config": config_json(config),
        "model_instance_kind": "GPU" if device.is_cuda else "CPU",
        "model_instance_name": name,
        "model_instance_device_id": str(device.id),
        "model_repository": str(model_dir),
        "model_version": str(version),
        "model_name": config.name,
    }
    return {
        "model_path": str(model_path),
        "model_name": config.name,
        "instance_name": name,
        "version": version,
        "decoupled": is_decoupled(config),
        "iterative": config.sequence_batching.iterative_sequence,
        "args": args,
    }
