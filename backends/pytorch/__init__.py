"""PyTorch backend: TorchScript modules (`model.pt`) run as Triton's PyTorch backend runs them,
one worker thread (and on a GPU one CUDA stream) per instance; PyTorch 2 AOTInductor packages
(`platform: "torch_aoti"`, `model.pt2`) as its beta does; torch is imported only on load."""

from backends.pytorch._aoti import AotiInstance, AotiIO, plan_aoti_io
from backends.pytorch._instance import TorchInstance
from backends.pytorch._naming import ForwardArgument, Naming, TorchIO, plan_io
from backends.pytorch._placement import torch_placements
from backends.pytorch._runtime import import_torch, torch_cuda_device_count
from backends.pytorch._settings import TorchSettings

__all__ = [
    "AotiIO",
    "AotiInstance",
    "ForwardArgument",
    "Naming",
    "TorchIO",
    "TorchInstance",
    "TorchSettings",
    "import_torch",
    "plan_aoti_io",
    "plan_io",
    "torch_cuda_device_count",
    "torch_placements",
]
