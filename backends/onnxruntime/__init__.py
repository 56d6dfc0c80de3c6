"""ONNX Runtime backend: one session, IO binding and worker thread per instance."""

from backends.onnxruntime._instance import OrtInstance, prepare_inputs, read_onnx_signature
from backends.onnxruntime._settings import OrtSettings

__all__ = ["OrtInstance", "OrtSettings", "prepare_inputs", "read_onnx_signature"]
