"""Backends: run one model version's instances; never imports grpc or batching.

The public surface is the instance contract (`Instance`, `ExecutionResult`), the signature a
model file declares (`ModelSignature`), and the ONNX Runtime backend.
"""

from backends.assemble import ArrayNamespace, concat_inputs, split_outputs
from backends.base import (
    ExecutionResult,
    Instance,
    ModelSignature,
    Response,
    TensorMap,
    TensorSignature,
)
from backends.errors import BackendError, ExecutionError, InvalidTensorError, ModelLoadError
from backends.onnxruntime import OrtInstance, OrtSettings, prepare_inputs, read_onnx_signature

__all__ = [
    "ArrayNamespace",
    "BackendError",
    "ExecutionError",
    "ExecutionResult",
    "Instance",
    "InvalidTensorError",
    "ModelLoadError",
    "ModelSignature",
    "OrtInstance",
    "OrtSettings",
    "Response",
    "TensorMap",
    "TensorSignature",
    "concat_inputs",
    "prepare_inputs",
    "read_onnx_signature",
    "split_outputs",
]
