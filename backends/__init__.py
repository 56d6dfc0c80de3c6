"""Backends: run one model version's instances; never imports grpc or batching.

The public surface is the instance contract (`Instance`, `ExecutionResult`), the signature a
model file declares (`ModelSignature`), and the ONNX Runtime backend.
"""

from backends.base import ExecutionResult, Instance, ModelSignature, TensorMap, TensorSignature
from backends.errors import BackendError, ExecutionError, ModelLoadError
from backends.onnxruntime import OrtInstance, OrtSettings, read_onnx_signature

__all__ = [
    "BackendError",
    "ExecutionError",
    "ExecutionResult",
    "Instance",
    "ModelLoadError",
    "ModelSignature",
    "OrtInstance",
    "OrtSettings",
    "TensorMap",
    "TensorSignature",
    "read_onnx_signature",
]
