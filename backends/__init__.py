"""Backends: run one model version's instances; never imports grpc or batching.

The public surface is the instance contract (`Instance`, `ExecutionResult`), the signature a
model file declares (`ModelSignature`), where arrays and instances live (`Device`, `Placement`), and
the ONNX Runtime, Python, PyTorch and OpenVINO backends.
"""

from backends.assemble import ArrayNamespace, concat_inputs, split_outputs
from backends.base import (
    ExecutionResult,
    Instance,
    ModelSignature,
    Outputs,
    Parameters,
    Response,
    TensorMap,
    TensorSignature,
    response_parameters,
)
from backends.custom_metrics import CustomMetrics, FamilySnapshot
from backends.daemon_thread import on_daemon_thread
from backends.device import (
    Device,
    DeviceKind,
    cuda_available,
    cuda_device_count,
    cuda_memory_total_bytes,
    device_memory,
    driver_device_count,
    import_cupy,
    is_device_array,
    on_host,
    usable_cores,
)
from backends.errors import (
    MODEL_ERROR_CODES,
    BackendError,
    ExecutionError,
    InvalidTensorError,
    ModelError,
    ModelLoadError,
)
from backends.onnxruntime import (
    CudaOrtInstance,
    OrtInstance,
    OrtSettings,
    Placement,
    load_instance,
    plan_placements,
    prepare_inputs,
    read_onnx_signature,
)
from backends.openvino import OpenVinoInstance, OpenVinoSettings
from backends.python import (
    ModelCaller,
    ModelControl,
    PythonInstance,
    PythonSettings,
    SharedArrays,
    python_placements,
)
from backends.pytorch import AotiInstance, TorchInstance, TorchSettings, torch_placements

__all__ = [
    "MODEL_ERROR_CODES",
    "AotiInstance",
    "ArrayNamespace",
    "BackendError",
    "CudaOrtInstance",
    "CustomMetrics",
    "Device",
    "DeviceKind",
    "ExecutionError",
    "ExecutionResult",
    "FamilySnapshot",
    "Instance",
    "InvalidTensorError",
    "ModelCaller",
    "ModelControl",
    "ModelError",
    "ModelLoadError",
    "ModelSignature",
    "OpenVinoInstance",
    "OpenVinoSettings",
    "OrtInstance",
    "OrtSettings",
    "Outputs",
    "Parameters",
    "Placement",
    "PythonInstance",
    "PythonSettings",
    "Response",
    "SharedArrays",
    "TensorMap",
    "TensorSignature",
    "TorchInstance",
    "TorchSettings",
    "concat_inputs",
    "cuda_available",
    "cuda_device_count",
    "cuda_memory_total_bytes",
    "device_memory",
    "driver_device_count",
    "import_cupy",
    "is_device_array",
    "load_instance",
    "on_daemon_thread",
    "on_host",
    "plan_placements",
    "prepare_inputs",
    "python_placements",
    "read_onnx_signature",
    "response_parameters",
    "split_outputs",
    "torch_placements",
    "usable_cores",
]
