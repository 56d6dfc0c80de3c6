"""ONNX Runtime backend: one session, IO binding and worker thread (and CUDA stream) per instance,
placed on CPU or a GPU by Triton's instance group rules."""

from backends.onnxruntime._cuda import CudaOrtInstance
from backends.onnxruntime._instance import (
    OrtInstance,
    bind_batch,
    prepare_inputs,
    read_onnx_signature,
)
from backends.onnxruntime._placement import Placement, load_instance, plan_placements
from backends.onnxruntime._settings import OrtSettings

__all__ = [
    "CudaOrtInstance",
    "OrtInstance",
    "OrtSettings",
    "Placement",
    "bind_batch",
    "load_instance",
    "plan_placements",
    "prepare_inputs",
    "read_onnx_signature",
]
